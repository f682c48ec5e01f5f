//! Cordon and drain as core does: evict (never delete) every Pod on the Node except DaemonSet
//! and mirror Pods and those labelled `cluster.x-k8s.io/drain=skip`; evictions refused by a
//! PodDisruptionBudget (HTTP 429) are retried on the next round.

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, EvictParams, ListParams, Patch, PatchParams};
use serde_json::json;

use crate::error::{Error, Result, api_code, is_not_found};
use crate::sim::Ctx;

/// Result of one drain round.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Drain {
    /// No Pods left that need evicting.
    Done,
    /// Pods remain; the message says which and why.
    Pending(String),
}

/// Why a Pod is left alone by drain, if it is.
pub(super) fn skip_reason(pod: &Pod) -> Option<&'static str> {
    let meta = &pod.metadata;
    if meta
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key("kubernetes.io/config.mirror"))
    {
        return Some("mirror pod");
    }
    if meta
        .owner_references
        .as_ref()
        .is_some_and(|o| o.iter().any(|r| r.controller == Some(true) && r.kind == "DaemonSet"))
    {
        return Some("DaemonSet pod");
    }
    if meta
        .labels
        .as_ref()
        .and_then(|l| l.get("cluster.x-k8s.io/drain"))
        .is_some_and(|v| v == "skip")
    {
        return Some("labelled cluster.x-k8s.io/drain=skip");
    }
    None
}

async fn pods_to_drain(ctx: &Ctx, node: &str) -> Result<Vec<Pod>> {
    let pods: Api<Pod> = Api::all(ctx.client.clone());
    let list = pods
        .list(&ListParams::default())
        .await
        .map_err(|e| Error::kube(format!("listing Pods on Node {node}"), e))?;
    Ok(list
        .items
        .into_iter()
        .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node))
        .filter(|p| skip_reason(p).is_none())
        .collect())
}

/// Marks the Node unschedulable if it is not yet.
pub(super) async fn cordon(ctx: &Ctx, node: &Node) -> Result<()> {
    if node.spec.as_ref().and_then(|s| s.unschedulable) == Some(true) {
        return Ok(());
    }
    let name = node.metadata.name.clone().unwrap_or_default();
    let nodes: Api<Node> = Api::all(ctx.client.clone());
    nodes
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"unschedulable": true}})),
        )
        .await
        .map_err(|e| Error::kube(format!("cordoning Node {name}"), e))?;
    Ok(())
}

/// One drain round: evict what is left, report what still blocks.
pub(super) async fn drain_round(ctx: &Ctx, node: &str) -> Result<Drain> {
    let pending = pods_to_drain(ctx, node).await?;
    if pending.is_empty() {
        return Ok(Drain::Done);
    }
    let mut blocked = Vec::new();
    let mut terminating = Vec::new();
    let mut failed = Vec::new();
    for pod in &pending {
        let ns = pod.metadata.namespace.clone().unwrap_or_default();
        let name = pod.metadata.name.clone().unwrap_or_default();
        let id = format!("{ns}/{name}");
        if pod.metadata.deletion_timestamp.is_some() {
            terminating.push(id);
            continue;
        }
        let api: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
        match api.evict(&name, &EvictParams::default()).await {
            Ok(_) => {}
            Err(e) if is_not_found(&e) => {}
            Err(e) if api_code(&e) == Some(429) => blocked.push(id),
            Err(e) => failed.push(format!("{id}: {e}")),
        }
    }
    // Evictions that went through usually delete the Pod at once; look again before waiting.
    let left = pods_to_drain(ctx, node).await?;
    if left.is_empty() {
        return Ok(Drain::Done);
    }
    let mut parts = Vec::new();
    if !blocked.is_empty() {
        parts.push(format!(
            "evictions blocked by PodDisruptionBudgets: {}",
            blocked.join(", ")
        ));
    }
    if !failed.is_empty() {
        parts.push(format!("evictions failed: {}", failed.join("; ")));
    }
    if !terminating.is_empty() {
        parts.push(format!("waiting for Pods to terminate: {}", terminating.join(", ")));
    }
    if parts.is_empty() {
        parts.push(format!("{} Pods still on the Node", left.len()));
    }
    Ok(Drain::Pending(format!("Drain not completed yet: {}", parts.join("; "))))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(v: serde_json::Value) -> Pod {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn skips_daemonset_mirror_and_labelled_pods() {
        let ds = pod(json!({"metadata": {"name": "a", "ownerReferences": [
            {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "d", "uid": "u", "controller": true}]}}));
        let mirror = pod(json!({"metadata": {"name": "b",
            "annotations": {"kubernetes.io/config.mirror": "x"}}}));
        let labelled = pod(json!({"metadata": {"name": "c",
            "labels": {"cluster.x-k8s.io/drain": "skip"}}}));
        let normal = pod(json!({"metadata": {"name": "d", "ownerReferences": [
            {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "r", "uid": "u", "controller": true}]}}));
        assert_eq!(skip_reason(&ds), Some("DaemonSet pod"));
        assert_eq!(skip_reason(&mirror), Some("mirror pod"));
        assert!(skip_reason(&labelled).is_some());
        assert_eq!(skip_reason(&normal), None);
    }
}

//! Linking a Machine to its Node by exact `spec.providerID` match (core's `getNode`) and
//! syncing the managed labels from the Machine to the Node, and core's annotations on it.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams};
use serde_json::{Value, json};

use super::phases::NodeLink;
use crate::conditions::Cond;
use crate::error::{Error, Result};
use crate::sim::Ctx;
use crate::view::{MachineView, status_bool, str_at};

/// Annotation in which core remembers which labels it put on the Node.
pub(crate) const LABELS_FROM_MACHINE: &str = "cluster.x-k8s.io/labels-from-machine";

/// Outcome of [`link`].
pub(super) struct LinkState {
    pub node_ref: Option<NodeLink>,
    /// The Node's `status.nodeInfo`, which core mirrors onto the Machine.
    pub node_info: Option<Value>,
    pub cond: Cond,
}

/// Labels core copies to Nodes (`util/labels` `IsNodeLabelManaged`), or all with `all`.
pub(crate) fn is_managed_label(key: &str, all: bool) -> bool {
    if all || key.starts_with("node-role.kubernetes.io") {
        return true;
    }
    let Some((domain, _)) = key.split_once('/') else {
        return false;
    };
    ["node-restriction.kubernetes.io", "node.cluster.x-k8s.io"]
        .iter()
        .any(|d| domain == *d || domain.ends_with(&format!(".{d}")))
}

/// The current nodeRef as recorded in the Machine status.
pub(crate) fn recorded(m: &MachineView) -> Option<NodeLink> {
    m.node_ref_name.clone().map(|name| NodeLink {
        name,
        uid: str_at(&m.status, &["nodeRef", "uid"]).unwrap_or_default(),
    })
}

pub(super) async fn link(
    ctx: &Ctx,
    obj: &DynamicObject,
    m: &MachineView,
    cluster: &DynamicObject,
) -> Result<LinkState> {
    let ty = "NodeHealthy";
    let cluster_status = cluster.data.get("status").cloned().unwrap_or(Value::Null);
    let cluster_infra = status_bool(
        &cluster_status,
        ctx.cfg.versions,
        "infrastructureReady",
        "infrastructureProvisioned",
    );
    if ctx.cfg.nodes_need_cluster_infra && !cluster_infra {
        return Ok(LinkState {
            node_ref: recorded(m),
            node_info: None,
            cond: Cond::new(
                ty,
                false,
                "WaitingForClusterInfrastructure",
                "the Cluster's infrastructure is not ready, so the workload cluster is not reachable",
            ),
        });
    }
    let Some(pid) = &m.provider_id else {
        return Ok(LinkState {
            node_ref: None,
            node_info: None,
            cond: Cond::new(ty, false, "WaitingForNodeRef", "spec.providerID is not set yet"),
        });
    };
    let nodes: Api<Node> = Api::all(ctx.client.clone());
    let list = nodes
        .list(&ListParams::default())
        .await
        .map_err(|e| Error::kube("listing Nodes", e))?;
    let found = list
        .items
        .into_iter()
        .find(|n| n.spec.as_ref().and_then(|s| s.provider_id.as_deref()) == Some(pid.as_str()));
    let Some(node) = found else {
        let (reason, msg) = if m.node_ref_name.is_some() {
            ("NodeNotFound", "the Node linked to this Machine is gone".to_string())
        } else {
            ("WaitingForNodeRef", format!("no Node has spec.providerID {pid}"))
        };
        return Ok(LinkState {
            node_ref: recorded(m),
            node_info: None,
            cond: Cond::new(ty, false, reason, msg),
        });
    };
    sync_labels(ctx, &nodes, obj, &node).await?;
    let ready = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
        .map(|c| c.status.clone());
    let cond = match ready.as_deref() {
        Some("True") => Cond::new(ty, true, "NodeReady", ""),
        Some(s) => Cond::new(ty, false, "NodeNotReady", format!("Node Ready is {s}")),
        None => Cond::new(ty, false, "NodeConditionsFailed", "Node has no Ready condition"),
    };
    let node_info = node
        .status
        .as_ref()
        .and_then(|s| s.node_info.as_ref())
        .and_then(|i| serde_json::to_value(i).ok());
    Ok(LinkState {
        node_ref: Some(NodeLink {
            name: node.metadata.name.clone().unwrap_or_default(),
            uid: node.metadata.uid.clone().unwrap_or_default(),
        }),
        node_info,
        cond,
    })
}

/// The annotations core puts on a Machine's Node: its Cluster, namespace and name, the
/// (empty: none are synced by default) annotations taken from the Machine, and the Machine's
/// controller (a MachineSet) when it has one.
pub(crate) fn core_annotations(machine: &DynamicObject) -> BTreeMap<String, String> {
    let cluster = machine
        .data
        .pointer("/spec/clusterName")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let mut a = BTreeMap::from([
        ("cluster.x-k8s.io/cluster-name".to_string(), cluster.to_string()),
        (
            "cluster.x-k8s.io/cluster-namespace".to_string(),
            machine.metadata.namespace.clone().unwrap_or_default(),
        ),
        (
            "cluster.x-k8s.io/machine".to_string(),
            machine.metadata.name.clone().unwrap_or_default(),
        ),
        ("cluster.x-k8s.io/annotations-from-machine".to_string(), String::new()),
    ]);
    let refs = machine.metadata.owner_references.as_deref().unwrap_or_default();
    if let Some(owner) = refs.iter().find(|r| r.controller == Some(true)) {
        a.insert("cluster.x-k8s.io/owner-kind".into(), owner.kind.clone());
        a.insert("cluster.x-k8s.io/owner-name".into(), owner.name.clone());
    }
    a
}

/// The label patch that makes the Node carry the Machine's managed labels, or `None`.
pub(crate) fn label_patch(
    machine_labels: &BTreeMap<String, String>,
    node_labels: &BTreeMap<String, String>,
    previous: Option<&str>,
    all: bool,
) -> Option<Value> {
    let desired: BTreeMap<&String, &String> = machine_labels
        .iter()
        .filter(|(k, _)| is_managed_label(k, all))
        .collect();
    let mut labels = serde_json::Map::new();
    for (k, v) in &desired {
        if node_labels.get(*k) != Some(*v) {
            labels.insert((*k).clone(), json!(v));
        }
    }
    for old in previous.unwrap_or("").split(',').filter(|s| !s.is_empty()) {
        if !desired.keys().any(|k| k.as_str() == old) && node_labels.contains_key(old) {
            labels.insert(old.to_string(), Value::Null);
        }
    }
    let keys: Vec<&str> = desired.keys().map(|k| k.as_str()).collect();
    let annotation = keys.join(",");
    if labels.is_empty() && previous == Some(annotation.as_str()) {
        return None;
    }
    Some(json!({
        "metadata": {
            "labels": Value::Object(labels),
            "annotations": { LABELS_FROM_MACHINE: annotation },
        }
    }))
}

async fn sync_labels(ctx: &Ctx, nodes: &Api<Node>, machine: &DynamicObject, node: &Node) -> Result<()> {
    let machine_labels = machine.metadata.labels.clone().unwrap_or_default();
    let node_labels = node.metadata.labels.clone().unwrap_or_default();
    let previous = node
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(LABELS_FROM_MACHINE))
        .map(String::as_str);
    let labels = label_patch(&machine_labels, &node_labels, previous, ctx.cfg.sync_all_labels);
    let current = node.metadata.annotations.clone().unwrap_or_default();
    let missing: serde_json::Map<String, Value> = core_annotations(machine)
        .into_iter()
        .filter(|(k, v)| current.get(k) != Some(v))
        .map(|(k, v)| (k, json!(v)))
        .collect();
    if labels.is_none() && missing.is_empty() {
        return Ok(());
    }
    let mut patch = labels.unwrap_or_else(|| json!({"metadata": {"annotations": {}}}));
    if let Some(a) = patch
        .pointer_mut("/metadata/annotations")
        .and_then(Value::as_object_mut)
    {
        a.extend(missing);
    }
    let name = node.metadata.name.clone().unwrap_or_default();
    nodes
        .patch(&name, &PatchParams::default(), &Patch::Merge(patch))
        .await
        .map_err(|e| Error::kube(format!("syncing labels to Node {name}"), e))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn managed_labels_follow_core() {
        assert!(is_managed_label("node-role.kubernetes.io/worker", false));
        assert!(is_managed_label("node-restriction.kubernetes.io/x", false));
        assert!(is_managed_label("a.node-restriction.kubernetes.io/x", false));
        assert!(is_managed_label("node.cluster.x-k8s.io/x", false));
        assert!(is_managed_label("foo.node.cluster.x-k8s.io/x", false));
        assert!(!is_managed_label("cluster.x-k8s.io/cluster-name", false));
        assert!(!is_managed_label("app", false));
        assert!(is_managed_label("app", true));
    }

    #[test]
    fn label_patch_adds_and_removes() {
        let machine = map(&[("node-role.kubernetes.io/worker", ""), ("app", "x")]);
        let node = map(&[("node-role.kubernetes.io/infra", "")]);
        let p = label_patch(&machine, &node, Some("node-role.kubernetes.io/infra"), false).unwrap();
        assert_eq!(p["metadata"]["labels"]["node-role.kubernetes.io/worker"], "");
        assert_eq!(
            p["metadata"]["labels"].get("node-role.kubernetes.io/infra"),
            Some(&Value::Null)
        );
        assert!(p["metadata"]["labels"].get("app").is_none());
        let synced = map(&[("node-role.kubernetes.io/worker", "")]);
        assert!(label_patch(&machine, &synced, Some("node-role.kubernetes.io/worker"), false).is_none());
    }
}

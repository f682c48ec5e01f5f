//! The deletion sequence of core's Machine controller (book: "Machine deletion process"):
//! pre-drain hooks → cordon + drain (until `nodeDrainTimeout`) → pre-terminate hooks →
//! delete InfraMachine and wait → delete bootstrap config and wait → delete Node → remove the
//! finalizer. Each wait is visible as the `Deleting` condition's reason.
//!
//! Not simulated: waiting for volume detach, `MachineDrainRule`s, `nodeDeletionTimeout`.

use std::time::Duration;

use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, DeleteParams, DynamicObject};
use kube::runtime::controller::Action;
use serde_json::json;

use super::drain::{Drain, cordon, drain_round};
use super::phases::write_deleting;
use crate::conditions::Cond;
use crate::error::{Error, Result, is_not_found};
use crate::patch::patch_guarded;
use crate::sim::Ctx;
use crate::view::{MachineView, ObjRef, status_bool, str_at};
use crate::{EXCLUDE_DRAIN_ANNOTATION, MACHINE_FINALIZER, PRE_DRAIN_HOOK_PREFIX, PRE_TERMINATE_HOOK_PREFIX};

fn hooks(obj: &DynamicObject, prefix: &str) -> Vec<String> {
    obj.metadata
        .annotations
        .as_ref()
        .map(|a| {
            a.keys()
                .filter(|k| k.split_once('/').is_some_and(|(d, _)| d == prefix))
                .cloned()
                .collect()
        })
        .unwrap_or_default()
}

fn deleting(reason: &str, message: impl Into<String>) -> Cond {
    Cond::new("Deleting", true, reason, message)
}

/// Whether a provider object is gone after asking for its deletion.
enum Gone {
    Yes,
    Waiting(String),
}

async fn delete_ref(ctx: &Ctx, m: &MachineView, r: &ObjRef) -> Result<Gone> {
    let kind = match ctx.resolve(r).await {
        Ok(k) => k,
        Err(Error::KindNotServed { detail, .. }) => {
            tracing::warn!(kind = %r.kind, %detail, "kind no longer served; treating {} as gone", r.name);
            return Ok(Gone::Yes);
        }
        Err(e) => return Err(e),
    };
    let Some(o) = ctx.resolver.get(&kind, &m.namespace, &r.name).await? else {
        return Ok(Gone::Yes);
    };
    if o.metadata.deletion_timestamp.is_none() {
        match ctx
            .resolver
            .api(&kind, &m.namespace)
            .delete(&r.name, &DeleteParams::background())
            .await
        {
            Ok(_) => {}
            Err(e) if is_not_found(&e) => return Ok(Gone::Yes),
            Err(e) => return Err(Error::kube(format!("deleting {} {}", r.kind, r.name), e)),
        }
        if ctx.resolver.get(&kind, &m.namespace, &r.name).await?.is_none() {
            return Ok(Gone::Yes);
        }
    }
    Ok(Gone::Waiting(format!(
        "waiting for {} {} to be deleted",
        r.kind, r.name
    )))
}

async fn node_ops_allowed(ctx: &Ctx, m: &MachineView) -> Result<bool> {
    if m.node_ref_name.is_none() {
        return Ok(false);
    }
    if !ctx.cfg.nodes_need_cluster_infra {
        return Ok(true);
    }
    match ctx.clusters(&m.namespace).get(&m.cluster_name).await {
        Ok(c) => {
            let status = c.data.get("status").cloned().unwrap_or_default();
            Ok(c.metadata.deletion_timestamp.is_none()
                && status_bool(
                    &status,
                    ctx.cfg.versions,
                    "infrastructureReady",
                    "infrastructureProvisioned",
                ))
        }
        Err(e) if is_not_found(&e) => Ok(false),
        Err(e) => Err(Error::kube(format!("reading Cluster {}", m.cluster_name), e)),
    }
}

pub(super) async fn reconcile(obj: &DynamicObject, m: &MachineView, ctx: &Ctx) -> Result<Action> {
    let has_finalizer = obj
        .metadata
        .finalizers
        .as_ref()
        .is_some_and(|f| f.iter().any(|f| f == MACHINE_FINALIZER));
    if !has_finalizer {
        return Ok(Action::await_change());
    }
    let api = ctx.machines(&m.namespace);
    let drain_started = str_at(&m.status, &["deletion", "nodeDrainStartTime"]);

    let pre_drain = hooks(obj, PRE_DRAIN_HOOK_PREFIX);
    if !pre_drain.is_empty() {
        let msg = format!("waiting for pre-drain hooks: {}", pre_drain.join(", "));
        write_deleting(
            ctx,
            &api,
            obj,
            m,
            deleting("WaitingForPreDrainHook", msg),
            drain_started.as_deref(),
        )
        .await?;
        return Ok(Action::await_change());
    }

    let nodes: Api<Node> = Api::all(ctx.client.clone());
    let node = if node_ops_allowed(ctx, m).await? {
        let name = m.node_ref_name.clone().unwrap_or_default();
        nodes
            .get_opt(&name)
            .await
            .map_err(|e| Error::kube(format!("reading Node {name}"), e))?
    } else {
        None
    };
    let excluded = obj
        .metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(EXCLUDE_DRAIN_ANNOTATION));
    if let Some(node) = node.as_ref().filter(|_| !excluded) {
        let now = Utc::now();
        let started = drain_started
            .as_deref()
            .and_then(|s| DateTime::parse_from_rfc3339(s).ok())
            .map(|t| t.with_timezone(&Utc))
            .unwrap_or(now);
        let started_str = started.to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
        let timeout = m.drain_timeout.filter(|t| !t.is_zero());
        let elapsed = (now - started).to_std().unwrap_or(Duration::ZERO);
        let remaining = timeout.map(|t| t.saturating_sub(elapsed));
        if remaining.is_some_and(|r| r.is_zero()) {
            tracing::info!(machine = %m.name, "nodeDrainTimeout expired; skipping the rest of the drain");
        } else {
            cordon(ctx, node).await?;
            if let Drain::Pending(msg) = drain_round(ctx, node.metadata.name.as_deref().unwrap_or("")).await? {
                write_deleting(ctx, &api, obj, m, deleting("DrainingNode", msg), Some(&started_str)).await?;
                let wait = remaining.map_or(ctx.cfg.drain_retry, |r| r.min(ctx.cfg.drain_retry));
                return Ok(Action::requeue(wait.max(Duration::from_millis(10))));
            }
        }
    }

    let pre_terminate = hooks(obj, PRE_TERMINATE_HOOK_PREFIX);
    if !pre_terminate.is_empty() {
        let msg = format!("waiting for pre-terminate hooks: {}", pre_terminate.join(", "));
        write_deleting(
            ctx,
            &api,
            obj,
            m,
            deleting("WaitingForPreTerminateHook", msg),
            drain_started.as_deref(),
        )
        .await?;
        return Ok(Action::await_change());
    }

    if let Some(r) = &m.infra_ref
        && let Gone::Waiting(msg) = delete_ref(ctx, m, r).await?
    {
        if ctx.cfg.kubelet != crate::KubeletMode::Off {
            crate::kubelet::stop_node(ctx, m).await?;
        }
        let cond = deleting("WaitingForInfrastructureDeletion", msg);
        write_deleting(ctx, &api, obj, m, cond, drain_started.as_deref()).await?;
        return Ok(Action::await_change());
    }
    if let Some(r) = &m.config_ref
        && let Gone::Waiting(msg) = delete_ref(ctx, m, r).await?
    {
        let cond = deleting("WaitingForBootstrapDeletion", msg);
        write_deleting(ctx, &api, obj, m, cond, drain_started.as_deref()).await?;
        return Ok(Action::await_change());
    }

    if let Some(node) = &node {
        let name = node.metadata.name.clone().unwrap_or_default();
        if node.metadata.deletion_timestamp.is_none() {
            match nodes.delete(&name, &DeleteParams::background()).await {
                Ok(_) => {}
                Err(e) if is_not_found(&e) => {}
                Err(e) => return Err(Error::kube(format!("deleting Node {name}"), e)),
            }
        }
        let still = nodes
            .get_opt(&name)
            .await
            .map_err(|e| Error::kube(format!("reading Node {name}"), e))?;
        if still.is_some() {
            let msg = format!("waiting for Node {name} to be deleted");
            write_deleting(
                ctx,
                &api,
                obj,
                m,
                deleting("DeletingNode", msg),
                drain_started.as_deref(),
            )
            .await?;
            return Ok(Action::await_change());
        }
    }

    let finalizers: Vec<String> = obj
        .metadata
        .finalizers
        .clone()
        .unwrap_or_default()
        .into_iter()
        .filter(|f| f != MACHINE_FINALIZER)
        .collect();
    patch_guarded(
        &api,
        obj,
        json!({"metadata": {"finalizers": finalizers}}),
        "removing finalizer from Machine",
    )
    .await?;
    Ok(Action::await_change())
}

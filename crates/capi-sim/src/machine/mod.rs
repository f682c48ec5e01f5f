//! What core's Machine controller does for providers: metadata (finalizer, cluster label,
//! adoption), ownership of the bootstrap config and InfraMachine, copying their results onto
//! the Machine, linking the Node, phases, and the deletion sequence.

mod deletion;
mod drain;
mod node;
mod phases;
mod refs;

use kube::api::{Api, DynamicObject};
use kube::runtime::controller::Action;
use serde_json::{Value, json};

use crate::conditions::Cond;
use crate::error::Result;
use crate::patch::{owner_ref, patch_guarded};
use crate::sim::Ctx;
use crate::view::MachineView;
use crate::{CLUSTER_NAME_LABEL, MACHINE_FINALIZER};

pub(crate) use phases::write_status;

/// Reconciles one Machine.
pub(crate) async fn reconcile(obj: &DynamicObject, ctx: &Ctx) -> Result<Action> {
    let m = MachineView::new(obj);
    let api = ctx.machines(&m.namespace);
    let cluster = get_cluster(ctx, &m).await?;
    // Core does nothing, not even deletion, for a paused Machine or Cluster.
    if crate::cluster::annotated_paused(obj) || cluster.as_ref().is_some_and(crate::cluster::paused) {
        return Ok(Action::await_change());
    }
    if m.deleting {
        return deletion::reconcile(obj, &m, ctx).await;
    }
    let obj = ensure_metadata(&api, obj, &m, cluster.as_ref(), ctx).await?;
    let m = MachineView::new(&obj);
    let Some(cluster) = cluster else {
        let cond = Cond::new(
            "InfrastructureReady",
            false,
            "WaitingForCluster",
            format!("Cluster {} does not exist", m.cluster_name),
        );
        write_status(ctx, &api, &obj, &m, phases::Observed::waiting(cond)).await?;
        return Ok(Action::await_change());
    };

    let boot = refs::bootstrap(ctx, &obj, &m).await?;
    let infra = refs::infrastructure(ctx, &obj, &m).await?;

    let mut spec_patch = serde_json::Map::new();
    if let Some(name) = &boot.copy_data_secret_name {
        spec_patch.insert("bootstrap".into(), json!({ "dataSecretName": name }));
    }
    if let Some(pid) = &infra.copy_provider_id {
        spec_patch.insert("providerID".into(), json!(pid));
    }
    if let Some(fd) = &infra.copy_failure_domain {
        spec_patch.insert("failureDomain".into(), json!(fd));
    }
    let obj = if spec_patch.is_empty() {
        obj
    } else {
        patch_guarded(
            &api,
            &obj,
            json!({ "spec": Value::Object(spec_patch) }),
            "copying provider results to Machine",
        )
        .await?
    };
    let m = MachineView::new(&obj);

    if ctx.cfg.kubelet != crate::KubeletMode::Off {
        match (&infra.object, infra.ready, &infra.provider_id) {
            (Some(i), true, Some(pid)) if i.metadata.deletion_timestamp.is_none() => {
                crate::kubelet::ensure_node(ctx, &m, i, pid).await?;
            }
            (Some(i), _, _) if i.metadata.deletion_timestamp.is_some() => {
                crate::kubelet::stop_node(ctx, &m).await?;
            }
            (None, _, _) if infra.resolved => crate::kubelet::stop_node(ctx, &m).await?,
            _ => {}
        }
    }

    let link = node::link(ctx, &obj, &m, &cluster).await?;
    let observed = phases::Observed {
        bootstrap_ready: boot.ready,
        bootstrap_cond: Some(boot.cond),
        infra_ready: infra.ready,
        infra_cond: Some(infra.cond),
        addresses: infra.addresses,
        node: link.node_ref,
        node_info: link.node_info,
        node_cond: Some(link.cond),
        deleting_cond: None,
    };
    write_status(ctx, &api, &obj, &m, observed).await?;
    Ok(Action::await_change())
}

async fn get_cluster(ctx: &Ctx, m: &MachineView) -> Result<Option<DynamicObject>> {
    if m.cluster_name.is_empty() {
        return Ok(None);
    }
    ctx.cluster(&m.namespace, &m.cluster_name).await
}

/// Cluster-name label, then (once the Cluster exists, as core fails before that point) the
/// finalizer and, for stand-alone Machines, a non-controller ownerRef to the Cluster as core's
/// `shouldAdopt` does; one guarded patch, returning the new object.
async fn ensure_metadata(
    api: &Api<DynamicObject>,
    obj: &DynamicObject,
    m: &MachineView,
    cluster: Option<&DynamicObject>,
    ctx: &Ctx,
) -> Result<DynamicObject> {
    let mut finalizers = obj.metadata.finalizers.clone().unwrap_or_default();
    let mut patch = json!({});
    if cluster.is_some() && !finalizers.iter().any(|f| f == MACHINE_FINALIZER) {
        finalizers.push(MACHINE_FINALIZER.to_string());
        patch["metadata"]["finalizers"] = json!(finalizers);
    }
    let labelled = obj
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(CLUSTER_NAME_LABEL))
        .is_some_and(|v| *v == m.cluster_name);
    if !labelled && !m.cluster_name.is_empty() {
        patch["metadata"]["labels"] = json!({ CLUSTER_NAME_LABEL: m.cluster_name });
    }
    if let Some(cluster) = cluster {
        let refs = obj.metadata.owner_references.clone().unwrap_or_default();
        let has_controller = refs.iter().any(|r| r.controller == Some(true));
        let has_cluster = refs
            .iter()
            .any(|r| r.kind == "Cluster" && r.api_version.starts_with(crate::CAPI_GROUP));
        if !has_controller && !has_cluster {
            let mut new_refs = refs;
            new_refs.push(owner_ref(cluster, &ctx.cluster_ar, false));
            patch["metadata"]["ownerReferences"] = json!(new_refs);
        }
    }
    if patch.as_object().is_some_and(|p| p.is_empty()) {
        return Ok(obj.clone());
    }
    patch_guarded(api, obj, patch, "setting finalizer/labels/owner on Machine").await
}

//! Giving a Cluster without a control plane its SelfManagedControlPlane, for the LibvirtCluster
//! controller.
//!
//! Cluster API core drains and deletes a worker's Node only when the Cluster has control plane
//! Machines or an externally managed control plane (`isDeleteNodeAllowed`), and reports
//! `ControlPlaneInitialized` only from a control plane object. The seed's Cluster has neither,
//! so a SelfManagedControlPlane named after the Cluster is created and the Cluster's
//! `spec.controlPlaneRef` set to it.
//!
//! The reference is only ever added: a Cluster that has one (the user's own control plane, or
//! someone quicker) is never changed, and core's webhook forbids removing it anyway. The patch
//! carries the Cluster's `resourceVersion`, so a reference set concurrently makes it fail with a
//! conflict instead of being overwritten; the conflict is retried at once, on a fresh read.

use kube::{
    Resource, ResourceExt,
    api::{Api, DynamicObject, Patch, PatchParams},
    runtime::events::EventType,
};

use crate::api::{
    CLUSTER_NAME_LABEL, SelfManagedControlPlane,
    capi::{self, ClusterView, ContractRef},
};
use crate::reconcile::{ApiError, Context, error::get_opt, publish_event};

/// Field manager of the SelfManagedControlPlanes created for Clusters.
pub const FIELD_MANAGER: &str = "caplv-manager/control-plane-link";

/// Failures of linking a control plane: a read or write (a conflict is the Cluster changing
/// under the patch), or a Cluster of an unexpected shape.
pub type Error = ApiError;

/// What linking did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Linked {
    /// The Cluster already references a control plane that is not ours: nothing to do.
    Foreign,
    /// The Cluster references our SelfManagedControlPlane, which exists.
    Existing,
    /// Our SelfManagedControlPlane, referenced by the Cluster, was missing and is recreated.
    Recreated,
    /// The Cluster had no reference; it now points at a new SelfManagedControlPlane.
    Linked,
    /// The Cluster is being deleted: core removes its control plane first, which must not
    /// come back (nor a new one be made in a namespace that may be terminating).
    ClusterDeleting,
}

/// Whether `reference` names a SelfManagedControlPlane.
fn is_ours(reference: &ContractRef) -> bool {
    reference.group == SelfManagedControlPlane::group(&()) && reference.kind == SelfManagedControlPlane::kind(&())
}

/// Make sure `cluster` (read just now, so its resourceVersion is fresh) has a control plane.
///
/// # Errors
/// When a read or write fails; [`ApiError::is_conflict`] tells a lost race.
pub async fn ensure(ctx: &Context, cluster: &DynamicObject) -> Result<Linked, Error> {
    if cluster.metadata.deletion_timestamp.is_some() {
        return Ok(Linked::ClusterDeleting);
    }
    let view = ClusterView::decode(cluster, ctx.capi)?;
    let namespace = cluster.namespace().unwrap_or_default();
    let control_planes: Api<SelfManagedControlPlane> = Api::namespaced(ctx.client.clone(), &namespace);
    match &view.control_plane_ref {
        Some(reference) if is_ours(reference) => {
            // The cache answers the usual case; only a miss (deleted, or not seen yet) is read live.
            if ctx
                .caches
                .control_planes
                .get(&namespace, &reference.name)
                .await
                .is_some()
                || get_opt(&control_planes, &reference.name, "SelfManagedControlPlane")
                    .await?
                    .is_some()
            {
                return Ok(Linked::Existing);
            }
            create(&control_planes, &reference.name, &view.name).await?;
            tracing::info!(cluster = %view.name, "recreated the SelfManagedControlPlane the Cluster references");
            return Ok(Linked::Recreated);
        }
        Some(_) => return Ok(Linked::Foreign),
        None => {}
    }
    create(&control_planes, &view.name, &view.name).await?;
    let reference = capi::control_plane_ref(
        ctx.capi,
        SelfManagedControlPlane::group(&()).as_ref(),
        SelfManagedControlPlane::version(&()).as_ref(),
        SelfManagedControlPlane::kind(&()).as_ref(),
        &view.name,
        &namespace,
    );
    let patch = serde_json::json!({
        "metadata": {"resourceVersion": cluster.resource_version()},
        "spec": {"controlPlaneRef": reference},
    });
    let clusters: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), &namespace, &ctx.capi.cluster());
    clusters
        .patch(&view.name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(ApiError::write(format!(
            "spec.controlPlaneRef of Cluster {:?}",
            view.name
        )))?;
    tracing::info!(cluster = %view.name, "set the Cluster's controlPlaneRef to its SelfManagedControlPlane");
    publish_event(
        &ctx.recorder,
        &cluster.object_ref(&ctx.capi.cluster()),
        EventType::Normal,
        "ControlPlaneLinked",
        "LinkControlPlane",
        format!(
            "the Cluster had no controlPlaneRef: it now references SelfManagedControlPlane {:?}, which keeps the \
             {:?} Secret and lets Cluster API drain and delete worker Nodes",
            view.name,
            format!("{}-kubeconfig", view.name)
        ),
    )
    .await;
    Ok(Linked::Linked)
}

/// Server-side apply an empty SelfManagedControlPlane `name` for `cluster`; fields others set
/// (a user's `spec.server`, core's ownerRef and label) are kept.
async fn create(api: &Api<SelfManagedControlPlane>, name: &str, cluster: &str) -> Result<(), Error> {
    let body = serde_json::json!({
        "apiVersion": SelfManagedControlPlane::api_version(&()),
        "kind": SelfManagedControlPlane::kind(&()),
        "metadata": {"name": name, "labels": {CLUSTER_NAME_LABEL: cluster}},
        "spec": {},
    });
    api.patch(name, &PatchParams::apply(FIELD_MANAGER).force(), &Patch::Apply(&body))
        .await
        .map_err(ApiError::write(format!("SelfManagedControlPlane {name:?}")))?;
    Ok(())
}

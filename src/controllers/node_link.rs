//! Links a LibvirtMachine's Node once it registers: sets `Node.spec.providerID` while it is empty
//! (Cluster API finds the Node by it; a kubelet started without `--provider-id` leaves it
//! empty), and keeps `spec.nodeLabels` / `spec.nodeAnnotations` applied.
//!
//! Labels and annotations are written with server-side apply under a field manager of their own,
//! so a key removed from the spec is removed from the Node, and keys others own (the kubelet,
//! Cluster API's label sync, an administrator) are left alone. A Node whose provider ID names
//! another machine is never touched (Warning Event `NodeProviderIDMismatch`).

use std::{collections::BTreeMap, sync::Arc};

use k8s_openapi::api::core::v1::Node;
use kube::{
    Api, Resource, ResourceExt,
    api::{PartialObjectMeta, Patch, PatchParams},
    runtime::{
        controller::Action,
        events::EventType,
        reflector::{ObjectRef, Store},
        watcher,
    },
};
use tokio_util::sync::CancellationToken;

use crate::reconcile::{ApiError, Context, drive_cached, publish_event, refs_where};
use crate::{api::libvirt_machine::LibvirtMachine, app::health::Readiness};

/// Controller name in metrics and logs.
pub const NAME: &str = "nodelink";
/// Field manager owning the labels and annotations applied from the spec.
pub const FIELD_MANAGER: &str = "caplv-manager/node-metadata";

/// Failures of one reconcile: a Node read or write.
pub type Error = ApiError;

/// What to do to the Node. Pure.
#[derive(Debug, PartialEq, Eq)]
pub enum Link {
    /// Set the empty provider ID.
    SetProviderId,
    /// It is already ours.
    AlreadyLinked,
    /// It names another machine: hands off.
    Mismatch(String),
}

/// Decide from the Node's current provider ID.
#[must_use]
pub fn link(current: Option<&str>, ours: &str) -> Link {
    match current.filter(|p| !p.is_empty()) {
        None => Link::SetProviderId,
        Some(p) if p == ours => Link::AlreadyLinked,
        Some(p) => Link::Mismatch(p.to_owned()),
    }
}

/// The server-side apply body for the Node's labels and annotations from `spec`.
#[must_use]
pub fn metadata_patch(
    node: &str,
    labels: &BTreeMap<String, String>,
    annotations: &BTreeMap<String, String>,
) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": node, "labels": labels, "annotations": annotations},
    })
}

async fn reconcile(machine: Arc<LibvirtMachine>, ctx: Arc<Context>) -> Result<Action, Error> {
    apply(&machine, &ctx).await
}

async fn apply(machine: &LibvirtMachine, ctx: &Context) -> Result<Action, Error> {
    let status = machine.status.clone().unwrap_or_default();
    let (Some(node_name), Some(provider_id)) = (status.node_name.as_deref(), machine.spec.provider_id.as_deref())
    else {
        return Ok(Action::await_change());
    };
    if !status.ready || machine.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let nodes: Api<Node> = Api::all(ctx.client.clone());
    let Some(node) = nodes
        .get_opt(node_name)
        .await
        .map_err(ApiError::read(format!("Node {node_name}")))?
    else {
        return Ok(Action::await_change());
    };
    let current = node.spec.as_ref().and_then(|s| s.provider_id.as_deref());
    match link(current, provider_id) {
        Link::Mismatch(other) => {
            publish_event(
                &ctx.recorder,
                &machine.object_ref(&()),
                EventType::Warning,
                "NodeProviderIDMismatch",
                "LinkNode",
                format!("Node {node_name} has provider ID {other}, not {provider_id}; leaving it alone"),
            )
            .await;
            return Ok(Action::await_change());
        }
        Link::SetProviderId => {
            // The resourceVersion precondition keeps us from racing a kubelet setting it.
            let patch = serde_json::json!({
                "metadata": {"resourceVersion": node.resource_version()},
                "spec": {"providerID": provider_id},
            });
            nodes
                .patch(node_name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map_err(ApiError::write(format!("the provider ID of Node {node_name}")))?;
            publish_event(
                &ctx.recorder,
                &machine.object_ref(&()),
                EventType::Normal,
                "NodeLinked",
                "LinkNode",
                format!("set providerID {provider_id} on Node {node_name}"),
            )
            .await;
        }
        Link::AlreadyLinked => {}
    }
    let patch = metadata_patch(node_name, &machine.spec.node_labels, &machine.spec.node_annotations);
    nodes
        .patch(
            node_name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&patch),
        )
        .await
        .map_err(ApiError::write(format!("the labels of Node {node_name}")))?;
    Ok(Action::await_change())
}

fn machines_for_node(store: &Store<LibvirtMachine>, node: &str) -> Vec<ObjectRef<LibvirtMachine>> {
    refs_where(store, |m| {
        m.status.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node)
    })
}

/// Run the controller until `shutdown` is cancelled.
pub async fn run(ctx: Arc<Context>, readiness: Readiness, shutdown: CancellationToken) {
    let controller = Context::shared_controller(&ctx.caches.libvirt_machines);
    let store = controller.store();
    let by_node = store.clone();
    let nodes: Api<PartialObjectMeta<Node>> = Api::all(ctx.client.clone());
    let controller = controller
        .watches(nodes, watcher::Config::default(), move |n| {
            machines_for_node(&by_node, &n.name_any())
        })
        .graceful_shutdown_on(shutdown.clone().cancelled_owned());
    drive_cached(controller, NAME, readiness, reconcile, ctx.clone(), &ctx).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_provider_id_is_set_only_while_empty() {
        assert_eq!(link(None, "libvirt:///a"), Link::SetProviderId);
        assert_eq!(link(Some(""), "libvirt:///a"), Link::SetProviderId);
        assert_eq!(link(Some("libvirt:///a"), "libvirt:///a"), Link::AlreadyLinked);
        assert_eq!(
            link(Some("aws:///x"), "libvirt:///a"),
            Link::Mismatch("aws:///x".to_owned())
        );
    }

    #[test]
    fn the_metadata_patch_carries_exactly_the_spec() {
        let labels = BTreeMap::from([("node-role.kubernetes.io/worker".to_owned(), String::new())]);
        let p = metadata_patch("n", &labels, &BTreeMap::new());
        assert_eq!(p["metadata"]["labels"]["node-role.kubernetes.io/worker"], "");
        assert_eq!(p["metadata"]["annotations"], serde_json::json!({}));
        assert_eq!(p["kind"], "Node");
    }
}

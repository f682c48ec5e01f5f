//! Links a LibvirtMachine's Node once it registers: sets `Node.spec.providerID` while it is empty
//! (Cluster API finds the Node by it; a kubelet started without `--provider-id` leaves it
//! empty), and keeps `spec.nodeLabels` / `spec.nodeAnnotations` applied.
//!
//! Labels and annotations are written with server-side apply under a field manager of their own,
//! so a key removed from the spec is removed from the Node, and keys others own (the kubelet,
//! Cluster API's label sync, an administrator) are left alone. A Node whose provider ID names
//! another machine is never touched (Warning Event `NodeProviderIDMismatch`).

use std::{
    collections::{BTreeMap, HashMap},
    sync::{Arc, Mutex, PoisonError},
};

use k8s_openapi::api::core::v1::Node;
use kube::{
    Api, Resource, ResourceExt,
    api::{Patch, PatchParams},
    runtime::{
        controller::Action,
        events::EventType,
        reflector::{ObjectRef, Store},
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

/// Whether `node` carries every label and annotation of the spec, with the spec's values.
#[must_use]
pub fn carries(node: &Node, labels: &BTreeMap<String, String>, annotations: &BTreeMap<String, String>) -> bool {
    let has = |current: &BTreeMap<String, String>, wanted: &BTreeMap<String, String>| {
        wanted.iter().all(|(k, v)| current.get(k) == Some(v))
    };
    has(node.labels(), labels) && has(node.annotations(), annotations)
}

/// The context, and the body last applied to each Node: a Node that carries it is not written
/// again at every change of its machine (a status write, another writer's annotation).
struct State {
    ctx: Arc<Context>,
    applied: Mutex<HashMap<String, serde_json::Value>>,
}

impl State {
    fn applied(&self) -> std::sync::MutexGuard<'_, HashMap<String, serde_json::Value>> {
        self.applied.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

async fn reconcile(machine: Arc<LibvirtMachine>, state: Arc<State>) -> Result<Action, Error> {
    apply(&machine, &state).await
}

async fn apply(machine: &LibvirtMachine, state: &State) -> Result<Action, Error> {
    let ctx = &state.ctx;
    let status = machine.status.clone().unwrap_or_default();
    let (Some(node_name), Some(provider_id)) = (status.node_name.as_deref(), machine.spec.provider_id.as_deref())
    else {
        return Ok(Action::await_change());
    };
    if !status.ready || machine.metadata.deletion_timestamp.is_some() {
        state.applied().remove(node_name);
        return Ok(Action::await_change());
    }
    let Some(node) = ctx.caches.nodes.get_cluster_scoped(node_name).await else {
        state.applied().remove(node_name);
        return Ok(Action::await_change());
    };
    let nodes: Api<Node> = Api::all(ctx.client.clone());
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
    let (labels, annotations) = (&machine.spec.node_labels, &machine.spec.node_annotations);
    let patch = metadata_patch(node_name, labels, annotations);
    if state.applied().get(node_name) == Some(&patch) && carries(&node, labels, annotations) {
        return Ok(Action::await_change());
    }
    nodes
        .patch(
            node_name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&patch),
        )
        .await
        .map_err(ApiError::write(format!("the labels of Node {node_name}")))?;
    state.applied().insert(node_name.to_owned(), patch);
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
    let controller = controller
        .watches_shared_stream(ctx.caches.nodes.subscribe(), move |n| {
            machines_for_node(&by_node, &n.name_any())
        })
        .graceful_shutdown_on(shutdown.clone().cancelled_owned());
    let state = Arc::new(State {
        ctx: ctx.clone(),
        applied: Mutex::default(),
    });
    drive_cached(controller, NAME, readiness, reconcile, state, &ctx).await;
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
    fn a_node_carries_the_spec_only_with_every_key_and_value() {
        let node = |labels: serde_json::Value| -> Node {
            serde_json::from_value(serde_json::json!({"metadata": {"name": "n", "labels": labels,
                "annotations": {"a": "1", "other": "x"}}}))
            .unwrap()
        };
        let labels = BTreeMap::from([("role".to_owned(), "spot".to_owned())]);
        let annotations = BTreeMap::from([("a".to_owned(), "1".to_owned())]);
        let current = node(serde_json::json!({"role": "spot", "kubernetes.io/hostname": "n"}));
        assert!(carries(&current, &labels, &annotations), "others' keys do not matter");
        assert!(!carries(
            &node(serde_json::json!({"role": "db"})),
            &labels,
            &annotations
        ));
        assert!(!carries(&node(serde_json::json!({})), &labels, &annotations));
        let more = BTreeMap::from([("b".to_owned(), "2".to_owned())]);
        assert!(!carries(&current, &labels, &more));
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

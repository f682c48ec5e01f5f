//! One watch per kind for every controller that reads or follows it.
//!
//! Several controllers read Clusters and Machines. Each used to watch them for triggers and GET
//! them in every reconcile: four Cluster watches, and a dozen GETs per object a burst creates.
//! A [`SharedCache`] runs one watch into one store. Its subscribers get each changed object
//! only after the store holds it, so a reconcile a change wakes never reads an older copy (two
//! separate watches, one for the trigger and one for the cache, would allow that).
//!
//! Cached objects are trimmed: `managedFields` and the last-applied annotation are dropped, as
//! no controller reads them and they are often most of an object's size.

use std::{
    hash::Hash,
    sync::{Arc, Mutex, OnceLock, PoisonError},
};

use futures::{Stream, StreamExt};
use kube::{
    Api, Resource, ResourceExt,
    runtime::{
        WatchStreamExt,
        reflector::{self, ObjectRef, Store, store::Writer},
        watcher,
    },
};
use serde::de::DeserializeOwned;
use tokio::sync::mpsc;
use tokio_stream::wrappers::UnboundedReceiverStream;

/// The annotation `kubectl apply` keeps a whole copy of the object in.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// A store of one kind, filled by one watch that starts on first use.
pub struct SharedCache<K>
where
    K: Resource + Clone + 'static,
    K::DynamicType: Eq + Hash + Clone,
{
    api: Api<K>,
    dyntype: K::DynamicType,
    store: OnceLock<Store<K>>,
    subscribers: Arc<Mutex<Vec<mpsc::UnboundedSender<Arc<K>>>>>,
    /// Drops, after trimming, what no reader of this kind reads.
    project: fn(&mut K),
}

impl<K> SharedCache<K>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
    K::DynamicType: Eq + Hash + Clone + Send + Sync,
{
    /// A cache of what `api` lists (`dyntype`: `()` for a typed kind, the resource for a
    /// dynamic one); nothing is watched until it is first used.
    pub fn new(api: Api<K>, dyntype: K::DynamicType) -> Self {
        Self::projected(api, dyntype, |_| {})
    }

    /// A cache whose objects keep only what `project` leaves of them.
    pub fn projected(api: Api<K>, dyntype: K::DynamicType, project: fn(&mut K)) -> Self {
        Self {
            api,
            dyntype,
            store: OnceLock::new(),
            subscribers: Arc::default(),
            project,
        }
    }

    /// The store; it is empty until the first list has arrived ([`super::wait_synced`]).
    pub fn store(&self) -> Store<K> {
        self.store.get_or_init(|| self.start()).clone()
    }

    /// The store if a reader has started the watch; never starts it.
    pub fn started_store(&self) -> Option<Store<K>> {
        self.store.get().cloned()
    }

    /// The store, once the first list has filled it.
    pub async fn synced_store(&self) -> Store<K> {
        let store = self.store();
        super::wait_synced(&store).await;
        store
    }

    /// The cached object `name` in `namespace`, once the first list has filled the store (an
    /// object is never reported missing only because the watch has just started).
    pub async fn get(&self, namespace: &str, name: &str) -> Option<Arc<K>> {
        self.synced_store()
            .await
            .get(&ObjectRef::new_with(name, self.dyntype.clone()).within(namespace))
    }

    /// The cached cluster-scoped object `name`, once the first list has filled the store.
    pub async fn get_cluster_scoped(&self, name: &str) -> Option<Arc<K>> {
        self.synced_store()
            .await
            .get(&ObjectRef::new_with(name, self.dyntype.clone()))
    }

    /// Every object that changes from now on (or is deleted), once the store has the change.
    /// A subscriber that stops polling only holds memory; it never holds up the others.
    pub fn subscribe(&self) -> impl Stream<Item = Arc<K>> + Send + 'static {
        let (tx, rx) = mpsc::unbounded_channel();
        self.subscribers.lock().unwrap_or_else(PoisonError::into_inner).push(tx);
        // Subscribing before the first use starts the watch; its initial list reaches the
        // subscriber then.
        let _ = self.store();
        UnboundedReceiverStream::new(rx)
    }

    fn start(&self) -> Store<K> {
        let writer = Writer::new(self.dyntype.clone());
        let store = writer.as_reader();
        let subscribers = self.subscribers.clone();
        let project = self.project;
        let changes = reflector::reflector(
            writer,
            watcher(self.api.clone(), watcher::Config::default())
                .default_backoff()
                .modify(move |obj| {
                    trim(obj);
                    project(obj);
                }),
        )
        .touched_objects();
        tokio::spawn(async move {
            let mut changes = std::pin::pin!(changes);
            while let Some(change) = changes.next().await {
                let Ok(obj) = change else {
                    // The watcher retries with backoff; the error is logged by kube.
                    continue;
                };
                let obj = Arc::new(obj);
                subscribers
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .retain(|tx| tx.send(obj.clone()).is_ok());
            }
        });
        store
    }
}

/// Drop what no controller reads.
pub(crate) fn trim<K: Resource>(obj: &mut K) {
    obj.managed_fields_mut().clear();
    obj.annotations_mut().remove(LAST_APPLIED);
}

/// Of a Node's status keep only the conditions (whether it is Ready): its images, volumes and
/// system facts are most of its size and no controller reads them.
pub(crate) fn project_node(node: &mut k8s_openapi::api::core::v1::Node) {
    if let Some(status) = &mut node.status {
        *status = k8s_openapi::api::core::v1::NodeStatus {
            conditions: status.conditions.take(),
            ..Default::default()
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;

    #[test]
    fn trimming_drops_managed_fields_and_the_last_applied_copy_only() {
        let mut cm: ConfigMap = serde_json::from_value(serde_json::json!({
            "metadata": {
                "name": "a",
                "annotations": {LAST_APPLIED: "{}", "keep": "me"},
                "managedFields": [{"manager": "kubectl", "operation": "Apply"}]
            },
            "data": {"k": "v"}
        }))
        .unwrap();
        trim(&mut cm);
        assert!(cm.managed_fields().is_empty());
        assert_eq!(cm.annotations().keys().collect::<Vec<_>>(), ["keep"]);
        assert_eq!(cm.data.unwrap()["k"], "v");
    }

    #[test]
    fn a_cached_node_keeps_its_spec_metadata_and_conditions_only() {
        let mut node: k8s_openapi::api::core::v1::Node = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "w1", "annotations": {"a": "b"}},
            "spec": {"providerID": "libvirt:///x", "unschedulable": true},
            "status": {
                "conditions": [{"type": "Ready", "status": "True"}],
                "images": [{"names": ["quay.io/a@sha256:0"], "sizeBytes": 1}],
                "nodeInfo": {"architecture": "amd64", "bootID": "", "containerRuntimeVersion": "", "kernelVersion": "",
                    "kubeProxyVersion": "", "kubeletVersion": "", "machineID": "", "operatingSystem": "linux",
                    "osImage": "", "systemUUID": ""}
            }
        }))
        .unwrap();
        project_node(&mut node);
        let status = node.status.unwrap();
        assert_eq!(status.conditions.unwrap()[0].type_, "Ready");
        assert!(status.images.is_none() && status.node_info.is_none());
        assert_eq!(node.spec.unwrap().provider_id.as_deref(), Some("libvirt:///x"));
        assert_eq!(node.metadata.annotations.unwrap()["a"], "b");
    }

    #[cfg(feature = "sandbox")]
    #[tokio::test]
    async fn subscribers_see_a_change_after_the_store_has_it() {
        use kube::api::{DeleteParams, PostParams};
        let server = memkube::Server::new();
        let api: Api<ConfigMap> = Api::namespaced(server.client(), "default");
        let cache = SharedCache::new(api.clone(), ());
        let mut changes = cache.subscribe();
        let mut cm: ConfigMap = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "a", "annotations": {LAST_APPLIED: "{}"}}
        }))
        .unwrap();
        cm = api.create(&PostParams::default(), &cm).await.unwrap();
        let deadline = std::time::Duration::from_secs(10);
        let seen = tokio::time::timeout(deadline, changes.next()).await.unwrap().unwrap();
        assert_eq!(seen.name_any(), "a");
        let cached = cache
            .get("default", "a")
            .await
            .expect("in the store before the subscriber hears of it");
        assert_eq!(cached.resource_version(), cm.resource_version());
        assert!(
            cached.annotations().is_empty() && cached.managed_fields().is_empty(),
            "trimmed"
        );

        // A second subscriber gets what changes from then on; deletions are delivered too.
        let mut later = cache.subscribe();
        api.delete("a", &DeleteParams::default()).await.unwrap();
        for stream in [&mut changes, &mut later] {
            let gone = tokio::time::timeout(deadline, stream.next()).await.unwrap().unwrap();
            assert_eq!(gone.name_any(), "a");
        }
        assert!(cache.get("default", "a").await.is_none());
    }
}

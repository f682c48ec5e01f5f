//! Reading a controller's own writes before its watch brings them back.
//!
//! A controller reconciles the copy of an object its watch has stored. Right after it writes
//! (a finalizer, a status), that copy is one or more versions behind, and a reconcile woken in
//! between by some other event (the owner Machine changing, a Secret being written) decides
//! from the old copy: it writes the same status again, or sends a patch guarded by the old
//! `resourceVersion` and gets a 409. In a burst of new objects that doubled the writes.
//!
//! [`OwnWrites`] keeps, per object, what the API server returned for the controller's last
//! write and the versions that write replaced. A reconcile given one of those older versions
//! decides from the returned object instead. As soon as the watch delivers any other version
//! (ours, or someone else's newer one) the entry is dropped and the stored copy is used again,
//! so nothing here can hide another writer's change.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, PoisonError},
    time::{Duration, Instant},
};

use kube::{Resource, ResourceExt, runtime::reflector::ObjectRef};

/// How long an entry may wait for its object's watch event; longer means the object is gone.
const KEEP: Duration = Duration::from_secs(300);

struct Entry<K> {
    /// The object as the last write returned it.
    latest: Arc<K>,
    /// Versions our writes replaced.
    superseded: Vec<String>,
    written: Instant,
}

/// The controller's last write per object; shared by its reconciles.
pub struct OwnWrites<K: Resource<DynamicType = ()>> {
    entries: Mutex<HashMap<ObjectRef<K>, Entry<K>>>,
}

impl<K: Resource<DynamicType = ()>> Default for OwnWrites<K> {
    fn default() -> Self {
        Self {
            entries: Mutex::default(),
        }
    }
}

impl<K: Resource<DynamicType = ()> + Clone> OwnWrites<K> {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<ObjectRef<K>, Entry<K>>> {
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The object to decide from: `stored`, unless it is a version our own writes replaced;
    /// then the object as our last write returned it.
    pub fn fresh(&self, stored: Arc<K>) -> Arc<K> {
        let key = ObjectRef::from_obj(stored.as_ref());
        let mut entries = self.lock();
        let Some(entry) = entries.get(&key) else {
            return stored;
        };
        let version = stored.resource_version().unwrap_or_default();
        if entry.superseded.contains(&version) {
            return entry.latest.clone();
        }
        // The watch caught up, or someone else wrote since.
        entries.remove(&key);
        stored
    }

    /// Record a write decided from `from` that the API server answered with `written`.
    pub fn wrote(&self, from: &K, written: K) {
        let key = ObjectRef::from_obj(from);
        let now = Instant::now();
        let mut entries = self.lock();
        entries.retain(|_, e| now.duration_since(e.written) < KEEP);
        let mut superseded = entries.remove(&key).map_or_else(Vec::new, |old| {
            let mut versions = old.superseded;
            versions.extend(old.latest.resource_version());
            versions
        });
        superseded.extend(from.resource_version());
        entries.insert(
            key,
            Entry {
                latest: Arc::new(written),
                superseded,
                written: now,
            },
        );
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::ConfigMap;

    use super::*;

    fn at(version: &str, data: &str) -> ConfigMap {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "a", "namespace": "ns", "resourceVersion": version},
            "data": {"k": data}
        }))
        .unwrap()
    }

    fn data(cm: &ConfigMap) -> &str {
        &cm.data.as_ref().unwrap()["k"]
    }

    #[test]
    fn a_stale_copy_is_replaced_until_the_watch_catches_up() {
        let writes = OwnWrites::default();
        writes.wrote(&at("1", "old"), at("2", "finalizer"));
        writes.wrote(&at("1", "old"), at("3", "status"));
        // Both older versions give our latest write.
        assert_eq!(data(&writes.fresh(Arc::new(at("1", "old")))), "status");
        assert_eq!(data(&writes.fresh(Arc::new(at("2", "finalizer")))), "status");
        // The watch brings our write back: the stored copy is used, and the entry goes.
        assert_eq!(data(&writes.fresh(Arc::new(at("3", "status")))), "status");
        assert_eq!(data(&writes.fresh(Arc::new(at("1", "old")))), "old");
    }

    #[test]
    fn another_writers_newer_version_wins() {
        let writes = OwnWrites::default();
        writes.wrote(&at("1", "old"), at("2", "ours"));
        assert_eq!(data(&writes.fresh(Arc::new(at("5", "theirs")))), "theirs");
        assert_eq!(
            data(&writes.fresh(Arc::new(at("1", "old")))),
            "old",
            "the entry is gone"
        );
    }
}

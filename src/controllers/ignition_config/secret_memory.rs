//! What the controller already knows about the Secrets it reads and writes, so that a
//! reconcile whose Secrets have not changed reads none of them.
//!
//! Every IgnitionConfig a burst creates is reconciled several times (created, its data Secret
//! written, its status written, adopted by its Machine), and each pass used to GET the source
//! and the data Secret. Most configs share one source. The shared Secret metadata cache tells
//! each Secret's current `resourceVersion` without its contents; an entry here is used only
//! while that version is the one it was taken at, so any change to a Secret (a hand edit, a
//! rotation, a deletion) makes the next reconcile read it again.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, PoisonError},
};

use super::plan::{Fingerprint, Payload, Problem};

/// A Secret's namespace and name.
type SecretKey = (String, String);

/// A validated source: the payload or why there is none, at the version it was read.
struct Source {
    version: String,
    payload: Arc<Result<Payload, Problem>>,
}

/// A data Secret known to hold what a fingerprint describes, at a version.
struct Data {
    version: String,
    fingerprint: Fingerprint,
}

#[derive(Default)]
struct Inner {
    /// By source Secret and the key read from it.
    sources: HashMap<(SecretKey, String), Source>,
    data: HashMap<SecretKey, Data>,
    /// One read at a time per source: configs created together share one GET.
    reading: HashMap<SecretKey, Arc<tokio::sync::Mutex<()>>>,
}

/// The memory; shared by the controller's reconciles.
#[derive(Default)]
pub struct SecretMemory {
    inner: Mutex<Inner>,
}

fn key(namespace: &str, name: &str) -> SecretKey {
    (namespace.to_owned(), name.to_owned())
}

impl SecretMemory {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The payload validated from `key` of Secret `namespace/name`, if the Secret is still at
    /// `version` (its current version in the metadata cache).
    pub fn source(
        &self,
        namespace: &str,
        name: &str,
        data_key: &str,
        version: &str,
    ) -> Option<Arc<Result<Payload, Problem>>> {
        let inner = self.lock();
        let found = inner.sources.get(&(key(namespace, name), data_key.to_owned()))?;
        (found.version == version).then(|| found.payload.clone())
    }

    /// The lock to hold while reading source Secret `namespace/name`, so that reconciles
    /// wanting it at the same moment wait for one read instead of each sending their own.
    pub fn read_lock(&self, namespace: &str, name: &str) -> Arc<tokio::sync::Mutex<()>> {
        self.lock().reading.entry(key(namespace, name)).or_default().clone()
    }

    /// Remember what `key` of Secret `namespace/name` at `version` validated to.
    pub fn remember_source(
        &self,
        namespace: &str,
        name: &str,
        data_key: &str,
        version: String,
        payload: Arc<Result<Payload, Problem>>,
    ) {
        self.lock()
            .sources
            .insert((key(namespace, name), data_key.to_owned()), Source { version, payload });
    }

    /// The fingerprint of what data Secret `namespace/name` holds, if it is still at `version`.
    pub fn data(&self, namespace: &str, name: &str, version: &str) -> Option<Fingerprint> {
        let inner = self.lock();
        let found = inner.data.get(&key(namespace, name))?;
        (found.version == version).then_some(found.fingerprint)
    }

    /// The fingerprint last remembered for data Secret `namespace/name`, whatever its version:
    /// what it holds while the cache has not yet seen our write of it.
    pub fn last_data(&self, namespace: &str, name: &str) -> Option<Fingerprint> {
        self.lock().data.get(&key(namespace, name)).map(|d| d.fingerprint)
    }

    /// Remember that data Secret `namespace/name` at `version` holds what `fingerprint` describes.
    pub fn remember_data(&self, namespace: &str, name: &str, version: String, fingerprint: Fingerprint) {
        self.lock()
            .data
            .insert(key(namespace, name), Data { version, fingerprint });
    }

    /// Forget Secret `namespace/name`: it was deleted.
    pub fn forget(&self, namespace: &str, name: &str) {
        let gone = key(namespace, name);
        let mut inner = self.lock();
        inner.data.remove(&gone);
        inner.reading.remove(&gone);
        inner.sources.retain(|(k, _), _| *k != gone);
    }

    /// How many Secrets are remembered (for tests: deletions must not leak entries).
    #[cfg(test)]
    pub fn len(&self) -> usize {
        let inner = self.lock();
        inner.sources.len() + inner.data.len() + inner.reading.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn payload() -> Arc<Result<Payload, Problem>> {
        Arc::new(Ok(Payload {
            json: b"{}".to_vec(),
            version: "3.4.0".to_owned(),
            from_butane: false,
        }))
    }

    #[test]
    fn an_entry_serves_only_the_version_it_was_taken_at() {
        let memory = SecretMemory::default();
        memory.remember_source("ns", "src", "value", "5".to_owned(), payload());
        assert!(memory.source("ns", "src", "value", "5").is_some());
        assert!(memory.source("ns", "src", "value", "6").is_none(), "the Secret changed");
        assert!(memory.source("ns", "src", "other", "5").is_none(), "another key");
        assert!(
            memory.source("other", "src", "value", "5").is_none(),
            "another namespace"
        );

        memory.remember_data("ns", "cfg", "7".to_owned(), [1; 32]);
        assert_eq!(memory.data("ns", "cfg", "7"), Some([1; 32]));
        assert_eq!(memory.data("ns", "cfg", "8"), None, "edited by hand");
        assert_eq!(memory.last_data("ns", "cfg"), Some([1; 32]), "whatever the version");
        assert_eq!(memory.last_data("ns", "other"), None);
        memory.remember_data("ns", "cfg", "9".to_owned(), [2; 32]);
        assert_eq!(
            memory.data("ns", "cfg", "9"),
            Some([2; 32]),
            "a rewrite replaces the entry"
        );
    }

    #[test]
    fn a_deleted_secret_is_forgotten() {
        let memory = SecretMemory::default();
        memory.remember_source("ns", "s", "value", "1".to_owned(), payload());
        memory.remember_source("ns", "s", "other", "1".to_owned(), payload());
        memory.remember_data("ns", "s", "1".to_owned(), [0; 32]);
        memory.remember_data("ns", "t", "1".to_owned(), [0; 32]);
        let _ = memory.read_lock("ns", "s");
        memory.forget("ns", "s");
        assert_eq!(memory.len(), 1);
        assert!(memory.data("ns", "t", "1").is_some());
    }
}

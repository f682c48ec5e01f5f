//! Ownership index kept by the store, so the garbage collector only looks at objects a write
//! can affect (dependents of removed uids, newly owned objects, deleting objects) instead of
//! scanning everything after each write.

use crate::meta;
use serde_json::Value;
use std::collections::{BTreeSet, HashMap};

/// Identity of a stored object: (store key, namespace, name).
pub type ObjId = (String, String, String);

/// uid, ownerReference and deletion indexes plus the GC work queue.
#[derive(Debug, Default)]
pub struct OwnerIndex {
    uids: HashMap<String, ObjId>,
    dependents: HashMap<String, BTreeSet<ObjId>>,
    deleting: BTreeSet<ObjId>,
    queue: BTreeSet<ObjId>,
}

fn id_of(key: &str, obj: &Value) -> ObjId {
    (
        key.to_string(),
        meta::namespace(obj).to_string(),
        meta::name(obj).to_string(),
    )
}

fn owner_uids(obj: &Value) -> Vec<String> {
    meta::owner_refs(obj)
        .iter()
        .filter_map(|r| r["uid"].as_str().map(String::from))
        .collect()
}

impl OwnerIndex {
    /// Record a stored object; objects with owners are queued for a GC check.
    pub fn add(&mut self, key: &str, obj: &Value) {
        let id = id_of(key, obj);
        let uid = meta::uid(obj);
        if !uid.is_empty() {
            self.uids.insert(uid.to_string(), id.clone());
        }
        let owners = owner_uids(obj);
        if !owners.is_empty() {
            self.queue.insert(id.clone());
        }
        for o in owners {
            self.dependents.entry(o).or_default().insert(id.clone());
        }
        if meta::is_deleting(obj) {
            self.deleting.insert(id);
        }
    }

    /// Forget an object's previous state (before an update).
    pub fn forget(&mut self, key: &str, obj: &Value) {
        let id = id_of(key, obj);
        if self.uids.get(meta::uid(obj)) == Some(&id) {
            self.uids.remove(meta::uid(obj));
        }
        for o in owner_uids(obj) {
            if let Some(set) = self.dependents.get_mut(&o) {
                set.remove(&id);
                if set.is_empty() {
                    self.dependents.remove(&o);
                }
            }
        }
        self.deleting.remove(&id);
    }

    /// An object left the store: its dependents need a GC check.
    pub fn removed(&mut self, key: &str, obj: &Value) {
        self.forget(key, obj);
        if let Some(deps) = self.dependents.get(meta::uid(obj)) {
            self.queue.extend(deps.iter().cloned());
        }
    }

    /// Whether an object with this uid exists.
    pub fn uid_exists(&self, uid: &str) -> bool {
        self.uids.contains_key(uid)
    }

    /// Objects with an ownerReference to `uid`.
    pub fn dependents_of(&self, uid: &str) -> Vec<ObjId> {
        self.dependents
            .get(uid)
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// Take the queued objects plus every deleting object.
    pub fn take_work(&mut self) -> BTreeSet<ObjId> {
        let mut w = std::mem::take(&mut self.queue);
        w.extend(self.deleting.iter().cloned());
        w
    }

    /// Whether anything was queued since the last `take_work`.
    pub fn has_queued(&self) -> bool {
        !self.queue.is_empty()
    }
}

//! Object storage with one global resourceVersion counter and a bounded event log
//! that watches replay from; everything is mutated under the server's single lock.

use crate::index::OwnerIndex;
use crate::meta;
use serde_json::Value;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;
use tokio::sync::broadcast;

/// Watch event type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    /// Object created.
    Added,
    /// Object changed.
    Modified,
    /// Object removed (carries its final state).
    Deleted,
}

impl EventType {
    /// Wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }
}

/// One change in the store.
#[derive(Debug)]
pub struct Event {
    /// resourceVersion of the change.
    pub rv: u64,
    /// Store key (`group/plural`).
    pub key: String,
    /// Event type.
    pub etype: EventType,
    /// The object after the change (the final object for deletes).
    pub object: Value,
    /// The object before the change, for selector transitions.
    pub old: Option<Value>,
    /// Watch lines already rendered from this event, by view (see `watch::View`): watchers of
    /// one view share the bytes instead of each cloning and serializing the object.
    pub rendered: std::sync::Mutex<Vec<(String, bytes::Bytes)>>,
}

/// Objects per store key, keyed by (namespace, name).
pub type Bucket = BTreeMap<(String, String), Value>;

/// The store.
#[derive(Debug)]
pub struct Store {
    rv: u64,
    objects: BTreeMap<String, Bucket>,
    log: VecDeque<Arc<Event>>,
    log_cap: usize,
    /// Events with rv greater than this are all in `log`.
    compacted_to: u64,
    /// Every live event, for [`Store::subscribe`].
    tx: broadcast::Sender<Arc<Event>>,
    /// Live events per key, for watches: as with the genuine API server's per-resource watch
    /// caches, a watcher falls behind only by its own kind's events, never by a burst of another.
    kinds: HashMap<String, broadcast::Sender<Arc<Event>>>,
    chan_cap: usize,
    /// Ownership index for the garbage collector.
    pub index: OwnerIndex,
}

impl Store {
    /// Empty store; `log_cap` events are kept for replay, `chan_cap` buffered per watcher.
    pub fn new(log_cap: usize, chan_cap: usize) -> Self {
        let chan_cap = chan_cap.max(16);
        let (tx, _) = broadcast::channel(chan_cap);
        Store {
            rv: 1,
            objects: BTreeMap::new(),
            log: VecDeque::new(),
            log_cap: log_cap.max(1),
            compacted_to: 1,
            tx,
            kinds: HashMap::new(),
            chan_cap,
            index: OwnerIndex::default(),
        }
    }

    /// Current global resourceVersion.
    pub fn rv(&self) -> u64 {
        self.rv
    }

    /// Get one object.
    pub fn get(&self, key: &str, ns: &str, name: &str) -> Option<&Value> {
        self.objects
            .get(key)
            .and_then(|b| b.get(&(ns.to_string(), name.to_string())))
    }

    /// All objects of a key, optionally in one namespace, ordered by (namespace, name).
    pub fn list(&self, key: &str, ns: Option<&str>) -> Vec<Value> {
        self.objects
            .get(key)
            .map(|b| {
                b.iter()
                    .filter(|((n, _), _)| ns.is_none_or(|x| x == n))
                    .map(|(_, v)| v.clone())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Number of objects of a key (optionally in one namespace), without cloning.
    pub fn count(&self, key: &str, ns: Option<&str>) -> usize {
        self.objects
            .get(key)
            .map_or(0, |b| b.keys().filter(|(n, _)| ns.is_none_or(|x| x == n)).count())
    }

    /// Write an object, stamping a new resourceVersion; emits ADDED or MODIFIED.
    pub fn put(&mut self, key: &str, mut obj: Value) -> Value {
        self.rv += 1;
        let rv = self.rv;
        meta::meta_mut(&mut obj).insert("resourceVersion".into(), Value::from(rv.to_string()));
        let k = (meta::namespace(&obj).to_string(), meta::name(&obj).to_string());
        let old = self.objects.entry(key.to_string()).or_default().insert(k, obj.clone());
        if let Some(o) = &old {
            self.index.forget(key, o);
        }
        self.index.add(key, &obj);
        let etype = if old.is_some() {
            EventType::Modified
        } else {
            EventType::Added
        };
        self.emit(Event {
            rv,
            key: key.into(),
            etype,
            object: obj.clone(),
            old,
            rendered: std::sync::Mutex::default(),
        });
        obj
    }

    /// Remove an object; emits DELETED with the final object at a new resourceVersion.
    pub fn remove(&mut self, key: &str, ns: &str, name: &str) -> Option<Value> {
        self.remove_as(key, ns, name, None)
    }

    /// Remove an object, reporting `final_obj` (when given) as its last state.
    pub fn remove_as(&mut self, key: &str, ns: &str, name: &str, final_obj: Option<Value>) -> Option<Value> {
        let stored = self.objects.get_mut(key)?.remove(&(ns.to_string(), name.to_string()))?;
        self.index.removed(key, &stored);
        let mut obj = final_obj.unwrap_or(stored);
        self.rv += 1;
        let rv = self.rv;
        meta::meta_mut(&mut obj).insert("resourceVersion".into(), Value::from(rv.to_string()));
        self.emit(Event {
            rv,
            key: key.into(),
            etype: EventType::Deleted,
            object: obj.clone(),
            old: None,
            rendered: std::sync::Mutex::default(),
        });
        Some(obj)
    }

    fn emit(&mut self, e: Event) {
        let e = Arc::new(e);
        self.log.push_back(e.clone());
        while self.log.len() > self.log_cap {
            if let Some(old) = self.log.pop_front() {
                self.compacted_to = old.rv;
            }
        }
        if let Some(kind) = self.kinds.get(&e.key) {
            let _ = kind.send(e.clone());
        }
        let _ = self.tx.send(e);
    }

    /// Drop the event log: resuming a watch from any older resourceVersion gives 410.
    pub fn compact(&mut self) {
        self.log.clear();
        self.compacted_to = self.rv;
    }

    /// Events for `key` after `rv`, or `Err` when `rv` is older than the log.
    pub fn events_since(&self, key: &str, rv: u64) -> Result<Vec<Arc<Event>>, u64> {
        if rv < self.compacted_to {
            return Err(self.compacted_to);
        }
        Ok(self.log.iter().filter(|e| e.rv > rv && e.key == key).cloned().collect())
    }

    /// Subscribe to live events (call under the lock to avoid gaps).
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<Event>> {
        self.tx.subscribe()
    }

    /// Subscribe to live events of `key` only (call under the lock to avoid gaps).
    pub fn subscribe_key(&mut self, key: &str) -> broadcast::Receiver<Arc<Event>> {
        let cap = self.chan_cap;
        self.kinds
            .entry(key.to_owned())
            .or_insert_with(|| broadcast::channel(cap).0)
            .subscribe()
    }

    /// Remove all objects of a key (CRD deletion), emitting DELETED for each.
    pub fn drop_key(&mut self, key: &str) {
        let names: Vec<(String, String)> = self
            .objects
            .get(key)
            .map(|b| b.keys().cloned().collect())
            .unwrap_or_default();
        for (ns, n) in names {
            self.remove(key, &ns, &n);
        }
        self.objects.remove(key);
    }
}

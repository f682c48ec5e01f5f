//! Which Machines (or Clusters) refer to each provider object, kept from their own watch.
//!
//! A provider object's change must wake the objects that refer to it. Scanning every Machine
//! for each change made 1000 new windows cost a million reference parses; this index answers
//! from a map, as core's informer indexes do.

use crate::view::{ObjRef, at};
use kube::api::{ApiResource, DynamicObject};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

/// A referred-to object: group, kind, the referrer's namespace, name.
type Target = (String, String, Option<String>, String);

/// Referrers by what they refer to, for references at fixed paths under `spec`.
pub(crate) struct RefIndex {
    ar: ApiResource,
    paths: &'static [&'static [&'static str]],
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    by_target: HashMap<Target, HashSet<ObjectRef<DynamicObject>>>,
    by_referrer: HashMap<ObjectRef<DynamicObject>, Vec<Target>>,
}

impl RefIndex {
    /// An index of objects of `ar` by their references at `paths` (under `spec`).
    pub fn new(ar: ApiResource, paths: &'static [&'static [&'static str]]) -> Self {
        Self {
            ar,
            paths,
            inner: Mutex::default(),
        }
    }

    /// Follow one event of the referrers' watch.
    pub fn observe(&self, event: &watcher::Event<DynamicObject>) {
        match event {
            watcher::Event::Apply(o) | watcher::Event::InitApply(o) => self.set(o),
            watcher::Event::Delete(o) => self.remove(&ObjectRef::from_obj_with(o, self.ar.clone())),
            // A relist: what it lists is indexed anew.
            watcher::Event::Init => *self.lock() = Inner::default(),
            watcher::Event::InitDone => {}
        }
    }

    /// The objects referring to `group`/`kind` `target` (in their own namespace).
    pub fn referrers(&self, group: &str, kind: &str, target: &DynamicObject) -> Vec<ObjectRef<DynamicObject>> {
        let key = (
            group.to_owned(),
            kind.to_owned(),
            target.metadata.namespace.clone(),
            target.metadata.name.clone().unwrap_or_default(),
        );
        self.lock()
            .by_target
            .get(&key)
            .map(|refs| refs.iter().cloned().collect())
            .unwrap_or_default()
    }

    fn set(&self, obj: &DynamicObject) {
        let referrer = ObjectRef::from_obj_with(obj, self.ar.clone());
        let targets: Vec<Target> = self
            .paths
            .iter()
            .filter_map(|p| obj.data.get("spec").and_then(|s| at(s, p)).and_then(ObjRef::parse))
            .map(|r| (r.group, r.kind, obj.metadata.namespace.clone(), r.name))
            .collect();
        self.remove(&referrer);
        let mut inner = self.lock();
        for t in &targets {
            inner.by_target.entry(t.clone()).or_default().insert(referrer.clone());
        }
        inner.by_referrer.insert(referrer, targets);
    }

    fn remove(&self, referrer: &ObjectRef<DynamicObject>) {
        let mut inner = self.lock();
        for t in inner.by_referrer.remove(referrer).unwrap_or_default() {
            if let Some(refs) = inner.by_target.get_mut(&t) {
                refs.remove(referrer);
                if refs.is_empty() {
                    inner.by_target.remove(&t);
                }
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn machine(name: &str, infra: &str, bootstrap: Option<&str>) -> DynamicObject {
        let ar = ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&());
        let mut m = DynamicObject::new(name, &ar).within("ns");
        let mut spec =
            serde_json::json!({"infrastructureRef": {"apiVersion": "infra.x/v1", "kind": "LM", "name": infra}});
        if let Some(b) = bootstrap {
            spec["bootstrap"] = serde_json::json!({"configRef": {"apiVersion": "boot.x/v1", "kind": "IC", "name": b}});
        }
        m.data = serde_json::json!({ "spec": spec });
        m
    }

    fn target(name: &str, ns: &str) -> DynamicObject {
        let ar = ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&());
        DynamicObject::new(name, &ar).within(ns)
    }

    fn names(refs: Vec<ObjectRef<DynamicObject>>) -> Vec<String> {
        let mut n: Vec<String> = refs.into_iter().map(|r| r.name).collect();
        n.sort();
        n
    }

    #[test]
    fn follows_changes_deletions_and_relists() {
        let ar = ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&());
        let index = RefIndex::new(ar, &[&["infrastructureRef"], &["bootstrap", "configRef"]]);
        index.observe(&watcher::Event::Apply(machine("a", "lm-a", Some("ic-a"))));
        index.observe(&watcher::Event::Apply(machine("b", "shared", None)));
        index.observe(&watcher::Event::Apply(machine("c", "shared", None)));
        assert_eq!(names(index.referrers("infra.x", "LM", &target("lm-a", "ns"))), ["a"]);
        assert_eq!(names(index.referrers("boot.x", "IC", &target("ic-a", "ns"))), ["a"]);
        assert_eq!(
            names(index.referrers("infra.x", "LM", &target("shared", "ns"))),
            ["b", "c"]
        );
        // Another namespace, group or kind is another object.
        assert!(index.referrers("infra.x", "LM", &target("lm-a", "other")).is_empty());
        assert!(index.referrers("boot.x", "LM", &target("lm-a", "ns")).is_empty());

        // A changed reference moves; a deletion forgets.
        index.observe(&watcher::Event::Apply(machine("a", "lm-new", None)));
        assert!(index.referrers("infra.x", "LM", &target("lm-a", "ns")).is_empty());
        assert!(index.referrers("boot.x", "IC", &target("ic-a", "ns")).is_empty());
        assert_eq!(names(index.referrers("infra.x", "LM", &target("lm-new", "ns"))), ["a"]);
        index.observe(&watcher::Event::Delete(machine("b", "shared", None)));
        assert_eq!(names(index.referrers("infra.x", "LM", &target("shared", "ns"))), ["c"]);

        // A relist replaces everything.
        index.observe(&watcher::Event::Init);
        index.observe(&watcher::Event::InitApply(machine("d", "shared", None)));
        index.observe(&watcher::Event::InitDone);
        assert_eq!(names(index.referrers("infra.x", "LM", &target("shared", "ns"))), ["d"]);
        assert!(index.referrers("infra.x", "LM", &target("lm-new", "ns")).is_empty());
    }
}

//! Deletion: finalizers, propagation policies (Background, Foreground, Orphan), preconditions,
//! and a synchronous ownerReference garbage collector run after every write that can orphan.

use crate::meta::{self, meta_mut};
use crate::ops::{CRD_KEY, NS_KEY, State};
use crate::registry::ResourceInfo;
use crate::selectors::Selectors;
use crate::status::{ApiError, ApiResult};
use serde_json::{Value, json};

/// Options of a DELETE.
#[derive(Debug, Clone, Default)]
pub struct DeleteOpts {
    /// `Background` (default), `Foreground` or `Orphan`.
    pub propagation: Option<String>,
    /// `preconditions.uid`.
    pub uid: Option<String>,
    /// `preconditions.resourceVersion`.
    pub resource_version: Option<String>,
    /// `dryRun=All`.
    pub dry_run: bool,
    /// The deprecated `orphanDependents: false`, the one case where the apiserver answers
    /// 202 Accepted for an object that finalizers keep.
    pub cascade_requested: bool,
}

const FOREGROUND: &str = "foregroundDeletion";
const ORPHAN: &str = "orphan";
const CRD_CLEANUP: &str = "customresourcecleanup.apiextensions.k8s.io";

/// Store key of a CRD's instances.
fn instances_key(crd: &Value) -> String {
    let s = |p: &str| crd.pointer(p).and_then(Value::as_str).unwrap_or("").to_string();
    format!("{}/{}", s("/spec/group"), s("/spec/names/plural"))
}

impl State {
    /// DELETE one object; returns its state (deleting or final).
    pub fn delete(&mut self, info: &ResourceInfo, ns: &str, name: &str, opts: &DeleteOpts) -> ApiResult<Value> {
        let ns = if info.namespaced { ns } else { "" };
        let key = info.store_key();
        let obj = self
            .store
            .get(&key, ns, name)
            .cloned()
            .ok_or_else(|| ApiError::not_found(&info.plural, &info.group, name))?;
        if let Some(u) = &opts.uid
            && u != meta::uid(&obj)
        {
            return Err(ApiError::precondition(
                &info.kind,
                &info.group,
                name,
                &format!(
                    "the UID in the precondition ({u}) does not match the UID in record ({}). The object might have been deleted and then recreated",
                    meta::uid(&obj)
                ),
            ));
        }
        if let Some(rv) = &opts.resource_version
            && rv != meta::resource_version(&obj)
        {
            return Err(ApiError::precondition(
                &info.kind,
                &info.group,
                name,
                &format!(
                    "the ResourceVersion in the precondition ({rv}) does not match the ResourceVersion in record ({}). The object might have been modified",
                    meta::resource_version(&obj)
                ),
            ));
        }
        if opts.dry_run {
            return Ok(crate::ops::present(info, obj));
        }
        let out = self.delete_obj(&key, ns, name, opts.propagation.as_deref());
        collect(self);
        Ok(crate::ops::present(info, out.unwrap_or(obj)))
    }

    /// DELETE on a collection path with selectors; returns the deleted objects.
    pub fn delete_collection(
        &mut self,
        info: &ResourceInfo,
        ns: Option<&str>,
        sel: &Selectors,
        opts: &DeleteOpts,
    ) -> ApiResult<Vec<Value>> {
        let key = info.store_key();
        let victims: Vec<Value> = self
            .store
            .list(&key, ns)
            .into_iter()
            .filter(|o| sel.matches(&crate::ops::present(info, o.clone())))
            .collect();
        let mut out = vec![];
        for v in victims {
            if !opts.dry_run {
                if let Some(o) = self.delete_obj(&key, meta::namespace(&v), meta::name(&v), opts.propagation.as_deref())
                {
                    out.push(crate::ops::present(info, o));
                }
            } else {
                out.push(crate::ops::present(info, v));
            }
        }
        collect(self);
        Ok(out)
    }

    /// Delete honouring finalizers and the propagation policy (no GC pass).
    fn delete_obj(&mut self, key: &str, ns: &str, name: &str, propagation: Option<&str>) -> Option<Value> {
        let mut obj = self.store.get(key, ns, name)?.clone();
        let uid = meta::uid(&obj).to_string();
        let mut fins = meta::finalizers(&obj);
        match propagation {
            Some("Orphan") => {
                self.orphan_dependents(&uid);
                fins.retain(|f| f != ORPHAN);
            }
            Some("Foreground") if !self.dependents(&uid).is_empty() && !fins.iter().any(|f| f == FOREGROUND) => {
                fins.push(FOREGROUND.into());
            }
            _ => {}
        }
        if key == NS_KEY {
            return self.delete_namespace(obj, &fins);
        }
        if key == CRD_KEY && !meta::is_deleting(&obj) {
            // Like the apiextensions server: delete every instance (their finalizers still
            // run), and keep the CRD until they are gone.
            let ik = instances_key(&obj);
            for o in self.store.list(&ik, None) {
                self.delete_obj(&ik, meta::namespace(&o), meta::name(&o), None);
            }
            if self.store.count(&ik, None) > 0 {
                fins.push(CRD_CLEANUP.into());
                if let Some(Value::Array(conds)) = obj.pointer_mut("/status/conditions") {
                    conds.push(
                        json!({"type": "Terminating", "status": "True", "reason": "InstanceDeletionInProgress",
                        "message": "CustomResource deletion is in progress", "lastTransitionTime": meta::now()}),
                    );
                }
            }
        }
        if fins.is_empty() {
            let out = self.store.remove(key, ns, name)?;
            self.after_delete(key, &out);
            return Some(out);
        }
        if meta::is_deleting(&obj) && meta::finalizers(&obj) == fins {
            return Some(obj);
        }
        meta::set_finalizers(&mut obj, &fins);
        let m = meta_mut(&mut obj);
        if !m.contains_key("deletionTimestamp") {
            m.insert("deletionTimestamp".into(), json!(meta::now()));
            m.insert("deletionGracePeriodSeconds".into(), json!(0));
            // The apiserver bumps generation when it sets deletionTimestamp, so controllers
            // comparing observedGeneration notice the deletion.
            if let Some(g) = m.get("generation").and_then(Value::as_i64) {
                m.insert("generation".into(), json!(g + 1));
            }
        }
        Some(self.store.put(key, obj))
    }

    /// Namespaces terminate: their content is deleted, and they go once empty and unfinalized.
    fn delete_namespace(&mut self, mut obj: Value, fins: &[String]) -> Option<Value> {
        let ns = meta::name(&obj).to_string();
        for k in self.reg.namespaced_store_keys() {
            for o in self.store.list(&k, Some(&ns)) {
                if !meta::is_deleting(&o) {
                    self.delete_obj(&k, &ns, meta::name(&o), None);
                }
            }
        }
        if fins.is_empty() && self.namespace_empty(&ns) {
            let out = self.store.remove(NS_KEY, "", &ns)?;
            return Some(out);
        }
        if meta::is_deleting(&obj) {
            return Some(obj);
        }
        let m = meta_mut(&mut obj);
        m.insert("deletionTimestamp".into(), json!(meta::now()));
        m.insert("deletionGracePeriodSeconds".into(), json!(0));
        obj["status"] = json!({"phase": "Terminating"});
        Some(self.store.put(NS_KEY, obj))
    }

    fn namespace_empty(&self, ns: &str) -> bool {
        self.reg
            .namespaced_store_keys()
            .iter()
            .all(|k| self.store.count(k, Some(ns)) == 0)
    }

    /// (key, object) of every object with an ownerReference to `uid`.
    fn dependents(&self, uid: &str) -> Vec<(String, Value)> {
        self.store
            .index
            .dependents_of(uid)
            .into_iter()
            .filter_map(|(k, ns, n)| self.store.get(&k, &ns, &n).cloned().map(|o| (k, o)))
            .collect()
    }

    fn orphan_dependents(&mut self, uid: &str) {
        for (k, mut o) in self.dependents(uid) {
            let refs: Vec<Value> = meta::owner_refs(&o).into_iter().filter(|r| r["uid"] != uid).collect();
            let m = meta_mut(&mut o);
            if refs.is_empty() {
                m.remove("ownerReferences");
            } else {
                m.insert("ownerReferences".into(), Value::Array(refs));
            }
            self.store.put(&k, o);
        }
    }
}

/// Run garbage collection to a fixed point: delete objects whose owners are all gone, and
/// finish foreground deletions whose dependents are gone.
pub fn collect(state: &mut State) {
    // Bounded: every pass either changes something or ends.
    for _ in 0..100_000 {
        let work = state.store.index.take_work();
        let mut changed = false;
        for (key, ns, name) in &work {
            let key = key.as_str();
            let Some(cur) = state.store.get(key, ns, name).cloned() else {
                continue;
            };
            let o = &cur;
            let refs = meta::owner_refs(o);
            let orphaned = !refs.is_empty()
                && refs
                    .iter()
                    .all(|r| !state.store.index.uid_exists(r["uid"].as_str().unwrap_or("")));
            if orphaned && !meta::is_deleting(o) {
                state.delete_obj(key, meta::namespace(o), meta::name(o), None);
                changed = true;
            }
            if key == NS_KEY
                && meta::is_deleting(o)
                && meta::finalizers(o).is_empty()
                && state.namespace_empty(meta::name(o))
            {
                state.store.remove(NS_KEY, "", meta::name(o));
                changed = true;
            }
            if key == CRD_KEY
                && meta::finalizers(o).iter().any(|f| f == CRD_CLEANUP)
                && state.store.count(&instances_key(o), None) == 0
            {
                let mut cur = o.clone();
                let fins: Vec<String> = meta::finalizers(o).into_iter().filter(|f| f != CRD_CLEANUP).collect();
                meta::set_finalizers(&mut cur, &fins);
                if fins.is_empty() {
                    if let Some(out) = state.store.remove_as(key, "", meta::name(o), Some(cur)) {
                        state.after_delete(key, &out);
                    }
                } else {
                    state.store.put(key, cur);
                }
                changed = true;
            }
            if meta::is_deleting(o) && meta::finalizers(o).iter().any(|f| f == FOREGROUND) {
                let deps = state.dependents(meta::uid(o));
                for (dk, d) in &deps {
                    if !meta::is_deleting(d) {
                        state.delete_obj(dk, meta::namespace(d), meta::name(d), Some("Foreground"));
                        changed = true;
                    }
                }
                let blocking = deps.iter().any(|(_, d)| {
                    meta::owner_refs(d)
                        .iter()
                        .any(|r| r["uid"] == meta::uid(o) && r["blockOwnerDeletion"] == true)
                });
                if !blocking && state.dependents(meta::uid(o)).iter().all(|(_, d)| meta::is_deleting(d)) {
                    let mut cur = o.clone();
                    let fins: Vec<String> = meta::finalizers(o).into_iter().filter(|f| f != FOREGROUND).collect();
                    meta::set_finalizers(&mut cur, &fins);
                    if fins.is_empty() {
                        if let Some(out) = state.store.remove_as(key, meta::namespace(o), meta::name(o), Some(cur)) {
                            state.after_delete(key, &out);
                        }
                    } else {
                        state.store.put(key, cur);
                    }
                    changed = true;
                }
            }
        }
        if !changed && !state.store.index.has_queued() {
            break;
        }
    }
    state.refresh_pdbs();
}

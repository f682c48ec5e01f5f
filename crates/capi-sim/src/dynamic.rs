//! Finding and watching provider kinds the way CAPI core does.
//!
//! Core never compiles provider types in: it resolves a ref's kind through discovery, reads the
//! CRD `<plural>.<group>` and picks the API version from the CRD's contract label
//! (`cluster.x-k8s.io/v1beta1: v1alpha1_v1alpha2`). A missing label is an error there, so it is
//! one here: it catches providers whose CRDs would not work with real core.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DynamicObject};
use kube::discovery;
use kube::runtime::reflector::store::Writer;
use kube::runtime::reflector::{ObjectRef, Store, reflector};
use kube::runtime::{WatchStreamExt, watcher};
use tokio::task::JoinHandle;

use crate::crds::CapiVersions;
use crate::error::{Error, Result, is_not_found};
use crate::view::ObjRef;

/// Which provider contract a kind was resolved under; decides which status fields are read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Contract {
    V1beta1,
    V1beta2,
}

/// A provider kind resolved to something the client can talk to.
#[derive(Clone, Debug)]
pub(crate) struct ResolvedKind {
    pub ar: ApiResource,
    pub contract: Contract,
}

/// Orders Kubernetes API versions: GA > beta > alpha, then by number (v1 > v1beta2 > v1beta1).
pub(crate) fn version_priority(v: &str) -> (u8, u32, u32) {
    let Some(rest) = v.strip_prefix('v') else {
        return (0, 0, 0);
    };
    let digits = rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len());
    let major = rest[..digits].parse().unwrap_or(0);
    let tail = &rest[digits..];
    let (stability, minor) = if tail.is_empty() {
        (3, 0)
    } else if let Some(n) = tail.strip_prefix("beta") {
        (2, n.parse().unwrap_or(0))
    } else if let Some(n) = tail.strip_prefix("alpha") {
        (1, n.parse().unwrap_or(0))
    } else {
        (0, 0)
    };
    (stability, major, minor)
}

/// Picks the newest version listed in a contract label value (`v1alpha1_v1alpha2`).
pub(crate) fn latest_from_label(value: &str) -> Option<&str> {
    value
        .split('_')
        .filter(|s| !s.is_empty())
        .max_by_key(|v| version_priority(v))
}

/// Resolves provider refs to [`ResolvedKind`]s, caching successes only so a kind that is
/// installed later is picked up on the next retry.
pub(crate) struct Resolver {
    client: kube::Client,
    versions: CapiVersions,
    cache: Mutex<HashMap<(String, String), ResolvedKind>>,
}

impl Resolver {
    pub fn new(client: kube::Client, versions: CapiVersions) -> Self {
        Resolver {
            client,
            versions,
            cache: Mutex::new(HashMap::new()),
        }
    }

    /// Forgets a resolution: the kind's CRD changed, so its served versions or contract
    /// label may have too.
    pub fn forget(&self, group: &str, kind: &str) {
        if let Ok(mut c) = self.cache.lock() {
            c.remove(&(group.to_string(), kind.to_string()));
        }
    }

    pub async fn resolve(&self, r: &ObjRef) -> Result<ResolvedKind> {
        let key = (r.group.clone(), r.kind.clone());
        if let Some(hit) = self.cache.lock().ok().and_then(|c| c.get(&key).cloned()) {
            return Ok(hit);
        }
        let not_served = |detail: String| Error::KindNotServed {
            group: r.group.clone(),
            kind: r.kind.clone(),
            detail,
        };
        let group = discovery::group(&self.client, &r.group)
            .await
            .map_err(|e| not_served(e.to_string()))?;
        let mut by_version: HashMap<String, ApiResource> = HashMap::new();
        for v in group.versions() {
            for (ar, _caps) in group.versioned_resources(v) {
                if ar.kind == r.kind {
                    by_version.insert(v.to_string(), ar);
                }
            }
        }
        let plural = by_version
            .values()
            .next()
            .map(|ar| ar.plural.clone())
            .ok_or_else(|| not_served("kind not found in discovery".into()))?;
        let crd_name = format!("{plural}.{}", r.group);
        let crds: Api<CustomResourceDefinition> = Api::all(self.client.clone());
        let crd = crds
            .get(&crd_name)
            .await
            .map_err(|e| Error::kube(format!("reading CRD {crd_name}"), e))?;
        let labels = crd.metadata.labels.unwrap_or_default();
        let candidates: &[(Contract, &str)] = if self.versions.is_v1beta2() {
            &[
                (Contract::V1beta2, "cluster.x-k8s.io/v1beta2"),
                (Contract::V1beta1, "cluster.x-k8s.io/v1beta1"),
            ]
        } else {
            &[(Contract::V1beta1, "cluster.x-k8s.io/v1beta1")]
        };
        let (contract, label, version) = candidates
            .iter()
            .find_map(|(c, l)| {
                let value = labels.get(*l)?;
                Some((*c, *l, latest_from_label(value)?.to_string()))
            })
            .ok_or_else(|| Error::NoContractVersion {
                contract: candidates.first().map(|(_, l)| l.to_string()).unwrap_or_default(),
                crd: crd_name.clone(),
            })?;
        let ar = by_version
            .get(&version)
            .cloned()
            .ok_or_else(|| not_served(format!("contract label {label} names {version}, which is not served")))?;
        let resolved = ResolvedKind { ar, contract };
        if let Ok(mut c) = self.cache.lock() {
            c.insert(key, resolved.clone());
        }
        Ok(resolved)
    }

    /// Reads the referenced object; `Ok(None)` if it does not exist.
    pub async fn get(&self, kind: &ResolvedKind, namespace: &str, name: &str) -> Result<Option<DynamicObject>> {
        let api: Api<DynamicObject> = Api::namespaced_with(self.client.clone(), namespace, &kind.ar);
        match api.get(name).await {
            Ok(o) => Ok(Some(o)),
            Err(e) if is_not_found(&e) => Ok(None),
            Err(e) => Err(Error::kube(format!("reading {} {namespace}/{name}", kind.ar.kind), e)),
        }
    }

    pub fn api(&self, kind: &ResolvedKind, namespace: &str) -> Api<DynamicObject> {
        Api::namespaced_with(self.client.clone(), namespace, &kind.ar)
    }
}

/// Called with every provider object that changes: `(group, kind, object)`.
pub(crate) type OnChange = Arc<dyn Fn(&str, &str, &DynamicObject) + Send + Sync>;

/// Starts one cluster-wide watch per provider kind the first time a ref to it resolves, so the
/// simulator reacts to provider status changes instead of polling.
pub(crate) struct WatchRegistry {
    client: kube::Client,
    on_change: OnChange,
    watched: Mutex<HashSet<(String, String, String)>>,
    /// Each watched kind's objects, read as core reads through its informers.
    stores: Mutex<HashMap<(String, String, String), Store<DynamicObject>>>,
    tasks: Mutex<Vec<JoinHandle<()>>>,
}

impl WatchRegistry {
    pub fn new(client: kube::Client, on_change: OnChange) -> Self {
        WatchRegistry {
            client,
            on_change,
            watched: Mutex::new(HashSet::new()),
            stores: Mutex::new(HashMap::new()),
            tasks: Mutex::new(Vec::new()),
        }
    }

    /// Object `namespace/name` of kind `ar` as its watch last saw it; `None` when the kind is
    /// not watched yet or the watch has not seen the object (then the caller reads it).
    pub fn cached(&self, ar: &ApiResource, namespace: &str, name: &str) -> Option<DynamicObject> {
        let key = (ar.group.clone(), ar.version.clone(), ar.kind.clone());
        let store = self.stores.lock().ok()?.get(&key)?.clone();
        let found = store.get(&ObjectRef::new_with(name, ar.clone()).within(namespace))?;
        Some((*found).clone())
    }

    pub fn ensure(&self, ar: &ApiResource) {
        let key = (ar.group.clone(), ar.version.clone(), ar.kind.clone());
        let fresh = self.watched.lock().map(|mut w| w.insert(key.clone())).unwrap_or(false);
        if !fresh {
            return;
        }
        tracing::debug!(kind = %ar.kind, group = %ar.group, "watching provider kind");
        let api: Api<DynamicObject> = Api::all_with(self.client.clone(), ar);
        let on_change = self.on_change.clone();
        let (group, kind) = (ar.group.clone(), ar.kind.clone());
        let writer = Writer::new(ar.clone());
        if let Ok(mut stores) = self.stores.lock() {
            stores.insert(key, writer.as_reader());
        }
        let task = tokio::spawn(async move {
            // The store has each change before `on_change` hears of it.
            let mut events = reflector(writer, watcher(api, watcher::Config::default()).default_backoff()).boxed();
            while let Some(ev) = events.next().await {
                match ev {
                    Ok(watcher::Event::Apply(o)) | Ok(watcher::Event::InitApply(o)) | Ok(watcher::Event::Delete(o)) => {
                        on_change(&group, &kind, &o)
                    }
                    Ok(_) => {}
                    Err(e) => tracing::debug!(%kind, error = %e, "provider watch error; retrying"),
                }
            }
        });
        if let Ok(mut t) = self.tasks.lock() {
            t.push(task);
        }
    }
}

impl Drop for WatchRegistry {
    fn drop(&mut self) {
        if let Ok(tasks) = self.tasks.lock() {
            for t in tasks.iter() {
                t.abort();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn picks_newest_contract_version() {
        assert_eq!(latest_from_label("v1alpha1"), Some("v1alpha1"));
        assert_eq!(latest_from_label("v1alpha1_v1alpha2"), Some("v1alpha2"));
        assert_eq!(latest_from_label("v1beta1_v1alpha3_v1"), Some("v1"));
        assert_eq!(latest_from_label("v1alpha4_v1beta1"), Some("v1beta1"));
        assert_eq!(latest_from_label(""), None);
    }
}

//! Finalizers: the list with ours added, and dropping ours. Both patches carry the object's
//! `resourceVersion`, so a concurrent change to the list fails with a conflict instead of
//! being overwritten.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::{
    Api, Resource, ResourceExt,
    api::{Patch, PatchParams},
};
use serde::de::DeserializeOwned;

/// Whether the object carries `finalizer`.
#[must_use]
pub fn has(meta: &ObjectMeta, finalizer: &str) -> bool {
    meta.finalizers
        .as_deref()
        .unwrap_or_default()
        .iter()
        .any(|f| f == finalizer)
}

/// The object's finalizers with `finalizer` added (once).
#[must_use]
pub fn added(meta: &ObjectMeta, finalizer: &str) -> Vec<String> {
    let mut list = meta.finalizers.clone().unwrap_or_default();
    if !list.iter().any(|f| f == finalizer) {
        list.push(finalizer.to_owned());
    }
    list
}

/// Add `finalizer` to `obj`, before anything it guards is created.
///
/// # Errors
/// The API error, a conflict included.
pub async fn add<K>(api: &Api<K>, obj: &K, finalizer: &str) -> kube::Result<()>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    patch(api, obj, &added(obj.meta(), finalizer)).await
}

/// Replace the finalizer list, guarded by the resourceVersion that was read.
async fn patch<K>(api: &Api<K>, obj: &K, finalizers: &[impl serde::Serialize]) -> kube::Result<()>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    let patch = serde_json::json!({
        "metadata": {"finalizers": finalizers, "resourceVersion": obj.resource_version()},
    });
    api.patch(&obj.name_any(), &PatchParams::default(), &Patch::Merge(patch))
        .await
        .map(|_| ())
}

/// Drop `finalizer` from `obj`. An object already gone counts as done.
///
/// # Errors
/// The API error, a conflict included.
pub async fn release<K>(api: &Api<K>, obj: &K, finalizer: &str) -> kube::Result<()>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    let kept: Vec<&String> = obj.finalizers().iter().filter(|f| *f != finalizer).collect();
    match patch(api, obj, &kept).await {
        Ok(()) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn added_keeps_others_and_adds_once() {
        let meta = ObjectMeta {
            finalizers: Some(vec!["other".into()]),
            ..ObjectMeta::default()
        };
        assert!(!has(&meta, "ours") && has(&meta, "other"));
        let list = added(&meta, "ours");
        assert_eq!(list, ["other", "ours"]);
        let meta = ObjectMeta {
            finalizers: Some(list),
            ..ObjectMeta::default()
        };
        assert_eq!(added(&meta, "ours"), ["other", "ours"]);
    }
}

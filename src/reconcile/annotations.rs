//! Removing annotations the controller reads but does not own, such as the schedule override
//! annotations once their instant has passed.

use kube::{
    Api, Resource, ResourceExt,
    api::{Patch, PatchParams},
};
use serde::de::DeserializeOwned;

use super::ApiError;

/// Remove `keys` from `obj`'s annotations, guarded by the `resourceVersion` it was read at, so
/// an annotation someone set again in the meantime is not lost (the conflict is retried).
///
/// # Errors
/// The patch failed; the message names what was being removed.
pub async fn remove<K>(api: &Api<K>, obj: &K, keys: &[&str], what: &str) -> Result<(), ApiError>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    let gone: serde_json::Map<String, serde_json::Value> = keys
        .iter()
        .map(|k| ((*k).to_owned(), serde_json::Value::Null))
        .collect();
    let patch = serde_json::json!({"metadata": {"annotations": gone, "resourceVersion": obj.resource_version()}});
    api.patch(&obj.name_any(), &PatchParams::default(), &Patch::Merge(patch))
        .await
        .map_err(ApiError::write(what.to_owned()))?;
    Ok(())
}

//! Small write helpers shared by the controllers: JSON merge patches that are only sent when
//! they would change something (so a reconcile triggered by our own write settles), and
//! ownership of provider objects.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams};
use serde_json::{Value, json};

use crate::CLUSTER_NAME_LABEL;
use crate::error::{Error, Result};

/// True if applying merge patch `patch` to `current` would change it.
pub(crate) fn changes(current: &Value, patch: &Value) -> bool {
    match patch {
        Value::Object(fields) => fields.iter().any(|(k, v)| {
            let cur = current.get(k).unwrap_or(&Value::Null);
            match v {
                Value::Null => !cur.is_null(),
                Value::Object(_) => changes(cur, v),
                _ => cur != v,
            }
        }),
        other => current != other,
    }
}

/// Sends a merge patch to `/status` if it changes the object's status.
pub(crate) async fn patch_status(api: &Api<DynamicObject>, obj: &DynamicObject, status: Value) -> Result<bool> {
    let current = obj.data.get("status").cloned().unwrap_or(Value::Null);
    if !changes(&current, &status) {
        return Ok(false);
    }
    let name = obj.metadata.name.clone().unwrap_or_default();
    api.patch_status(
        &name,
        &PatchParams::default(),
        &Patch::Merge(json!({ "status": status })),
    )
    .await
    .map_err(|e| Error::kube(format!("patching status of {name}"), e))?;
    Ok(true)
}

/// Sends a merge patch (with the object's resourceVersion, so concurrent writers conflict
/// instead of overwriting lists such as finalizers and ownerReferences).
pub(crate) async fn patch_guarded(
    api: &Api<DynamicObject>,
    obj: &DynamicObject,
    mut patch: Value,
    action: &str,
) -> Result<DynamicObject> {
    let name = obj.metadata.name.clone().unwrap_or_default();
    if let Some(rv) = &obj.metadata.resource_version {
        patch["metadata"]["resourceVersion"] = json!(rv);
    }
    api.patch(&name, &PatchParams::default(), &Patch::Merge(patch))
        .await
        .map_err(|e| Error::kube(format!("{action} {name}"), e))
}

/// Outcome of [`ensure_owned`].
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Ownership {
    Owned,
    /// Another object is the controller; core refuses to proceed.
    OtherController(String),
}

/// Makes `owner` an ownerRef of `obj` (a controller ref if `controller`) and sets the
/// cluster-name label, as core's `ensureOwnerRefAndLabel` / `ensureExternalOwnershipAndWatch`.
pub(crate) async fn ensure_owned(
    api: &Api<DynamicObject>,
    obj: &DynamicObject,
    owner: OwnerReference,
    cluster_name: &str,
) -> Result<Ownership> {
    let refs = obj.metadata.owner_references.clone().unwrap_or_default();
    let controller = owner.controller == Some(true);
    if controller && let Some(other) = refs.iter().find(|r| r.controller == Some(true) && r.uid != owner.uid) {
        return Ok(Ownership::OtherController(format!("{} {}", other.kind, other.name)));
    }
    let has_owner = refs
        .iter()
        .any(|r| r.uid == owner.uid && r.controller == owner.controller);
    let labelled = obj
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(CLUSTER_NAME_LABEL))
        .is_some_and(|v| v == cluster_name);
    if has_owner && labelled {
        return Ok(Ownership::Owned);
    }
    let mut new_refs: Vec<OwnerReference> = refs.into_iter().filter(|r| r.uid != owner.uid).collect();
    new_refs.push(owner);
    let patch = json!({
        "metadata": {
            "ownerReferences": new_refs,
            "labels": { CLUSTER_NAME_LABEL: cluster_name },
        }
    });
    patch_guarded(api, obj, patch, "setting owner of").await?;
    Ok(Ownership::Owned)
}

/// An ownerRef pointing at `obj`.
pub(crate) fn owner_ref(obj: &DynamicObject, ar: &ApiResource, controller: bool) -> OwnerReference {
    OwnerReference {
        api_version: ar.api_version.clone(),
        kind: ar.kind.clone(),
        name: obj.metadata.name.clone().unwrap_or_default(),
        uid: obj.metadata.uid.clone().unwrap_or_default(),
        controller: controller.then_some(true),
        // Core blocks owner deletion only through its controller references; adopting a
        // stand-alone Machine into its Cluster sets neither.
        block_owner_deletion: controller.then_some(true),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detects_changes_like_a_merge_patch() {
        let cur = json!({"a": 1, "b": {"c": true, "d": [1]}});
        assert!(!changes(&cur, &json!({"a": 1})));
        assert!(!changes(&cur, &json!({"b": {"c": true}})));
        assert!(changes(&cur, &json!({"b": {"c": false}})));
        assert!(changes(&cur, &json!({"b": {"d": [1, 2]}})));
        assert!(changes(&cur, &json!({"e": "x"})));
        assert!(!changes(&cur, &json!({"e": null})));
        assert!(changes(&cur, &json!({"a": null})));
    }
}

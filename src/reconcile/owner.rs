//! Who owns an object in Cluster API terms, and whether its reconciliation is paused.
//!
//! Every provider object gets its owner from CAPI core (a Machine for machine-level objects, a
//! Cluster for cluster-level ones); until then there is nothing to reconcile against.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

use crate::api::{PAUSED_ANNOTATION, capi::GROUP as CAPI_GROUP};

/// The message of `Paused=True`, the same for every kind.
pub const PAUSED_MESSAGE: &str = "reconciliation is paused by the Cluster or the cluster.x-k8s.io/paused annotation";

/// The owner reference to a Cluster API core object of `kind` (`Machine`, `Cluster`): the
/// controller reference when there are several, else the first.
#[must_use]
pub fn capi_owner<'a>(meta: &'a ObjectMeta, kind: &str) -> Option<&'a OwnerReference> {
    meta.owner_references
        .as_deref()
        .unwrap_or_default()
        .iter()
        .filter(|r| r.kind == kind && r.api_version.split_once('/').is_some_and(|(g, _)| g == CAPI_GROUP))
        .max_by_key(|r| r.controller == Some(true))
}

/// Whether the object's own `cluster.x-k8s.io/paused` annotation pauses it.
#[must_use]
pub fn annotated_paused(meta: &ObjectMeta) -> bool {
    meta.annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(PAUSED_ANNOTATION))
}

/// Whether reconciliation is paused: by the Cluster's `spec.paused`, or by the annotation.
#[must_use]
pub fn is_paused(cluster_paused: bool, meta: &ObjectMeta) -> bool {
    cluster_paused || annotated_paused(meta)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reference(api_version: &str, kind: &str, name: &str, controller: bool) -> OwnerReference {
        OwnerReference {
            api_version: api_version.into(),
            kind: kind.into(),
            name: name.into(),
            controller: Some(controller),
            ..OwnerReference::default()
        }
    }

    #[test]
    fn the_controller_owner_of_the_capi_group_wins() {
        let meta = ObjectMeta {
            owner_references: Some(vec![
                reference("example.com/v1", "Machine", "foreign", true),
                reference("cluster.x-k8s.io/v1beta1", "Machine", "plain", false),
                reference("cluster.x-k8s.io/v1beta2", "Machine", "controller", true),
                reference("cluster.x-k8s.io/v1beta2", "Cluster", "c", true),
            ]),
            ..ObjectMeta::default()
        };
        assert_eq!(
            capi_owner(&meta, "Machine").map(|r| r.name.as_str()),
            Some("controller")
        );
        assert_eq!(capi_owner(&meta, "Cluster").map(|r| r.name.as_str()), Some("c"));
        assert!(capi_owner(&ObjectMeta::default(), "Machine").is_none());
    }

    #[test]
    fn the_cluster_or_the_annotation_pauses() {
        let mut meta = ObjectMeta::default();
        assert!(!is_paused(false, &meta));
        assert!(is_paused(true, &meta));
        meta.annotations = Some([(PAUSED_ANNOTATION.to_owned(), String::new())].into());
        assert!(is_paused(false, &meta));
    }
}

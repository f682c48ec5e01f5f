//! The target of a ScheduledCapacity: which Cluster API kinds it may name, what its
//! `managedFields` say about `spec.replicas`, the one apply we send, and reading a field
//! conflict out of the API's answer.

use kube::{
    ResourceExt,
    api::{DynamicObject, Patch, PatchParams},
    core::ApiResource,
};

use super::{FIELD_MANAGER, decide::Replicas};
use crate::api::{
    capi::{CapiVersion, GROUP},
    scheduled_capacity::CapacityTargetReference,
};

/// The kinds a ScheduledCapacity scales.
pub const MACHINE_DEPLOYMENT: &str = "MachineDeployment";
/// See [`MACHINE_DEPLOYMENT`].
pub const MACHINE_SET: &str = "MachineSet";

/// The resource `target` names, at the contract version the cluster serves.
///
/// # Errors
/// Not a Cluster API MachineDeployment or MachineSet: the message says what was named. The CRD
/// refuses these already; this holds for an API server that does not validate.
pub fn resource(target: &CapacityTargetReference, capi: CapiVersion) -> Result<ApiResource, String> {
    let (group, version) = target.api_version.split_once('/').unwrap_or_default();
    if group != GROUP || !matches!(version, "v1beta1" | "v1beta2") {
        return Err(format!(
            "spec.targetRef.apiVersion {:?} is not {GROUP}/v1beta1 or {GROUP}/v1beta2",
            target.api_version
        ));
    }
    match target.kind.as_str() {
        MACHINE_DEPLOYMENT => Ok(capi.machine_deployment()),
        MACHINE_SET => Ok(capi.machine_set()),
        other => Err(format!(
            "spec.targetRef.kind {other:?} is not {MACHINE_DEPLOYMENT} or {MACHINE_SET}"
        )),
    }
}

/// Whether a managedFields entry's field set holds `spec.replicas`.
fn owns_replicas(entry: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry) -> bool {
    entry
        .fields_v1
        .as_ref()
        .is_some_and(|f| f.0.pointer("/f:spec/f:replicas").is_some())
}

/// The target's replica count and whether our apply owns it, and the managers that own it
/// (ours included), for telling one conflict from the next.
///
/// # Errors
/// A MachineSet a MachineDeployment controls: that controller sets its replicas, so scaling
/// it here would be a fight; the message names the MachineDeployment to target instead.
pub fn read(obj: &DynamicObject) -> Result<(Replicas, Vec<String>), String> {
    let kind = obj.types.as_ref().map_or("", |t| t.kind.as_str());
    let describe = format!("{kind} {}", obj.name_any());
    if let Some(owner) = obj
        .owner_references()
        .iter()
        .find(|o| o.controller == Some(true) && o.kind == MACHINE_DEPLOYMENT)
    {
        return Err(format!(
            "{describe} is controlled by {MACHINE_DEPLOYMENT} {}, which sets its replicas; target the {MACHINE_DEPLOYMENT}",
            owner.name
        ));
    }
    let owners: Vec<&_> = obj.managed_fields().iter().filter(|e| owns_replicas(e)).collect();
    let ours = owners
        .iter()
        .any(|e| e.manager.as_deref() == Some(FIELD_MANAGER) && e.operation.as_deref() == Some("Apply"));
    let mut names: Vec<String> = owners
        .iter()
        .map(|e| {
            format!(
                "{}/{}/{}",
                e.manager.as_deref().unwrap_or_default(),
                e.operation.as_deref().unwrap_or_default(),
                e.subresource.as_deref().unwrap_or_default()
            )
        })
        .collect();
    names.sort();
    let value = obj.data.pointer("/spec/replicas").and_then(serde_json::Value::as_i64);
    Ok((Replicas { describe, value, ours }, names))
}

/// Server-side apply `spec.replicas = replicas` on the target as our field manager, never by
/// force. The applied configuration holds nothing else, so the manager owns that one field.
///
/// # Errors
/// The API's refusal; [`field_conflict`] tells a conflict from the rest.
pub async fn apply(
    api: &kube::Api<DynamicObject>,
    resource: &ApiResource,
    name: &str,
    replicas: i32,
) -> kube::Result<()> {
    let body = serde_json::json!({
        "apiVersion": resource.api_version,
        "kind": resource.kind,
        "metadata": {"name": name},
        "spec": {"replicas": replicas},
    });
    api.patch(name, &PatchParams::apply(FIELD_MANAGER), &Patch::Apply(body))
        .await
        .map(|_| ())
}

/// When `err` is a server-side apply conflict (409 with `FieldManagerConflict` causes), the
/// API's message, which names the other field managers and the field.
#[must_use]
pub fn field_conflict(err: &kube::Error) -> Option<String> {
    let kube::Error::Api(status) = err else {
        return None;
    };
    let causes = status.details.as_ref().map(|d| d.causes.as_slice()).unwrap_or_default();
    let field_conflict = causes.iter().any(|c| c.reason == "FieldManagerConflict");
    (status.code == 409 && field_conflict).then(|| status.message.clone())
}

/// The condition message for a conflict: who owns the field (from the API's message), what we
/// wanted, and that we leave it alone.
#[must_use]
pub fn conflict_message(describe: &str, replicas: i32, api_message: &str) -> String {
    let managers: Vec<&str> = api_message
        .split("conflict with \"")
        .skip(1)
        .filter_map(|rest| rest.split('"').next())
        .collect();
    let who = if managers.is_empty() {
        "another field manager".to_owned()
    } else {
        managers.iter().map(|m| format!("{m:?}")).collect::<Vec<_>>().join(", ")
    };
    format!(
        "spec.replicas of {describe} is owned by {who}; not forced to {replicas} (the API server said: {api_message})"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reference(api_version: &str, kind: &str) -> CapacityTargetReference {
        CapacityTargetReference {
            api_version: api_version.into(),
            kind: kind.into(),
            name: "workers".into(),
        }
    }

    #[test]
    fn only_capi_machine_deployments_and_sets_are_targets_at_the_served_version() {
        let md = resource(
            &reference("cluster.x-k8s.io/v1beta1", "MachineDeployment"),
            CapiVersion::V1beta2,
        )
        .unwrap();
        assert_eq!(
            (md.api_version.as_str(), md.plural.as_str()),
            ("cluster.x-k8s.io/v1beta2", "machinedeployments")
        );
        let ms = resource(
            &reference("cluster.x-k8s.io/v1beta2", "MachineSet"),
            CapiVersion::V1beta1,
        )
        .unwrap();
        assert_eq!(
            (ms.api_version.as_str(), ms.plural.as_str()),
            ("cluster.x-k8s.io/v1beta1", "machinesets")
        );
        let err = resource(&reference("apps/v1", "MachineDeployment"), CapiVersion::V1beta1).unwrap_err();
        assert!(err.contains(r#"apiVersion "apps/v1""#), "{err}");
        let err = resource(&reference("cluster.x-k8s.io/v1beta1", "Machine"), CapiVersion::V1beta1).unwrap_err();
        assert!(err.contains(r#"kind "Machine""#), "{err}");
    }

    fn object(value: serde_json::Value) -> DynamicObject {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn managed_fields_say_who_owns_the_replicas() {
        let md = object(serde_json::json!({
            "apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "MachineDeployment",
            "metadata": {"name": "workers", "managedFields": [
                {"manager": "kubectl", "operation": "Update", "fieldsV1": {"f:spec": {"f:clusterName": {}}}},
                {"manager": FIELD_MANAGER, "operation": "Apply", "fieldsV1": {"f:spec": {"f:replicas": {}}}},
            ]},
            "spec": {"replicas": 3},
        }));
        let (replicas, owners) = read(&md).unwrap();
        assert_eq!(
            replicas,
            Replicas {
                describe: "MachineDeployment workers".into(),
                value: Some(3),
                ours: true
            }
        );
        assert_eq!(owners, [format!("{FIELD_MANAGER}/Apply/")]);

        let scaled = object(serde_json::json!({
            "apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "MachineSet",
            "metadata": {"name": "workers", "managedFields": [
                {"manager": "kubectl", "operation": "Update", "subresource": "scale", "fieldsV1": {"f:spec": {"f:replicas": {}}}},
            ]},
            "spec": {"replicas": 5},
        }));
        let (replicas, owners) = read(&scaled).unwrap();
        assert!(!replicas.ours);
        assert_eq!(owners, ["kubectl/Update/scale"]);
    }

    #[test]
    fn a_machine_set_of_a_machine_deployment_is_not_a_target() {
        let ms = object(serde_json::json!({
            "apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "MachineSet",
            "metadata": {"name": "workers-abc", "ownerReferences": [
                {"apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "MachineDeployment", "name": "workers", "uid": "u", "controller": true},
            ]},
            "spec": {},
        }));
        let err = read(&ms).unwrap_err();
        assert!(err.contains("controlled by MachineDeployment workers"), "{err}");
    }

    fn api_error(code: u16, causes: &[&str], message: &str) -> kube::Error {
        let mut status = kube::core::Status::failure(message, "Conflict").with_code(code);
        status.details = Some(kube::core::response::StatusDetails {
            name: String::new(),
            group: String::new(),
            kind: String::new(),
            uid: String::new(),
            retry_after_seconds: 0,
            causes: causes
                .iter()
                .map(|r| kube::core::response::StatusCause {
                    reason: (*r).into(),
                    message: String::new(),
                    field: ".spec.replicas".into(),
                })
                .collect(),
        });
        kube::Error::Api(status.boxed())
    }

    #[test]
    fn a_field_conflict_is_told_from_other_errors_and_names_the_managers() {
        let said = r#"Apply failed with 2 conflicts: conflict with "kubectl" using cluster.x-k8s.io/v1beta1: .spec.replicas, conflict with "cluster-autoscaler" with subresource "scale" using cluster.x-k8s.io/v1beta1: .spec.replicas"#;
        let conflict = api_error(409, &["FieldManagerConflict"], said);
        assert_eq!(field_conflict(&conflict).as_deref(), Some(said));
        assert_eq!(
            field_conflict(&api_error(409, &[], "the object has been modified")),
            None
        );
        assert_eq!(field_conflict(&api_error(422, &["FieldManagerConflict"], "x")), None);
        let message = conflict_message("MachineDeployment workers", 3, said);
        assert!(
            message.starts_with(
                r#"spec.replicas of MachineDeployment workers is owned by "kubectl", "cluster-autoscaler"; not forced to 3"#
            ),
            "{message}"
        );
        assert!(message.ends_with(&format!("(the API server said: {said})")));
    }
}

//! The objects a ScheduledMachine creates for a window, built as plain JSON. Pure.
//!
//! All three share the ScheduledMachine's name and namespace and carry the labels that tie them
//! back to it. None gets a controller ownerRef: CAPI core adopts the bootstrap and
//! infrastructure objects under the Machine, and a Machine owned by anything but its Cluster
//! would break CAPI's adoption and `clusterctl move`.

use std::time::Duration;

use serde_json::{Value, json};

use crate::api::{
    CLUSTER_NAME_LABEL,
    capi::{self, CapiVersion},
    label_syntax,
    node_taint::NodeTaint,
    scheduled_machine::{CreatedObjectReference, ScheduledMachineSpec, ScheduledReason},
};

pub use crate::api::{PRIORITY_LABEL, SCHEDULED_MACHINE_LABEL};
/// API group bootstrap configs must belong to.
pub const BOOTSTRAP_GROUP: &str = "bootstrap.cluster.x-k8s.io";
/// API group infrastructure objects must belong to.
pub const INFRASTRUCTURE_GROUP: &str = "infrastructure.cluster.x-k8s.io";

/// Why a spec cannot be turned into objects.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    /// A template's apiVersion is outside the group CAPI expects for it.
    #[error("{field}: apiVersion {api_version:?} must be in group {group}")]
    WrongGroup {
        /// The offending field.
        field: &'static str,
        /// What was written.
        api_version: String,
        /// The group required.
        group: &'static str,
    },
    /// Neither or both bootstrap sources are set.
    #[error("set exactly one of spec.bootstrapSpec or spec.bootstrapDataSecretName")]
    BootstrapSource,
    /// A label that only the controller may set appears in `machineTemplate.labels`.
    #[error("spec.machineTemplate.labels[{0}]: reserved for the controller")]
    ReservedLabel(String),
    /// A label key or value, or an annotation key, that Kubernetes would refuse on the Machine.
    #[error("{field}: {problem}")]
    InvalidLabel {
        /// The entry, e.g. `spec.machineTemplate.labels["team"]` (the key clipped).
        field: String,
        /// What is wrong, with the value when it is the value.
        problem: String,
    },
    /// A taint key under a prefix Kubernetes or this project reserves.
    #[error("spec.nodeTaints[{index}].key: {key:?} uses the reserved prefix {prefix:?}")]
    ReservedTaintKey {
        /// Position in the list.
        index: usize,
        /// The key.
        key: String,
        /// The prefix it uses.
        prefix: &'static str,
    },
    /// A taint key and effect pair listed twice.
    #[error("spec.nodeTaints[{index}]: {key:?} with effect {effect} is listed twice")]
    DuplicateTaint {
        /// Position of the second entry.
        index: usize,
        /// The key.
        key: String,
        /// The effect.
        effect: &'static str,
    },
}

impl SpecError {
    /// The `ScheduleValid` reason.
    #[must_use]
    pub const fn reason(&self) -> ScheduledReason {
        match self {
            Self::WrongGroup { .. } => ScheduledReason::InvalidApiGroup,
            Self::BootstrapSource => ScheduledReason::InvalidBootstrapSource,
            Self::ReservedLabel(_) => ScheduledReason::ReservedLabel,
            Self::InvalidLabel { .. } => ScheduledReason::InvalidLabel,
            Self::ReservedTaintKey { .. } | Self::DuplicateTaint { .. } => ScheduledReason::InvalidNodeTaint,
        }
    }
}

/// Check what the CRD schema cannot (or, for taints, what an API server without CEL would
/// not): groups, the bootstrap either/or, reserved and malformed labels, malformed annotation
/// keys, reserved and repeated taints.
///
/// # Errors
/// The first problem found.
pub fn validate(spec: &ScheduledMachineSpec) -> Result<(), SpecError> {
    check_group(
        "spec.infrastructureSpec.apiVersion",
        &spec.infrastructure_spec.api_version,
        INFRASTRUCTURE_GROUP,
    )?;
    match (&spec.bootstrap_spec, &spec.bootstrap_data_secret_name) {
        (Some(b), None) => check_group("spec.bootstrapSpec.apiVersion", &b.api_version, BOOTSTRAP_GROUP)?,
        (None, Some(_)) => {}
        _ => return Err(SpecError::BootstrapSource),
    }
    for key in spec.machine_template.labels.keys() {
        if key == CLUSTER_NAME_LABEL || key == SCHEDULED_MACHINE_LABEL || key == PRIORITY_LABEL {
            return Err(SpecError::ReservedLabel(key.clone()));
        }
    }
    check_label_syntax(spec)?;
    check_taints(&spec.node_taints)
}

fn check_label_syntax(spec: &ScheduledMachineSpec) -> Result<(), SpecError> {
    let invalid = |map: &str, key: &str, problem: String| SpecError::InvalidLabel {
        field: format!("spec.machineTemplate.{map}[{:?}]", clip(key)),
        problem,
    };
    for (key, value) in &spec.machine_template.labels {
        if let Some(problem) = label_syntax::key_problem(key) {
            return Err(invalid("labels", key, format!("not a valid key: {problem}")));
        }
        if let Some(problem) = label_syntax::value_problem(value) {
            return Err(invalid("labels", key, format!("value {:?}: {problem}", clip(value))));
        }
    }
    for key in spec.machine_template.annotations.keys() {
        if let Some(problem) = label_syntax::key_problem(key) {
            return Err(invalid("annotations", key, format!("not a valid key: {problem}")));
        }
    }
    Ok(())
}

/// At most 64 characters of what a user wrote, for a message.
fn clip(text: &str) -> String {
    match text.char_indices().nth(64) {
        Some((end, _)) => format!("{}...", &text[..end]),
        None => text.to_owned(),
    }
}

fn check_taints(taints: &[NodeTaint]) -> Result<(), SpecError> {
    for (index, taint) in taints.iter().enumerate() {
        if let Some(prefix) = taint.reserved_prefix() {
            return Err(SpecError::ReservedTaintKey {
                index,
                key: taint.key.clone(),
                prefix,
            });
        }
        if taints[..index]
            .iter()
            .any(|t| t.key == taint.key && t.effect == taint.effect)
        {
            return Err(SpecError::DuplicateTaint {
                index,
                key: taint.key.clone(),
                effect: taint.effect.as_str(),
            });
        }
    }
    Ok(())
}

fn check_group(field: &'static str, api_version: &str, group: &'static str) -> Result<(), SpecError> {
    match api_version.split_once('/') {
        Some((g, v)) if g == group && !v.is_empty() => Ok(()),
        _ => Err(SpecError::WrongGroup {
            field,
            api_version: api_version.to_owned(),
            group,
        }),
    }
}

/// What every created object is labelled with.
fn labels(name: &str, spec: &ScheduledMachineSpec) -> serde_json::Map<String, Value> {
    let mut labels = serde_json::Map::new();
    labels.insert(SCHEDULED_MACHINE_LABEL.to_owned(), json!(name));
    labels.insert(CLUSTER_NAME_LABEL.to_owned(), json!(spec.cluster_name));
    labels.insert(PRIORITY_LABEL.to_owned(), json!(spec.priority.to_string()));
    labels
}

/// The bootstrap config to create, if the spec asks for one.
#[must_use]
pub fn bootstrap(name: &str, namespace: &str, spec: &ScheduledMachineSpec) -> Option<Value> {
    spec.bootstrap_spec.as_ref().map(|b| {
        json!({
            "apiVersion": b.api_version,
            "kind": b.kind,
            "metadata": {"name": name, "namespace": namespace, "labels": labels(name, spec)},
            "spec": b.spec,
        })
    })
}

/// The infrastructure object to create.
#[must_use]
pub fn infrastructure(name: &str, namespace: &str, spec: &ScheduledMachineSpec) -> Value {
    let infra = &spec.infrastructure_spec;
    json!({
        "apiVersion": infra.api_version,
        "kind": infra.kind,
        "metadata": {"name": name, "namespace": namespace, "labels": labels(name, spec)},
        "spec": infra.spec,
    })
}

/// References to the created objects, as recorded in status.
#[must_use]
pub fn references(name: &str, spec: &ScheduledMachineSpec, version: CapiVersion) -> CreatedRefs {
    CreatedRefs {
        machine: CreatedObjectReference {
            api_version: format!("{}/{}", capi::GROUP, version.as_str()),
            kind: "Machine".to_owned(),
            name: name.to_owned(),
        },
        bootstrap: spec.bootstrap_spec.as_ref().map(|b| CreatedObjectReference {
            api_version: b.api_version.clone(),
            kind: b.kind.clone(),
            name: name.to_owned(),
        }),
        infrastructure: CreatedObjectReference {
            api_version: spec.infrastructure_spec.api_version.clone(),
            kind: spec.infrastructure_spec.kind.clone(),
            name: name.to_owned(),
        },
    }
}

/// The three references a window's objects are known by.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CreatedRefs {
    /// The Machine.
    pub machine: CreatedObjectReference,
    /// The bootstrap config, unless an existing data Secret is used.
    pub bootstrap: Option<CreatedObjectReference>,
    /// The infrastructure object.
    pub infrastructure: CreatedObjectReference,
}

/// The Machine to create, in the shape of the served CAPI version.
#[must_use]
pub fn machine(
    name: &str,
    namespace: &str,
    spec: &ScheduledMachineSpec,
    drain_timeout: Duration,
    version: CapiVersion,
) -> Value {
    let mut labels = labels(name, spec);
    for (k, v) in &spec.machine_template.labels {
        labels.insert(k.clone(), json!(v));
    }
    let group_of = |api_version: &str| api_version.split_once('/').map_or("", |(g, _)| g).to_owned();
    let infra = &spec.infrastructure_spec;
    let (bootstrap, infrastructure_ref) = match version {
        CapiVersion::V1beta1 => (
            match (&spec.bootstrap_spec, &spec.bootstrap_data_secret_name) {
                (Some(b), _) => json!({"configRef": {"apiVersion": b.api_version, "kind": b.kind, "name": name}}),
                (None, secret) => json!({"dataSecretName": secret}),
            },
            json!({"apiVersion": infra.api_version, "kind": infra.kind, "name": name}),
        ),
        CapiVersion::V1beta2 => (
            match (&spec.bootstrap_spec, &spec.bootstrap_data_secret_name) {
                (Some(b), _) => {
                    json!({"configRef": {"apiGroup": group_of(&b.api_version), "kind": b.kind, "name": name}})
                }
                (None, secret) => json!({"dataSecretName": secret}),
            },
            json!({"apiGroup": group_of(&infra.api_version), "kind": infra.kind, "name": name}),
        ),
    };
    let mut machine_spec = json!({
        "clusterName": spec.cluster_name,
        "bootstrap": bootstrap,
        "infrastructureRef": infrastructure_ref,
    });
    match version {
        CapiVersion::V1beta1 => machine_spec["nodeDrainTimeout"] = json!(go_duration(drain_timeout)),
        CapiVersion::V1beta2 => {
            machine_spec["deletion"] =
                json!({"nodeDrainTimeoutSeconds": i32::try_from(drain_timeout.as_secs()).unwrap_or(i32::MAX)});
        }
    }
    json!({
        "apiVersion": format!("{}/{}", capi::GROUP, version.as_str()),
        "kind": "Machine",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": labels,
            "annotations": spec.machine_template.annotations,
        },
        "spec": machine_spec,
    })
}

/// A whole-second duration in Go's notation, as `metav1.Duration` serialises it.
fn go_duration(d: Duration) -> String {
    format!("{}s", d.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::ScheduledMachine;

    fn seed() -> ScheduledMachineSpec {
        let sm: ScheduledMachine =
            serde_yaml::from_str(include_str!("../../../examples/seed/05-scheduledmachine.yaml")).unwrap();
        sm.spec
    }

    #[test]
    fn the_seed_spec_is_valid() {
        validate(&seed()).unwrap();
    }

    #[test]
    fn wrong_groups_and_bootstrap_sources_are_refused_by_field() {
        let mut spec = seed();
        spec.infrastructure_spec.api_version = "apps/v1".into();
        let err = validate(&spec).unwrap_err();
        assert_eq!(err.reason().as_str(), "InvalidAPIGroup");
        assert!(
            err.to_string().starts_with("spec.infrastructureSpec.apiVersion"),
            "{err}"
        );

        let mut spec = seed();
        spec.bootstrap_data_secret_name = Some("s".into());
        assert_eq!(validate(&spec).unwrap_err(), SpecError::BootstrapSource);

        let mut spec = seed();
        spec.machine_template
            .labels
            .insert(SCHEDULED_MACHINE_LABEL.into(), "x".into());
        assert_eq!(validate(&spec).unwrap_err().reason().as_str(), "ReservedLabel");
    }

    #[test]
    fn labels_and_annotation_keys_kubernetes_would_refuse_are_refused_naming_the_entry() {
        let refused = |labels: &[(&str, &str)], annotations: &[&str]| {
            let mut spec = seed();
            for (k, v) in labels {
                spec.machine_template.labels.insert((*k).into(), (*v).into());
            }
            for k in annotations {
                spec.machine_template
                    .annotations
                    .insert((*k).into(), "ünïcödé is fine here".into());
            }
            validate(&spec).err().map(|e| (e.reason().as_str(), e.to_string()))
        };
        assert_eq!(refused(&[("team", "")], &["note/élan"]).unwrap().0, "InvalidLabel");
        assert_eq!(
            refused(&[("équipe", "a")], &[]).unwrap().1,
            r#"spec.machineTemplate.labels["équipe"]: not a valid key: only ASCII letters, digits, '-', '_' and '.'"#
        );
        assert_eq!(
            refused(&[("team", "🚀")], &[]).unwrap().1,
            r#"spec.machineTemplate.labels["team"]: value "🚀": only ASCII letters, digits, '-', '_' and '.'"#
        );
        let long = "ß".repeat(500);
        let message = refused(&[("team", &long)], &[]).unwrap().1;
        assert!(message.len() < 300 && message.contains("ßß..."), "{message}");
        assert_eq!(
            refused(
                &[("spot.example.com/pool", "blue"), ("team", "")],
                &["ünïcödé.example/x"]
            )
            .unwrap()
            .0,
            "InvalidLabel"
        );
        assert_eq!(
            refused(
                &[("spot.example.com/pool", "blue"), ("team", "")],
                &["spot.example.com/note"]
            ),
            None
        );
    }

    #[test]
    fn reserved_and_repeated_taints_are_refused_naming_the_key() {
        use crate::api::node_taint::TaintEffect;
        let taint = |key: &str, effect| NodeTaint {
            key: key.into(),
            value: None,
            effect,
        };
        let mut spec = seed();
        spec.node_taints = vec![
            taint("spot.example.com/ephemeral", TaintEffect::NoSchedule),
            taint("node-role.kubernetes.io/infra", TaintEffect::NoSchedule),
        ];
        let err = validate(&spec).unwrap_err();
        assert_eq!(err.reason().as_str(), "InvalidNodeTaint");
        assert_eq!(
            err.to_string(),
            r#"spec.nodeTaints[1].key: "node-role.kubernetes.io/infra" uses the reserved prefix "node-role.kubernetes.io/""#
        );
        spec.node_taints = vec![
            taint("a", TaintEffect::NoSchedule),
            taint("a", TaintEffect::NoExecute),
            taint("a", TaintEffect::NoSchedule),
        ];
        assert!(
            validate(&spec)
                .unwrap_err()
                .to_string()
                .starts_with("spec.nodeTaints[2]: ")
        );
        spec.node_taints.pop();
        assert_eq!(validate(&spec), Ok(()), "same key, other effect is fine");
    }

    #[test]
    fn objects_carry_our_labels_and_no_owner() {
        let spec = seed();
        let infra = infrastructure("w", "default", &spec);
        assert_eq!(infra["kind"], "LibvirtMachine");
        assert_eq!(infra["metadata"]["labels"][SCHEDULED_MACHINE_LABEL], "w");
        assert_eq!(infra["metadata"]["labels"][CLUSTER_NAME_LABEL], "spot");
        assert_eq!(infra["metadata"]["labels"][PRIORITY_LABEL], "50");
        assert!(infra["metadata"].get("ownerReferences").is_none());
        assert_eq!(infra["spec"]["network"]["addresses"][0], "192.168.122.100/24");
        let bootstrap = bootstrap("w", "default", &spec).unwrap();
        assert_eq!(bootstrap["spec"]["secretRef"]["name"], "worker-ignition");
    }

    #[test]
    fn machine_matches_the_served_capi_version() {
        let spec = seed();
        let v1 = machine("w", "default", &spec, Duration::from_secs(300), CapiVersion::V1beta1);
        assert_eq!(v1["apiVersion"], "cluster.x-k8s.io/v1beta1");
        assert_eq!(
            v1["spec"]["bootstrap"]["configRef"]["apiVersion"],
            "bootstrap.cluster.x-k8s.io/v1alpha1"
        );
        assert_eq!(v1["spec"]["infrastructureRef"]["kind"], "LibvirtMachine");
        assert_eq!(v1["spec"]["nodeDrainTimeout"], "300s");
        assert_eq!(v1["metadata"]["labels"]["node-role.kubernetes.io/worker"], "");

        let v2 = machine("w", "default", &spec, Duration::from_secs(300), CapiVersion::V1beta2);
        assert_eq!(
            v2["spec"]["bootstrap"]["configRef"]["apiGroup"],
            "bootstrap.cluster.x-k8s.io"
        );
        assert!(v2["spec"]["infrastructureRef"].get("apiVersion").is_none());
        assert_eq!(v2["spec"]["deletion"]["nodeDrainTimeoutSeconds"], 300);
    }

    #[test]
    fn a_data_secret_replaces_the_bootstrap_config() {
        let mut spec = seed();
        spec.bootstrap_spec = None;
        spec.bootstrap_data_secret_name = Some("precooked".into());
        assert!(bootstrap("w", "default", &spec).is_none());
        let m = machine("w", "default", &spec, Duration::from_secs(1), CapiVersion::V1beta2);
        assert_eq!(m["spec"]["bootstrap"], json!({"dataSecretName": "precooked"}));
        assert!(references("w", &spec, CapiVersion::V1beta2).bootstrap.is_none());
    }
}

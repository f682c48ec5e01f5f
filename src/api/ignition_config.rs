//! `IgnitionConfig`: the Cluster API bootstrap provider object that turns a user's Ignition
//! Secret into the bootstrap data Secret a Machine boots from.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{condition::Condition, libvirt_machine::TemplateMetadata};

/// Desired state of an IgnitionConfig.
#[derive(CustomResource, Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[kube(
    group = "bootstrap.cluster.x-k8s.io",
    version = "v1alpha1",
    kind = "IgnitionConfig",
    namespaced,
    status = "IgnitionConfigStatus",
    shortname = "ignc",
    category = "cluster-api",
    category = "caplv",
    label("cluster.x-k8s.io/v1beta1", "v1alpha1"),
    label("cluster.x-k8s.io/v1beta2", "v1alpha1"),
    doc = "Bootstrap data for a Cluster API Machine, taken from a Secret that holds Ignition JSON.",
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status",
        description = "Whether the bootstrap data Secret is written"
    ),
    printcolumn(
        name = "DataSecret",
        type_ = "string",
        json_path = ".status.dataSecretName",
        description = "Bootstrap data Secret"
    ),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase")]
pub struct IgnitionConfigSpec {
    /// The Secret (same namespace) holding the Ignition config.
    pub secret_ref: IgnitionSecretReference,
}

/// Where the source Ignition lives.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
pub struct IgnitionSecretReference {
    /// Secret name, in the IgnitionConfig's namespace.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// Key within the Secret.
    #[serde(default = "default_key")]
    #[schemars(length(min = 1, max = 253), regex(pattern = r"^[-._a-zA-Z0-9]+$"))]
    pub key: String,
}

fn default_key() -> String {
    "value".to_owned()
}

/// Observed state of an IgnitionConfig.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct IgnitionConfigStatus {
    /// Cluster API v1beta1 contract: true once the data Secret exists.
    #[serde(default)]
    pub ready: bool,
    /// Name of the bootstrap data Secret.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_secret_name: Option<String>,
    /// Cluster API v1beta2 contract.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initialization: Option<BootstrapInitialization>,
    /// `Ready` and its reasons.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

/// The v1beta2 contract's one-time flag for bootstrap objects.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct BootstrapInitialization {
    /// True once the bootstrap data Secret has been created.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_secret_created: Option<bool>,
}

/// A template CAPI MachineSets and MachineDeployments clone IgnitionConfigs from.
#[derive(CustomResource, Clone, Debug, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[kube(
    group = "bootstrap.cluster.x-k8s.io",
    version = "v1alpha1",
    kind = "IgnitionConfigTemplate",
    namespaced,
    shortname = "ignct",
    category = "cluster-api",
    category = "caplv",
    label("cluster.x-k8s.io/v1beta1", "v1alpha1"),
    label("cluster.x-k8s.io/v1beta2", "v1alpha1"),
    doc = "A template for IgnitionConfigs, as the Cluster API bootstrap template contract requires.",
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase")]
pub struct IgnitionConfigTemplateSpec {
    /// The IgnitionConfig every clone starts from.
    pub template: IgnitionConfigTemplateResource,
}

/// The object an IgnitionConfigTemplate stamps out.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
pub struct IgnitionConfigTemplateResource {
    /// Labels and annotations for the clones.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<TemplateMetadata>,
    /// Spec of every clone.
    pub spec: IgnitionConfigSpec,
}

crate::condition_names! {
    /// Condition types of an IgnitionConfig.
    pub enum ConfigCondition {
        /// The data Secret holds the current bootstrap data.
        Ready,
        /// Reconciliation is paused.
        Paused,
    }
}

crate::condition_names! {
    /// An IgnitionConfig's own reasons; [`Reason`] adds the Ignition library's.
    pub enum ConfigReason {
        /// The data Secret holds the current bootstrap data.
        DataSecretCreated,
        /// The Secret named by `spec.secretRef.name` does not exist.
        SourceSecretNotFound,
        /// The source Secret has no `spec.secretRef.key`.
        SourceKeyNotFound,
        /// The source Secret's `format` key is neither `ignition` nor `butane`.
        UnsupportedFormat,
        /// A Secret with the data Secret's name exists and is not owned by this IgnitionConfig.
        DataSecretConflict,
        /// Reconciliation is paused.
        Paused,
        /// Reconciliation is not paused.
        NotPaused,
    }
}

crate::condition_reasons! {
    /// The reason of an IgnitionConfig condition: its own, or why the source is not valid
    /// Ignition or Butane.
    pub enum Reason {
        /// One of the IgnitionConfig's own.
        Config(ConfigReason),
        /// The Ignition library refused the source.
        Ignition(crate::ignition::Reason),
    }
}

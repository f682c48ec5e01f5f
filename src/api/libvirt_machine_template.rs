//! `LibvirtMachineTemplate`: what CAPI MachineSets and MachineDeployments clone LibvirtMachines
//! from, with the clones' capacity in status for the cluster autoscaler.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::libvirt_machine::LibvirtMachineSpec;

/// A template CAPI MachineSets and MachineDeployments clone LibvirtMachines from.
#[derive(CustomResource, Clone, Debug, Deserialize, Serialize, JsonSchema, PartialEq)]
#[kube(
    group = "infrastructure.cluster.x-k8s.io",
    version = "v1alpha1",
    kind = "LibvirtMachineTemplate",
    namespaced,
    shortname = "lvmt",
    category = "cluster-api",
    category = "caplv",
    label("cluster.x-k8s.io/v1beta1", "v1alpha1"),
    label("cluster.x-k8s.io/v1beta2", "v1alpha1"),
    doc = "A template for LibvirtMachines, as the Cluster API InfraMachineTemplate contract requires.",
    status = "LibvirtMachineTemplateStatus",
    printcolumn(
        name = "CPU",
        type_ = "string",
        json_path = ".status.capacity.cpu",
        description = "vCPUs of every clone, for scale-from-zero"
    ),
    printcolumn(
        name = "Memory",
        type_ = "string",
        json_path = ".status.capacity.memory",
        description = "Memory of every clone, for scale-from-zero"
    ),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase")]
pub struct LibvirtMachineTemplateSpec {
    /// The LibvirtMachine every clone starts from.
    pub template: LibvirtMachineTemplateResource,
}

/// What a clone of the template will have, for the cluster autoscaler to scale a
/// MachineDeployment up from zero replicas (it has no machine to look at then).
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct LibvirtMachineTemplateStatus {
    /// `cpu` and `memory` of every clone; a resource the template sizes from the host's free
    /// capacity (0) is left out, as it is not known before admission.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub capacity: BTreeMap<String, Quantity>,
    /// The clones' architecture and operating system.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_info: Option<TemplateNodeInfo>,
}

/// A clone's platform, as the autoscaler labels the Node it imagines.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct TemplateNodeInfo {
    /// `amd64` (q35 machines are x86-64).
    pub architecture: String,
    /// `linux`.
    pub operating_system: String,
}

/// The object a LibvirtMachineTemplate stamps out.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema, PartialEq)]
pub struct LibvirtMachineTemplateResource {
    /// Labels and annotations for the clones.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<TemplateMetadata>,
    /// Spec of every clone.
    pub spec: LibvirtMachineSpec,
}

/// Labels and annotations for objects stamped from a template.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
pub struct TemplateMetadata {
    /// Labels.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Annotations.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

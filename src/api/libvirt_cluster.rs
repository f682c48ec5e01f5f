//! `LibvirtCluster`: the Cluster API infrastructure object for a cluster whose workers are libvirt VMs.
//!
//! The control plane already exists (typically Single Node OpenShift); this object records where
//! its API server is and reports whether it answers, which is what CAPI waits for before it
//! provisions machines.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{
    common::{ApiEndpoint, InfrastructureInitialization},
    condition::Condition,
};

/// Desired state of a LibvirtCluster.
#[derive(CustomResource, Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[kube(
    group = "infrastructure.cluster.x-k8s.io",
    version = "v1alpha1",
    kind = "LibvirtCluster",
    namespaced,
    status = "LibvirtClusterStatus",
    shortname = "lvc",
    category = "cluster-api",
    category = "caplv",
    label("cluster.x-k8s.io/v1beta1", "v1alpha1"),
    label("cluster.x-k8s.io/v1beta2", "v1alpha1"),
    doc = "Infrastructure for a Cluster API cluster whose workers run as libvirt VMs.",
    printcolumn(
        name = "Cluster",
        type_ = "string",
        json_path = ".metadata.labels['cluster\\.x-k8s\\.io/cluster-name']",
        description = "Cluster this object belongs to"
    ),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status",
        description = "Whether the control plane endpoint answers"
    ),
    printcolumn(
        name = "Endpoint",
        type_ = "string",
        json_path = ".spec.controlPlaneEndpoint.host",
        description = "Control plane endpoint host"
    ),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase")]
pub struct LibvirtClusterSpec {
    /// The existing cluster's API server endpoint. CAPI copies it to the Cluster when the
    /// Cluster has none. The manager checks that it accepts TCP connections.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_plane_endpoint: Option<ApiEndpoint>,
}

/// A template ClusterClass stamps LibvirtClusters from.
#[derive(CustomResource, Clone, Debug, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[kube(
    group = "infrastructure.cluster.x-k8s.io",
    version = "v1alpha1",
    kind = "LibvirtClusterTemplate",
    namespaced,
    shortname = "lvct",
    category = "cluster-api",
    category = "caplv",
    label("cluster.x-k8s.io/v1beta1", "v1alpha1"),
    label("cluster.x-k8s.io/v1beta2", "v1alpha1"),
    doc = "A template for LibvirtClusters, as the Cluster API InfraClusterTemplate contract (ClusterClass) requires.",
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase")]
pub struct LibvirtClusterTemplateSpec {
    /// The LibvirtCluster every clone starts from.
    pub template: LibvirtClusterTemplateResource,
}

/// The object a LibvirtClusterTemplate stamps out.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
pub struct LibvirtClusterTemplateResource {
    /// Labels and annotations for the clones.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<super::libvirt_machine::TemplateMetadata>,
    /// Spec of every clone.
    pub spec: LibvirtClusterSpec,
}

/// Observed state of a LibvirtCluster.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct LibvirtClusterStatus {
    /// Cluster API v1beta1 contract: true once the infrastructure is provisioned.
    #[serde(default)]
    pub ready: bool,
    /// Cluster API v1beta2 contract: one-time provisioning flag.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initialization: Option<InfrastructureInitialization>,
    /// The failure domains of the LibvirtHosts in this namespace (`spec.failureDomain`), for
    /// Cluster API to copy to the Cluster: a map of name to `{controlPlane: false}` under the
    /// v1beta1 contract, a list of `{name, controlPlane: false}` under v1beta2.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "super::common::preserve_unknown_any")]
    pub failure_domains: Option<serde_json::Value>,
    /// `Ready` (endpoint answering), `Paused`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

crate::condition_names! {
    /// Condition types of a LibvirtCluster.
    pub enum ClusterCondition {
        /// The summary.
        Ready,
        /// Reconciliation is paused.
        Paused,
    }
}

crate::condition_names! {
    /// Reasons of the LibvirtCluster `Ready` and `Paused` conditions.
    pub enum Reason {
        /// The control plane endpoint accepted a TCP connection.
        ControlPlaneReachable,
        /// The control plane endpoint did not accept a TCP connection in time.
        ControlPlaneUnreachable,
        /// No endpoint is set, so there is nothing to check.
        NoControlPlaneEndpoint,
        /// CAPI core has not yet made a Cluster the owner of this object.
        WaitingForOwnerCluster,
        /// The owning Cluster named in the ownerReference does not exist.
        OwnerClusterNotFound,
        /// The Cluster or this object is paused.
        Paused,
        /// Reconciliation is not paused.
        NotPaused,
    }
}

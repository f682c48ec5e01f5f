//! `SelfManagedControlPlane`: the Cluster API control plane object for a cluster whose control
//! plane is the cluster the manager itself runs in (Single Node OpenShift managing itself).
//!
//! It manages no control plane machines. It exists because Cluster API core needs a control
//! plane it can read: without `spec.controlPlaneRef` and without control plane Machines, core
//! never drains or deletes Nodes (`isDeleteNodeAllowed`), and the Cluster's
//! `ControlPlaneInitialized` stays False. It also maintains the `<cluster>-kubeconfig` Secret core's
//! ClusterCache uses to reach the workload cluster, with a short-lived ServiceAccount token.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::condition::Condition;

/// Desired state of a SelfManagedControlPlane. Every field is optional: the seed's Cluster gets
/// one created for it with an empty spec.
#[derive(CustomResource, Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[kube(
    group = "controlplane.cluster.x-k8s.io",
    version = "v1alpha1",
    kind = "SelfManagedControlPlane",
    namespaced,
    status = "SelfManagedControlPlaneStatus",
    shortname = "smcp",
    category = "cluster-api",
    category = "caplv",
    label("cluster.x-k8s.io/v1beta1", "v1alpha1"),
    label("cluster.x-k8s.io/v1beta2", "v1alpha1"),
    doc = "The control plane of a Cluster API cluster that manages itself: always initialized, and the source of the cluster's kubeconfig Secret.",
    printcolumn(
        name = "Cluster",
        type_ = "string",
        json_path = ".metadata.labels['cluster\\.x-k8s\\.io/cluster-name']",
        description = "Cluster this control plane belongs to"
    ),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status",
        description = "Whether the cluster's kubeconfig Secret is usable"
    ),
    printcolumn(
        name = "Server",
        type_ = "string",
        json_path = ".status.kubeconfig.server",
        description = "API server the kubeconfig points at"
    ),
    printcolumn(
        name = "Expires",
        type_ = "string",
        json_path = ".status.kubeconfig.expiresAt",
        description = "When the kubeconfig's token expires (renewed well before)"
    ),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase")]
pub struct SelfManagedControlPlaneSpec {
    /// API server URL written into the kubeconfig, e.g. `https://kubernetes.default.svc` when
    /// Cluster API core runs inside the cluster. Default: `https://<host>:<port>` of the Cluster's
    /// `spec.controlPlaneEndpoint` (else the LibvirtCluster's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 2048), regex(pattern = r"^https://[^\s/?#]+(/\S*)?$"))]
    pub server: Option<String>,
}

/// Observed state of a SelfManagedControlPlane.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SelfManagedControlPlaneStatus {
    /// Cluster API contract: the control plane's Nodes are not Machines of this cluster, so core
    /// may drain and delete worker Nodes without control plane Machines.
    #[serde(default)]
    pub external_managed_control_plane: bool,
    /// Cluster API v1beta1 contract: the control plane accepts requests (it is the running cluster).
    #[serde(default)]
    pub initialized: bool,
    /// Cluster API v1beta1 contract: the control plane is ready.
    #[serde(default)]
    pub ready: bool,
    /// Cluster API v1beta2 contract.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initialization: Option<ControlPlaneInitialization>,
    /// The kubeconfig Secret this object maintains; absent while it maintains none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubeconfig: Option<KubeconfigStatus>,
    /// `Ready` (the kubeconfig Secret) and `Paused`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

/// The v1beta2 contract's one-time flag for control plane objects.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ControlPlaneInitialization {
    /// True once the control plane accepts requests; never goes back to false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_plane_initialized: Option<bool>,
}

/// What the maintained kubeconfig Secret holds (never the token itself).
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct KubeconfigStatus {
    /// Name of the Secret, `<cluster>-kubeconfig`.
    pub secret_name: String,
    /// The API server URL in it.
    pub server: String,
    /// The ServiceAccount whose token it carries, `namespace/name`.
    pub service_account: String,
    /// When the token was minted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub issued_at: Option<Time>,
    /// When the token expires.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<Time>,
    /// When a new token will be minted: once a third of its lifetime remains.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub renew_at: Option<Time>,
}

crate::condition_names! {
    /// Condition types of a SelfManagedControlPlane.
    pub enum ControlPlaneCondition {
        /// The summary.
        Ready,
        /// Reconciliation is paused.
        Paused,
    }
}

crate::condition_names! {
    /// Reasons of the SelfManagedControlPlane `Ready` and `Paused` conditions.
    pub enum Reason {
        /// The kubeconfig Secret holds a current token for the configured server.
        KubeconfigAvailable,
        /// A `<cluster>-kubeconfig` Secret not owned by this object exists; it is left alone.
        UserProvidedKubeconfig,
        /// Neither `spec.server` nor a control plane endpoint (Cluster or LibvirtCluster) is known.
        NoControlPlaneEndpoint,
        /// The ServiceAccount the token is minted for does not exist.
        WorkloadServiceAccountNotFound,
        /// The object names no Cluster (no cluster-name label, no Cluster owner).
        WaitingForCluster,
        /// The Cluster it belongs to does not exist.
        ClusterNotFound,
        /// The Cluster or this object is paused.
        Paused,
        /// Reconciliation is not paused.
        NotPaused,
    }
}

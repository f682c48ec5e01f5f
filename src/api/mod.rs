//! Custom resource types served by the manager, and typed views of the Cluster API kinds it reads.
//!
//! Nothing here performs I/O: these are the shapes users write and controllers report.

pub mod capi;
pub mod common;
pub mod condition;
#[allow(
    clippy::duplicated_attributes,
    reason = "kube's printcolumn(...) repeats `type_` for every column"
)]
pub mod ignition_config;
#[allow(
    clippy::duplicated_attributes,
    reason = "kube's printcolumn(...) repeats `type_` for every column"
)]
pub mod libvirt_cluster;
#[allow(
    clippy::duplicated_attributes,
    reason = "kube's printcolumn(...) repeats `type_` for every column"
)]
pub mod libvirt_host;
#[allow(
    clippy::duplicated_attributes,
    reason = "kube's printcolumn(...) repeats `type_` for every column"
)]
pub mod libvirt_machine;
#[allow(
    clippy::duplicated_attributes,
    reason = "kube's printcolumn(...) repeats `type_` for every column"
)]
pub mod scheduled_machine;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;

pub use ignition_config::{IgnitionConfig, IgnitionConfigTemplate};
pub use libvirt_cluster::LibvirtCluster;
pub use libvirt_host::LibvirtHost;
pub use libvirt_machine::{LibvirtMachine, LibvirtMachineTemplate};
pub use scheduled_machine::ScheduledMachine;

/// Label CAPI core puts on every object that belongs to a cluster.
pub const CLUSTER_NAME_LABEL: &str = "cluster.x-k8s.io/cluster-name";
/// Annotation that pauses reconciliation of a single object.
pub const PAUSED_ANNOTATION: &str = "cluster.x-k8s.io/paused";

/// Every CRD this binary defines, in a stable order (the order `caplv-manager crds` prints).
pub fn crds() -> Vec<CustomResourceDefinition> {
    vec![
        LibvirtCluster::crd(),
        LibvirtHost::crd(),
        LibvirtMachine::crd(),
        LibvirtMachineTemplate::crd(),
        IgnitionConfig::crd(),
        IgnitionConfigTemplate::crd(),
        ScheduledMachine::crd(),
    ]
}

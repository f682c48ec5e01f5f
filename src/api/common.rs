//! Small value types shared by several kinds.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A Go-style duration such as `5m`, `90s` or `1h30m`.
pub const DURATION_PATTERN: &str = r"^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$";

/// A reference to an object of a known kind in the same namespace.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
pub struct LocalObjectReference {
    /// Name of the referenced object, in the same namespace as the referrer.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
}

/// Where a cluster's Kubernetes API server listens.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
pub struct ApiEndpoint {
    /// DNS name or IP address of the API server.
    #[schemars(length(min = 1, max = 253))]
    pub host: String,
    /// TCP port of the API server.
    #[schemars(range(min = 1, max = 65535))]
    pub port: i32,
}

/// The kinds of address Cluster API understands for a machine.
#[derive(Clone, Copy, Debug, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
pub enum MachineAddressType {
    /// The machine's hostname.
    Hostname,
    /// An IP address reachable from outside the cluster network.
    ExternalIP,
    /// An IP address on the cluster network.
    InternalIP,
    /// A DNS name reachable from outside the cluster network.
    ExternalDNS,
    /// A DNS name on the cluster network; the node name, for the OpenShift CSR approver.
    InternalDNS,
}

/// One address of a machine, as Cluster API copies it onto the Machine.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
pub struct MachineAddress {
    /// What kind of address this is.
    #[serde(rename = "type")]
    pub type_: MachineAddressType,
    /// The address itself.
    pub address: String,
}

/// The v1beta2 contract's one-time provisioning flag for infrastructure objects.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct InfrastructureInitialization {
    /// True once the infrastructure has been provisioned; never goes back to false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provisioned: Option<bool>,
}

/// A schema for fields whose shape depends on the Cluster API contract (a map in one, a list in
/// the other), kept as written.
pub fn preserve_unknown_any(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "x-kubernetes-preserve-unknown-fields": true,
    })
}

/// A schema for fields that hold an arbitrary object the server must keep as written.
pub fn preserve_unknown_object(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true,
    })
}

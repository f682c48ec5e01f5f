//! Typed views of the Cluster API core kinds the manager reads (`Cluster`, `Machine`), for both
//! served API versions, and a version-neutral view controllers work with.
//!
//! CAPI core owns these kinds; we never install them, so they are read as dynamic objects and
//! decoded here.

use kube::{api::DynamicObject, core::ApiResource};
use serde::{Deserialize, Serialize};

use super::common::ApiEndpoint;

/// API group of Cluster API core.
pub const GROUP: &str = "cluster.x-k8s.io";

/// The Cluster API core versions the manager understands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum CapiVersion {
    /// CAPI up to v1.10 (OpenShift up to 4.20).
    V1beta1,
    /// CAPI v1.11 and later.
    V1beta2,
}

impl CapiVersion {
    /// The version string, e.g. `v1beta2`.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::V1beta1 => "v1beta1",
            Self::V1beta2 => "v1beta2",
        }
    }

    /// The newest version we understand among `served`, if any.
    pub fn preferred<'a>(served: impl IntoIterator<Item = &'a str>) -> Option<Self> {
        served
            .into_iter()
            .filter_map(|v| match v {
                "v1beta1" => Some(Self::V1beta1),
                "v1beta2" => Some(Self::V1beta2),
                _ => None,
            })
            .max()
    }

    /// The `ApiResource` of a core kind (`Cluster`, `Machine`) at this version.
    #[must_use]
    pub fn api_resource(self, kind: &str, plural: &str) -> ApiResource {
        ApiResource {
            group: GROUP.to_owned(),
            version: self.as_str().to_owned(),
            api_version: format!("{GROUP}/{}", self.as_str()),
            kind: kind.to_owned(),
            plural: plural.to_owned(),
        }
    }

    /// `ApiResource` of `Cluster`.
    #[must_use]
    pub fn cluster(self) -> ApiResource {
        self.api_resource("Cluster", "clusters")
    }

    /// `ApiResource` of `Machine`.
    #[must_use]
    pub fn machine(self) -> ApiResource {
        self.api_resource("Machine", "machines")
    }

    /// `ApiResource` of `MachineDeployment`.
    #[must_use]
    pub fn machine_deployment(self) -> ApiResource {
        self.api_resource("MachineDeployment", "machinedeployments")
    }

    /// `ApiResource` of `MachineSet`.
    #[must_use]
    pub fn machine_set(self) -> ApiResource {
        self.api_resource("MachineSet", "machinesets")
    }
}

/// A reference from a CAPI object to a provider object, reduced to what both versions carry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContractRef {
    /// API group of the referenced object.
    pub group: String,
    /// Kind of the referenced object.
    pub kind: String,
    /// Name of the referenced object (same namespace).
    pub name: String,
}

/// v1beta1 `ObjectReference`, as Cluster and Machine carry it.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectReferenceV1beta1 {
    /// `group/version` of the target.
    #[serde(default)]
    pub api_version: String,
    /// Kind of the target.
    #[serde(default)]
    pub kind: String,
    /// Name of the target.
    #[serde(default)]
    pub name: String,
}

/// v1beta2 `ContractVersionedObjectReference`.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectReferenceV1beta2 {
    /// API group of the target.
    #[serde(default)]
    pub api_group: String,
    /// Kind of the target.
    #[serde(default)]
    pub kind: String,
    /// Name of the target.
    #[serde(default)]
    pub name: String,
}

impl From<ObjectReferenceV1beta1> for ContractRef {
    fn from(r: ObjectReferenceV1beta1) -> Self {
        let group = r.api_version.split_once('/').map_or("", |(g, _)| g).to_owned();
        Self {
            group,
            kind: r.kind,
            name: r.name,
        }
    }
}

impl From<ObjectReferenceV1beta2> for ContractRef {
    fn from(r: ObjectReferenceV1beta2) -> Self {
        Self {
            group: r.api_group,
            kind: r.kind,
            name: r.name,
        }
    }
}

/// The parts of a v1beta1 `Cluster` spec the manager reads.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterSpecV1beta1 {
    /// Pauses every controller acting on the cluster.
    #[serde(default)]
    pub paused: bool,
    /// The InfraCluster.
    #[serde(default)]
    pub infrastructure_ref: Option<ObjectReferenceV1beta1>,
    /// The control plane object.
    #[serde(default)]
    pub control_plane_ref: Option<ObjectReferenceV1beta1>,
    /// Where the API server listens.
    #[serde(default)]
    pub control_plane_endpoint: Option<EndpointSpec>,
}

/// The parts of a v1beta2 `Cluster` spec the manager reads.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterSpecV1beta2 {
    /// Pauses every controller acting on the cluster.
    #[serde(default)]
    pub paused: Option<bool>,
    /// The InfraCluster.
    #[serde(default)]
    pub infrastructure_ref: Option<ObjectReferenceV1beta2>,
    /// The control plane object.
    #[serde(default)]
    pub control_plane_ref: Option<ObjectReferenceV1beta2>,
    /// Where the API server listens.
    #[serde(default)]
    pub control_plane_endpoint: Option<EndpointSpec>,
}

/// A Cluster as the manager sees it, whatever version it was read at.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterView {
    /// Cluster name.
    pub name: String,
    /// Whether reconciliation of the cluster's objects is paused.
    pub paused: bool,
    /// The InfraCluster reference.
    pub infrastructure_ref: Option<ContractRef>,
    /// The control plane reference, when set.
    pub control_plane_ref: Option<ContractRef>,
    /// The API server endpoint, when set (an empty host or a zero port counts as unset, as in core).
    pub control_plane_endpoint: Option<ApiEndpoint>,
}

/// Why a CAPI object could not be decoded.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    /// The object's spec does not have the shape of its declared version.
    #[error("{kind} {name:?} does not match the Cluster API {version} schema: {source}")]
    Shape {
        /// Kind of the object.
        kind: &'static str,
        /// Name of the object.
        name: String,
        /// Version it was decoded as.
        version: &'static str,
        /// The decoding error.
        #[source]
        source: serde_json::Error,
    },
}

fn spec_of<T: for<'de> Deserialize<'de> + Default>(
    obj: &DynamicObject,
    kind: &'static str,
    version: CapiVersion,
) -> Result<T, DecodeError> {
    match obj.data.get("spec") {
        None => Ok(T::default()),
        Some(spec) => serde_json::from_value(spec.clone()).map_err(|source| DecodeError::Shape {
            kind,
            name: obj.metadata.name.clone().unwrap_or_default(),
            version: version.as_str(),
            source,
        }),
    }
}

impl ClusterView {
    /// Decode a Cluster read at `version`.
    ///
    /// # Errors
    /// When the spec does not have the shape of that version.
    pub fn decode(obj: &DynamicObject, version: CapiVersion) -> Result<Self, DecodeError> {
        let name = obj.metadata.name.clone().unwrap_or_default();
        Ok(match version {
            CapiVersion::V1beta1 => {
                let spec: ClusterSpecV1beta1 = spec_of(obj, "Cluster", version)?;
                Self {
                    name,
                    paused: spec.paused,
                    infrastructure_ref: spec.infrastructure_ref.map(Into::into),
                    control_plane_ref: spec.control_plane_ref.map(Into::into),
                    control_plane_endpoint: spec.control_plane_endpoint.and_then(EndpointSpec::into_set),
                }
            }
            CapiVersion::V1beta2 => {
                let spec: ClusterSpecV1beta2 = spec_of(obj, "Cluster", version)?;
                Self {
                    name,
                    paused: spec.paused.unwrap_or(false),
                    infrastructure_ref: spec.infrastructure_ref.map(Into::into),
                    control_plane_ref: spec.control_plane_ref.map(Into::into),
                    control_plane_endpoint: spec.control_plane_endpoint.and_then(EndpointSpec::into_set),
                }
            }
        })
    }
}

/// A Cluster's `spec.controlPlaneEndpoint`; both fields are optional in v1beta2.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct EndpointSpec {
    /// DNS name or IP address.
    #[serde(default)]
    pub host: String,
    /// TCP port.
    #[serde(default)]
    pub port: i32,
}

impl EndpointSpec {
    /// The endpoint, unless its host or port is missing: core treats that as no endpoint
    /// (`APIEndpoint.IsValid`).
    fn into_set(self) -> Option<ApiEndpoint> {
        (!self.host.is_empty() && self.port != 0).then_some(ApiEndpoint {
            host: self.host,
            port: self.port,
        })
    }
}

/// The Cluster `spec.controlPlaneRef` value pointing at `kind` `name` of `group`/`version`, in the
/// shape `capi` wants: v1beta1 an `ObjectReference` (with apiVersion and namespace), v1beta2 a
/// `ContractVersionedObjectReference` (core finds the version through the CRD's contract label).
#[must_use]
pub fn control_plane_ref(
    capi: CapiVersion,
    group: &str,
    version: &str,
    kind: &str,
    name: &str,
    namespace: &str,
) -> serde_json::Value {
    match capi {
        CapiVersion::V1beta1 => serde_json::json!({
            "apiVersion": format!("{group}/{version}"),
            "kind": kind,
            "name": name,
            "namespace": namespace,
        }),
        CapiVersion::V1beta2 => serde_json::json!({"apiGroup": group, "kind": kind, "name": name}),
    }
}

/// The parts of a `Machine` spec the manager reads; `R` is the version's object reference
/// (v1beta1 `ObjectReference`, v1beta2 `ContractVersionedObjectReference`).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MachineSpec<R> {
    /// Cluster the machine belongs to.
    #[serde(default)]
    pub cluster_name: String,
    /// Bootstrap configuration.
    #[serde(default)]
    pub bootstrap: Bootstrap<R>,
    /// The InfraMachine.
    #[serde(default)]
    pub infrastructure_ref: R,
    /// Provider ID copied from the InfraMachine.
    #[serde(default, rename = "providerID")]
    pub provider_id: Option<String>,
}

/// A Machine's bootstrap block.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Bootstrap<R> {
    /// The bootstrap config object.
    #[serde(default)]
    pub config_ref: Option<R>,
    /// The bootstrap data Secret, once known.
    #[serde(default)]
    pub data_secret_name: Option<String>,
}

impl<R> Default for Bootstrap<R> {
    fn default() -> Self {
        Self {
            config_ref: None,
            data_secret_name: None,
        }
    }
}

impl<R: Into<ContractRef>> MachineSpec<R> {
    /// The version-independent parts: cluster, bootstrap config, data Secret, InfraMachine,
    /// provider ID.
    fn into_parts(self) -> MachineParts {
        (
            self.cluster_name,
            self.bootstrap.config_ref.map(Into::into),
            self.bootstrap.data_secret_name,
            self.infrastructure_ref.into(),
            self.provider_id,
        )
    }
}

/// What [`MachineSpec::into_parts`] gives.
type MachineParts = (String, Option<ContractRef>, Option<String>, ContractRef, Option<String>);

/// The parts of a Machine's status the manager reads; the same field names in both versions
/// except `nodeRef`, which keeps at least `name` in both.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MachineStatus {
    /// Machine phase (`Pending`, `Provisioning`, `Provisioned`, `Running`, `Deleting`, ...).
    #[serde(default)]
    pub phase: Option<String>,
    /// The Node the machine became.
    #[serde(default)]
    pub node_ref: Option<NodeRef>,
}

/// A Node reference; both versions carry its name.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct NodeRef {
    /// Node name.
    #[serde(default)]
    pub name: String,
}

/// A Machine as the manager sees it, whatever version it was read at.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MachineView {
    /// Machine name.
    pub name: String,
    /// Cluster the machine belongs to.
    pub cluster_name: String,
    /// The bootstrap config object, if any.
    pub bootstrap_config_ref: Option<ContractRef>,
    /// The bootstrap data Secret, once known.
    pub data_secret_name: Option<String>,
    /// The InfraMachine.
    pub infrastructure_ref: ContractRef,
    /// Provider ID, once copied from the InfraMachine.
    pub provider_id: Option<String>,
    /// Phase, as CAPI reports it.
    pub phase: Option<String>,
    /// Name of the Node, once linked.
    pub node_name: Option<String>,
    /// Whether the Machine is being deleted.
    pub deleting: bool,
    /// `spec.failureDomain`: where the Machine must run (a plain string in both versions).
    pub failure_domain: Option<String>,
}

impl MachineView {
    /// Decode a Machine read at `version`.
    ///
    /// # Errors
    /// When the spec does not have the shape of that version.
    pub fn decode(obj: &DynamicObject, version: CapiVersion) -> Result<Self, DecodeError> {
        let name = obj.metadata.name.clone().unwrap_or_default();
        let status: MachineStatus = obj
            .data
            .get("status")
            .and_then(|s| serde_json::from_value(s.clone()).ok())
            .unwrap_or_default();
        let (cluster_name, bootstrap_config_ref, data_secret_name, infrastructure_ref, provider_id) = match version {
            CapiVersion::V1beta1 => {
                spec_of::<MachineSpec<ObjectReferenceV1beta1>>(obj, "Machine", version)?.into_parts()
            }
            CapiVersion::V1beta2 => {
                spec_of::<MachineSpec<ObjectReferenceV1beta2>>(obj, "Machine", version)?.into_parts()
            }
        };
        Ok(Self {
            name,
            cluster_name,
            bootstrap_config_ref,
            data_secret_name,
            infrastructure_ref,
            provider_id: provider_id.filter(|p| !p.is_empty()),
            phase: status.phase,
            node_name: status.node_ref.map(|n| n.name).filter(|n| !n.is_empty()),
            deleting: obj.metadata.deletion_timestamp.is_some(),
            failure_domain: obj.data["spec"]["failureDomain"]
                .as_str()
                .filter(|fd| !fd.is_empty())
                .map(str::to_owned),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dynamic(version: CapiVersion, kind: &str, body: serde_json::Value) -> DynamicObject {
        let ar = version.api_resource(kind, "x");
        let mut obj = DynamicObject::new("spot", &ar);
        obj.data = body;
        obj
    }

    #[test]
    fn prefers_the_newest_understood_version() {
        assert_eq!(
            CapiVersion::preferred(["v1beta1", "v1beta2", "v1alpha4"]),
            Some(CapiVersion::V1beta2)
        );
        assert_eq!(CapiVersion::preferred(["v1beta1"]), Some(CapiVersion::V1beta1));
        assert_eq!(CapiVersion::preferred(["v1alpha3"]), None);
    }

    #[test]
    fn decodes_the_seed_cluster_at_v1beta1() {
        let obj = dynamic(
            CapiVersion::V1beta1,
            "Cluster",
            serde_json::json!({"spec": {
                "controlPlaneEndpoint": {"host": "api.spot.labdroid.net", "port": 6443},
                "infrastructureRef": {"apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1", "kind": "LibvirtCluster", "name": "spot"}
            }}),
        );
        let view = ClusterView::decode(&obj, CapiVersion::V1beta1).unwrap();
        assert!(!view.paused);
        assert_eq!(view.control_plane_ref, None, "the seed sets no controlPlaneRef");
        assert_eq!(
            view.control_plane_endpoint,
            Some(ApiEndpoint {
                host: "api.spot.labdroid.net".into(),
                port: 6443
            })
        );
        assert_eq!(
            view.infrastructure_ref,
            Some(ContractRef {
                group: "infrastructure.cluster.x-k8s.io".into(),
                kind: "LibvirtCluster".into(),
                name: "spot".into()
            })
        );
    }

    #[test]
    fn decodes_a_paused_v1beta2_cluster() {
        let obj = dynamic(
            CapiVersion::V1beta2,
            "Cluster",
            serde_json::json!({"spec": {"paused": true, "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "LibvirtCluster", "name": "spot"}}}),
        );
        let view = ClusterView::decode(&obj, CapiVersion::V1beta2).unwrap();
        assert!(view.paused);
        assert_eq!(view.infrastructure_ref.unwrap().kind, "LibvirtCluster");
    }

    #[test]
    fn control_plane_refs_round_trip_in_both_shapes() {
        for capi in [CapiVersion::V1beta1, CapiVersion::V1beta2] {
            let reference = control_plane_ref(
                capi,
                "controlplane.cluster.x-k8s.io",
                "v1alpha1",
                "SelfManagedControlPlane",
                "spot",
                "default",
            );
            let obj = dynamic(
                capi,
                "Cluster",
                serde_json::json!({"spec": {"controlPlaneRef": reference, "controlPlaneEndpoint": {"host": "", "port": 0}}}),
            );
            let view = ClusterView::decode(&obj, capi).unwrap();
            assert_eq!(
                view.control_plane_ref,
                Some(ContractRef {
                    group: "controlplane.cluster.x-k8s.io".into(),
                    kind: "SelfManagedControlPlane".into(),
                    name: "spot".into()
                }),
                "{capi:?}"
            );
            assert_eq!(view.control_plane_endpoint, None, "an empty endpoint is no endpoint");
        }
        let v1beta2 = control_plane_ref(CapiVersion::V1beta2, "g", "v1", "K", "n", "ns");
        assert!(v1beta2.get("apiVersion").is_none() && v1beta2.get("namespace").is_none());
    }

    #[test]
    fn a_malformed_spec_is_a_named_error() {
        let obj = dynamic(
            CapiVersion::V1beta1,
            "Cluster",
            serde_json::json!({"spec": {"paused": "yes"}}),
        );
        let err = ClusterView::decode(&obj, CapiVersion::V1beta1).unwrap_err().to_string();
        assert!(err.contains("Cluster \"spot\"") && err.contains("v1beta1"), "{err}");
    }

    #[test]
    fn decodes_machines_of_both_versions() {
        let v1 = dynamic(
            CapiVersion::V1beta1,
            "Machine",
            serde_json::json!({
                "spec": {"clusterName": "spot", "bootstrap": {"configRef": {"apiVersion": "bootstrap.cluster.x-k8s.io/v1alpha1", "kind": "IgnitionConfig", "name": "w"}, "dataSecretName": "w"},
                         "infrastructureRef": {"apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1", "kind": "LibvirtMachine", "name": "w"}, "providerID": ""},
                "status": {"phase": "Running", "nodeRef": {"apiVersion": "v1", "kind": "Node", "name": "w"}}
            }),
        );
        let view = MachineView::decode(&v1, CapiVersion::V1beta1).unwrap();
        assert_eq!(view.bootstrap_config_ref.unwrap().group, "bootstrap.cluster.x-k8s.io");
        assert_eq!(view.data_secret_name.as_deref(), Some("w"));
        assert_eq!(view.provider_id, None, "an empty provider ID is no provider ID");
        assert_eq!(view.node_name.as_deref(), Some("w"));

        let v2 = dynamic(
            CapiVersion::V1beta2,
            "Machine",
            serde_json::json!({"spec": {"clusterName": "spot", "bootstrap": {"dataSecretName": "s"},
                "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "LibvirtMachine", "name": "w"}, "providerID": "libvirt:///u"}}),
        );
        let view = MachineView::decode(&v2, CapiVersion::V1beta2).unwrap();
        assert_eq!(view.infrastructure_ref.kind, "LibvirtMachine");
        assert_eq!(view.provider_id.as_deref(), Some("libvirt:///u"));
        assert!(view.bootstrap_config_ref.is_none());
    }
}

//! CRD manifests for the CAPI core kinds the simulator plays, `Cluster` and `Machine`, for
//! `MachineDeployment` and `MachineSet`, which it serves but does not reconcile (a
//! ScheduledCapacity only sets their `spec.replicas`), and for the IPAM contract's
//! `IPAddressClaim` and `IPAddress`, which core ships and IPAM providers fill in.
//!
//! Each served version's schema lives in its own YAML file under `crds/` (trimmed from the
//! upstream CRDs to the fields providers and this simulator use); this module builds the
//! `CustomResourceDefinition` envelope so one set of files serves all three configurations.

use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, PostParams};
use kube::runtime::wait::{await_condition, conditions};
use serde_json::{Value, json};

use crate::error::{Error, Result, api_code};

const CLUSTER_V1BETA1: &str = include_str!("../crds/cluster-v1beta1.yaml");
const CLUSTER_V1BETA2: &str = include_str!("../crds/cluster-v1beta2.yaml");
const MACHINE_V1BETA1: &str = include_str!("../crds/machine-v1beta1.yaml");
const MACHINE_V1BETA2: &str = include_str!("../crds/machine-v1beta2.yaml");
const MACHINE_DEPLOYMENT_V1BETA1: &str = include_str!("../crds/machinedeployment-v1beta1.yaml");
const MACHINE_DEPLOYMENT_V1BETA2: &str = include_str!("../crds/machinedeployment-v1beta2.yaml");
const MACHINE_SET_V1BETA1: &str = include_str!("../crds/machineset-v1beta1.yaml");
const MACHINE_SET_V1BETA2: &str = include_str!("../crds/machineset-v1beta2.yaml");
const IP_ADDRESS_CLAIM: &str = include_str!("../crds/ipaddressclaim.yaml");
const IP_ADDRESS: &str = include_str!("../crds/ipaddress.yaml");

/// API group of the IPAM contract.
pub const IPAM_GROUP: &str = "ipam.cluster.x-k8s.io";

/// Which CAPI core API versions are installed and spoken.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CapiVersions {
    /// Only v1beta1, as OpenShift 4.16–4.20 (CAPI 1.6–1.10) serve.
    #[default]
    V1beta1,
    /// Only v1beta2 (CAPI ≥ 1.11 with v1beta1 no longer served).
    V1beta2,
    /// Both served, v1beta2 stored, **no conversion**: only apiVersion changes between them.
    /// Use this for discovery tests only; the simulator speaks v1beta2 in this mode.
    Both,
}

impl CapiVersions {
    /// The version the simulator reads and writes in this configuration.
    pub fn spoken(self) -> &'static str {
        match self {
            CapiVersions::V1beta1 => "v1beta1",
            CapiVersions::V1beta2 | CapiVersions::Both => "v1beta2",
        }
    }

    /// True when the simulator speaks v1beta2 (refs are `{apiGroup, kind, name}`).
    pub fn is_v1beta2(self) -> bool {
        self.spoken() == "v1beta2"
    }
}

fn version_entries(versions: CapiVersions, v1beta1: &str, v1beta2: &str) -> Result<Vec<Value>> {
    let parse = |yaml: &str, storage: bool| -> Result<Value> {
        let mut v: Value =
            serde_yaml::from_str(yaml).map_err(|e| Error::invalid("embedded CRD version YAML", e.to_string()))?;
        v["storage"] = Value::Bool(storage);
        Ok(v)
    };
    Ok(match versions {
        CapiVersions::V1beta1 => vec![parse(v1beta1, true)?],
        CapiVersions::V1beta2 => vec![parse(v1beta2, true)?],
        CapiVersions::Both => {
            let mut old = parse(v1beta1, false)?;
            old["deprecated"] = Value::Bool(true);
            old["deprecationWarning"] = json!("cluster.x-k8s.io/v1beta1 is deprecated; use cluster.x-k8s.io/v1beta2");
            vec![old, parse(v1beta2, true)?]
        }
    })
}

/// An IPAM kind's one schema under each version `versions` serves (v1beta1 and v1beta2 agree
/// on every field the YAML keeps).
fn ipam_version_entries(versions: CapiVersions, yaml: &str) -> Result<Vec<Value>> {
    let names: &[&str] = match versions {
        CapiVersions::V1beta1 => &["v1beta1"],
        CapiVersions::V1beta2 => &["v1beta2"],
        CapiVersions::Both => &["v1beta1", "v1beta2"],
    };
    let spoken = versions.spoken();
    names
        .iter()
        .map(|name| {
            let mut v: Value =
                serde_yaml::from_str(yaml).map_err(|e| Error::invalid("embedded CRD version YAML", e.to_string()))?;
            v["name"] = json!(name);
            v["storage"] = Value::Bool(*name == spoken);
            Ok(v)
        })
        .collect()
}

fn envelope(kind: &str, plural: &str, short: &str, versions: Vec<Value>) -> Value {
    let mut crd = grouped_envelope("cluster.x-k8s.io", kind, plural, versions);
    crd["spec"]["names"]["shortNames"] = json!([short]);
    crd
}

fn grouped_envelope(group: &str, kind: &str, plural: &str, versions: Vec<Value>) -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": format!("{plural}.{group}"),
            "labels": {
                "cluster.x-k8s.io/provider": "cluster-api",
                "clusterctl.cluster.x-k8s.io": "",
            },
        },
        "spec": {
            "group": group,
            "names": {
                "kind": kind,
                "listKind": format!("{kind}List"),
                "plural": plural,
                "singular": kind.to_lowercase(),
                "categories": ["cluster-api"],
            },
            "scope": "Namespaced",
            "conversion": {"strategy": "None"},
            "versions": versions,
        },
    })
}

/// The Cluster, Machine, MachineDeployment, MachineSet, IPAddressClaim and IPAddress CRDs for
/// `versions`, as JSON manifests.
///
/// Errors only if an embedded YAML file is malformed, which the unit tests rule out.
pub fn crds(versions: CapiVersions) -> Vec<Value> {
    let build = || -> Result<Vec<Value>> {
        Ok(vec![
            envelope(
                "Cluster",
                "clusters",
                "cl",
                version_entries(versions, CLUSTER_V1BETA1, CLUSTER_V1BETA2)?,
            ),
            envelope(
                "Machine",
                "machines",
                "ma",
                version_entries(versions, MACHINE_V1BETA1, MACHINE_V1BETA2)?,
            ),
            envelope(
                "MachineDeployment",
                "machinedeployments",
                "md",
                version_entries(versions, MACHINE_DEPLOYMENT_V1BETA1, MACHINE_DEPLOYMENT_V1BETA2)?,
            ),
            envelope(
                "MachineSet",
                "machinesets",
                "ms",
                version_entries(versions, MACHINE_SET_V1BETA1, MACHINE_SET_V1BETA2)?,
            ),
            grouped_envelope(
                IPAM_GROUP,
                "IPAddressClaim",
                "ipaddressclaims",
                ipam_version_entries(versions, IP_ADDRESS_CLAIM)?,
            ),
            grouped_envelope(
                IPAM_GROUP,
                "IPAddress",
                "ipaddresses",
                ipam_version_entries(versions, IP_ADDRESS)?,
            ),
        ])
    };
    match build() {
        Ok(v) => v,
        Err(e) => {
            tracing::error!(error = %e, "embedded CAPI CRD YAML is malformed");
            Vec::new()
        }
    }
}

/// Creates (or replaces) the CAPI CRDs and waits until each is `Established`.
pub async fn install(client: &kube::Client, versions: CapiVersions) -> Result<()> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    for manifest in crds(versions) {
        let crd: CustomResourceDefinition =
            serde_json::from_value(manifest).map_err(|e| Error::json("decoding CAPI CRD", e))?;
        let name = crd.metadata.name.clone().unwrap_or_default();
        match api.create(&PostParams::default(), &crd).await {
            Ok(_) => {}
            Err(e) if api_code(&e) == Some(409) => {
                let current = api
                    .get(&name)
                    .await
                    .map_err(|e| Error::kube(format!("reading CRD {name}"), e))?;
                let mut desired = crd.clone();
                desired.metadata.resource_version = current.metadata.resource_version;
                api.replace(&name, &PostParams::default(), &desired)
                    .await
                    .map_err(|e| Error::kube(format!("replacing CRD {name}"), e))?;
            }
            Err(e) => return Err(Error::kube(format!("creating CRD {name}"), e)),
        }
        let established = await_condition(api.clone(), &name, conditions::is_crd_established());
        match tokio::time::timeout(Duration::from_secs(30), established).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => {
                return Err(Error::Timeout(format!("waiting for CRD {name}: {e}")));
            }
            Err(_) => return Err(Error::Timeout(format!("CRD {name} not Established in 30s"))),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn served(crd: &Value) -> Vec<(String, bool)> {
        crd["spec"]["versions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| (v["name"].as_str().unwrap().to_string(), v["storage"].as_bool().unwrap()))
            .collect()
    }

    #[test]
    fn every_configuration_builds_six_typed_crds() {
        for versions in [CapiVersions::V1beta1, CapiVersions::V1beta2, CapiVersions::Both] {
            let all = crds(versions);
            assert_eq!(all.len(), 6);
            for crd in all {
                let _typed: CustomResourceDefinition = serde_json::from_value(crd.clone()).unwrap();
                let storage: Vec<_> = served(&crd).into_iter().filter(|(_, s)| *s).collect();
                assert_eq!(storage.len(), 1, "exactly one storage version");
            }
        }
        let both = crds(CapiVersions::Both);
        for i in [1, 4] {
            assert_eq!(
                served(&both[i]),
                vec![("v1beta1".into(), false), ("v1beta2".into(), true)]
            );
        }
        assert_eq!(both[4]["metadata"]["name"], "ipaddressclaims.ipam.cluster.x-k8s.io");
    }

    #[test]
    fn machine_printer_columns_match_core() {
        let machine = &crds(CapiVersions::V1beta1)[1];
        let cols: Vec<&str> = machine["spec"]["versions"][0]["additionalPrinterColumns"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        assert_eq!(cols, ["Cluster", "NodeName", "ProviderID", "Phase", "Age", "Version"]);
        let v1b1 = &machine["spec"]["versions"][0]["schema"]["openAPIV3Schema"];
        assert!(v1b1["properties"]["spec"]["properties"]["nodeDrainTimeout"].is_object());
        let machine2 = &crds(CapiVersions::V1beta2)[1];
        let refp = &machine2["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["infrastructureRef"];
        assert_eq!(refp["required"], json!(["apiGroup", "kind", "name"]));
    }

    #[test]
    fn machine_deployments_and_sets_scale_their_spec_replicas() {
        for versions in [CapiVersions::V1beta1, CapiVersions::V1beta2] {
            for crd in &crds(versions)[2..4] {
                let version = &crd["spec"]["versions"][0];
                assert_eq!(version["subresources"]["scale"]["specReplicasPath"], ".spec.replicas");
                let spec = &version["schema"]["openAPIV3Schema"]["properties"]["spec"];
                assert_eq!(spec["properties"]["replicas"]["format"], "int32");
                // Required as in core, so an apply of the replicas alone can never create one.
                assert!(spec["required"].as_array().unwrap().contains(&json!("clusterName")));
            }
        }
    }
}

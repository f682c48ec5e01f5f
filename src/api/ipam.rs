//! The Cluster API IPAM contract (`ipam.cluster.x-k8s.io`) as a LibvirtMachine uses it: it files
//! an `IPAddressClaim` naming a pool, an IPAM provider answers with an `IPAddress`. v1beta1 and
//! v1beta2 carry the same fields for this, so the version simply follows the core contract.

use kube::api::{ApiResource, DynamicObject};
use serde::Deserialize;
use serde_json::{Value, json};

use super::{capi::CapiVersion, machine_network::IpPoolReference};

/// The IPAM API group.
pub const GROUP: &str = "ipam.cluster.x-k8s.io";

fn resource(version: CapiVersion, kind: &str, plural: &str) -> ApiResource {
    ApiResource {
        group: GROUP.to_owned(),
        version: version.as_str().to_owned(),
        api_version: format!("{GROUP}/{}", version.as_str()),
        kind: kind.to_owned(),
        plural: plural.to_owned(),
    }
}

/// `ApiResource` of `IPAddressClaim` at the contract's version.
#[must_use]
pub fn claim_resource(version: CapiVersion) -> ApiResource {
    resource(version, "IPAddressClaim", "ipaddressclaims")
}

/// `ApiResource` of `IPAddress` at the contract's version.
#[must_use]
pub fn address_resource(version: CapiVersion) -> ApiResource {
    resource(version, "IPAddress", "ipaddresses")
}

/// The spec of a claim for one address from `pool` for a machine of `cluster`.
#[must_use]
pub fn claim_spec(cluster: &str, pool: &IpPoolReference) -> Value {
    json!({
        "clusterName": cluster,
        "poolRef": {"apiGroup": pool.api_group, "kind": pool.kind, "name": pool.name},
    })
}

/// What a claim says so far.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClaimState {
    /// Bound to the `IPAddress` of this name.
    Bound(String),
    /// Not bound; the provider's `Ready` message, if it gave one.
    Pending(Option<String>),
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ClaimStatus {
    #[serde(default)]
    address_ref: Option<NameRef>,
    #[serde(default)]
    conditions: Vec<Value>,
}

#[derive(Deserialize)]
struct NameRef {
    #[serde(default)]
    name: String,
}

/// Read a claim's status.
#[must_use]
pub fn claim_state(claim: &DynamicObject) -> ClaimState {
    let status: Option<ClaimStatus> = claim
        .data
        .get("status")
        .and_then(|s| serde_json::from_value(s.clone()).ok());
    let Some(status) = status else {
        return ClaimState::Pending(None);
    };
    match status.address_ref {
        Some(r) if !r.name.is_empty() => ClaimState::Bound(r.name),
        _ => ClaimState::Pending(
            status
                .conditions
                .iter()
                .find(|c| c["type"] == "Ready" && c["status"] == "False")
                .and_then(|c| c["message"].as_str())
                .filter(|m| !m.is_empty())
                .map(str::to_owned),
        ),
    }
}

/// The parts of an `IPAddress` a machine configures.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AllocatedAddress {
    /// The address with its prefix length, e.g. `10.10.0.12/24`.
    pub cidr: String,
    /// The pool's gateway, if it has one.
    pub gateway: Option<String>,
}

#[derive(Deserialize)]
struct AddressSpec {
    address: String,
    prefix: i64,
    #[serde(default)]
    gateway: Option<String>,
}

/// Read an `IPAddress`, or say what is wrong with it.
pub fn allocated_address(address: &DynamicObject) -> Result<AllocatedAddress, String> {
    let spec: AddressSpec = address
        .data
        .get("spec")
        .cloned()
        .ok_or_else(|| "has no spec".to_owned())
        .and_then(|s| serde_json::from_value(s).map_err(|e| format!("has an unreadable spec: {e}")))?;
    Ok(AllocatedAddress {
        cidr: format!("{}/{}", spec.address, spec.prefix),
        gateway: spec.gateway.filter(|g| !g.is_empty()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(data: Value) -> DynamicObject {
        DynamicObject {
            types: None,
            metadata: kube::api::ObjectMeta::default(),
            data,
        }
    }

    #[test]
    fn a_claim_is_bound_once_it_names_its_address() {
        assert_eq!(claim_state(&object(json!({}))), ClaimState::Pending(None));
        let waiting = json!({"status": {"conditions": [
            {"type": "Ready", "status": "False", "reason": "PoolExhausted", "message": "no addresses left"}
        ]}});
        assert_eq!(
            claim_state(&object(waiting)),
            ClaimState::Pending(Some("no addresses left".to_owned()))
        );
        let bound = json!({"status": {"addressRef": {"name": "m-0-0"}}});
        assert_eq!(claim_state(&object(bound)), ClaimState::Bound("m-0-0".to_owned()));
    }

    #[test]
    fn an_address_reads_as_cidr_and_gateway() {
        let a = object(
            json!({"spec": {"address": "10.10.0.12", "prefix": 24, "gateway": "10.10.0.1",
            "claimRef": {"name": "m-0-0"}, "poolRef": {"kind": "InClusterIPPool", "name": "p"}}}),
        );
        assert_eq!(
            allocated_address(&a).unwrap(),
            AllocatedAddress {
                cidr: "10.10.0.12/24".to_owned(),
                gateway: Some("10.10.0.1".to_owned())
            }
        );
        let no_prefix = object(json!({"spec": {"address": "10.10.0.12"}}));
        assert!(allocated_address(&no_prefix).unwrap_err().contains("prefix"));
        assert_eq!(allocated_address(&object(json!({}))).unwrap_err(), "has no spec");
    }

    #[test]
    fn resources_follow_the_contract_version() {
        assert_eq!(
            claim_resource(CapiVersion::V1beta2).api_version,
            "ipam.cluster.x-k8s.io/v1beta2"
        );
        assert_eq!(address_resource(CapiVersion::V1beta1).plural, "ipaddresses");
    }
}

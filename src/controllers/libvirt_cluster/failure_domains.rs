//! The failure domains a LibvirtCluster publishes (pure): those its namespace's LibvirtHosts
//! name, in the shape the Cluster API contract in use reads. No host runs a control plane
//! here, so none is marked `controlPlane: true`.

use std::collections::BTreeSet;

use serde_json::{Value, json};

use crate::api::{capi::CapiVersion, libvirt_host::LibvirtHost};

/// `status.failureDomains` for `hosts`, or `None` when no host names one.
#[must_use]
pub fn publish<'a>(hosts: impl IntoIterator<Item = &'a LibvirtHost>, capi: CapiVersion) -> Option<Value> {
    let names: BTreeSet<&str> = hosts
        .into_iter()
        .filter_map(|h| h.spec.failure_domain.as_deref())
        .collect();
    if names.is_empty() {
        return None;
    }
    Some(match capi {
        CapiVersion::V1beta1 => Value::Object(
            names
                .into_iter()
                .map(|n| (n.to_owned(), json!({"controlPlane": false})))
                .collect(),
        ),
        CapiVersion::V1beta2 => Value::Array(
            names
                .into_iter()
                .map(|n| json!({"name": n, "controlPlane": false}))
                .collect(),
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(name: &str, failure_domain: Option<&str>) -> LibvirtHost {
        serde_json::from_value(json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1", "kind": "LibvirtHost",
            "metadata": {"name": name, "namespace": "ns"},
            "spec": {"uri": "test:///default", "failureDomain": failure_domain}
        }))
        .unwrap()
    }

    #[test]
    fn each_contract_gets_its_shape_and_a_domain_appears_once() {
        let hosts = [
            host("a", Some("rack-2")),
            host("b", Some("rack-1")),
            host("c", Some("rack-2")),
            host("d", None),
        ];
        assert_eq!(
            publish(&hosts, CapiVersion::V1beta1),
            Some(json!({"rack-1": {"controlPlane": false}, "rack-2": {"controlPlane": false}}))
        );
        assert_eq!(
            publish(&hosts, CapiVersion::V1beta2),
            Some(json!([{"name": "rack-1", "controlPlane": false}, {"name": "rack-2", "controlPlane": false}]))
        );
        assert_eq!(publish(&hosts[3..], CapiVersion::V1beta1), None);
    }
}

//! What the manager's caches keep of CAPI objects: the parts [`super::capi::MachineView`] and
//! [`super::capi::ClusterView`] decode.
//!
//! A Machine's status is mostly what core and the kubelet report (conditions in two formats,
//! addresses, the Node's system info): about half of each cached Machine, none of it read here.

use kube::api::DynamicObject;

/// The status fields `MachineView::decode` reads.
const MACHINE_STATUS_READ: [&str; 2] = ["phase", "nodeRef"];

/// Keep of a Machine's status only what `MachineView` reads.
pub fn project_machine(machine: &mut DynamicObject) {
    if let Some(status) = machine
        .data
        .get_mut("status")
        .and_then(serde_json::Value::as_object_mut)
    {
        status.retain(|field, _| MACHINE_STATUS_READ.contains(&field.as_str()));
    }
}

/// Drop a Cluster's status: `ClusterView` reads only its spec.
pub fn project_cluster(cluster: &mut DynamicObject) {
    if let Some(fields) = cluster.data.as_object_mut() {
        fields.remove("status");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::capi::{CapiVersion, ClusterView, MachineView};

    fn object(version: CapiVersion, kind: &str, body: serde_json::Value) -> DynamicObject {
        let mut obj = DynamicObject::new("w", &version.api_resource(kind, "x"));
        obj.data = body;
        obj
    }

    #[test]
    fn projected_objects_decode_as_the_whole_ones_do() {
        for version in [CapiVersion::V1beta1, CapiVersion::V1beta2] {
            let infra = match version {
                CapiVersion::V1beta1 => {
                    serde_json::json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1", "kind": "LibvirtMachine", "name": "w"})
                }
                CapiVersion::V1beta2 => {
                    serde_json::json!({"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "LibvirtMachine", "name": "w"})
                }
            };
            let whole = object(
                version,
                "Machine",
                serde_json::json!({
                    "spec": {"clusterName": "spot", "bootstrap": {"dataSecretName": "s"}, "infrastructureRef": infra,
                             "providerID": "libvirt:///u", "failureDomain": "rack-1"},
                    "status": {"phase": "Running", "nodeRef": {"kind": "Node", "name": "w"},
                               "addresses": [{"type": "InternalIP", "address": "10.0.0.2"}],
                               "nodeInfo": {"kernelVersion": "6.1", "osImage": "RHCOS"},
                               "conditions": [{"type": "Ready", "status": "True"}]}
                }),
            );
            let mut projected = whole.clone();
            project_machine(&mut projected);
            assert_eq!(
                MachineView::decode(&projected, version).unwrap(),
                MachineView::decode(&whole, version).unwrap()
            );
            let status = projected.data["status"].as_object().unwrap();
            assert_eq!(status.keys().collect::<Vec<_>>(), ["nodeRef", "phase"]);

            let whole = object(
                version,
                "Cluster",
                serde_json::json!({
                    "spec": {"paused": true, "controlPlaneEndpoint": {"host": "api", "port": 6443}},
                    "status": {"phase": "Provisioned", "conditions": [{"type": "Ready", "status": "True"}]}
                }),
            );
            let mut projected = whole.clone();
            project_cluster(&mut projected);
            assert!(projected.data.get("status").is_none());
            assert_eq!(
                ClusterView::decode(&projected, version).unwrap(),
                ClusterView::decode(&whole, version).unwrap()
            );
        }
    }

    #[test]
    fn objects_without_a_status_are_left_alone() {
        let mut machine = object(
            CapiVersion::V1beta1,
            "Machine",
            serde_json::json!({"spec": {"clusterName": "spot"}}),
        );
        let before = machine.data.clone();
        project_machine(&mut machine);
        project_cluster(&mut machine);
        assert_eq!(machine.data, before);
    }
}

//! Custom resource types served by the manager, and typed views of the Cluster API kinds it reads.
//!
//! Nothing here performs I/O: these are the shapes users write and controllers report.

#![allow(
    clippy::duplicated_attributes,
    reason = "kube's printcolumn(...) repeats `type_` for every column"
)]

pub mod capi;
pub mod capi_cache;
pub mod common;
pub mod condition;
pub mod ignition_config;
pub mod ipam;
pub mod label_syntax;
pub mod libvirt_cluster;
pub mod libvirt_host;
pub mod libvirt_machine;
pub mod libvirt_machine_template;
pub mod machine_network;
pub mod node_taint;
pub mod scheduled_capacity;
pub mod scheduled_machine;
pub mod self_managed_control_plane;

crate::has_conditions!(
    ignition_config::IgnitionConfigStatus,
    libvirt_cluster::LibvirtClusterStatus,
    libvirt_host::LibvirtHostStatus,
    libvirt_machine::LibvirtMachineStatus,
    scheduled_capacity::ScheduledCapacityStatus,
    scheduled_machine::ScheduledMachineStatus,
    self_managed_control_plane::SelfManagedControlPlaneStatus,
);

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;

pub use ignition_config::{IgnitionConfig, IgnitionConfigTemplate};
pub use libvirt_cluster::{LibvirtCluster, LibvirtClusterTemplate};
pub use libvirt_host::LibvirtHost;
pub use libvirt_machine::{LibvirtMachine, LibvirtMachineTemplate};
pub use scheduled_capacity::ScheduledCapacity;
pub use scheduled_machine::ScheduledMachine;
pub use self_managed_control_plane::SelfManagedControlPlane;

/// Label CAPI core puts on every object that belongs to a cluster.
pub const CLUSTER_NAME_LABEL: &str = "cluster.x-k8s.io/cluster-name";
/// Annotation that pauses reconciliation of a single object.
pub const PAUSED_ANNOTATION: &str = "cluster.x-k8s.io/paused";
/// Label carrying a ScheduledMachine's priority onto the objects it creates; LibvirtMachines
/// waiting for host capacity are admitted highest first.
pub const PRIORITY_LABEL: &str = "5spot.finos.org/priority";
/// Label naming the ScheduledMachine an object was created for: watches and adoption use it,
/// and a host's reclaim policy treats a LibvirtMachine carrying it as a spot machine.
pub const SCHEDULED_MACHINE_LABEL: &str = "5spot.finos.org/scheduled-machine";

/// Every CRD this binary defines, in a stable order (the order `caplv-manager crds` prints).
pub fn crds() -> Vec<CustomResourceDefinition> {
    vec![
        LibvirtCluster::crd(),
        LibvirtHost::crd(),
        LibvirtMachine::crd(),
        LibvirtMachineTemplate::crd(),
        LibvirtClusterTemplate::crd(),
        SelfManagedControlPlane::crd(),
        IgnitionConfig::crd(),
        IgnitionConfigTemplate::crd(),
        ScheduledMachine::crd(),
        ScheduledCapacity::crd(),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse<T: serde::de::DeserializeOwned>(yaml: &str) -> T {
        serde_yaml::from_str(yaml).unwrap()
    }

    #[test]
    fn the_seed_manifests_decode_into_our_types() {
        let cluster: LibvirtCluster = parse(include_str!("../../examples/seed/01-libvirtcluster.yaml"));
        assert_eq!(cluster.spec.control_plane_endpoint.unwrap().port, 6443);

        let host: LibvirtHost = parse(include_str!("../../examples/seed/02-libvirthost.yaml"));
        assert_eq!(host.spec.uri, "qemu+ssh://caplv@192.168.122.1/system");
        assert_eq!(
            host.spec.reserved_resources.vcpus, 2,
            "defaults fill what the seed leaves out"
        );

        let ignition: IgnitionConfig = parse(include_str!("../../examples/seed/reference/ignitionconfig.yaml"));
        assert_eq!(ignition.spec.secret_ref.key, "value");

        let sm: ScheduledMachine = parse(include_str!("../../examples/seed/05-scheduledmachine.yaml"));
        assert_eq!(
            sm.spec.schedule.days_of_week.as_deref(),
            Some(&["mon-fri".to_owned()][..])
        );
        assert_eq!(sm.spec.infrastructure_spec.kind, "LibvirtMachine");
        let machine: libvirt_machine::LibvirtMachineSpec =
            serde_json::from_value(sm.spec.infrastructure_spec.spec).unwrap();
        assert_eq!(machine.interfaces()[0].addresses, ["192.168.122.100/24"]);
        assert_eq!(machine.interfaces()[0].interface_name, "enp1s0");
        assert_eq!(machine.domain.memory_mb, 8192);
    }
}

#[cfg(test)]
mod readme_tests {
    //! The README's table of conditions and reasons is the user's reference; it must name
    //! exactly what the code declares.

    use std::collections::BTreeSet;

    use super::{
        ignition_config, libvirt_cluster, libvirt_host, libvirt_machine, scheduled_capacity, scheduled_machine,
        self_managed_control_plane,
    };

    /// The backticked words of a table cell.
    fn ticked(cell: &str) -> BTreeSet<String> {
        cell.split('`').skip(1).step_by(2).map(str::to_owned).collect()
    }

    fn names<T: Copy>(all: &[T], as_str: fn(T) -> &'static str) -> BTreeSet<String> {
        all.iter().map(|n| as_str(*n).to_owned()).collect()
    }

    #[test]
    fn the_readme_table_lists_every_condition_and_reason() {
        let readme = include_str!("../../README.md");
        let section = readme
            .split("## Conditions and reasons")
            .nth(1)
            .and_then(|s| s.split("\n## ").next())
            .expect("README has a Conditions and reasons section");
        // The wire names of a set declared with `condition_names!`.
        macro_rules! set {
            ($t:ty) => {
                names(<$t>::ALL, <$t>::as_str)
            };
        }
        let expected = [
            (
                "LibvirtCluster",
                set!(libvirt_cluster::ClusterCondition),
                set!(libvirt_cluster::Reason),
            ),
            (
                "LibvirtHost",
                set!(libvirt_host::HostCondition),
                &(&set!(libvirt_host::HostReason) | &set!(libvirt_host::PressureReason))
                    | &set!(libvirt_host::MaintenanceReason),
            ),
            (
                "LibvirtMachine",
                set!(libvirt_machine::MachineCondition),
                set!(libvirt_machine::MachineReason),
            ),
            (
                "IgnitionConfig",
                set!(ignition_config::ConfigCondition),
                set!(ignition_config::ConfigReason),
            ),
            ("Ignition", BTreeSet::new(), set!(crate::ignition::Reason)),
            (
                "ScheduledMachine",
                set!(scheduled_machine::ScheduledCondition),
                set!(scheduled_machine::ScheduledReason),
            ),
            (
                "ScheduledCapacity",
                set!(scheduled_capacity::CapacityCondition),
                set!(scheduled_capacity::CapacityReason),
            ),
            ("schedule", BTreeSet::new(), set!(crate::schedule::Reason)),
            (
                "SelfManagedControlPlane",
                set!(self_managed_control_plane::ControlPlaneCondition),
                set!(self_managed_control_plane::Reason),
            ),
        ];
        let rows: Vec<Vec<&str>> = section
            .lines()
            .filter(|l| l.starts_with("| ") && !l.starts_with("| kind"))
            .map(|l| l.trim_matches('|').split(" | ").map(str::trim).collect())
            .collect();
        assert_eq!(rows.len(), expected.len(), "one row per set: {rows:?}");
        for (row, (label, types, reasons)) in rows.iter().zip(&expected) {
            assert!(row[0].starts_with(label), "row {:?} should be {label}", row[0]);
            assert_eq!(&ticked(row[1]), types, "{label}: condition types");
            assert_eq!(&ticked(row[2]), reasons, "{label}: reasons");
        }
    }
}

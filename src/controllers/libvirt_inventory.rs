//! The inventory gauges' source: LibvirtMachines by phase and LibvirtHosts' readiness and
//! capacity, counted from the shared caches at each scrape.

use std::sync::{Arc, Weak};

use crate::{
    api::{LibvirtHost, LibvirtMachine, condition, libvirt_host::HostCondition, libvirt_machine::MachineCondition},
    metrics::inventory::{HostReading, MachineCounts, Snapshot},
    reconcile::Context,
};

/// Feed the manager's inventory gauges from `ctx`'s caches. Only caches a controller started are
/// read (a scrape never starts a watch), and the context is held weakly: the gauges keep nothing
/// alive.
pub fn install(ctx: &Arc<Context>) {
    let weak: Weak<Context> = Arc::downgrade(ctx);
    ctx.metrics.inventory.set_source(move || {
        let Some(ctx) = weak.upgrade() else {
            return Snapshot::default();
        };
        let hosts = ctx
            .caches
            .libvirt_hosts
            .started_store()
            .map(|s| s.state())
            .unwrap_or_default();
        let machines = ctx.caches.libvirt_machines.started_store().map(|s| s.state());
        snapshot(&hosts, machines.as_deref())
    });
}

/// What the gauges show for these cached objects (`machines` absent: not watched).
fn snapshot(hosts: &[Arc<LibvirtHost>], machines: Option<&[Arc<LibvirtMachine>]>) -> Snapshot {
    let mut readings: Vec<HostReading> = hosts.iter().map(|h| host_reading(h)).collect();
    readings.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    Snapshot {
        machines: machines.map(count_machines),
        hosts: readings,
    }
}

fn count_machines(machines: &[Arc<LibvirtMachine>]) -> MachineCounts {
    let mut counts = MachineCounts::default();
    for machine in machines {
        let status = machine.status.as_ref();
        if machine.metadata.deletion_timestamp.is_some() {
            counts.deleting += 1;
            let conditions = status.map(|s| s.conditions.as_slice()).unwrap_or_default();
            if condition::is_true(conditions, MachineCondition::CleanupStalled.as_str()) {
                counts.cleanup_stalled += 1;
            }
        } else if status.is_some_and(|s| s.ready) {
            counts.running += 1;
        } else if status.is_some_and(|s| s.host_ref.is_some()) {
            counts.provisioning += 1;
        } else {
            counts.pending += 1;
        }
    }
    counts
}

fn host_reading(host: &LibvirtHost) -> HostReading {
    let status = host.status.as_ref();
    let capacity = status.and_then(|s| s.capacity.as_ref());
    HostReading {
        namespace: host.metadata.namespace.clone().unwrap_or_default(),
        name: host.metadata.name.clone().unwrap_or_default(),
        ready: status.is_some_and(|s| s.ready),
        reachable: status.is_some_and(|s| condition::is_true(&s.conditions, HostCondition::Reachable.as_str())),
        vcpus: capacity.map(|c| {
            [
                i64::from(c.total_vcpus),
                i64::from(c.allocatable_vcpus),
                i64::from(c.available_vcpus),
            ]
        }),
        memory_mib: capacity.map(|c| [c.total_memory_mb, c.allocatable_memory_mb, c.available_memory_mb]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn machine(value: serde_json::Value) -> Arc<LibvirtMachine> {
        let mut object = serde_json::json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1",
            "kind": "LibvirtMachine",
            "metadata": {"name": "m", "namespace": "spot"},
            "spec": {"rootDisk": {"baseImage": "b", "storagePool": "p", "size": "20Gi"}}
        });
        json_patch::merge(&mut object, &value);
        Arc::new(serde_json::from_value(object).unwrap())
    }

    #[test]
    fn machines_are_counted_by_phase_and_stalled_cleanups_apart() {
        let stalled = serde_json::json!({"type": "CleanupStalled", "status": "True", "reason": "ConnectionFailed",
            "lastTransitionTime": "2026-12-07T10:00:00Z"});
        let machines = [
            machine(serde_json::json!({})),
            machine(serde_json::json!({"status": {"hostRef": {"name": "laptop"}}})),
            machine(serde_json::json!({"status": {"hostRef": {"name": "laptop"}, "ready": true}})),
            machine(serde_json::json!({"status": {"ready": true}})),
            machine(
                serde_json::json!({"metadata": {"deletionTimestamp": "2026-12-07T10:00:00Z",
                "finalizers": ["x"]}, "status": {"ready": true, "conditions": [stalled]}}),
            ),
            machine(
                serde_json::json!({"metadata": {"deletionTimestamp": "2026-12-07T10:00:00Z",
                "finalizers": ["x"]}}),
            ),
        ];
        let counts = snapshot(&[], Some(&machines)).machines.unwrap();
        assert_eq!(
            counts,
            MachineCounts {
                pending: 1,
                provisioning: 1,
                running: 2,
                deleting: 2,
                cleanup_stalled: 1,
            }
        );
        assert_eq!(snapshot(&[], None).machines, None);
    }

    #[test]
    fn a_host_reports_readiness_reachability_and_capacity_once_known() {
        let host = |name: &str, status: serde_json::Value| -> Arc<LibvirtHost> {
            Arc::new(
                serde_json::from_value(serde_json::json!({
                    "apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1",
                    "kind": "LibvirtHost",
                    "metadata": {"name": name, "namespace": "spot"},
                    "spec": {"uri": "qemu+ssh://root@laptop/system"},
                    "status": status
                }))
                .unwrap(),
            )
        };
        let hosts = [
            host("b-unreached", serde_json::json!({"ready": false})),
            host(
                "a-laptop",
                serde_json::json!({"ready": true,
                "conditions": [{"type": "Reachable", "status": "True", "reason": "Connected",
                    "lastTransitionTime": "2026-12-07T10:00:00Z"}],
                "capacity": {"totalVCPUs": 16, "totalMemoryMB": 31560, "allocatableVCPUs": 14,
                    "allocatableMemoryMB": 30000, "availableVCPUs": 12, "availableMemoryMB": 22000}}),
            ),
        ];
        let readings = snapshot(&hosts, None).hosts;
        assert_eq!(
            readings,
            [
                HostReading {
                    namespace: "spot".to_owned(),
                    name: "a-laptop".to_owned(),
                    ready: true,
                    reachable: true,
                    vcpus: Some([16, 14, 12]),
                    memory_mib: Some([31560, 30000, 22000]),
                },
                HostReading {
                    namespace: "spot".to_owned(),
                    name: "b-unreached".to_owned(),
                    ready: false,
                    reachable: false,
                    vcpus: None,
                    memory_mib: None,
                },
            ]
        );
    }
}

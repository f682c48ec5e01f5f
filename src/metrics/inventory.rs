//! Gauges of what exists now (machines by phase, hosts' readiness and capacity), read from the
//! controllers' caches at each scrape. Counting them on every change instead would put work on
//! every reconcile for numbers only a scrape reads.

use std::sync::{Arc, Mutex, PoisonError};

use prometheus::{
    IntGauge, IntGaugeVec, Opts,
    core::{Collector, Desc},
    proto::MetricFamily,
};

/// LibvirtMachines by phase, as the cache holds them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MachineCounts {
    /// Waiting to be placed on a host.
    pub pending: usize,
    /// Placed on a host, not yet running.
    pub provisioning: usize,
    /// Running: the infrastructure is ready.
    pub running: usize,
    /// Being torn down.
    pub deleting: usize,
    /// Being torn down with `CleanupStalled=True`: the host refuses or cannot be reached.
    pub cleanup_stalled: usize,
}

/// One LibvirtHost's readiness and capacity.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostReading {
    /// The host's namespace.
    pub namespace: String,
    /// The host's name.
    pub name: String,
    /// `status.ready`.
    pub ready: bool,
    /// The `Reachable` condition is True.
    pub reachable: bool,
    /// vCPUs: total, allocatable, available (absent until the host was first reached).
    pub vcpus: Option<[i64; 3]>,
    /// Memory in MiB: total, allocatable, available.
    pub memory_mib: Option<[i64; 3]>,
}

/// What the caches hold at one scrape.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Snapshot {
    /// Absent where no LibvirtMachine cache runs (the CAPLV family is off).
    pub machines: Option<MachineCounts>,
    /// Every cached LibvirtHost.
    pub hosts: Vec<HostReading>,
}

type Source = Box<dyn Fn() -> Snapshot + Send + Sync>;

/// The gauges, and where their values come from once the caches exist.
pub struct Inventory {
    machines: IntGaugeVec,
    cleanup_stalled: IntGauge,
    host_ready: IntGaugeVec,
    host_reachable: IntGaugeVec,
    host_vcpus: IntGaugeVec,
    host_memory: IntGaugeVec,
    /// Held through a whole collection, so two scrapes at once never mix their fills.
    source: Mutex<Option<Source>>,
}

impl std::fmt::Debug for Inventory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inventory").finish_non_exhaustive()
    }
}

/// The capacity figures' `kind` label, in [`HostReading`]'s order.
const CAPACITY_KINDS: [&str; 3] = ["total", "allocatable", "available"];

impl Inventory {
    /// The gauges, without a source: they read zero until [`Inventory::set_source`].
    ///
    /// # Errors
    /// Only for invalid metric names, which tests rule out.
    pub fn new() -> Result<Self, prometheus::Error> {
        let host = ["namespace", "host"];
        let capacity = ["namespace", "host", "kind"];
        Ok(Self {
            machines: IntGaugeVec::new(Opts::new("libvirt_machines", "LibvirtMachines by phase"), &["phase"])?,
            cleanup_stalled: IntGauge::with_opts(Opts::new(
                "libvirt_machines_cleanup_stalled",
                "LibvirtMachines whose teardown is stalled (CleanupStalled=True)",
            ))?,
            host_ready: IntGaugeVec::new(
                Opts::new("libvirt_host_ready", "1 while the LibvirtHost is Ready"),
                &host,
            )?,
            host_reachable: IntGaugeVec::new(
                Opts::new(
                    "libvirt_host_reachable",
                    "1 while the manager reaches libvirt on the host",
                ),
                &host,
            )?,
            host_vcpus: IntGaugeVec::new(
                Opts::new(
                    "libvirt_host_vcpus",
                    "A LibvirtHost's vCPUs: total, allocatable, available",
                ),
                &capacity,
            )?,
            host_memory: IntGaugeVec::new(
                Opts::new(
                    "libvirt_host_memory_mib",
                    "A LibvirtHost's memory in MiB: total, allocatable, available",
                ),
                &capacity,
            )?,
            source: Mutex::new(None),
        })
    }

    /// Read the gauges from `source` at each scrape from now on.
    pub fn set_source(&self, source: impl Fn() -> Snapshot + Send + Sync + 'static) {
        *self.source.lock().unwrap_or_else(PoisonError::into_inner) = Some(Box::new(source));
    }

    fn fill(&self, snapshot: &Snapshot) {
        for vec in [
            &self.machines,
            &self.host_ready,
            &self.host_reachable,
            &self.host_vcpus,
            &self.host_memory,
        ] {
            vec.reset();
        }
        let machines = snapshot.machines.unwrap_or_default();
        for (phase, count) in [
            ("Pending", machines.pending),
            ("Provisioning", machines.provisioning),
            ("Running", machines.running),
            ("Deleting", machines.deleting),
        ] {
            self.machines.with_label_values(&[phase]).set(gauge(count));
        }
        self.cleanup_stalled.set(gauge(machines.cleanup_stalled));
        for host in &snapshot.hosts {
            let labels = [host.namespace.as_str(), host.name.as_str()];
            self.host_ready.with_label_values(&labels).set(i64::from(host.ready));
            self.host_reachable
                .with_label_values(&labels)
                .set(i64::from(host.reachable));
            for (vec, figures) in [(&self.host_vcpus, host.vcpus), (&self.host_memory, host.memory_mib)] {
                for (kind, value) in CAPACITY_KINDS.iter().zip(figures.iter().flatten()) {
                    vec.with_label_values(&[labels[0], labels[1], kind]).set(*value);
                }
            }
        }
    }

    fn collectors(&self) -> [&dyn Collector; 6] {
        [
            &self.machines,
            &self.cleanup_stalled,
            &self.host_ready,
            &self.host_reachable,
            &self.host_vcpus,
            &self.host_memory,
        ]
    }
}

fn gauge(count: usize) -> i64 {
    i64::try_from(count).unwrap_or(i64::MAX)
}

/// The registry's handle on the shared [`Inventory`].
pub struct Registered(pub Arc<Inventory>);

impl Collector for Registered {
    fn desc(&self) -> Vec<&Desc> {
        self.0.collectors().into_iter().flat_map(Collector::desc).collect()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let source = self.0.source.lock().unwrap_or_else(PoisonError::into_inner);
        self.0.fill(&source.as_ref().map(|read| read()).unwrap_or_default());
        self.0.collectors().into_iter().flat_map(Collector::collect).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn render(inventory: &Arc<Inventory>) -> String {
        let registry = prometheus::Registry::new_custom(Some("caplv".to_owned()), None).unwrap();
        registry.register(Box::new(Registered(inventory.clone()))).unwrap();
        let mut out = String::new();
        prometheus::TextEncoder::new()
            .encode_utf8(&registry.gather(), &mut out)
            .unwrap();
        out
    }

    #[test]
    fn without_a_source_every_phase_reads_zero_and_no_host_is_listed() {
        let inventory = Arc::new(Inventory::new().unwrap());
        let text = render(&inventory);
        assert!(text.contains("caplv_libvirt_machines{phase=\"Running\"} 0"), "{text}");
        assert!(text.contains("caplv_libvirt_machines_cleanup_stalled 0"), "{text}");
        assert!(!text.contains("caplv_libvirt_host_ready{"), "{text}");
    }

    #[test]
    fn each_scrape_reads_the_source_afresh_and_forgets_hosts_gone() {
        let inventory = Arc::new(Inventory::new().unwrap());
        let hosts = Arc::new(Mutex::new(vec![HostReading {
            namespace: "spot".to_owned(),
            name: "laptop".to_owned(),
            ready: true,
            reachable: true,
            vcpus: Some([16, 14, 12]),
            memory_mib: Some([31560, 30000, 22000]),
        }]));
        let read = hosts.clone();
        inventory.set_source(move || Snapshot {
            machines: Some(MachineCounts {
                running: 2,
                deleting: 1,
                cleanup_stalled: 1,
                ..MachineCounts::default()
            }),
            hosts: read.lock().unwrap().clone(),
        });
        let text = render(&inventory);
        for line in [
            "caplv_libvirt_machines{phase=\"Running\"} 2",
            "caplv_libvirt_machines{phase=\"Deleting\"} 1",
            "caplv_libvirt_machines{phase=\"Pending\"} 0",
            "caplv_libvirt_machines_cleanup_stalled 1",
            "caplv_libvirt_host_ready{host=\"laptop\",namespace=\"spot\"} 1",
            "caplv_libvirt_host_vcpus{host=\"laptop\",kind=\"available\",namespace=\"spot\"} 12",
            "caplv_libvirt_host_memory_mib{host=\"laptop\",kind=\"total\",namespace=\"spot\"} 31560",
        ] {
            assert!(text.contains(line), "{line} missing from\n{text}");
        }
        hosts.lock().unwrap().clear();
        let text = render(&inventory);
        assert!(!text.contains("laptop"), "{text}");
    }
}

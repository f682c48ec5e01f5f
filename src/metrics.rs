//! Prometheus metrics. One registry is created by the application and passed down; nothing is global.

pub mod inventory;

use std::{sync::Arc, time::Instant};

use prometheus::{
    Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry,
};

/// Every metric the manager exports.
#[derive(Clone, Debug)]
pub struct Metrics {
    registry: Registry,
    /// Reconciliations by controller and result (`success`, `error`).
    pub reconciliations: IntCounterVec,
    /// Failed reconciliations by controller and bounded reason.
    pub reconcile_errors: IntCounterVec,
    /// Reconcile durations by controller.
    pub reconcile_duration: HistogramVec,
    /// 1 once a controller's watch caches have synced.
    pub controller_ready: IntGaugeVec,
    /// 1 while this replica holds the leader lease (or runs without leader election).
    pub leader: IntGauge,
    /// Control plane endpoint probes by result (`reachable`, `unreachable`).
    pub endpoint_probes: IntCounterVec,
    /// ScheduledMachines by phase.
    pub scheduled_machines: IntGaugeVec,
    /// ScheduledMachine phase changes.
    pub phase_transitions: IntCounterVec,
    /// Pod evictions while draining, by result (`evicted`, `blocked`, `gone`, `failed`).
    pub evictions: IntCounterVec,
    /// Seconds between a schedule edge and the reconcile that acted on it.
    pub schedule_lag: Histogram,
    /// Seconds from a window's opening edge to its Node taking pods.
    pub edge_schedulable_lag: Histogram,
    /// Windows that ended (closed, disabled, killed or reclaimed) after opening without their
    /// Node ever taking pods.
    pub missed_windows: IntCounter,
    /// LibvirtMachine lifecycle events by kind (`provisioned`, `restarted`, `guest_shutdown`,
    /// `crashed`, `vanished`, `shutdown_requested`, `shutdown_timed_out`, `shutdown_refused`,
    /// `deleted`, `abandoned`).
    pub machine_events: IntCounterVec,
    /// Seconds a provisioning pass (disks, Ignition, define, start) spent on the host.
    pub provision_duration: Histogram,
    /// Spot machines a host reclaimed for its owner, by reason (`MemoryPressure`, `CPUPressure`).
    pub host_reclaims: IntCounterVec,
    /// Kubelet CSR decisions by kind (`client`, `serving`), decision (`approved`, `ignored`) and
    /// reason.
    pub csr_decisions: IntCounterVec,
    /// Work run on a host's libvirt connection (a few RPCs each), by result (`ok`, `error`,
    /// `unreachable`): its rate is the load the manager puts on its hosts.
    pub host_calls: IntCounterVec,
    /// Connections opened to hosts (SSH and libvirt handshakes), by result (`opened`, `failed`).
    pub host_connects: IntCounterVec,
    /// Machines by phase and hosts by readiness and capacity, read from the caches at scrape.
    pub inventory: Arc<inventory::Inventory>,
}

impl Metrics {
    /// Create the metrics and register them in a fresh registry.
    ///
    /// # Errors
    /// Only if two metrics were given the same name, which is a programming error caught by tests.
    pub fn new() -> Result<Self, prometheus::Error> {
        let registry = Registry::new_custom(Some("caplv".to_owned()), None)?;
        let reconciliations = IntCounterVec::new(
            Opts::new("reconciliations_total", "Reconciliations by controller and result"),
            &["controller", "result"],
        )?;
        let reconcile_errors = IntCounterVec::new(
            Opts::new(
                "reconcile_errors_total",
                "Failed reconciliations by controller and reason",
            ),
            &["controller", "reason"],
        )?;
        let reconcile_duration = HistogramVec::new(
            HistogramOpts::new("reconcile_duration_seconds", "Time spent in one reconciliation")
                .buckets(vec![0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 15.0, 60.0]),
            &["controller"],
        )?;
        let controller_ready = IntGaugeVec::new(
            Opts::new("controller_ready", "1 once the controller's caches have synced"),
            &["controller"],
        )?;
        let leader = IntGauge::new("leader", "1 while this replica runs the controllers")?;
        let endpoint_probes = IntCounterVec::new(
            Opts::new("endpoint_probes_total", "Control plane endpoint probes by result"),
            &["result"],
        )?;
        let scheduled_machines = IntGaugeVec::new(
            Opts::new("scheduled_machines", "ScheduledMachines by phase"),
            &["phase"],
        )?;
        let phase_transitions = IntCounterVec::new(
            Opts::new("scheduled_machine_transitions_total", "ScheduledMachine phase changes"),
            &["from", "to"],
        )?;
        let evictions = IntCounterVec::new(
            Opts::new("evictions_total", "Pod evictions while draining, by result"),
            &["result"],
        )?;
        let schedule_lag = Histogram::with_opts(
            HistogramOpts::new("schedule_lag_seconds", "Delay between a schedule edge and acting on it")
                .buckets(vec![0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 15.0, 60.0]),
        )?;
        let edge_schedulable_lag = Histogram::with_opts(
            HistogramOpts::new(
                "edge_schedulable_lag_seconds",
                "Delay between a window opening and its Node becoming schedulable",
            )
            .buckets(vec![
                0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0, 30.0, 60.0, 300.0, 900.0, 1800.0,
            ]),
        )?;
        let missed_windows = IntCounter::new(
            "scheduled_machine_missed_windows_total",
            "Windows that ended after opening without their Node ever taking pods",
        )?;
        let machine_events = IntCounterVec::new(
            Opts::new(
                "libvirt_machine_events_total",
                "LibvirtMachine lifecycle events by kind",
            ),
            &["event"],
        )?;
        let provision_duration = Histogram::with_opts(
            HistogramOpts::new(
                "libvirt_provision_duration_seconds",
                "Time one provisioning pass spent on the host",
            )
            .buckets(vec![0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 120.0]),
        )?;
        let host_reclaims = IntCounterVec::new(
            Opts::new(
                "host_reclaims_total",
                "Spot machines a LibvirtHost reclaimed for its owner, by reason",
            ),
            &["reason"],
        )?;
        let csr_decisions = IntCounterVec::new(
            Opts::new(
                "csr_decisions_total",
                "Kubelet CSR decisions by kind, decision and reason",
            ),
            &["kind", "decision", "reason"],
        )?;
        let host_calls = IntCounterVec::new(
            Opts::new("host_calls_total", "Work run on a host's libvirt connection, by result"),
            &["result"],
        )?;
        let host_connects = IntCounterVec::new(
            Opts::new("host_connects_total", "Connections opened to hosts, by result"),
            &["result"],
        )?;
        let inventory = Arc::new(inventory::Inventory::new()?);
        registry.register(Box::new(inventory::Registered(inventory.clone())))?;
        registry.register(Box::new(missed_windows.clone()))?;
        registry.register(Box::new(host_calls.clone()))?;
        registry.register(Box::new(host_connects.clone()))?;
        registry.register(Box::new(csr_decisions.clone()))?;
        registry.register(Box::new(machine_events.clone()))?;
        registry.register(Box::new(host_reclaims.clone()))?;
        registry.register(Box::new(provision_duration.clone()))?;
        registry.register(Box::new(scheduled_machines.clone()))?;
        registry.register(Box::new(phase_transitions.clone()))?;
        registry.register(Box::new(evictions.clone()))?;
        registry.register(Box::new(schedule_lag.clone()))?;
        registry.register(Box::new(edge_schedulable_lag.clone()))?;
        registry.register(Box::new(reconciliations.clone()))?;
        registry.register(Box::new(reconcile_errors.clone()))?;
        registry.register(Box::new(reconcile_duration.clone()))?;
        registry.register(Box::new(controller_ready.clone()))?;
        registry.register(Box::new(leader.clone()))?;
        registry.register(Box::new(endpoint_probes.clone()))?;
        Ok(Self {
            registry,
            reconciliations,
            reconcile_errors,
            reconcile_duration,
            controller_ready,
            leader,
            endpoint_probes,
            scheduled_machines,
            phase_transitions,
            evictions,
            schedule_lag,
            edge_schedulable_lag,
            missed_windows,
            machine_events,
            provision_duration,
            host_reclaims,
            csr_decisions,
            host_calls,
            host_connects,
            inventory,
        })
    }

    /// The registry to expose.
    #[must_use]
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// Render every metric in the Prometheus text format.
    #[must_use]
    pub fn render(&self) -> String {
        let mut out = String::new();
        // Encoding into a String cannot fail for well-formed metric families.
        let _ = prometheus::TextEncoder::new().encode_utf8(&self.registry.gather(), &mut out);
        out
    }

    /// Start timing one reconciliation of `controller`; record its outcome with [`ReconcileTimer::finish`].
    #[must_use]
    pub fn reconcile_started(&self, controller: &'static str) -> ReconcileTimer<'_> {
        ReconcileTimer {
            metrics: self,
            controller,
            started: Instant::now(),
        }
    }
}

/// Measures one reconciliation.
pub struct ReconcileTimer<'a> {
    metrics: &'a Metrics,
    controller: &'static str,
    started: Instant,
}

impl ReconcileTimer<'_> {
    /// Record the duration and the result; `error_reason` is `None` on success.
    pub fn finish(self, error_reason: Option<&'static str>) {
        self.metrics
            .reconcile_duration
            .with_label_values(&[self.controller])
            .observe(self.started.elapsed().as_secs_f64());
        let result = if error_reason.is_some() { "error" } else { "success" };
        self.metrics
            .reconciliations
            .with_label_values(&[self.controller, result])
            .inc();
        if let Some(reason) = error_reason {
            self.metrics
                .reconcile_errors
                .with_label_values(&[self.controller, reason])
                .inc();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_reconcile_outcomes_with_bounded_labels() {
        let metrics = Metrics::new().unwrap();
        metrics.reconcile_started("libvirtcluster").finish(None);
        metrics.reconcile_started("libvirtcluster").finish(Some("PatchStatus"));
        let text = metrics.render();
        assert!(
            text.contains(r#"caplv_reconciliations_total{controller="libvirtcluster",result="success"} 1"#),
            "{text}"
        );
        assert!(
            text.contains(r#"caplv_reconcile_errors_total{controller="libvirtcluster",reason="PatchStatus"} 1"#),
            "{text}"
        );
        assert!(text.contains("caplv_reconcile_duration_seconds_bucket"), "{text}");
    }
}

//! LibvirtHost controller.
//!
//! `connect (cached) → capabilities → pure plan → status`. There is no finalizer: a LibvirtHost
//! creates nothing outside Kubernetes.
//!
//! - **Connections** come from the cache shared with the LibvirtMachine controller
//!   ([`crate::reconcile::host_connections`]): one per host, rebuilt when the URI, the host key settings or
//!   the key Secret change, or when it dies. Every blocking libvirt call runs in `spawn_blocking`.
//! - **Capacity.** `total` is what the host reports; `available` is total minus
//!   `spec.reservedResources` minus what this manager's LibvirtMachines on the host have been
//!   allocated (`status.allocated`), clamped at zero. Machines are watched, so an admission or a
//!   deletion updates `available` at once. After a failed check the last known capacity, version
//!   and KVM flag are kept (the `Reachable`/`Ready` conditions and `ready` say they are stale).
//! - **Conditions.** `Reachable` (True `Connected`, or False with the transport's reason:
//!   `HostKeyMismatch`, `HostKeyNotPinned`, `AuthenticationFailed`, `ConnectionFailed`,
//!   `InvalidPrivateKey`, `InvalidHostKeyFingerprint`, `TunnelFailed`, `SecretNotFound`,
//!   `HypervisorUnavailable`, …) and `Ready` mirroring it. Messages never contain key material.
//!   `observedHostKeyFingerprint` is the key the SSH server presented, also on host key refusals
//!   so that it can be verified and pinned.
//! - **No hot loop.** Status is written only when it changes. `lastChecked` alone moves at most
//!   once per half health-check interval; since a healthy host is rechecked once per interval,
//!   that is in practice one status write per interval (≥ 30 s by schema), and none in between.
//! - **Reclaim.** With `spec.reclaim`, the host's own load (libvirt's node statistics, guest CPU
//!   subtracted) is checked against its limits every `for / 2`, and lasting pressure names one
//!   spot machine at a time in `status.reclaim.victim` for its ScheduledMachine to remove (the
//!   policy is [`reclaim`]). `UnderPressure` says what it sees; the load alone is written only
//!   when it moved.
//! - **Requeue.** After `healthCheckIntervalSeconds` (with a reclaim policy, its sample period);
//!   a failure retries after `min(interval, 30 s)`. Secrets are watched (metadata only) and mapped to the hosts that
//!   reference them, so a new or rotated key is picked up at once.

mod load;
pub mod maintenance;
pub mod reclaim;

use std::{sync::Arc, time::Duration};

use k8s_openapi::{api::core::v1::ObjectReference, apimachinery::pkg::apis::meta::v1::Time};
use kube::{
    Api, Resource, ResourceExt,
    api::{DeleteParams, DynamicObject},
    runtime::{
        controller::Action,
        events::{Event, EventType},
        reflector::{ObjectRef, Store},
    },
};
use tokio_util::sync::CancellationToken;

pub use crate::reconcile::host_connections::{Failure, SECRET_KEY};
use crate::reconcile::{
    ApiError, Context,
    host_connections::{HostCall, HostConnections, HostId, SecretReadError, host_id},
    placement::{self, Placement, Resources},
    refs_where, write_status,
};
use crate::{
    api::{
        condition::{self, DesiredCondition, Status},
        libvirt_host::{
            HostCapacity, HostCondition, HostReason, LibvirtHost, LibvirtHostSpec, LibvirtHostStatus, PressureReason,
            ReclaimStatus, ReclaimVictim,
        },
        libvirt_machine::LibvirtMachine,
        scheduled_machine::ScheduledMachine,
    },
    app::health::Readiness,
    libvirt::{
        hypervisor::HostInfo,
        pressure::{self, Measurement},
    },
};
use load::LoadSampler;
use maintenance::Resident;
use reclaim::Candidate;

/// Controller name in metrics and logs.
pub const NAME: &str = "libvirthost";
const FIELD_MANAGER: &str = "caplv-manager/libvirthost";
/// Upper bound on the retry delay after a failed check.
pub const FAILURE_RETRY: Duration = Duration::from_secs(30);

/// Failures of one reconcile (Kubernetes API trouble; host trouble is an [`Observation`]).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Reading the SSH key Secret failed.
    #[error(transparent)]
    GetSecret(#[from] SecretReadError),
    /// Writing status failed.
    #[error(transparent)]
    Api(#[from] ApiError),
}

impl crate::reconcile::ReconcileError for Error {
    fn reason(&self) -> &'static str {
        match self {
            Self::GetSecret(_) => "GetSecret",
            Self::Api(e) => e.reason(),
        }
    }
}

/// What a check of the host found.
#[derive(Clone, Debug, PartialEq)]
pub enum Observation {
    /// libvirt answered.
    Probed {
        /// What the host offers.
        info: HostInfo,
        /// The SSH host key fingerprint, for SSH hosts.
        fingerprint: Option<String>,
        /// What this manager's machines have committed on the host.
        committed: Resources,
        /// The host's own load, when its statistics could be read.
        measurement: Option<Measurement>,
    },
    /// The host could not be reached or used.
    Failed(Failure),
}

/// The decision of one reconcile.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    /// The status to write (written only when it differs from the current one).
    pub status: LibvirtHostStatus,
    /// When to check again.
    pub requeue: Duration,
    /// A spot machine the reclaim policy named in this decision.
    pub reclaiming: Option<ReclaimVictim>,
    /// A machine maintenance removes now.
    pub removing: Option<Resident>,
}

/// The machines on a host, as the reclaim policy and maintenance see them.
#[derive(Clone, Debug, Default)]
pub struct OnHost {
    /// Its admitted spot machines.
    pub spot: Vec<Candidate>,
    /// All its machines.
    pub residents: Vec<Resident>,
}

/// Capacity from what the host reports, minus the reservation and what our machines have
/// committed (clamped at zero).
#[must_use]
pub fn capacity(info: &HostInfo, spec: &LibvirtHostSpec, committed: Resources) -> HostCapacity {
    let total_vcpus = i32::try_from(info.cpus).unwrap_or(i32::MAX);
    let total_memory_mb = i64::try_from(info.memory_mib).unwrap_or(i64::MAX);
    let offered = placement::offered_from(spec, i64::from(total_vcpus), total_memory_mb);
    HostCapacity {
        total_vcpus,
        total_memory_mb,
        allocatable_vcpus: i32::try_from(offered.vcpus).unwrap_or(i32::MAX),
        allocatable_memory_mb: offered.memory_mib,
        available_vcpus: i32::try_from(offered.vcpus.saturating_sub(committed.vcpus).max(0)).unwrap_or(i32::MAX),
        available_memory_mb: offered.memory_mib.saturating_sub(committed.memory_mib).max(0),
    }
}

/// `Ready`'s message for a host that answered, with what the reservation and overcommit leave
/// none of: a new user's small host with the default reservation must say why every machine
/// waits.
fn connected_message(info: &HostInfo, spec: &LibvirtHostSpec, capacity: Option<&HostCapacity>) -> String {
    let connected = format!(
        "connected to libvirt {} ({} driver, {} vCPUs, {} MiB)",
        info.libvirt_version, info.driver, info.cpus, info.memory_mib
    );
    let nothing = capacity.and_then(|c| match (c.allocatable_vcpus <= 0, c.allocatable_memory_mb <= 0) {
        (true, true) => Some("vCPUs or memory"),
        (true, false) => Some("vCPUs"),
        (false, true) => Some("memory"),
        (false, false) => None,
    });
    match nothing {
        Some(nothing) => format!(
            "{connected}; reservedResources ({} vCPUs, {} MiB) and overcommit leave no {nothing} for machines",
            spec.reserved_resources.vcpus, spec.reserved_resources.memory_mb
        ),
        None => connected,
    }
}

/// The health-check interval of a spec (the schema keeps it ≥ 30 s; at least 1 s here).
#[must_use]
pub fn interval(spec: &LibvirtHostSpec) -> Duration {
    Duration::from_secs(u64::try_from(spec.health_check_interval_seconds).unwrap_or(0).max(1))
}

/// What the reclaim policy adds to a plan.
struct ReclaimPlan {
    status: Option<ReclaimStatus>,
    condition: Option<DesiredCondition>,
    chosen: Option<ReclaimVictim>,
    recheck: Option<Duration>,
}

/// Run the reclaim policy on a fresh measurement; a failed check keeps what it had.
fn plan_reclaim(
    current: &LibvirtHostStatus,
    spec: &LibvirtHostSpec,
    observation: &Observation,
    spot: &[Candidate],
    now: &Time,
) -> ReclaimPlan {
    let unchanged = ReclaimPlan {
        status: current.reclaim.clone(),
        condition: None,
        chosen: None,
        recheck: None,
    };
    let Some(reclaim) = &spec.reclaim else {
        return ReclaimPlan {
            status: None,
            ..unchanged
        };
    };
    let policy = match reclaim::Policy::read(reclaim) {
        Ok(policy) => policy,
        Err(message) => {
            return ReclaimPlan {
                status: None,
                condition: Some(DesiredCondition::new(
                    HostCondition::UnderPressure,
                    Status::False,
                    PressureReason::InvalidReclaim,
                    message,
                )),
                ..unchanged
            };
        }
    };
    let Observation::Probed { measurement, .. } = observation else {
        return unchanged;
    };
    let Some(measurement) = measurement else {
        return ReclaimPlan {
            condition: Some(DesiredCondition::new(
                HostCondition::UnderPressure,
                Status::Unknown,
                PressureReason::Unmeasured,
                "libvirt on this host gives no node statistics, so spec.reclaim cannot act",
            )),
            recheck: Some(policy.sample_period()),
            ..unchanged
        };
    };
    let breach = pressure::breach(&policy.limits, measurement);
    let under_pressure = condition::is_true(&current.conditions, HostCondition::UnderPressure.as_str());
    let outcome = reclaim::decide(
        &policy,
        breach.as_ref(),
        under_pressure,
        &current.reclaim.clone().unwrap_or_default(),
        spot,
        now,
    );
    let recheck = outcome
        .sustained_in
        .map_or(policy.sample_period(), |d| d.min(policy.sample_period()));
    ReclaimPlan {
        status: Some(outcome.status),
        condition: Some(outcome.condition),
        chosen: outcome.chosen,
        recheck: Some(recheck),
    }
}

/// Refresh `lastChecked` and the load only as often as the health-check pace allows: a load
/// that barely moved is not written, since with a reclaim policy the host is sampled every few
/// seconds and a write per sample would be a write every few seconds for nothing.
fn stamp(current: &LibvirtHostStatus, status: &mut LibvirtHostStatus, interval: Duration, now: &Time) {
    let stale = current.last_checked.as_ref().is_none_or(|last| {
        let age_ms = now.0.as_millisecond().saturating_sub(last.0.as_millisecond());
        u128::try_from(age_ms).unwrap_or(0) >= interval.as_millis() / 2
    });
    if !stale && !load::moved(current.load.as_ref(), status.load.as_ref()) {
        status.load.clone_from(&current.load);
    }
    if *status != *current || stale {
        status.last_checked = Some(now.clone());
    }
}

/// Decide the status and the next check from an observation, with the host's machines for
/// the reclaim policy and maintenance. Pure.
#[must_use]
pub fn plan(
    current: &LibvirtHostStatus,
    spec: &LibvirtHostSpec,
    generation: Option<i64>,
    observation: &Observation,
    machines: &OnHost,
    now: &Time,
) -> Plan {
    let interval = interval(spec);
    let mut status = current.clone();
    let (condition_status, reason, message, requeue) = match observation {
        Observation::Probed {
            info,
            fingerprint,
            committed,
            measurement,
        } => {
            status.ready = true;
            status.capacity = Some(capacity(info, spec, *committed));
            status.load = measurement.as_ref().map(load::host_load);
            status.libvirt_version = Some(info.libvirt_version.clone());
            status.kvm_available = Some(info.kvm_available);
            if fingerprint.is_some() {
                status.observed_host_key_fingerprint.clone_from(fingerprint);
            }
            let message = connected_message(info, spec, status.capacity.as_ref());
            (Status::True, HostReason::Connected, message, interval)
        }
        Observation::Failed(failure) => {
            status.ready = false;
            if failure.observed_fingerprint.is_some() {
                status
                    .observed_host_key_fingerprint
                    .clone_from(&failure.observed_fingerprint);
            }
            (
                Status::False,
                failure.reason,
                failure.message.clone(),
                interval.min(FAILURE_RETRY),
            )
        }
    };
    let reclaim = plan_reclaim(current, spec, observation, &machines.spot, now);
    status.reclaim = reclaim.status;
    let maintenance = maintenance::decide(
        spec.maintenance,
        current.maintenance.as_ref(),
        &current.conditions,
        &machines.residents,
    );
    status.maintenance = maintenance.status;
    let mut desired = vec![
        DesiredCondition::new(HostCondition::Reachable, condition_status, reason, message.clone()),
        DesiredCondition::new(HostCondition::Ready, condition_status, reason, message),
    ];
    desired.extend(reclaim.condition);
    desired.extend(maintenance.condition);
    status.conditions = condition::merge_all(&current.conditions, &desired, now, generation);
    if spec.reclaim.is_none() {
        status
            .conditions
            .retain(|c| c.type_ != HostCondition::UnderPressure.as_str());
    }
    status.observed_generation = generation;
    stamp(current, &mut status, interval, now);
    Plan {
        status,
        requeue: reclaim.recheck.map_or(requeue, |r| requeue.min(r)),
        reclaiming: reclaim.chosen,
        removing: maintenance.remove,
    }
}

/// The connection cache and admission state shared with the LibvirtMachine controller.
pub struct Shared {
    /// One connection per host.
    pub hosts: Arc<HostConnections>,
    /// What machines have committed on each host.
    pub placement: Arc<Placement>,
}

/// Controller state: the shared context, the host and machine stores and the shared caches.
struct State {
    ctx: Arc<Context>,
    store: Store<LibvirtHost>,
    /// Every LibvirtMachine, for the reclaim policy's spot machines.
    machines: Store<LibvirtMachine>,
    shared: Shared,
    /// The load sampler of each host.
    load: LoadSampler,
}

/// Connect (or reuse the shared connection) and read the host's capabilities and statistics.
async fn observe(host: &LibvirtHost, state: &State) -> Result<Observation, Error> {
    let called = state
        .shared
        .hosts
        .call(&state.ctx.client, host, |hv| {
            // Statistics are a bonus: a host that cannot give them is still usable.
            hv.capabilities().map(|info| (info, hv.node_stats().ok()))
        })
        .await?;
    Ok(match called {
        HostCall::Ran {
            result: Ok((info, stats)),
            fingerprint,
        } => Observation::Probed {
            info,
            fingerprint,
            committed: state.shared.placement.committed(&host_id(host)),
            measurement: stats.map(|s| state.load.sample(&ObjectRef::from_obj(host), s)),
        },
        HostCall::Ran {
            result: Err(e),
            fingerprint,
        } => Observation::Failed(Failure {
            observed_fingerprint: fingerprint,
            ..Failure::from(e)
        }),
        HostCall::Unreachable(failure) => Observation::Failed(failure),
    })
}

async fn reconcile(host: Arc<LibvirtHost>, state: Arc<State>) -> Result<Action, Error> {
    let live: Vec<HostId> = state.store.state().iter().map(|h| host_id(h)).collect();
    state.shared.hosts.prune(&live);
    state.shared.placement.settle(&host_id(&host));
    let observation = observe(&host, &state).await?;
    let current = host.status.clone().unwrap_or_default();
    let now = state.ctx.timestamp();
    let machines = state.machines.state();
    let on_host = OnHost {
        spot: reclaim::candidates(&host, machines.iter().map(AsRef::as_ref)),
        residents: maintenance::residents(&host, machines.iter().map(AsRef::as_ref)),
    };
    let plan = plan(
        &current,
        &host.spec,
        host.metadata.generation,
        &observation,
        &on_host,
        &now,
    );
    write_status(
        &state.ctx,
        host.as_ref(),
        FIELD_MANAGER,
        &current,
        &plan.status,
        Vec::new(),
    )
    .await?;
    if let Some(victim) = &plan.reclaiming {
        report_reclaim(&state.ctx, &host, victim).await;
    }
    // Recorded in status first, so a restart never removes a second one alongside.
    if let Some(resident) = &plan.removing {
        remove_for_maintenance(&state.ctx, &host, resident).await?;
    }
    Ok(Action::requeue(plan.requeue))
}

/// Remove a machine from a host in maintenance: its owner Machine (Cluster API drains the Node
/// and deletes the LibvirtMachine), or the LibvirtMachine itself when it has no owner.
async fn remove_for_maintenance(ctx: &Context, host: &LibvirtHost, resident: &Resident) -> Result<(), Error> {
    let namespace = host.namespace().unwrap_or_default();
    let (deleted, what) = match &resident.owner {
        Some(owner) => {
            let machines: Api<DynamicObject> =
                Api::namespaced_with(ctx.client.clone(), &namespace, &ctx.capi.machine());
            let deleted = machines.delete(owner, &DeleteParams::background()).await.map(|_| ());
            (deleted, format!("Machine {owner}"))
        }
        None => {
            let lvms: Api<LibvirtMachine> = Api::namespaced(ctx.client.clone(), &namespace);
            let deleted = lvms
                .delete(&resident.machine, &DeleteParams::background())
                .await
                .map(|_| ());
            (deleted, format!("LibvirtMachine {}", resident.machine))
        }
    };
    match deleted {
        Ok(()) => {}
        Err(kube::Error::Api(status)) if status.code == 404 => {}
        Err(e) => return Err(ApiError::write("a machine for maintenance")(e).into()),
    }
    // Related to the machine, so each removal is its own Event rather than a repeat.
    let machine = ObjectReference {
        api_version: Some(LibvirtMachine::api_version(&()).into_owned()),
        kind: Some(LibvirtMachine::kind(&()).into_owned()),
        name: Some(resident.machine.clone()),
        namespace: Some(namespace),
        ..ObjectReference::default()
    };
    let event = Event {
        type_: EventType::Normal,
        reason: "MaintenanceRemoving".to_owned(),
        note: Some(format!(
            "removing {what} (LibvirtMachine {}) for maintenance",
            resident.machine
        )),
        action: "Maintenance".to_owned(),
        secondary: Some(machine),
    };
    if let Err(err) = ctx.recorder.publish(&event, &host.object_ref(&())).await {
        tracing::warn!(error = %err, "could not publish the maintenance event");
    }
    Ok(())
}

/// A spot machine named for removal: a count, and an Event on the host that also refers to the
/// ScheduledMachine (so each victim gets its own Event rather than a repeat of the first).
async fn report_reclaim(ctx: &Context, host: &LibvirtHost, victim: &ReclaimVictim) {
    ctx.metrics
        .host_reclaims
        .with_label_values(&[victim.reason.as_str()])
        .inc();
    let scheduled_machine = ObjectReference {
        api_version: Some(ScheduledMachine::api_version(&()).into_owned()),
        kind: Some(ScheduledMachine::kind(&()).into_owned()),
        name: Some(victim.scheduled_machine.clone()),
        namespace: host.namespace(),
        ..ObjectReference::default()
    };
    let event = Event {
        type_: EventType::Warning,
        reason: "Reclaiming".to_owned(),
        note: Some(format!(
            "{}; reclaiming ScheduledMachine {} (LibvirtMachine {}) for the host's owner",
            victim.message, victim.scheduled_machine, victim.machine
        )),
        action: "Reclaim".to_owned(),
        secondary: Some(scheduled_machine),
    };
    if let Err(err) = ctx.recorder.publish(&event, &host.object_ref(&())).await {
        tracing::warn!(error = %err, "could not publish the reclaim event");
    }
}

/// The hosts whose `secretRef` names this Secret.
fn hosts_for_secret(store: &Store<LibvirtHost>, namespace: &str, name: &str) -> Vec<ObjectRef<LibvirtHost>> {
    refs_where(store, |h| {
        h.spec.secret_ref.as_ref().is_some_and(|r| {
            let host_ns = h.namespace().unwrap_or_default();
            r.name == name && r.namespace.as_deref().unwrap_or(&host_ns) == namespace
        })
    })
}

/// Run the controller until `shutdown` is cancelled.
pub async fn run(ctx: Arc<Context>, shared: Shared, readiness: Readiness, shutdown: CancellationToken) {
    let controller = ctx.controller::<LibvirtHost>();
    let store = controller.store();
    let by_secret = store.clone();
    // The machines, for the reclaim policy; their changes also trigger the hosts.
    let machines = ctx.caches.libvirt_machines.store();
    let machine_events = ctx.caches.libvirt_machines.subscribe();
    let controller = controller
        .watches_shared_stream(ctx.caches.secrets.subscribe(), move |secret| {
            hosts_for_secret(
                &by_secret,
                secret.namespace().as_deref().unwrap_or_default(),
                &secret.name_any(),
            )
        })
        // A machine's allocation changes what is available on its host, and its removal may
        // be what the reclaim policy waits for.
        .watches_shared_stream(machine_events, |machine| {
            machine.host_name().map(|host| {
                ObjectRef::<LibvirtHost>::new(host).within(machine.namespace().as_deref().unwrap_or_default())
            })
        })
        .graceful_shutdown_on(shutdown.clone().cancelled_owned());
    let synced = {
        let (store, machines) = (store.clone(), machines.clone());
        async move { crate::reconcile::wait_synced(&store).await && crate::reconcile::wait_synced(&machines).await }
    };
    let state = Arc::new(State {
        ctx: ctx.clone(),
        store,
        machines,
        shared,
        load: LoadSampler::default(),
    });
    crate::reconcile::drive(
        controller,
        crate::reconcile::Readying::new(NAME, synced, readiness, &ctx),
        reconcile,
        state.clone(),
    )
    .await;
    state.shared.hosts.close_all();
}

#[cfg(test)]
mod tests;

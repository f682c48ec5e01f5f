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
//! - **Requeue.** After `healthCheckIntervalSeconds`; a failure retries after
//!   `min(interval, 30 s)`. Secrets are watched (metadata only) and mapped to the hosts that
//!   reference them, so a new or rotated key is picked up at once.

mod load;

use std::{sync::Arc, time::Duration};

use k8s_openapi::{api::core::v1::Secret, apimachinery::pkg::apis::meta::v1::Time};
use kube::{
    ResourceExt,
    api::PartialObjectMeta,
    runtime::{
        controller::{Action, Controller},
        reflector::{ObjectRef, Store},
        watcher,
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
            HostCapacity, HostCondition, HostLoad, HostReason, LibvirtHost, LibvirtHostSpec, LibvirtHostStatus,
        },
        libvirt_machine::LibvirtMachine,
    },
    app::health::Readiness,
    libvirt::hypervisor::HostInfo,
};
use load::LoadSampler;

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
#[derive(Clone, Debug, PartialEq, Eq)]
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
        load: Option<HostLoad>,
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
        available_vcpus: i32::try_from(offered.vcpus.saturating_sub(committed.vcpus).max(0)).unwrap_or(i32::MAX),
        available_memory_mb: offered.memory_mib.saturating_sub(committed.memory_mib).max(0),
    }
}

/// The health-check interval of a spec (the schema keeps it ≥ 30 s; at least 1 s here).
#[must_use]
pub fn interval(spec: &LibvirtHostSpec) -> Duration {
    Duration::from_secs(u64::try_from(spec.health_check_interval_seconds).unwrap_or(0).max(1))
}

/// Decide the status and the next check from an observation. Pure.
#[must_use]
pub fn plan(
    current: &LibvirtHostStatus,
    spec: &LibvirtHostSpec,
    generation: Option<i64>,
    observation: &Observation,
    now: &Time,
) -> Plan {
    let interval = interval(spec);
    let mut status = current.clone();
    let (condition_status, reason, message, requeue) = match observation {
        Observation::Probed {
            info,
            fingerprint,
            committed,
            load,
        } => {
            status.ready = true;
            status.capacity = Some(capacity(info, spec, *committed));
            status.load.clone_from(load);
            status.libvirt_version = Some(info.libvirt_version.clone());
            status.kvm_available = Some(info.kvm_available);
            if fingerprint.is_some() {
                status.observed_host_key_fingerprint.clone_from(fingerprint);
            }
            let message = format!(
                "connected to libvirt {} ({} driver, {} vCPUs, {} MiB)",
                info.libvirt_version, info.driver, info.cpus, info.memory_mib
            );
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
    let desired = [
        DesiredCondition::new(HostCondition::Reachable, condition_status, reason, message.clone()),
        DesiredCondition::new(HostCondition::Ready, condition_status, reason, message),
    ];
    status.conditions = condition::merge_all(&current.conditions, &desired, now, generation);
    status.observed_generation = generation;
    let stale = current.last_checked.as_ref().is_none_or(|last| {
        let age_ms = now.0.as_millisecond().saturating_sub(last.0.as_millisecond());
        u128::try_from(age_ms).unwrap_or(0) >= interval.as_millis() / 2
    });
    if status != *current || stale {
        status.last_checked = Some(now.clone());
    }
    Plan { status, requeue }
}

/// The connection cache and admission state shared with the LibvirtMachine controller.
pub struct Shared {
    /// One connection per host.
    pub hosts: Arc<HostConnections>,
    /// What machines have committed on each host.
    pub placement: Arc<Placement>,
}

/// Controller state: the shared context, the host store and the shared caches.
struct State {
    ctx: Arc<Context>,
    store: Store<LibvirtHost>,
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
            load: stats.map(|s| state.load.load(&ObjectRef::from_obj(host), s)),
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
    let plan = plan(&current, &host.spec, host.metadata.generation, &observation, &now);
    write_status(
        &state.ctx,
        host.as_ref(),
        FIELD_MANAGER,
        &current,
        &plan.status,
        Vec::new(),
    )
    .await?;
    Ok(Action::requeue(plan.requeue))
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
    let secrets = ctx.watched_api::<PartialObjectMeta<Secret>>();
    let controller = Controller::new(ctx.watched_api::<LibvirtHost>(), watcher::Config::default());
    let store = controller.store();
    let by_secret = store.clone();
    let controller = controller
        .watches(secrets, watcher::Config::default(), move |secret| {
            hosts_for_secret(
                &by_secret,
                secret.namespace().as_deref().unwrap_or_default(),
                &secret.name_any(),
            )
        })
        // A machine's allocation changes what is available on its host.
        .watches(
            ctx.watched_api::<LibvirtMachine>(),
            watcher::Config::default(),
            |machine| {
                Some(
                    ObjectRef::<LibvirtHost>::new(&machine.spec.host_ref.name)
                        .within(machine.namespace().as_deref().unwrap_or_default()),
                )
            },
        )
        .graceful_shutdown_on(shutdown.clone().cancelled_owned());
    let synced = {
        let store = store.clone();
        async move { crate::reconcile::wait_synced(&store).await }
    };
    let state = Arc::new(State {
        ctx: ctx.clone(),
        store,
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

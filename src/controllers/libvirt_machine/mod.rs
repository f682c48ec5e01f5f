//! LibvirtMachine controller: one worker VM per object, per the Cluster API InfraMachine contract.
//!
//! A pass is observe (`observe.rs`: the reads) → decide (`decide.rs`: pure, a `Step`) → act
//! (`act.rs`: the writes and the host-side steps of [`provision`], off the reactor).
//!
//! Provisioning, each step observed before it acts:
//! owner Machine → Cluster not paused → finalizer → `spec.providerID` → bootstrap data Secret
//! named by the Machine → host exists and is ready → capacity admitted
//! ([`crate::reconcile::placement`]) → connection → Ignition rendered for this VM → root disk,
//! Ignition volume, domain defined and started → `status.ready`, `initialization.provisioned`,
//! addresses.
//!
//! The step a machine waits at is the `Ready` condition's reason ([`crate::api::libvirt_machine::Reason`]): `WaitingForMachineOwner`,
//! `MachineNotFound`, `ClusterNotFound`, `WaitingForBootstrapData`, `BootstrapDataNotFound`,
//! `InvalidBootstrapData` (or the Ignition library's reason), `HostNotFound`, `WaitingForHost`,
//! `WaitingForCapacity`, a connection failure (`HostKeyMismatch`, `ConnectionFailed`, …),
//! `StoragePoolNotFound`, `StoragePoolInactive`, `StoragePoolFull`, `BaseImageNotFound`, `RootDiskTooSmall`,
//! `InvalidSpec`, `DomainNameConflict`, `LibvirtError`; then `DomainRunning`, or after
//! provisioning `DomainMissing`, `DomainNotRunning`, `DomainShutDown` and `HostUnreachable`;
//! while deleting `Deleting`, `ShuttingDown`. `Paused` has its own condition. A new machine
//! writes no status while it waits for its owner, bootstrap data or host in its first 10 s: its
//! Machine and bootstrap config are created with it, so those waits are usually over by then.
//!
//! Once provisioned the domain is checked every `--domain-check-interval-seconds` ([`watch`]): a
//! stopped domain is started again, announced by why it stopped (Warning Event `DomainShutDown`
//! when its guest powered it off, `DomainCrashed`, otherwise `DomainRestarted`), except that a
//! guest shutdown while the owner Machine is being deleted (read live, not from the cache) is
//! left off (`DomainShutDown`); a
//! vanished one is reported (`DomainMissing`, Warning Event) and left to a MachineHealthCheck to
//! replace; `ready` stays true, as the contract wants it latched.
//!
//! Spec changes after provisioning do not touch the running VM: disks, size, network and
//! firmware take effect when the Machine is replaced. `nodeLabels` and `nodeAnnotations` stay
//! editable.
//!
//! Deletion ([`deletion`]): power off as `spec.shutdown` says ([`power_off`]: by default ACPI,
//! then a wait of up to 60 s as requeues, then destroy; `ShuttingDown` meanwhile), undefine with
//! NVRAM, delete the recorded volumes, prove nothing is left, release the allocation, drop the
//! finalizer.

mod act;
mod admission;
mod decide;
mod deletion;
mod ipam;
mod observe;
pub mod plan;
mod power_off;
pub mod provision;
mod status;
mod watch;

use std::{sync::Arc, time::Duration};

use kube::{
    Resource, ResourceExt,
    api::Api,
    runtime::{
        controller::{Action, Controller},
        reflector::{ObjectRef, Store},
    },
};
use tokio_util::sync::CancellationToken;

use self::status::{Outcome, current};
use crate::{
    api::{
        CLUSTER_NAME_LABEL, capi::DecodeError, capi::MachineView, libvirt_host::LibvirtHost,
        libvirt_machine::LibvirtMachine,
    },
    app::health::Readiness,
    reconcile::{
        ApiError, Context, drive_cached,
        host_connections::{HostConnections, SecretReadError},
        in_namespace,
        own_writes::OwnWrites,
        placement::Placement,
        refs_where, write_status,
    },
};

/// Controller name in metrics and logs.
pub const NAME: &str = "libvirtmachine";
const FIELD_MANAGER: &str = "caplv-manager/libvirtmachine";
/// Finalizer that keeps the object until its VM and disks are gone.
pub const FINALIZER: &str = "libvirtmachine.infrastructure.cluster.x-k8s.io";
/// Bootstrap data Secret key (CAPI bootstrap contract).
pub const BOOTSTRAP_DATA_KEY: &str = "value";
/// How long to wait before retrying a host-side failure.
const HOST_RETRY: Duration = Duration::from_secs(30);
/// Fallback recheck while queued for capacity (host status changes usually come first).
const CAPACITY_RECHECK: Duration = Duration::from_secs(60);

/// Kubernetes API failures of one reconcile (host trouble is a condition, not an error).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A read, a write (a conflict is usually CAPI core adding its owner reference first), or
    /// a CAPI object of an unexpected shape.
    #[error(transparent)]
    Api(#[from] ApiError),
    /// Reading the host's SSH key Secret failed.
    #[error(transparent)]
    HostSecret(#[from] SecretReadError),
    /// The object has no uid (it was not read from the API server).
    #[error("the object has no uid")]
    NoUid,
    /// Admission recorded no allocation (a bug: admission always records one).
    #[error("{0}")]
    Task(String),
}

impl From<DecodeError> for Error {
    fn from(e: DecodeError) -> Self {
        Self::Api(e.into())
    }
}

impl crate::reconcile::ReconcileError for Error {
    fn reason(&self) -> &'static str {
        match self {
            Self::Api(e) => e.reason(),
            Self::HostSecret(_) => "GetSecret",
            Self::NoUid => "NoUid",
            Self::Task(_) => "Task",
        }
    }

    fn is_conflict(&self) -> bool {
        matches!(self, Self::Api(e) if e.is_conflict())
    }
}

/// The connection cache and admission state shared with the LibvirtHost controller.
pub struct Shared {
    /// One connection per host.
    pub hosts: Arc<HostConnections>,
    /// What machines have committed on each host.
    pub placement: Arc<Placement>,
}

/// Controller state.
struct State {
    ctx: Arc<Context>,
    shared: Shared,
    /// Our writes the watch has not brought back yet.
    own: OwnWrites<LibvirtMachine>,
}

fn api(ctx: &Context, machine: &LibvirtMachine) -> Api<LibvirtMachine> {
    Api::namespaced(ctx.client.clone(), &machine.namespace().unwrap_or_default())
}

/// Observe, decide, act; then write the status and publish the Events.
async fn reconcile(machine: Arc<LibvirtMachine>, state: Arc<State>) -> Result<Action, Error> {
    let machine = state.own.fresh(machine);
    let outcome = if machine.metadata.deletion_timestamp.is_some() {
        match deletion::delete(&machine, &state).await? {
            Some(outcome) => outcome,
            None => return Ok(Action::await_change()),
        }
    } else {
        let id = plan::identity(&machine).ok_or(Error::NoUid)?;
        let observed = observe::observe(&machine, &state.ctx).await?;
        let decision = decide::decide(&machine, &id, observed, state.ctx.settings.domain_check_interval);
        act::act(&machine, &state, &id, decision).await?
    };
    publish(&machine, &state, outcome).await
}

/// Count what happened, then write the status when it changed and publish the Events.
async fn publish(machine: &LibvirtMachine, state: &State, mut outcome: Outcome) -> Result<Action, Error> {
    // A machine admitted before admissions recorded the host gets it from its hostRef.
    if outcome.status.allocated.is_some() && outcome.status.host_ref.is_none() {
        outcome.status.host_ref.clone_from(&machine.spec.host_ref);
    }
    for label in &outcome.counted {
        state.ctx.metrics.machine_events.with_label_values(&[label]).inc();
    }
    let before = current(machine);
    let events = outcome
        .events
        .into_iter()
        .map(|(t, r, n)| (t, r.to_owned(), n))
        .collect();
    if let Some(written) = write_status(&state.ctx, machine, FIELD_MANAGER, &before, &outcome.status, events).await? {
        state.own.wrote(machine, written);
    }
    Ok(outcome.action)
}

/// The machines on `host`, and those of a host pool it is in still waiting for one.
fn machines_on_host(store: &Store<LibvirtMachine>, host: &LibvirtHost) -> Vec<ObjectRef<LibvirtMachine>> {
    let (namespace, name) = (host.namespace().unwrap_or_default(), host.name_any());
    refs_where(store, |m| {
        in_namespace(m, &namespace)
            && (m.host_name() == Some(name.as_str()) || crate::reconcile::host_pool::queues_on(m, host))
    })
}

/// The machines of cluster `namespace/name`.
fn machines_of_cluster(store: &Store<LibvirtMachine>, namespace: &str, name: &str) -> Vec<ObjectRef<LibvirtMachine>> {
    refs_where(store, |m| {
        m.labels().get(CLUSTER_NAME_LABEL).map(String::as_str) == Some(name) && in_namespace(m, namespace)
    })
}

/// Run the controller until `shutdown` is cancelled.
pub async fn run(
    ctx: Arc<Context>,
    controller: Controller<LibvirtMachine>,
    shared: Shared,
    readiness: Readiness,
    shutdown: CancellationToken,
) {
    let capi = ctx.capi;
    let (machines, clusters) = (ctx.caches.machines.subscribe(), ctx.caches.clusters.subscribe());
    let store = controller.store();
    let (by_host, by_cluster) = (store.clone(), store.clone());
    let controller = controller
        // The Machine names the bootstrap data; its changes can unblock provisioning.
        .watches_shared_stream_with(
            machines,
            move |m| {
                let namespace = m.namespace().unwrap_or_default();
                MachineView::decode(&m, capi)
                    .ok()
                    .map(|v| v.infrastructure_ref)
                    .filter(|r| r.group == LibvirtMachine::group(&()) && r.kind == LibvirtMachine::kind(&()))
                    .map(|r| ObjectRef::<LibvirtMachine>::new(&r.name).within(&namespace))
            },
            capi.machine(),
        )
        // A host turning ready or freeing capacity unblocks its machines.
        .watches_shared_stream(ctx.caches.libvirt_hosts.subscribe(), move |h| {
            machines_on_host(&by_host, &h)
        })
        // Unpausing a Cluster resumes its machines.
        .watches_shared_stream_with(
            clusters,
            move |c| machines_of_cluster(&by_cluster, c.namespace().as_deref().unwrap_or_default(), &c.name_any()),
            capi.cluster(),
        )
        .graceful_shutdown_on(shutdown.clone().cancelled_owned());
    let state = Arc::new(State {
        ctx: ctx.clone(),
        shared,
        own: OwnWrites::default(),
    });
    drive_cached(controller, NAME, readiness, reconcile, state, &ctx).await;
}

//! LibvirtMachine controller: one worker VM per object, per the Cluster API InfraMachine contract.
//!
//! Provisioning, each step observed before it acts (see [`provision`] for the host side):
//! owner Machine → Cluster not paused → finalizer → `spec.providerID` → bootstrap data Secret
//! named by the Machine → host exists and is ready → capacity admitted ([`crate::reconcile::placement`]) →
//! connection → Ignition rendered for this VM → root disk, Ignition volume, domain defined and
//! started → `status.ready`, `initialization.provisioned`, addresses.
//!
//! The step a machine waits at is the `Ready` condition's reason: `WaitingForMachineOwner`,
//! `MachineNotFound`, `ClusterNotFound`, `WaitingForBootstrapData`, `BootstrapDataNotFound`,
//! `InvalidBootstrapData` (or the Ignition library's reason), `HostNotFound`, `WaitingForHost`,
//! `WaitingForCapacity`, a connection failure (`HostKeyMismatch`, `ConnectionFailed`, …),
//! `StoragePoolNotFound`, `StoragePoolInactive`, `BaseImageNotFound`, `RootDiskTooSmall`,
//! `InvalidSpec`, `DomainNameConflict`, `LibvirtError`; then `DomainRunning`, or after
//! provisioning `DomainMissing`, `DomainNotRunning` and `HostUnreachable`. `Paused` has its own
//! condition.
//!
//! Once provisioned the domain is checked every `--domain-check-interval-seconds`: a shut-off or
//! crashed domain is started again (Warning Event `DomainRestarted`), a vanished one is reported
//! (`DomainMissing`, Warning Event) and left to a MachineHealthCheck to replace; `ready` stays
//! true, as the contract wants it latched.
//!
//! Spec changes after provisioning do not touch the running VM: disks, size, network and
//! firmware take effect when the Machine is replaced. `nodeLabels` and `nodeAnnotations` stay
//! editable.
//!
//! Deletion ([`deletion`]): destroy, undefine with NVRAM, delete the recorded volumes, prove
//! nothing is left, release the allocation, drop the finalizer.

mod admission;
mod bootstrap;
mod deletion;
pub mod plan;
pub mod provision;
mod watch;

use std::{sync::Arc, time::Duration};

use k8s_openapi::{
    api::core::v1::ObjectReference,
    apimachinery::pkg::apis::meta::v1::{OwnerReference, Time},
    jiff::Timestamp,
};
use kube::{
    Resource, ResourceExt,
    api::{Api, DynamicObject, Patch, PatchParams},
    runtime::{
        controller::{Action, Controller},
        events::EventType,
        reflector::{ObjectRef, Store},
        watcher,
    },
};
use tokio_util::sync::CancellationToken;

use crate::reconcile::{
    Context, apply_status,
    host_connections::{HostConnections, SecretReadError, host_id},
    placement::Placement,
    publish_event,
};
use crate::{
    api::{
        CLUSTER_NAME_LABEL, PAUSED_ANNOTATION,
        capi::{ClusterView, DecodeError, GROUP as CAPI_GROUP, MachineView},
        common::InfrastructureInitialization,
        condition::{self, DesiredCondition, Status},
        libvirt_host::LibvirtHost,
        libvirt_machine::{AllocatedResources, LibvirtMachine, LibvirtMachineStatus},
    },
    app::health::Readiness,
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
    /// A read failed.
    #[error("cannot read {what}: {source}")]
    Get {
        /// What was read.
        what: String,
        /// API error.
        #[source]
        source: kube::Error,
    },
    /// A write failed.
    #[error("cannot write {what}: {source}")]
    Patch {
        /// What was written.
        what: &'static str,
        /// API error.
        #[source]
        source: kube::Error,
    },
    /// A CAPI object has an unexpected shape.
    #[error(transparent)]
    Decode(#[from] DecodeError),
    /// Reading the host's SSH key Secret failed.
    #[error(transparent)]
    HostSecret(#[from] SecretReadError),
    /// The object has no uid (it was not read from the API server).
    #[error("the object has no uid")]
    NoUid,
    /// A blocking task panicked or was cancelled.
    #[error("libvirt task failed: {0}")]
    Task(String),
}

impl Error {
    /// Whether a write lost an optimistic-concurrency race (HTTP 409).
    #[must_use]
    pub fn is_conflict(&self) -> bool {
        matches!(self, Self::Patch { source: kube::Error::Api(e), .. } if e.code == 409)
    }

    /// Bounded reason for metrics and logs.
    #[must_use]
    pub const fn reason(&self) -> &'static str {
        match self {
            Self::Get { .. } => "Get",
            Self::Patch { .. } => "Patch",
            Self::Decode(_) => "Decode",
            Self::HostSecret(_) => "GetSecret",
            Self::NoUid => "NoUid",
            Self::Task(_) => "Task",
        }
    }
}

impl crate::reconcile::ReconcileError for Error {
    fn reason(&self) -> &'static str {
        Error::reason(self)
    }

    // Usually CAPI core adding its owner reference first.
    fn is_conflict(&self) -> bool {
        Error::is_conflict(self)
    }
}

fn get_err(what: impl Into<String>) -> impl FnOnce(kube::Error) -> Error {
    let what = what.into();
    move |source| Error::Get { what, source }
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
}

/// A status to write, the Events to publish with it and when to look again.
struct Outcome {
    status: LibvirtMachineStatus,
    events: Vec<(EventType, &'static str, String)>,
    action: Action,
}

/// Set `Ready` (and clear `Paused`) on `status`.
fn with_ready(
    mut status: LibvirtMachineStatus,
    machine: &LibvirtMachine,
    ready: Status,
    reason: &'static str,
    message: impl Into<String>,
) -> LibvirtMachineStatus {
    let now = Time(Timestamp::now());
    let desired = [
        DesiredCondition::new(condition::READY, ready, reason, message),
        DesiredCondition::new(condition::PAUSED, Status::False, "NotPaused", ""),
    ];
    status.conditions = condition::merge_all(&status.conditions, &desired, &now, machine.metadata.generation);
    status.observed_generation = machine.metadata.generation;
    status
}

fn waiting(machine: &LibvirtMachine, reason: &'static str, message: impl Into<String>, action: Action) -> Outcome {
    Outcome {
        status: with_ready(current(machine), machine, Status::False, reason, message),
        events: Vec::new(),
        action,
    }
}

fn current(machine: &LibvirtMachine) -> LibvirtMachineStatus {
    machine.status.clone().unwrap_or_default()
}

fn api(ctx: &Context, machine: &LibvirtMachine) -> Api<LibvirtMachine> {
    Api::namespaced(ctx.client.clone(), &machine.namespace().unwrap_or_default())
}

/// The LibvirtHost `machine` names, if it exists.
async fn host_of(machine: &LibvirtMachine, ctx: &Context) -> Result<Option<LibvirtHost>, Error> {
    let name = &machine.spec.host_ref.name;
    Api::<LibvirtHost>::namespaced(ctx.client.clone(), &machine.namespace().unwrap_or_default())
        .get_opt(name)
        .await
        .map_err(get_err(format!("LibvirtHost {name}")))
}

/// The controller owner reference CAPI core sets from the Machine.
fn owner_machine(machine: &LibvirtMachine) -> Option<&OwnerReference> {
    machine
        .owner_references()
        .iter()
        .find(|r| r.kind == "Machine" && r.api_version.split_once('/').is_some_and(|(g, _)| g == CAPI_GROUP))
}

async fn reconcile(machine: Arc<LibvirtMachine>, state: Arc<State>) -> Result<Action, Error> {
    apply(&machine, &state).await
}

async fn apply(machine: &LibvirtMachine, state: &State) -> Result<Action, Error> {
    let outcome = if machine.metadata.deletion_timestamp.is_some() {
        match deletion::delete(machine, state).await? {
            Some(outcome) => outcome,
            None => return Ok(Action::await_change()),
        }
    } else {
        provision_or_watch(machine, state).await?
    };
    publish(machine, state, outcome).await
}

/// Write the status when it changed and publish the Events.
async fn publish(machine: &LibvirtMachine, state: &State, outcome: Outcome) -> Result<Action, Error> {
    let before = current(machine);
    let mut events: Vec<(EventType, String, String)> = outcome
        .events
        .into_iter()
        .map(|(t, r, n)| (t, r.to_owned(), n))
        .collect();
    if outcome.status != before {
        apply_status(
            &api(&state.ctx, machine),
            &machine.name_any(),
            FIELD_MANAGER,
            &outcome.status,
        )
        .await
        .map_err(|source| Error::Patch { what: "status", source })?;
        events.extend(crate::reconcile::condition_events(
            &before.conditions,
            &outcome.status.conditions,
        ));
    }
    let reference: ObjectReference = machine.object_ref(&());
    for (type_, reason, note) in events {
        publish_event(&state.ctx.recorder, &reference, type_, &reason, "Reconcile", note).await;
    }
    Ok(outcome.action)
}

async fn provision_or_watch(machine: &LibvirtMachine, state: &State) -> Result<Outcome, Error> {
    let ctx = &state.ctx;
    let namespace = machine.namespace().unwrap_or_default();
    let id = plan::identity(machine).ok_or(Error::NoUid)?;
    let Some(owner) = owner_machine(machine) else {
        return Ok(waiting(
            machine,
            "WaitingForMachineOwner",
            "waiting for Cluster API to set a Machine as owner",
            Action::await_change(),
        ));
    };
    let machines: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), &namespace, &ctx.capi.machine());
    let Some(capi_machine) = machines
        .get_opt(&owner.name)
        .await
        .map_err(get_err(format!("Machine {}", owner.name)))?
    else {
        return Ok(waiting(
            machine,
            "MachineNotFound",
            format!("owner Machine {:?} does not exist", owner.name),
            Action::await_change(),
        ));
    };
    let capi_machine = MachineView::decode(&capi_machine, ctx.capi)?;
    let clusters: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), &namespace, &ctx.capi.cluster());
    let Some(cluster) = clusters
        .get_opt(&capi_machine.cluster_name)
        .await
        .map_err(get_err(format!("Cluster {}", capi_machine.cluster_name)))?
    else {
        return Ok(waiting(
            machine,
            "ClusterNotFound",
            format!("Cluster {:?} does not exist", capi_machine.cluster_name),
            Action::await_change(),
        ));
    };
    let cluster = ClusterView::decode(&cluster, ctx.capi)?;
    if cluster.paused || machine.annotations().contains_key(PAUSED_ANNOTATION) {
        let mut status = current(machine);
        let now = Time(Timestamp::now());
        status.conditions = condition::merge_all(
            &status.conditions,
            &[DesiredCondition::new(
                condition::PAUSED,
                Status::True,
                "Paused",
                "reconciliation is paused by the Cluster or the cluster.x-k8s.io/paused annotation",
            )],
            &now,
            machine.metadata.generation,
        );
        return Ok(Outcome {
            status,
            events: Vec::new(),
            action: Action::await_change(),
        });
    }
    ensure_finalizer_and_provider_id(machine, ctx, &id.provider_id).await?;
    let status = current(machine);
    if status.ready {
        return watch::check(machine, state, &id).await;
    }
    let Some(data_secret) = capi_machine.data_secret_name.clone() else {
        return Ok(waiting(
            machine,
            "WaitingForBootstrapData",
            format!(
                "waiting for Machine {:?} to name its bootstrap data Secret",
                capi_machine.name
            ),
            Action::await_change(),
        ));
    };
    let host_name = &machine.spec.host_ref.name;
    let Some(host) = host_of(machine, ctx).await? else {
        return Ok(waiting(
            machine,
            "HostNotFound",
            format!("LibvirtHost {host_name:?} does not exist"),
            Action::await_change(),
        ));
    };
    if !host.status.as_ref().is_some_and(|s| s.ready) {
        return Ok(waiting(
            machine,
            "WaitingForHost",
            format!("LibvirtHost {host_name:?} is not ready"),
            Action::await_change(),
        ));
    }
    // Checked before admission, so a machine that cannot boot holds no capacity.
    let root = match plan::root_disk(&id, &machine.spec) {
        Ok(r) => r,
        Err(e) => return Ok(waiting(machine, "InvalidSpec", e.to_string(), Action::await_change())),
    };
    let payload = match bootstrap::payload(machine, ctx, &data_secret, &id).await? {
        Ok(p) => p,
        Err(outcome) => return Ok(outcome),
    };
    // After admission, carry the written status (allocation, artifacts) into every later write.
    let admitted;
    let machine = if status.allocated.is_some() {
        machine
    } else {
        match admission::admit(machine, state, &host, &id).await? {
            Ok(written) => {
                let mut updated = machine.clone();
                updated.status = Some(written);
                admitted = updated;
                &admitted
            }
            Err(outcome) => return Ok(outcome),
        }
    };
    let Some(size) = current(machine).allocated else {
        return Err(Error::Task("admission recorded no allocation".to_owned()));
    };
    let conn = match state.shared.hosts.get(&ctx.client, &host).await? {
        Ok(c) => c,
        Err(f) => return Ok(waiting(machine, f.reason, f.message, Action::requeue(HOST_RETRY))),
    };
    let domain = match plan::domain(&id, machine, &host, size) {
        Ok(p) => p,
        Err(e) => return Ok(waiting(machine, "InvalidSpec", e.to_string(), Action::await_change())),
    };
    let hv = conn.hypervisor();
    let started = std::time::Instant::now();
    let result = tokio::task::spawn_blocking(move || {
        provision::provision(
            hv.as_ref(),
            &provision::Request {
                root: &root,
                domain: &domain,
                ignition: &payload,
            },
        )
    })
    .await
    .map_err(|e| Error::Task(e.to_string()))?;
    ctx.metrics.provision_duration.observe(started.elapsed().as_secs_f64());
    match result {
        Ok(done) => Ok(provisioned(machine, ctx, &id, &host, size, &done)),
        Err(e) => {
            if e.is_transient() {
                state.shared.hosts.forget(&host_id(&host)).await;
            }
            let retry = if e.is_transient() {
                ctx.settings.error_requeue.max(Duration::from_secs(1))
            } else {
                HOST_RETRY
            };
            Ok(waiting(machine, e.reason(), e.to_string(), Action::requeue(retry)))
        }
    }
}

/// The status of a machine whose domain now runs, with the Events to publish.
fn provisioned(
    machine: &LibvirtMachine,
    ctx: &Context,
    id: &plan::Identity,
    host: &LibvirtHost,
    size: AllocatedResources,
    done: &provision::Provisioned,
) -> Outcome {
    ctx.metrics.machine_events.with_label_values(&["provisioned"]).inc();
    let mut status = current(machine);
    status.ready = true;
    if status.provisioned_at.is_none() {
        status.provisioned_at = Some(Time(Timestamp::now()));
    }
    status.initialization = Some(InfrastructureInitialization {
        provisioned: Some(true),
    });
    status.addresses = plan::addresses(id, &machine.spec);
    status.node_name = Some(id.node_name.clone());
    status.domain_uuid = Some(id.uuid.hyphenated().to_string());
    status.domain_state = Some(done.domain.state.as_str().to_owned());
    status.allocated = Some(size);
    status.managed_artifacts = Some(plan::artifacts(id, &machine.spec, host));
    let message = format!(
        "domain {} {} on {} ({} vCPUs, {} MiB)",
        id.node_name,
        done.domain.state.as_str(),
        host.name_any(),
        size.vcpus,
        size.memory_mb
    );
    let mut events = vec![(EventType::Normal, "Provisioned", message.clone())];
    if done.started_now && !done.defined_now {
        ctx.metrics.machine_events.with_label_values(&["restarted"]).inc();
        events.push((
            EventType::Warning,
            "DomainRestarted",
            format!(
                "domain {} was defined but not running and has been started",
                id.node_name
            ),
        ));
    }
    Outcome {
        status: with_ready(status, machine, Status::True, "DomainRunning", message),
        events,
        action: Action::requeue(ctx.settings.domain_check_interval),
    }
}

/// Add the finalizer and set `spec.providerID`, each only when missing (one patch at most).
async fn ensure_finalizer_and_provider_id(
    machine: &LibvirtMachine,
    ctx: &Context,
    provider_id: &str,
) -> Result<(), Error> {
    let has_finalizer = machine.finalizers().iter().any(|f| f == FINALIZER);
    let has_id = machine.spec.provider_id.as_deref() == Some(provider_id);
    if has_finalizer && has_id {
        return Ok(());
    }
    let mut finalizers = machine.finalizers().to_vec();
    if !has_finalizer {
        finalizers.push(FINALIZER.to_owned());
    }
    let patch = serde_json::json!({
        "metadata": {"finalizers": finalizers, "resourceVersion": machine.resource_version()},
        "spec": {"providerID": provider_id},
    });
    api(ctx, machine)
        .patch(&machine.name_any(), &PatchParams::default(), &Patch::Merge(patch))
        .await
        .map_err(|source| Error::Patch {
            what: "finalizer and providerID",
            source,
        })?;
    Ok(())
}

/// The machines on host `namespace/name`.
fn machines_on_host(store: &Store<LibvirtMachine>, namespace: &str, name: &str) -> Vec<ObjectRef<LibvirtMachine>> {
    store
        .state()
        .iter()
        .filter(|m| m.spec.host_ref.name == name && m.namespace().as_deref() == Some(namespace))
        .map(|m| ObjectRef::from_obj(m.as_ref()))
        .collect()
}

/// The machines of cluster `namespace/name`.
fn machines_of_cluster(store: &Store<LibvirtMachine>, namespace: &str, name: &str) -> Vec<ObjectRef<LibvirtMachine>> {
    store
        .state()
        .iter()
        .filter(|m| {
            m.labels().get(CLUSTER_NAME_LABEL).map(String::as_str) == Some(name)
                && m.namespace().as_deref() == Some(namespace)
        })
        .map(|m| ObjectRef::from_obj(m.as_ref()))
        .collect()
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
    let (machines, clusters): (Api<DynamicObject>, Api<DynamicObject>) = match &ctx.settings.watch_namespace {
        Some(ns) => (
            Api::namespaced_with(ctx.client.clone(), ns, &capi.machine()),
            Api::namespaced_with(ctx.client.clone(), ns, &capi.cluster()),
        ),
        None => (
            Api::all_with(ctx.client.clone(), &capi.machine()),
            Api::all_with(ctx.client.clone(), &capi.cluster()),
        ),
    };
    let store = controller.store();
    let (by_host, by_cluster) = (store.clone(), store.clone());
    let controller = controller
        // The Machine names the bootstrap data; its changes can unblock provisioning.
        .watches_with(machines, capi.machine(), watcher::Config::default(), move |m| {
            let namespace = m.namespace().unwrap_or_default();
            MachineView::decode(&m, capi)
                .ok()
                .map(|v| v.infrastructure_ref)
                .filter(|r| r.group == LibvirtMachine::group(&()) && r.kind == LibvirtMachine::kind(&()))
                .map(|r| ObjectRef::<LibvirtMachine>::new(&r.name).within(&namespace))
        })
        // A host turning ready or freeing capacity unblocks its machines.
        .watches(ctx.watched_api::<LibvirtHost>(), watcher::Config::default(), move |h| {
            machines_on_host(&by_host, h.namespace().as_deref().unwrap_or_default(), &h.name_any())
        })
        // Unpausing a Cluster resumes its machines.
        .watches_with(clusters, capi.cluster(), watcher::Config::default(), move |c| {
            machines_of_cluster(&by_cluster, c.namespace().as_deref().unwrap_or_default(), &c.name_any())
        })
        .graceful_shutdown_on(shutdown.clone().cancelled_owned());
    let synced = async move { crate::reconcile::wait_synced(&store).await };
    let state = Arc::new(State {
        ctx: ctx.clone(),
        shared,
    });
    crate::reconcile::drive(
        controller,
        crate::reconcile::Readying::new(NAME, synced, readiness, &ctx),
        reconcile,
        state,
    )
    .await;
}

//! ScheduledMachine controller (5-Spot): a CAPI Machine, with its bootstrap and infrastructure
//! objects, that exists only while a schedule window is open.
//!
//! `finalizer → observe (spec validity, schedule at the injected clock, our objects, the Node)
//! → decide (pure state machine, see [`plan`]) → act (one idempotent write) → status (only when
//! changed)`. Reconciles are triggered by the ScheduledMachine, by our Machines (label
//! `5spot.finos.org/scheduled-machine`), by their Nodes, and by a requeue at the next schedule
//! edge or drain deadline; nothing polls.

mod act;
mod expectations;
mod gate;
pub mod objects;
mod observe;
pub mod overrides;
pub mod plan;
pub mod reclaim;
pub mod taints;
mod window;

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, PoisonError},
    time::Duration,
};

use kube::{
    Api, Resource, ResourceExt,
    api::DynamicObject,
    runtime::{
        controller::Action as Requeue,
        events::EventType,
        reflector::{ObjectRef, Store},
    },
};
use tokio_util::sync::CancellationToken;

use self::plan::{Action, Decision, decide};
use crate::reconcile::{ApiError, Context, annotations, apply_status, finalizer, publish_event, wait_synced};
use crate::{
    api::{
        LibvirtHost, ScheduledMachine,
        capi::{DecodeError, MachineView},
        scheduled_machine::{Phase, ScheduledMachineStatus},
    },
    app::health::Readiness,
    schedule::ScheduleError,
};

/// Controller name in metrics and logs.
pub const NAME: &str = "scheduledmachine";
const FIELD_MANAGER: &str = "caplv-manager/scheduledmachine";
/// Finalizer that keeps a ScheduledMachine until its Machine is removed gracefully.
pub const FINALIZER: &str = "5spot.finos.org/scheduled-machine";
/// Annotation on a Node we cordoned, naming the ScheduledMachine, so only we uncordon it.
pub const CORDONED_BY_ANNOTATION: &str = "5spot.finos.org/cordoned-by";

/// Failures of one reconcile; the variants name the action that failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Reading, changing or deleting an object failed.
    #[error(transparent)]
    Api(#[from] ApiError),
    /// Creating an object failed (a 409 here is an existing object, not a lost race).
    #[error("cannot create {what}: {source}")]
    Create {
        /// What was created.
        what: String,
        /// API error.
        #[source]
        source: kube::Error,
    },
    /// An object with our name exists but is not ours.
    #[error("{0:?} exists and was not created by this ScheduledMachine")]
    NameConflict(String),
    /// A kind named in the spec is not served.
    #[error(transparent)]
    Kind(#[from] crate::reconcile::kinds::Error),
    /// A template did not form a valid object.
    #[error("cannot build an object from the spec: {0}")]
    Build(#[source] serde_json::Error),
    /// The Machine has an unexpected shape.
    #[error(transparent)]
    Decode(#[from] DecodeError),
    /// A duration in the spec is malformed (normally caught before acting).
    #[error(transparent)]
    Schedule(#[from] ScheduleError),
}

impl Error {
    /// Bounded reason for metrics, events and logs.
    #[must_use]
    pub const fn reason(&self) -> &'static str {
        match self {
            Self::Api(e) => e.reason(),
            Self::Create { .. } => "CreateFailed",
            Self::NameConflict(_) => "NameConflict",
            Self::Kind(_) => "KindNotServed",
            Self::Build(_) => "InvalidTemplate",
            Self::Decode(_) => "DecodeMachine",
            Self::Schedule(_) => "InvalidDuration",
        }
    }
}

impl crate::reconcile::ReconcileError for Error {
    fn reason(&self) -> &'static str {
        Error::reason(self)
    }

    fn is_conflict(&self) -> bool {
        matches!(self, Self::Api(e) if e.is_conflict())
    }
}

/// A status write: the `resourceVersion` it was decided from, and what was written.
type Written = (Option<String>, ScheduledMachineStatus);

/// Controller state shared by reconciles.
struct State {
    ctx: Arc<Context>,
    machines: Store<DynamicObject>,
    /// The LibvirtHosts, for their reclaims; absent when LibvirtHosts are not served.
    hosts: Option<Store<LibvirtHost>>,
    /// Orders creations by priority when many windows open at once.
    gate: gate::CreationGate,
    /// Our creates the Machine cache has not caught up with, and known absences of leftovers.
    expectations: expectations::Expectations,
    /// Last phase per object, for the phase gauge.
    phases: Mutex<HashMap<ObjectRef<ScheduledMachine>, Phase>>,
    /// The status last written per object, with the `resourceVersion` it was decided from.
    written: Mutex<HashMap<ObjectRef<ScheduledMachine>, Written>>,
}

impl State {
    /// The stored status to decide from. A reconcile woken (say, by a Machine event) before
    /// the watch has brought back our last status write sees the object as it was before that
    /// write; the status carries memory (the window's record, the provisioning durations), so
    /// deciding from the stale copy would erase what the write added.
    fn current_status(&self, sm: &ScheduledMachine) -> ScheduledMachineStatus {
        let mut written = self.written.lock().unwrap_or_else(PoisonError::into_inner);
        let key = ObjectRef::from_obj(sm);
        match written.get(&key) {
            Some((based_on, status)) if *based_on == sm.resource_version() => status.clone(),
            found => {
                // The cache has caught up (or someone else wrote): the copy is no longer needed.
                if found.is_some() {
                    written.remove(&key);
                }
                sm.status.clone().unwrap_or_default()
            }
        }
    }

    fn remember_status(&self, sm: &ScheduledMachine, status: Option<ScheduledMachineStatus>) {
        let mut written = self.written.lock().unwrap_or_else(PoisonError::into_inner);
        match status {
            Some(status) => written.insert(ObjectRef::from_obj(sm), (sm.resource_version(), status)),
            None => written.remove(&ObjectRef::from_obj(sm)),
        };
    }

    fn record_phase(&self, key: ObjectRef<ScheduledMachine>, phase: Option<Phase>) {
        let mut phases = self.phases.lock().unwrap_or_else(PoisonError::into_inner);
        let before = match phase {
            Some(p) => phases.insert(key, p),
            None => phases.remove(&key),
        };
        if before == phase {
            // Most reconciles change no phase: no need to count them all again.
            return;
        }
        let gauge = &self.ctx.metrics.scheduled_machines;
        for p in Phase::ALL {
            let count = phases.values().filter(|v| **v == p).count();
            gauge
                .with_label_values(&[p.as_str()])
                .set(i64::try_from(count).unwrap_or(i64::MAX));
        }
    }
}

async fn reconcile(sm: Arc<ScheduledMachine>, state: Arc<State>) -> Result<Requeue, Error> {
    reconcile_inner(&sm, &state).await
}

async fn reconcile_inner(sm: &ScheduledMachine, state: &State) -> Result<Requeue, Error> {
    let ctx = &state.ctx;
    let api: Api<ScheduledMachine> = Api::namespaced(ctx.client.clone(), &sm.namespace().unwrap_or_default());
    let deleting = sm.metadata.deletion_timestamp.is_some();
    if !finalizer::has(&sm.metadata, FINALIZER) {
        if !deleting {
            // The finalizer goes on before anything is created, so nothing can be orphaned.
            finalizer::add(&api, sm, FINALIZER)
                .await
                .map_err(ApiError::write("finalizers"))?;
        }
        return Ok(Requeue::await_change());
    }

    let seen = observe::observe(sm, ctx, &state.machines, state.hosts.as_ref(), &state.expectations).await?;
    if !seen.expired_overrides.is_empty() {
        // The write brings the object back with the annotations gone.
        annotations::remove(&api, sm, &seen.expired_overrides, "expired override annotations").await?;
        return Ok(Requeue::await_change());
    }
    let current = state.current_status(sm);
    let decision = decide(&current, &seen);
    let permit = if decision.action == Action::Create {
        let created = sm.metadata.creation_timestamp.as_ref().map_or(0, |t| t.0.as_second());
        Some(state.gate.acquire(sm.spec.priority, created).await)
    } else {
        None
    };
    let uid = sm.uid().unwrap_or_default();
    let acted = act(sm, ctx, &decision).await;
    drop(permit);
    if let Err(err) = acted {
        // A create may have got part-way: look for what it left.
        state.expectations.forget_absence(&uid);
        return Err(err);
    }
    let decision = match decision.action {
        Action::Create => {
            state.expectations.created(&uid, std::time::Instant::now());
            // The status says what is true now that the objects exist: one write for the
            // opening (Active), not one before the Machine cache catches up and one after.
            // Deciding from the create's own status keeps what it recorded (the window).
            decide(&decision.status, &seen.as_created())
        }
        Action::DeleteMachine { .. } => {
            state.expectations.settled(&uid);
            decision
        }
        _ => decision,
    };

    if decision.status != current {
        if !deleting || !decision.release_finalizer {
            apply_status(&api, &sm.name_any(), FIELD_MANAGER, &decision.status)
                .await
                .map_err(ApiError::write("status"))?;
            state.remember_status(sm, Some(decision.status.clone()));
        }
        report_transition(sm, ctx, &current, &decision.status, seen.now).await;
        if let Some(lag) = decision.schedulable_lag {
            report_schedulable(sm, ctx, lag).await;
        }
    }
    state.record_phase(ObjectRef::from_obj(sm), decision.status.phase);

    if decision.release_finalizer {
        finalizer::release(&api, sm, FINALIZER)
            .await
            .map_err(ApiError::write("finalizers"))?;
        state.record_phase(ObjectRef::from_obj(sm), None);
        state.remember_status(sm, None);
        state.expectations.settled(&uid);
        state.expectations.forget_absence(&uid);
    }
    Ok(decision.requeue.map_or_else(Requeue::await_change, |d| {
        Requeue::requeue(d.max(Duration::from_millis(10)))
    }))
}

async fn act(sm: &ScheduledMachine, ctx: &Context, decision: &Decision) -> Result<(), Error> {
    match &decision.action {
        Action::None => Ok(()),
        Action::Create => act::create(sm, ctx).await,
        Action::Uncordon { node } => act::uncordon(sm, ctx, node).await,
        Action::SetTaints {
            node,
            resource_version,
            update,
        } => act::set_taints(ctx, node, resource_version.as_deref(), update).await,
        Action::Drain { node } => act::drain(sm, ctx, node).await,
        Action::DeleteMachine { skip_drain } => act::delete_machine(sm, ctx, *skip_drain).await,
        Action::DeleteLeftovers => act::delete_leftovers(sm, ctx).await,
    }
}

/// Events, transition counts and schedule lag for a phase change.
async fn report_transition(
    sm: &ScheduledMachine,
    ctx: &Context,
    old: &ScheduledMachineStatus,
    new: &ScheduledMachineStatus,
    now: chrono::DateTime<chrono::Utc>,
) {
    let (Some(to), from) = (new.phase, old.phase) else {
        return;
    };
    if from == Some(to) {
        return;
    }
    let from_name = from.map_or("None", Phase::as_str);
    ctx.metrics
        .phase_transitions
        .with_label_values(&[from_name, to.as_str()])
        .inc();
    if window::missed(old, to, now) {
        ctx.metrics.missed_windows.inc();
    }
    if let Some(due) = old
        .next_transition
        .as_ref()
        .and_then(|t| chrono::DateTime::from_timestamp_millis(t.0.as_millisecond()))
        && due <= now
    {
        ctx.metrics
            .schedule_lag
            .observe((now - due).num_milliseconds() as f64 / 1000.0);
    }
    let type_ = if matches!(to, Phase::Error | Phase::Terminated | Phase::Reclaimed) {
        EventType::Warning
    } else {
        EventType::Normal
    };
    let note = format!(
        "{from_name} -> {}: {}",
        to.as_str(),
        new.message.as_deref().unwrap_or_default()
    );
    publish_event(
        &ctx.recorder,
        &sm.object_ref(&()),
        type_,
        to.as_str(),
        "PhaseTransition",
        note,
    )
    .await;
}

/// The Node took pods `lag` after its window opened: the histogram and an Event.
async fn report_schedulable(sm: &ScheduledMachine, ctx: &Context, lag: Duration) {
    ctx.metrics.edge_schedulable_lag.observe(lag.as_secs_f64());
    publish_event(
        &ctx.recorder,
        &sm.object_ref(&()),
        EventType::Normal,
        "Schedulable",
        "NodeSchedulable",
        format!(
            "the Node took pods {} after the window opened",
            crate::schedule::format_duration(lag)
        ),
    )
    .await;
}

/// Whether LibvirtHosts are served: 5-Spot also runs with other infrastructure providers.
async fn libvirt_hosts_served(ctx: &Context) -> bool {
    let api_version = LibvirtHost::api_version(&());
    match ctx.kinds.resolve(&api_version, &LibvirtHost::kind(&())).await {
        Ok(_) => true,
        Err(err) => {
            tracing::info!(error = %err, "LibvirtHosts are not served; host reclaims are not followed");
            false
        }
    }
}

/// The ScheduledMachine a host reclaims.
fn reclaimed_by(host: Arc<LibvirtHost>) -> Option<ObjectRef<ScheduledMachine>> {
    let victim = host.status.as_ref()?.reclaim.as_ref()?.victim.as_ref()?;
    Some(ObjectRef::new(&victim.scheduled_machine).within(&host.namespace().unwrap_or_default()))
}

/// Run the controller until `shutdown` is cancelled.
pub async fn run(ctx: Arc<Context>, readiness: Readiness, shutdown: CancellationToken) {
    // Observe reads our Machines from the shared cache, and Node events map through it. Its
    // change stream triggers reconciles after the cache has the change, so a reconcile never
    // reads a Machine older than the change that woke it (with a separate trigger watch, a
    // trigger for the Machine's new nodeRef could find the cache without it, and nothing would
    // wake the controller again until the next schedule edge).
    let machines = ctx.caches.machines.store();
    let machine_events = ctx.caches.machines.subscribe();

    let by_node = machines.clone();
    let capi = ctx.capi;
    let mut controller = ctx
        .controller::<ScheduledMachine>()
        .watches_shared_stream_with(
            machine_events,
            |machine| {
                let namespace = machine.namespace().unwrap_or_default();
                machine
                    .labels()
                    .get(objects::SCHEDULED_MACHINE_LABEL)
                    .map(|owner| ObjectRef::<ScheduledMachine>::new(owner).within(&namespace))
            },
            ctx.capi.machine(),
        )
        .watches_shared_stream(ctx.caches.nodes.subscribe(), move |node| {
            let node_name = node.name_any();
            by_node
                .state()
                .into_iter()
                // The label first: the cache holds every Machine, and decoding costs more.
                .filter_map(|m| {
                    let owner = m.labels().get(objects::SCHEDULED_MACHINE_LABEL)?.clone();
                    let linked =
                        MachineView::decode(&m, capi).is_ok_and(|v| v.node_name.as_deref() == Some(node_name.as_str()));
                    linked
                        .then(|| ObjectRef::<ScheduledMachine>::new(&owner).within(&m.namespace().unwrap_or_default()))
                })
                .collect::<Vec<_>>()
        })
        .graceful_shutdown_on(shutdown.clone().cancelled_owned());
    let hosts = if libvirt_hosts_served(&ctx).await {
        // The shared cache's stream wakes reclaimed ScheduledMachines after the cache has the
        // host's new status.
        controller = controller.watches_shared_stream(ctx.caches.libvirt_hosts.subscribe(), reclaimed_by);
        Some(ctx.caches.libvirt_hosts.store())
    } else {
        None
    };

    let synced = {
        let machines = machines.clone();
        let store = controller.store();
        // Both caches must be full before the controller counts as ready.
        async move { wait_synced(&machines).await && wait_synced(&store).await }
    };

    let gate = gate::CreationGate::new(ctx.settings.max_concurrent_creations);
    let state = Arc::new(State {
        ctx: ctx.clone(),
        machines,
        hosts,
        gate,
        expectations: expectations::Expectations::default(),
        phases: Mutex::default(),
        written: Mutex::default(),
    });
    crate::reconcile::drive(
        controller,
        crate::reconcile::Readying::new(NAME, synced, readiness, &ctx),
        reconcile,
        state,
    )
    .await;
}

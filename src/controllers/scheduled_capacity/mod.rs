//! ScheduledCapacity controller (5-Spot): a MachineDeployment's or MachineSet's `spec.replicas`
//! set to `onReplicas` while the schedule is on and to `offReplicas` while it is off.
//!
//! `observe (the schedule at the injected clock, overrides, the target from the watch cache) → decide
//! (pure, see [`decide`]) → at most one server-side apply of `spec.replicas` → status (only when
//! changed)`. The apply uses our own field manager and never forces: when another manager owns
//! the field (an autoscaler, `kubectl scale`, the manifest that created the target), the conflict
//! is reported (`ReplicasApplied=False`, `FieldConflict`, and a Warning Event) and the same apply
//! is not sent again until the target's replica owners or value, our generation or the wanted
//! count change. Reconciles are triggered by the ScheduledCapacity, by MachineDeployments and
//! MachineSets it targets, and by a requeue at the schedule's next switch; nothing polls.

pub mod decide;
mod observe;
pub mod target;

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, PoisonError},
};

use futures::Stream;
use kube::{
    Api, ResourceExt,
    api::DynamicObject,
    core::ApiResource,
    runtime::{
        WatchStreamExt,
        controller::{Action as Requeue, Controller},
        reflector::{self, ObjectRef, Store},
        watcher,
    },
};
use tokio_util::sync::CancellationToken;

use self::decide::{Outcome, Step, Target};
use crate::{
    api::scheduled_capacity::ScheduledCapacity,
    app::health::Readiness,
    reconcile::{ApiError, Context, Readying, annotations, drive, in_namespace, refs_where, wait_synced, write_status},
};

/// Controller name in metrics and logs.
pub const NAME: &str = "scheduledcapacity";
/// The field manager of our applies: it owns the targets' `spec.replicas` and our status.
pub const FIELD_MANAGER: &str = "caplv-manager/scheduledcapacity";

/// The state a conflict was met in: ours (generation, wanted count) and the target's (uid,
/// replica count, the managers owning it). The same apply against the same state would meet
/// the same conflict.
type ConflictKey = (Option<i64>, i32, (String, Option<i64>, Vec<String>));

/// Controller state shared by reconciles.
struct State {
    ctx: Arc<Context>,
    /// The MachineDeployments and the MachineSets, by kind: observe reads targets here.
    targets: HashMap<String, Store<DynamicObject>>,
    /// The last conflict per ScheduledCapacity, with its condition message.
    conflicts: Mutex<HashMap<ObjectRef<ScheduledCapacity>, (ConflictKey, String)>>,
}

impl State {
    /// The conflict already met in state `key`, if any.
    fn known_conflict(&self, sc: &ObjectRef<ScheduledCapacity>, key: Option<&ConflictKey>) -> Option<String> {
        let conflicts = self.conflicts.lock().unwrap_or_else(PoisonError::into_inner);
        let (seen, message) = conflicts.get(sc)?;
        (Some(seen) == key).then(|| message.clone())
    }

    /// Remember a conflict met in state `key`; any other outcome forgets it.
    fn remember(&self, sc: ObjectRef<ScheduledCapacity>, key: Option<ConflictKey>, outcome: &Outcome) {
        let mut conflicts = self.conflicts.lock().unwrap_or_else(PoisonError::into_inner);
        match (outcome, key) {
            (Outcome::Conflict(message), Some(key)) => conflicts.insert(sc, (key, message.clone())),
            _ => conflicts.remove(&sc),
        };
    }
}

async fn reconcile(sc: Arc<ScheduledCapacity>, state: Arc<State>) -> Result<Requeue, ApiError> {
    let ctx = &state.ctx;
    let api: Api<ScheduledCapacity> = Api::namespaced(ctx.client.clone(), &sc.namespace().unwrap_or_default());
    let mut seen = observe::observe(&sc, ctx, &state.targets).await?;
    if !seen.expired.is_empty() {
        // The write brings the object back with the annotations gone.
        annotations::remove(&api, &*sc, &seen.expired, "expired override annotations").await?;
        return Ok(Requeue::await_change());
    }
    let key = seen
        .observed
        .desired()
        .zip(seen.target_state.take())
        .map(|((_, replicas), target)| (sc.metadata.generation, replicas, target));
    let reference = ObjectRef::from_obj(&*sc);
    seen.observed.known_conflict = state.known_conflict(&reference, key.as_ref());
    let outcome = match decide::decide(&seen.observed) {
        Step::Report(outcome) => outcome,
        Step::Apply(replicas) => apply(ctx, &sc, &seen, replicas).await?,
    };
    state.remember(reference, key, &outcome);

    let current = sc.status.clone().unwrap_or_default();
    let status = decide::status(&current, &seen.observed, &outcome, &ctx.timestamp());
    write_status(ctx, &*sc, FIELD_MANAGER, &current, &status, Vec::new()).await?;
    Ok(decide::requeue(&seen.observed).map_or_else(Requeue::await_change, Requeue::requeue))
}

/// Apply the wanted count; a field conflict is an outcome to report, not an error to retry.
async fn apply(
    ctx: &Context,
    sc: &ScheduledCapacity,
    seen: &observe::Seen,
    replicas: i32,
) -> Result<Outcome, ApiError> {
    let (Some(resource), Target::Found(found)) = (&seen.resource, &seen.observed.target) else {
        return Ok(Outcome::TargetNotFound("the target is gone".to_owned()));
    };
    let name = &sc.spec.target_ref.name;
    let api: Api<DynamicObject> =
        Api::namespaced_with(ctx.client.clone(), &sc.namespace().unwrap_or_default(), resource);
    match target::apply(&api, resource, name, replicas).await {
        Ok(()) => {
            tracing::info!(target = %found.describe, replicas, "spec.replicas applied");
            Ok(Outcome::Applied)
        }
        Err(err) => match target::field_conflict(&err) {
            Some(said) => {
                tracing::info!(target = %found.describe, replicas, conflict = %said, "spec.replicas is owned by another field manager; not forcing");
                Ok(Outcome::Conflict(target::conflict_message(
                    &found.describe,
                    replicas,
                    &said,
                )))
            }
            None => Err(ApiError::write(format!("spec.replicas of {}", found.describe))(err)),
        },
    }
}

/// The ScheduledCapacities in `obj`'s namespace that target it, a `kind`.
fn targeting(store: &Store<ScheduledCapacity>, kind: &str, obj: &DynamicObject) -> Vec<ObjectRef<ScheduledCapacity>> {
    let namespace = obj.namespace().unwrap_or_default();
    let name = obj.name_any();
    refs_where(store, |sc| {
        in_namespace(sc, &namespace) && sc.spec.target_ref.name == name && sc.spec.target_ref.kind == kind
    })
}

/// A cache of `resource`'s objects, and the stream of their changes, each yielded once the cache
/// holds it: a reconcile it triggers never reads the target older than the change that woke it.
fn cached(
    ctx: &Context,
    resource: &ApiResource,
) -> (
    Store<DynamicObject>,
    impl Stream<Item = Result<DynamicObject, watcher::Error>> + Send + 'static,
) {
    let writer = reflector::store::Writer::new(resource.clone());
    let store = writer.as_reader();
    let watch = watcher(ctx.watched_dynamic(resource), watcher::Config::default()).default_backoff();
    (store, reflector::reflector(writer, watch).touched_objects())
}

/// Run the controller until `shutdown` is cancelled.
pub async fn run(ctx: Arc<Context>, readiness: Readiness, shutdown: CancellationToken) {
    let mut controller = Controller::new(ctx.watched_api::<ScheduledCapacity>(), watcher::Config::default());
    let store = controller.store();
    let mut targets = HashMap::new();
    // A change of a target (its replicas, their owners, its existence) is looked at at once.
    for resource in [ctx.capi.machine_deployment(), ctx.capi.machine_set()] {
        let (cache, events) = cached(&ctx, &resource);
        targets.insert(resource.kind.clone(), cache);
        let (store, kind) = (store.clone(), resource.kind.clone());
        controller = controller.watches_stream_with(events, move |obj| targeting(&store, &kind, &obj), resource);
    }
    let controller = controller.graceful_shutdown_on(shutdown.clone().cancelled_owned());
    let synced = {
        let caches: Vec<_> = targets.values().cloned().collect();
        // Every cache must be full before the controller counts as ready.
        async move {
            for cache in &caches {
                if !wait_synced(cache).await {
                    return false;
                }
            }
            wait_synced(&store).await
        }
    };
    let state = Arc::new(State {
        ctx: ctx.clone(),
        targets,
        conflicts: Mutex::default(),
    });
    drive(
        controller,
        Readying::new(NAME, synced, readiness, &ctx),
        reconcile,
        state,
    )
    .await;
}

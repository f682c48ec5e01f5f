//! Reading the world for one ScheduledCapacity reconcile: the schedule at the injected clock
//! with its override annotations, and the target's replica count and field owners.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use kube::{
    Api, ResourceExt,
    api::DynamicObject,
    core::ApiResource,
    runtime::reflector::{ObjectRef, Store},
};

use super::{
    decide::{Observed, Plan, Target, wanted},
    target,
};
use crate::{
    api::scheduled_capacity::{CapacityReason, ScheduledCapacity},
    controllers::scheduled_machine::overrides,
    reconcile::{ApiError, Context, error::get_opt},
    schedule::Schedule,
};

/// What one reconcile saw, beyond what [`super::decide`] reads.
pub struct Seen {
    /// The decision's input.
    pub observed: Observed,
    /// Override annotations whose instant has passed, to remove.
    pub expired: Vec<&'static str>,
    /// The target's resource, when `targetRef` names one we scale.
    pub resource: Option<ApiResource>,
    /// The target's uid, replica count and the field managers owning it, when it was found:
    /// what must change before a conflict could resolve.
    pub target_state: Option<(String, Option<i64>, Vec<String>)>,
}

/// The schedule's plan at `now` under the override annotations, and the expired overrides.
#[must_use]
pub fn plan(sc: &ScheduledCapacity, now: DateTime<Utc>) -> (Plan, Vec<&'static str>) {
    let schedule = match Schedule::parse(&sc.spec.schedule) {
        Ok(schedule) => schedule,
        Err(e) => {
            let plan = Plan::Invalid {
                reason: e.reason().into(),
                message: format!("spec.{e}"),
            };
            return (plan, Vec::new());
        }
    };
    match overrides::read(sc.annotations(), now) {
        Ok(read) => {
            let plan = wanted(&schedule, &sc.spec.schedule, now);
            (Plan::new(plan, read.forced, sc.spec.schedule.enabled), read.expired)
        }
        Err(message) => {
            let plan = Plan::Invalid {
                reason: CapacityReason::InvalidOverride.into(),
                message,
            };
            (plan, Vec::new())
        }
    }
}

/// The target from the watch cache; one the cache does not hold is looked up (before the cache
/// has filled, or just created), so a missing target is only reported when it is missing.
async fn lookup(
    ctx: &Context,
    cache: Option<&Store<DynamicObject>>,
    resource: &ApiResource,
    namespace: &str,
    name: &str,
) -> Result<Option<DynamicObject>, ApiError> {
    let key = ObjectRef::new_with(name, resource.clone()).within(namespace);
    if let Some(obj) = cache.and_then(|c| c.get(&key)) {
        return Ok(Some((*obj).clone()));
    }
    let api: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), namespace, resource);
    get_opt(&api, name, &resource.kind).await
}

/// Gather what the decision needs. A reconcile a target's change triggered finds that change
/// in the cache (the same stream fills it first).
///
/// # Errors
/// Looking up a target the cache does not hold failed.
pub async fn observe(
    sc: &ScheduledCapacity,
    ctx: &Context,
    targets: &HashMap<String, Store<DynamicObject>>,
) -> Result<Seen, ApiError> {
    let now = ctx.clock.now();
    let (plan, expired) = plan(sc, now);
    let namespace = sc.namespace().unwrap_or_default();
    let target_ref = &sc.spec.target_ref;
    let (target, resource, target_state) = match target::resource(target_ref, ctx.capi) {
        Err(message) => (Target::Invalid(message), None, None),
        Ok(resource) => {
            let cache = targets.get(&resource.kind);
            let (target, state) = match lookup(ctx, cache, &resource, &namespace, &target_ref.name).await? {
                None => (
                    Target::Missing(format!(
                        "{} {:?} not found in namespace {namespace}",
                        resource.kind, target_ref.name
                    )),
                    None,
                ),
                Some(obj) => match target::read(&obj) {
                    Ok((replicas, owners)) => {
                        let state = (obj.uid().unwrap_or_default(), replicas.value, owners);
                        (Target::Found(replicas), Some(state))
                    }
                    Err(message) => (Target::Invalid(message), None),
                },
            };
            (target, Some(resource), state)
        }
    };
    Ok(Seen {
        observed: Observed {
            now,
            generation: sc.metadata.generation,
            on_replicas: sc.spec.on_replicas,
            off_replicas: sc.spec.off_replicas,
            plan,
            target,
            known_conflict: None,
        },
        expired,
        resource,
        target_state,
    })
}

//! Reading the world for one ScheduledCapacity reconcile: the schedule at the injected clock
//! with its override annotations, and the target's replica count and field owners.

use chrono::{DateTime, Utc};
use kube::{Api, ResourceExt, api::DynamicObject, core::ApiResource};

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

/// Gather what the decision needs: one GET of the target (so a change that triggered this
/// reconcile is always seen).
///
/// # Errors
/// Reading the target failed.
pub async fn observe(sc: &ScheduledCapacity, ctx: &Context) -> Result<Seen, ApiError> {
    let now = ctx.clock.now();
    let (plan, expired) = plan(sc, now);
    let namespace = sc.namespace().unwrap_or_default();
    let target_ref = &sc.spec.target_ref;
    let (target, resource, target_state) = match target::resource(target_ref, ctx.capi) {
        Err(message) => (Target::Invalid(message), None, None),
        Ok(resource) => {
            let api: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), &namespace, &resource);
            let (target, state) = match get_opt(&api, &target_ref.name, &resource.kind).await? {
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

//! The pure half of a ScheduledCapacity reconcile: how many replicas the schedule wants, whether
//! the target needs an apply, what the status says about the outcome, and when to look again.

use std::time::Duration;

use chrono::{DateTime, SecondsFormat, Utc};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::{
    api::{
        condition::{DesiredCondition, Status, merge_all},
        scheduled_capacity::{CapacityCondition, CapacityReason, CapacityReasons, ScheduledCapacityStatus},
        scheduled_machine::ScheduleSpec,
    },
    controllers::scheduled_machine::overrides::Forced,
    schedule::{Margins, Plan as EnginePlan, Schedule},
};

/// The window at `now`, and whether the capacity is wanted: from `leadTime` before the window
/// opens until it closes.
///
/// The one place the schedule's state is read. `leadTime: auto` counts as zero here: a
/// ScheduledCapacity has no provisioning history of its own. `endPolicy` does not apply: the
/// count drops at the closing edge, and Cluster API drains the Machines it removes. A disabled
/// schedule is off for good (until it is enabled again).
#[must_use]
pub fn wanted(schedule: &Schedule, spec: &ScheduleSpec, now: DateTime<Utc>) -> EnginePlan {
    if !spec.enabled {
        return EnginePlan {
            open: false,
            next_edge: None,
            wanted: false,
            next_wanted_change: None,
        };
    }
    let margins = Margins {
        lead: schedule.lead_time().resolve(&[]),
        drain_ahead: Duration::ZERO,
    };
    schedule.plan(now, margins)
}

/// The schedule's answer, override annotations included.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Plan {
    /// The schedule can be read.
    Valid {
        /// On (`onReplicas`) or off (`offReplicas`).
        on: bool,
        /// The window is open (`status.inSchedule`); off while `on` starts `leadTime` early.
        open: bool,
        /// When `on` or `open` next changes, if ever.
        next: Option<DateTime<Utc>>,
        /// The override that decides instead of the schedule, if one holds.
        forced: Option<Forced>,
        /// `spec.schedule.enabled`.
        enabled: bool,
    },
    /// The schedule or an override annotation cannot be used.
    Invalid {
        /// The engine's reason, or `InvalidOverride`.
        reason: CapacityReasons,
        /// What is wrong, naming the field.
        message: String,
    },
}

impl Plan {
    /// The engine's `plan`, with the override that holds (if any) deciding instead until its
    /// instant.
    #[must_use]
    pub fn new(plan: EnginePlan, forced: Option<Forced>, enabled: bool) -> Self {
        match forced {
            Some(f) => Self::Valid {
                on: f.active,
                open: f.active,
                next: Some(f.until),
                forced: Some(f),
                enabled,
            },
            None => Self::Valid {
                on: plan.wanted,
                open: plan.open,
                next: plan.next_change(),
                forced: None,
                enabled,
            },
        }
    }
}

/// The target as read for this reconcile.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// `targetRef` names something a ScheduledCapacity cannot scale; the message says why.
    Invalid(String),
    /// No such object.
    Missing(String),
    /// The object, reduced to its replica count and who owns that field.
    Found(Replicas),
}

/// The target's `spec.replicas` and its field managers.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Replicas {
    /// `Kind name`, for messages.
    pub describe: String,
    /// `spec.replicas`, when set.
    pub value: Option<i64>,
    /// Whether our field manager's apply owns `spec.replicas`.
    pub ours: bool,
}

/// Everything [`decide`] and [`status`] need.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Observed {
    /// The injected clock's now.
    pub now: DateTime<Utc>,
    /// `metadata.generation`.
    pub generation: Option<i64>,
    /// `spec.onReplicas`.
    pub on_replicas: i32,
    /// `spec.offReplicas`.
    pub off_replicas: i32,
    /// What the schedule says.
    pub plan: Plan,
    /// What the target looks like.
    pub target: Target,
    /// The conflict an apply of the same count met against this same target (same owners, same
    /// value, same generation of ours): not sent again, only reported.
    pub known_conflict: Option<String>,
}

impl Observed {
    /// `(on, replicas)` the schedule wants, when it can be read.
    #[must_use]
    pub fn desired(&self) -> Option<(bool, i32)> {
        match self.plan {
            Plan::Valid { on, .. } => Some((on, if on { self.on_replicas } else { self.off_replicas })),
            Plan::Invalid { .. } => None,
        }
    }
}

/// What happened to the replica count, for the status.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The target has the wanted count, and the field is ours.
    Applied,
    /// Another field manager owns `spec.replicas`; the message names it (from the API error).
    Conflict(String),
    /// The target does not exist.
    TargetNotFound(String),
    /// The target cannot be scaled by a ScheduledCapacity.
    InvalidTarget(String),
    /// The schedule cannot be read, so nothing was applied.
    ScheduleInvalid,
}

/// What to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Nothing to write; the outcome is already known.
    Report(Outcome),
    /// Server-side apply `spec.replicas` with this value.
    Apply(i32),
}

/// Decide whether the target needs an apply: only when its count differs from the wanted one
/// or the field is not ours yet, and never again for a conflict already met on the same state.
#[must_use]
pub fn decide(seen: &Observed) -> Step {
    let Some((_, replicas)) = seen.desired() else {
        return Step::Report(Outcome::ScheduleInvalid);
    };
    match &seen.target {
        Target::Invalid(message) => Step::Report(Outcome::InvalidTarget(message.clone())),
        Target::Missing(message) => Step::Report(Outcome::TargetNotFound(message.clone())),
        Target::Found(_) if seen.known_conflict.is_some() => {
            Step::Report(Outcome::Conflict(seen.known_conflict.clone().unwrap_or_default()))
        }
        Target::Found(r) if r.ours && r.value == Some(i64::from(replicas)) => Step::Report(Outcome::Applied),
        Target::Found(_) => Step::Apply(replicas),
    }
}

/// When to reconcile again: at the schedule's next switch, else only on a change.
#[must_use]
pub fn requeue(seen: &Observed) -> Option<Duration> {
    match seen.plan {
        Plan::Valid { next: Some(next), .. } => Some(
            (next - seen.now)
                .to_std()
                .unwrap_or_default()
                .max(Duration::from_millis(10)),
        ),
        _ => None,
    }
}

fn rfc3339(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Secs, true)
}

/// Why the schedule is on or off, for messages.
fn schedule_note(seen: &Observed) -> String {
    let Plan::Valid {
        on,
        open,
        next,
        forced,
        enabled,
    } = &seen.plan
    else {
        return String::new();
    };
    if let Some(forced) = forced {
        return forced.note();
    }
    if !enabled {
        return "schedule disabled".to_owned();
    }
    let (state, edge) = match (on, open) {
        (true, true) => ("in schedule", "until"),
        (true, false) => ("leadTime ahead of the window", "which opens at"),
        (false, _) => ("outside the schedule", "until"),
    };
    match next {
        Some(t) => format!("{state} {edge} {}", rfc3339(*t)),
        None => state.to_owned(),
    }
}

/// The three conditions for `outcome`.
fn conditions(seen: &Observed, outcome: &Outcome) -> Vec<DesiredCondition> {
    use CapacityCondition::{Ready, ReplicasApplied, ScheduleValid};
    use Status::{False, True};
    let valid = match &seen.plan {
        Plan::Valid { .. } => {
            DesiredCondition::new(ScheduleValid, True, CapacityReason::ScheduleValid, "schedule valid")
        }
        Plan::Invalid { reason, message } => DesiredCondition::new(ScheduleValid, False, *reason, message.clone()),
    };
    let (on, replicas) = seen.desired().unwrap_or_default();
    let (applied, ready) = match outcome {
        Outcome::Applied => {
            let describe = match &seen.target {
                Target::Found(r) => r.describe.clone(),
                _ => "the target".to_owned(),
            };
            let which = if on { "onReplicas" } else { "offReplicas" };
            let message = format!("{describe} has {replicas} replicas ({which}): {}", schedule_note(seen));
            let reason = match seen.plan {
                Plan::Valid {
                    on: true, open: true, ..
                } => CapacityReason::InSchedule,
                Plan::Valid { on: true, .. } => CapacityReason::AheadOfWindow,
                _ => CapacityReason::OutsideSchedule,
            };
            (
                DesiredCondition::new(ReplicasApplied, True, CapacityReason::Applied, message.clone()),
                DesiredCondition::new(Ready, True, reason, message),
            )
        }
        Outcome::Conflict(m) | Outcome::TargetNotFound(m) | Outcome::InvalidTarget(m) => {
            let reason = match outcome {
                Outcome::Conflict(_) => CapacityReason::FieldConflict,
                Outcome::TargetNotFound(_) => CapacityReason::TargetNotFound,
                _ => CapacityReason::InvalidTarget,
            };
            (
                DesiredCondition::new(ReplicasApplied, False, reason, m.clone()),
                DesiredCondition::new(Ready, False, reason, m.clone()),
            )
        }
        Outcome::ScheduleInvalid => (
            DesiredCondition::new(
                ReplicasApplied,
                False,
                CapacityReason::ScheduleInvalid,
                "nothing is applied until the schedule is fixed",
            ),
            DesiredCondition {
                type_: Ready.as_str(),
                ..valid.clone()
            },
        ),
    };
    vec![ready, valid, applied]
}

/// The status after `outcome`; `current` keeps the conditions' transition times.
#[must_use]
pub fn status(
    current: &ScheduledCapacityStatus,
    seen: &Observed,
    outcome: &Outcome,
    now: &Time,
) -> ScheduledCapacityStatus {
    let (in_schedule, desired_replicas, next_transition) = match (&seen.plan, seen.desired()) {
        (Plan::Valid { open, next, .. }, Some((_, replicas))) => (Some(*open), Some(replicas), next.map(time)),
        _ => (None, None, None),
    };
    ScheduledCapacityStatus {
        in_schedule,
        desired_replicas,
        next_transition,
        conditions: merge_all(&current.conditions, &conditions(seen, outcome), now, seen.generation),
        observed_generation: seen.generation,
    }
}

fn time(t: DateTime<Utc>) -> Time {
    Time(k8s_openapi::jiff::Timestamp::from_millisecond(t.timestamp_millis()).unwrap_or_default())
}

#[cfg(test)]
mod tests;

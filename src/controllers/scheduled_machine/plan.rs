//! The ScheduledMachine state machine: from what was observed to what to do next. Pure.
//!
//! ```text
//!              window opens                     Machine exists
//!  Inactive ───────────────► Pending ─────────────────────────► Active
//!  Disabled ◄──┐                ▲                                  │ window closes, disabled,
//!  Error    ◄──┤ nothing left   │ window reopens, Machine kept     │ invalid, or deleted
//!              └── ShuttingDown ◄──────────────────────────────────┘
//!  killSwitch: Terminated from anywhere (Machine deleted at once, no drain); off again resumes.
//!  A host reclaiming it: Reclaimed from anywhere (drained within the host's bound, removed, off
//!  for the host's coolDown), then the schedule decides again.
//! ```
//!
//! No phase is sticky: each reconcile derives the phase from the spec and the world.

use std::{collections::BTreeSet, time::Duration};

use chrono::{DateTime, SecondsFormat, Utc};
use k8s_openapi::{api::core::v1::Taint, apimachinery::pkg::apis::meta::v1::Time, jiff::Timestamp};

use super::{
    objects::CreatedRefs,
    overrides::Forced,
    reclaim,
    taints::{self, TaintId, TaintUpdate},
    window,
};
use crate::{
    api::{
        condition::{self, DesiredCondition, Status},
        node_taint::NodeTaint,
        scheduled_machine::{
            NodeReference, Phase, Reason, ReclaimRecord, ScheduledCondition, ScheduledMachineStatus, ScheduledReason,
        },
    },
    schedule::{Plan, format_duration},
};

/// Drain and grace bound used when the spec's own cannot be read (the CRD's default).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);
/// How often eviction is retried while a drain is blocked (e.g. by a PodDisruptionBudget).
pub const DRAIN_RETRY: Duration = Duration::from_secs(5);
/// Recheck while a deleting Machine is being removed. A deletion that falls into a watch gap
/// is not replayed when the watch relists (the cache just no longer has the Machine), so
/// without a recheck the removal would only be noticed at the grace deadline.
pub const REMOVAL_RECHECK: Duration = Duration::from_secs(2);

/// The schedule evaluated now, or why it cannot be.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Validity {
    /// The spec is usable; what the schedule says now.
    Valid(Timing),
    /// The spec cannot be used.
    Invalid {
        /// Bounded reason.
        reason: Reason,
        /// What is wrong, naming the field.
        message: String,
    },
}

/// A usable schedule at the reconcile's instant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Timing {
    /// The window and the machine's wanted life (lead time, end policy and overrides applied).
    pub plan: Plan,
    /// The lead time in effect, when `leadTime` is set.
    pub lead: Option<Duration>,
    /// The opening edge a new window's record starts from: the open window's, or the next one's
    /// during the lead. Looked up only while no Machine exists; `None` when unknown (forced on,
    /// or open for longer than the engine looks back).
    pub edge: Option<DateTime<Utc>>,
    /// `endPolicy: DrainBeforeEnd`.
    pub drain_before_end: bool,
    /// Bound on draining the Node.
    pub drain_timeout: Duration,
    /// Bound on the whole graceful removal.
    pub graceful_timeout: Duration,
}

/// The Machine as observed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MachineSeen {
    /// Being deleted.
    pub deleting: bool,
    /// CAPI phase.
    pub phase: Option<String>,
    /// Linked Node.
    pub node_name: Option<String>,
    /// Provider ID.
    pub provider_id: Option<String>,
}

impl From<crate::api::capi::MachineView> for MachineSeen {
    fn from(m: crate::api::capi::MachineView) -> Self {
        Self {
            deleting: m.deleting,
            phase: m.phase,
            node_name: m.node_name,
            provider_id: m.provider_id,
        }
    }
}

/// The Machine's Node as observed.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NodeSeen {
    /// Node name.
    pub name: String,
    /// Its `resourceVersion`, which guards the taint write.
    pub resource_version: Option<String>,
    /// Whether its `Ready` condition is True.
    pub ready: bool,
    /// Its taints.
    pub taints: Vec<Taint>,
    /// The taints it says we own ([`super::taints::OWNED_TAINTS_ANNOTATION`]).
    pub owned_taints: BTreeSet<TaintId>,
    /// `spec.unschedulable`.
    pub cordoned: bool,
    /// Whether we cordoned it (so only we uncordon it).
    pub cordoned_by_us: bool,
    /// Pods a drain still has to evict (DaemonSet and mirror pods excluded).
    pub pods_to_evict: usize,
}

/// Everything observed for one reconcile.
#[derive(Clone, Debug, PartialEq)]
pub struct Observed {
    /// The instant of this reconcile (from the injected clock).
    pub now: DateTime<Utc>,
    /// `metadata.generation`.
    pub generation: Option<i64>,
    /// The ScheduledMachine is being deleted.
    pub deleting: bool,
    /// `spec.schedule.enabled`.
    pub enabled: bool,
    /// `spec.killSwitch`.
    pub kill_switch: bool,
    /// Schedule and spec validity.
    pub validity: Validity,
    /// What the objects are called.
    pub refs: CreatedRefs,
    /// Our Machine, if it exists.
    pub machine: Option<MachineSeen>,
    /// Whether our bootstrap config exists.
    pub bootstrap_exists: bool,
    /// Whether our infrastructure object exists.
    pub infrastructure_exists: bool,
    /// The Machine's Node, if linked and present.
    pub node: Option<NodeSeen>,
    /// `spec.nodeTaints`.
    pub node_taints: Vec<NodeTaint>,
    /// The override annotation that decides the window now, if any.
    pub forced: Option<Forced>,
    /// Override annotations that have expired (removed by the reconcile).
    pub expired_overrides: Vec<&'static str>,
    /// A host naming this ScheduledMachine the spot machine it reclaims.
    pub reclaim_request: Option<reclaim::Request>,
}

/// What to do in this reconcile.
#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    /// Nothing; wait.
    None,
    /// Create whatever of bootstrap, infrastructure and Machine is missing (adopting existing ones).
    Create,
    /// The window reopened during shutdown: make the Node schedulable again.
    Uncordon {
        /// Node name.
        node: String,
    },
    /// Bring the Ready Node's taints to `spec.nodeTaints`.
    SetTaints {
        /// Node name.
        node: String,
        /// Its `resourceVersion` when read.
        resource_version: Option<String>,
        /// What to write.
        update: TaintUpdate,
    },
    /// Cordon the Node and evict what can be evicted.
    Drain {
        /// Node name.
        node: String,
    },
    /// Delete the Machine; CAPI removes infrastructure and bootstrap after it.
    DeleteMachine {
        /// Tell CAPI to skip its own drain (kill switch, or the grace period ran out).
        skip_drain: bool,
    },
    /// Delete a bootstrap config and infrastructure object left without a Machine.
    DeleteLeftovers,
}

/// The decision of one reconcile.
#[derive(Clone, Debug, PartialEq)]
pub struct Decision {
    /// The write to make.
    pub action: Action,
    /// The status to record.
    pub status: ScheduledMachineStatus,
    /// When to look again (`None`: wait for a watch event).
    pub requeue: Option<Duration>,
    /// Deletion may complete: nothing is left.
    pub release_finalizer: bool,
    /// The Node becomes schedulable with this decision, this long after the window opened.
    pub schedulable_lag: Option<Duration>,
}

/// `t` as a Kubernetes time, to the millisecond.
pub fn time(t: DateTime<Utc>) -> Option<Time> {
    Timestamp::from_millisecond(t.timestamp_millis()).ok().map(Time)
}

/// A Kubernetes time as a `chrono` instant.
pub fn chrono_of(t: &Time) -> Option<DateTime<Utc>> {
    DateTime::from_timestamp_millis(t.0.as_millisecond())
}

fn until(now: DateTime<Utc>, then: DateTime<Utc>) -> Duration {
    (then - now).to_std().unwrap_or(Duration::ZERO)
}

fn earliest(a: Option<Duration>, b: Option<Duration>) -> Option<Duration> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// A phase, the action it takes and the status message.
type Step = (Phase, Action, String);

/// The machine is wanted (the window is open, or opens within the lead time): create, wait for
/// the old Machine, or keep it and its Node's taints.
fn open_step(seen: &Observed, timing: &Timing) -> Step {
    let open = timing.plan.open;
    let (creating, waiting, kept) = if open {
        (
            (Phase::Pending, "window open; creating the Machine".to_owned()),
            "window open; waiting for the previous Machine to go",
            (Phase::Active, "window open; Machine exists".to_owned()),
        )
    } else {
        let opens = timing.plan.next_edge.map_or_else(
            || "soon".to_owned(),
            |t| format!("at {}", t.to_rfc3339_opts(SecondsFormat::Secs, true)),
        );
        let lead = timing
            .lead
            .map_or_else(String::new, |l| format!(" (leadTime {})", format_duration(l)));
        (
            (
                Phase::Preparing,
                format!("window opens {opens}{lead}; creating the Machine ahead of it"),
            ),
            "window opens soon; waiting for the previous Machine to go",
            (
                Phase::Preparing,
                format!(
                    "window opens {opens}{lead}; the Node waits with taint {}",
                    taints::WINDOW_CLOSED_TAINT
                ),
            ),
        )
    };
    let Some(machine) = &seen.machine else {
        return (creating.0, Action::Create, creating.1);
    };
    if machine.deleting {
        return (creating.0, Action::None, waiting.to_owned());
    }
    let Some(node) = &seen.node else {
        return (kept.0, Action::None, kept.1);
    };
    if node.cordoned_by_us {
        return (
            kept.0,
            Action::Uncordon {
                node: node.name.clone(),
            },
            "window reopened during shutdown; keeping the Machine".to_owned(),
        );
    }
    let wanted = taints::wanted(&seen.node_taints, node.ready, &node.owned_taints, open);
    match taints::reconcile(&node.taints, &node.owned_taints, &wanted) {
        Some(update) => {
            let what = if open && taints::window_closed(&node.taints) {
                "window open; releasing the Node for pods".to_owned()
            } else if open {
                "window open; applying spec.nodeTaints to the Node".to_owned()
            } else {
                kept.1
            };
            (
                kept.0,
                Action::SetTaints {
                    node: node.name.clone(),
                    resource_version: node.resource_version.clone(),
                    update,
                },
                what,
            )
        }
        None => (kept.0, Action::None, kept.1),
    }
}

/// The kill switch: remove at once, without draining.
fn killed_step(seen: &Observed) -> Step {
    let action = match &seen.machine {
        Some(m) if !m.deleting => Action::DeleteMachine { skip_drain: true },
        None if seen.bootstrap_exists || seen.infrastructure_exists => Action::DeleteLeftovers,
        _ => Action::None,
    };
    (
        Phase::Terminated,
        action,
        "kill switch on; machine removed without draining".to_owned(),
    )
}

/// Not wanted, and nothing exists: say why.
fn idle_step(seen: &Observed, reclaimed: Option<&ReclaimRecord>) -> Step {
    let (phase, message) = if seen.deleting {
        (Phase::ShuttingDown, "deleted; nothing left to remove".to_owned())
    } else if let Validity::Invalid { message, .. } = &seen.validity {
        (Phase::Error, message.clone())
    } else if !seen.enabled {
        (Phase::Disabled, "schedule disabled".to_owned())
    } else if let Some(record) = reclaimed {
        (Phase::Reclaimed, reclaim::describe(record))
    } else if matches!(&seen.validity, Validity::Valid(t) if t.plan.open) {
        (
            Phase::Inactive,
            "removed ahead of the window's end (endPolicy DrainBeforeEnd)".to_owned(),
        )
    } else {
        (Phase::Inactive, "outside the schedule window".to_owned())
    };
    (phase, Action::None, message)
}

/// The next step of a graceful removal.
struct Shutdown {
    phase: Phase,
    started: DateTime<Utc>,
    action: Action,
    message: String,
    requeue: Option<Duration>,
}

/// Not wanted, and something exists: drain within the drain timeout, then delete the Machine
/// (without draining once the grace period is over), then the leftovers.
fn shutdown_step(
    current: &ScheduledMachineStatus,
    seen: &Observed,
    valid: bool,
    reclaimed: Option<&ReclaimRecord>,
    (drain_timeout, graceful_timeout): (Duration, Duration),
) -> Shutdown {
    let now = seen.now;
    let drain_timeout = reclaimed.map_or(drain_timeout, |r| reclaim::drain_timeout(r, drain_timeout));
    let started = current.shutdown_started_at.as_ref().and_then(chrono_of).unwrap_or(now);
    let grace_deadline = started + chrono::Duration::from_std(graceful_timeout).unwrap_or(chrono::Duration::MAX);
    let drain_deadline =
        started + chrono::Duration::from_std(drain_timeout.min(graceful_timeout)).unwrap_or(chrono::Duration::MAX);
    let mut phase = Phase::ShuttingDown;
    let why = if seen.deleting {
        "deleted".to_owned()
    } else if !valid {
        "spec invalid".to_owned()
    } else if !seen.enabled {
        "schedule disabled".to_owned()
    } else if let Some(record) = reclaimed {
        phase = Phase::Reclaimed;
        reclaim::why(record)
    } else if matches!(&seen.validity, Validity::Valid(t) if t.plan.open) {
        "window closing (endPolicy DrainBeforeEnd)".to_owned()
    } else {
        "window closed".to_owned()
    };
    let mut requeue = None;
    let (action, message) = match (&seen.machine, &seen.node) {
        (Some(m), Some(node)) if !m.deleting && now < drain_deadline && (node.pods_to_evict > 0 || !node.cordoned) => {
            requeue = Some(DRAIN_RETRY.min(until(now, drain_deadline)));
            (
                Action::Drain {
                    node: node.name.clone(),
                },
                format!(
                    "{why}; draining node {} ({} pods to evict)",
                    node.name, node.pods_to_evict
                ),
            )
        }
        (Some(m), _) if !m.deleting => (
            Action::DeleteMachine {
                skip_drain: now >= grace_deadline,
            },
            format!("{why}; deleting the Machine"),
        ),
        (Some(_), _) => {
            requeue = (now < grace_deadline).then(|| until(now, grace_deadline).min(REMOVAL_RECHECK));
            let action = if now >= grace_deadline {
                Action::DeleteMachine { skip_drain: true }
            } else {
                Action::None
            };
            (action, format!("{why}; waiting for the Machine to be removed"))
        }
        (None, _) => (
            Action::DeleteLeftovers,
            format!("{why}; removing the bootstrap and infrastructure objects"),
        ),
    };
    Shutdown {
        phase,
        started,
        action,
        message,
        requeue,
    }
}

/// Decide what to do. `current` is the stored status.
#[must_use]
pub fn decide(current: &ScheduledMachineStatus, seen: &Observed) -> Decision {
    let now = seen.now;
    let timing = match &seen.validity {
        Validity::Valid(timing) => Some(timing),
        Validity::Invalid { .. } => None,
    };
    // An unusable spec may have unusable timeouts too: remove with the defaults.
    let (drain_timeout, graceful_timeout) = timing.map_or((DEFAULT_TIMEOUT, DEFAULT_TIMEOUT), |t| {
        (t.drain_timeout, t.graceful_timeout)
    });
    let valid = timing.is_some();
    let anything_exists = seen.machine.is_some() || seen.bootstrap_exists || seen.infrastructure_exists;
    // The host's owner comes first: a reclaim outranks the window and a force-on override.
    let reclaimed = reclaim::advance(
        current.reclaim.as_ref(),
        seen.reclaim_request.as_ref(),
        !anything_exists,
        now,
    );
    let wanted_timing =
        timing.filter(|t| !seen.deleting && !seen.kill_switch && seen.enabled && t.plan.wanted && reclaimed.is_none());
    let mut shutdown_started = None;
    let mut requeue = None;
    let (phase, action, message) = if let Some(timing) = wanted_timing {
        open_step(seen, timing)
    } else if seen.kill_switch {
        killed_step(seen)
    } else if !anything_exists {
        idle_step(seen, reclaimed.as_ref())
    } else {
        let shutdown = shutdown_step(
            current,
            seen,
            valid,
            reclaimed.as_ref(),
            (drain_timeout, graceful_timeout),
        );
        shutdown_started = Some(shutdown.started);
        requeue = shutdown.requeue;
        (shutdown.phase, shutdown.action, shutdown.message)
    };

    let next_change = timing.and_then(|t| t.plan.next_change());
    if valid && !seen.deleting {
        requeue = earliest(requeue, next_change.map(|t| until(now, t)));
    }
    if let Some(back) = reclaimed.as_ref().and_then(reclaim::off_until) {
        requeue = earliest(requeue, Some(until(now, back)));
    }
    let message = match &seen.forced {
        Some(forced) => format!("{message} ({})", forced.note()),
        None => message,
    };
    let release_finalizer = seen.deleting && !anything_exists;
    let moments = window::advance(current, seen, timing, phase, &action);
    let mut status = build_status(current, seen, phase, message, shutdown_started, timing);
    status.conditions = reclaim::with_condition(
        &status.conditions,
        reclaimed.as_ref(),
        &time(now).unwrap_or(Time(Timestamp::UNIX_EPOCH)),
        seen.generation,
    );
    status.reclaim = reclaimed;
    status.window = moments.record;
    status.provisioning_durations = moments.provisioning_durations;
    Decision {
        action,
        status,
        requeue,
        release_finalizer,
        schedulable_lag: moments.schedulable_lag,
    }
}

/// `Ready` (from the phase), `ScheduleValid` and `MachineReady`.
fn desired_conditions(seen: &Observed, phase: Phase, message: &str) -> [DesiredCondition; 3] {
    let machine_running = seen
        .machine
        .as_ref()
        .is_some_and(|m| !m.deleting && m.phase.as_deref() == Some("Running"));
    let schedule = match &seen.validity {
        Validity::Valid { .. } => (
            Status::True,
            Reason::from(ScheduledReason::ScheduleValid),
            String::new(),
        ),
        Validity::Invalid { reason, message } => (Status::False, *reason, message.clone()),
    };
    let machine = match &seen.machine {
        None => (
            Status::False,
            ScheduledReason::NoMachine,
            "no Machine exists".to_owned(),
        ),
        Some(m) if m.deleting => (
            Status::False,
            ScheduledReason::MachineDeleting,
            "the Machine is being deleted".to_owned(),
        ),
        Some(_) if machine_running => (
            Status::True,
            ScheduledReason::MachineRunning,
            "the Machine's Node has joined".to_owned(),
        ),
        // The phases on the way to a Node are one message, so that each step of the Machine
        // does not cost a status write; others (`Failed`, `Unknown`) are named.
        Some(m) => (
            Status::False,
            ScheduledReason::MachineNotRunning,
            match m.phase.as_deref() {
                None | Some("Pending" | "Provisioning" | "Provisioned") => {
                    "the Machine is on its way to a Node".to_owned()
                }
                Some(other) => format!("Machine phase {other}"),
            },
        ),
    };
    let ready = Status::from_bool(phase == Phase::Active && machine_running);
    [
        DesiredCondition::new(ScheduledCondition::Ready, ready, phase.reason(), message),
        DesiredCondition::new(ScheduledCondition::ScheduleValid, schedule.0, schedule.1, schedule.2),
        DesiredCondition::new(ScheduledCondition::MachineReady, machine.0, machine.1, machine.2),
    ]
}

fn build_status(
    current: &ScheduledMachineStatus,
    seen: &Observed,
    phase: Phase,
    message: String,
    shutdown_started: Option<DateTime<Utc>>,
    timing: Option<&Timing>,
) -> ScheduledMachineStatus {
    let now_time = time(seen.now).unwrap_or(Time(Timestamp::UNIX_EPOCH));
    let desired = desired_conditions(seen, phase, &message);
    let conditions = condition::merge_all(&current.conditions, &desired, &now_time, seen.generation);
    let exists = |present: bool, r: &crate::api::scheduled_machine::CreatedObjectReference| present.then(|| r.clone());
    let open = timing.is_some_and(|t| t.plan.open);
    let next_edge = timing.and_then(|t| t.plan.next_edge).and_then(time);
    ScheduledMachineStatus {
        phase: Some(phase),
        message: Some(message),
        in_schedule: timing.map(|_| open),
        next_activation: if open { None } else { next_edge.clone() },
        next_cleanup: if open { next_edge } else { None },
        next_transition: timing.and_then(|t| t.plan.next_change()).and_then(time),
        machine_ref: exists(seen.machine.is_some(), &seen.refs.machine),
        bootstrap_ref: seen
            .refs
            .bootstrap
            .as_ref()
            .and_then(|r| exists(seen.bootstrap_exists, r)),
        infrastructure_ref: exists(seen.infrastructure_exists, &seen.refs.infrastructure),
        node_ref: seen
            .machine
            .as_ref()
            .and_then(|m| m.node_name.clone())
            .map(|name| NodeReference { name }),
        provider_id: seen.machine.as_ref().and_then(|m| m.provider_id.clone()),
        shutdown_started_at: shutdown_started.and_then(time),
        lead_time: timing.and_then(|t| t.lead).map(format_duration),
        provisioning_durations: Vec::new(),
        window: None,
        reclaim: None,
        conditions,
        observed_generation: seen.generation,
    }
}

#[cfg(test)]
mod tests;

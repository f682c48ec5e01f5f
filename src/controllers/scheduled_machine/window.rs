//! The window's timeline in status (pure): when it opened, when its Node was Ready and when the
//! Node first took pods, plus the provisioning durations that `leadTime: auto` learns from.
//!
//! A record starts when the objects of a new window are first created, and is kept (through
//! the window and after it) until the next window starts. A reconcile that finds the machine
//! already there adds nothing it did not see happen.

use std::time::Duration;

use chrono::{DateTime, Utc};

use super::{
    plan::{Action, Observed, Timing, chrono_of, time},
    taints,
};
use crate::{
    api::scheduled_machine::{Phase, ScheduledMachineStatus, WindowRecord},
    schedule::{AUTO_HISTORY, format_duration},
};

/// What a reconcile records about the window.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Moments {
    /// `status.window`.
    pub record: Option<WindowRecord>,
    /// `status.provisioningDurations`.
    pub provisioning_durations: Vec<String>,
    /// Set in the reconcile whose action makes the Node schedulable: how long after the edge.
    pub schedulable_lag: Option<Duration>,
}

fn since(now: DateTime<Utc>, then: Option<DateTime<Utc>>) -> Option<Duration> {
    then.map(|t| (now - t).to_std().unwrap_or(Duration::ZERO))
}

/// Whether the Node takes pods once `action` is done: Ready, not cordoned, and without the
/// window-closed taint.
fn schedulable_after(seen: &Observed, action: &Action) -> bool {
    let Some(node) = &seen.node else { return false };
    let taints = match action {
        Action::SetTaints { update, .. } => &update.taints,
        _ => &node.taints,
    };
    let cordoned = node.cordoned && !matches!(action, Action::Uncordon { .. });
    node.ready && !cordoned && !taints::window_closed(taints)
}

/// Whether the change from `old` to `phase` ends a window that had opened without its Node ever
/// taking pods: closed, disabled, killed or reclaimed. A window still in its lead time had not
/// opened, so it is not missed.
#[must_use]
pub fn missed(old: &ScheduledMachineStatus, phase: Phase, now: DateTime<Utc>) -> bool {
    let ends = matches!(
        phase,
        Phase::ShuttingDown | Phase::Inactive | Phase::Disabled | Phase::Terminated | Phase::Reclaimed
    );
    let was_in_window = matches!(old.phase, Some(Phase::Preparing | Phase::Pending | Phase::Active));
    ends && was_in_window
        && old.window.as_ref().is_some_and(|r| {
            r.schedulable_at.is_none()
                && r.opens_at
                    .as_ref()
                    .and_then(chrono_of)
                    .is_some_and(|opens| opens <= now)
        })
}

/// The record and durations after this reconcile's `phase` and `action`.
#[must_use]
pub fn advance(
    current: &ScheduledMachineStatus,
    seen: &Observed,
    timing: Option<&Timing>,
    phase: Phase,
    action: &Action,
) -> Moments {
    let now = seen.now;
    let mut record = current.window.clone();
    let mut durations = current.provisioning_durations.clone();
    let creating_phase = matches!(current.phase, Some(Phase::Pending | Phase::Preparing));
    match (action, &seen.machine) {
        (Action::Create, None) if record.is_none() || !creating_phase => {
            let opens = timing.and_then(|t| t.edge).unwrap_or(now);
            record = Some(WindowRecord {
                opens_at: time(opens),
                provisioning_started_at: time(now),
                ..WindowRecord::default()
            });
        }
        // The previous window's Machine is still going: its record is over, the next not begun.
        (Action::None, Some(m)) if m.deleting && matches!(phase, Phase::Pending | Phase::Preparing) => record = None,
        _ => {}
    }
    let mut schedulable_lag = None;
    let machine_up = seen.machine.as_ref().is_some_and(|m| !m.deleting);
    if let (Some(r), Some(node), true) = (&mut record, &seen.node, machine_up) {
        if node.ready && r.node_ready_at.is_none() {
            r.node_ready_at = time(now);
            let started = r.provisioning_started_at.as_ref().and_then(chrono_of);
            if let Some(took) = since(now, started) {
                durations.push(format_duration(took));
                let excess = durations.len().saturating_sub(AUTO_HISTORY);
                durations.drain(..excess);
            }
        }
        if r.schedulable_at.is_none() && phase == Phase::Active && schedulable_after(seen, action) {
            r.schedulable_at = time(now);
            let lag = since(now, r.opens_at.as_ref().and_then(chrono_of));
            r.schedulable_lag = lag.map(format_duration);
            schedulable_lag = lag;
        }
    }
    Moments {
        record,
        provisioning_durations: durations,
        schedulable_lag,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(phase: Phase, opens: DateTime<Utc>, schedulable: Option<DateTime<Utc>>) -> ScheduledMachineStatus {
        ScheduledMachineStatus {
            phase: Some(phase),
            window: Some(WindowRecord {
                opens_at: time(opens),
                schedulable_at: schedulable.and_then(time),
                ..WindowRecord::default()
            }),
            ..ScheduledMachineStatus::default()
        }
    }

    #[test]
    fn a_window_is_missed_only_if_it_opened_and_ended_without_pods() {
        let now = DateTime::from_timestamp(1_800_000_000, 0).unwrap();
        let hour = chrono::Duration::hours(1);
        let opened = now - hour;
        assert!(missed(&status(Phase::Active, opened, None), Phase::ShuttingDown, now));
        assert!(missed(&status(Phase::Pending, opened, None), Phase::Reclaimed, now));
        // It took pods: not missed.
        assert!(!missed(
            &status(Phase::Active, opened, Some(opened)),
            Phase::ShuttingDown,
            now
        ));
        // Still in its lead time when disabled: it never opened.
        assert!(!missed(
            &status(Phase::Preparing, now + hour, None),
            Phase::Disabled,
            now
        ));
        // Counted once: the rest of the teardown is not another end.
        assert!(!missed(
            &status(Phase::ShuttingDown, opened, None),
            Phase::Inactive,
            now
        ));
        // A window going wrong has not ended.
        assert!(!missed(&status(Phase::Active, opened, None), Phase::Error, now));
        let no_record = ScheduledMachineStatus {
            phase: Some(Phase::Active),
            ..ScheduledMachineStatus::default()
        };
        assert!(!missed(&no_record, Phase::ShuttingDown, now));
    }
}

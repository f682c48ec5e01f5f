//! Powering a machine's VM off on deletion, as `spec.shutdown` says, before the teardown.
//!
//! `Hard` (or a zero timeout) leaves it to the teardown, which destroys the domain at once.
//! `Graceful` presses the ACPI power button once and records when in
//! `status.shutdownRequestedAt` (to the second, rounded up); deletion then looks again every few seconds (a requeue, never a
//! sleep) until the domain is off, or destroys it once `timeout` has passed since the request.
//! The request time lives in the status, so a manager restart neither asks again nor restarts
//! the clock. A driver that cannot send ACPI at all gets its domain destroyed at once.

use std::time::Duration;

use k8s_openapi::{apimachinery::pkg::apis::meta::v1::Time, jiff::Timestamp};
use kube::runtime::{controller::Action, events::EventType};
use uuid::Uuid;

use super::{
    provision::ProvisionError,
    status::{Outcome, current, with_ready},
};
use crate::{
    api::{
        condition::{self, DesiredCondition, Status},
        libvirt_machine::{LibvirtMachine, MachineCondition, MachineReason, ShutdownMode, ShutdownSpec},
    },
    libvirt::hypervisor::{Hypervisor, HypervisorError},
    schedule::{ScheduleError, parse_duration},
};

/// How often deletion looks at a guest it asked to power off.
const POLL: Duration = Duration::from_secs(2);
/// The shortest requeue while waiting, so a nearly spent timeout never spins.
const MIN_POLL: Duration = Duration::from_millis(100);

/// What a deletion pass does about power, decided before the host is touched.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Plan {
    /// Leave it to the teardown's destroy.
    Hard,
    /// Not asked yet: press the power button.
    Request {
        /// How long the guest gets.
        timeout: Duration,
    },
    /// Asked; `remaining` of the timeout is left.
    Wait {
        /// Until the timeout.
        remaining: Duration,
    },
    /// Asked, and `timeout` has passed.
    TimedOut {
        /// The timeout that passed.
        timeout: Duration,
    },
}

impl Plan {
    /// How long until the guest's time is up, for a plan that may wait.
    pub(super) fn remaining(self) -> Duration {
        match self {
            Self::Request { timeout } => timeout,
            Self::Wait { remaining } => remaining,
            Self::Hard | Self::TimedOut { .. } => Duration::ZERO,
        }
    }
}

/// The plan for `spec`, given when the guest was asked (if it was), at `now`.
///
/// # Errors
/// `spec.shutdown.timeout` is not a usable duration (the message names the field).
pub(super) fn plan(spec: &ShutdownSpec, requested_at: Option<&Time>, now: &Time) -> Result<Plan, ScheduleError> {
    if spec.mode == ShutdownMode::Hard {
        return Ok(Plan::Hard);
    }
    let timeout = parse_duration("spec.shutdown.timeout", &spec.timeout)?;
    if timeout.is_zero() {
        return Ok(Plan::Hard);
    }
    let Some(at) = requested_at else {
        return Ok(Plan::Request { timeout });
    };
    // A request stamped in the future (the clock moved back) counts as made just now.
    let elapsed = u64::try_from(now.0.as_millisecond().saturating_sub(at.0.as_millisecond())).unwrap_or(0);
    match timeout.checked_sub(Duration::from_millis(elapsed)) {
        Some(remaining) if !remaining.is_zero() => Ok(Plan::Wait { remaining }),
        _ => Ok(Plan::TimedOut { timeout }),
    }
}

/// What the power step found or did on the host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Power {
    /// Not running (any more), gone, or not ours: the teardown goes on. `asked_now` when this
    /// pass's request is what stopped it.
    Off {
        /// Whether this pass pressed the power button.
        asked_now: bool,
    },
    /// Asked and still running.
    Stopping {
        /// Whether this pass pressed the power button.
        asked_now: bool,
    },
    /// It still ran and has been destroyed, for this reason.
    Destroyed(Forced),
}

/// Why a running guest was destroyed instead of waited for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Forced {
    /// It did not power off within the timeout.
    TimedOut(Duration),
    /// libvirt cannot send it an ACPI request (its message).
    Refused(String),
}

/// Carry out `plan` on domain `name` (blocking: run on the host's thread); `Hard` touches
/// nothing and leaves the destroy to the teardown.
///
/// # Errors
/// Connection trouble, or a refused request or destroy; a rerun picks up from the status.
pub(super) fn step(hv: &dyn Hypervisor, name: &str, uuid: Uuid, plan: Plan) -> Result<Power, ProvisionError> {
    let running = |hv: &dyn Hypervisor| -> Result<bool, HypervisorError> {
        Ok(hv.domain(name)?.is_some_and(|d| d.uuid == uuid && d.state.is_active()))
    };
    let forced = match plan {
        Plan::Hard => return Ok(Power::Off { asked_now: false }),
        _ if !running(hv)? => return Ok(Power::Off { asked_now: false }),
        Plan::Wait { .. } => return Ok(Power::Stopping { asked_now: false }),
        Plan::TimedOut { timeout } => Forced::TimedOut(timeout),
        Plan::Request { .. } => match hv.shutdown(name) {
            Ok(()) if running(hv)? => return Ok(Power::Stopping { asked_now: true }),
            Ok(()) => return Ok(Power::Off { asked_now: true }),
            Err(e) if e.is_not_found() => return Ok(Power::Off { asked_now: false }),
            Err(e @ HypervisorError::Unsupported { .. }) => Forced::Refused(e.to_string()),
            Err(e) => return Err(e.into()),
        },
    };
    match hv.destroy(name) {
        Ok(()) => Ok(Power::Destroyed(forced)),
        Err(e) if e.is_not_found() => Ok(Power::Off { asked_now: false }),
        Err(e) => Err(e.into()),
    }
}

/// The Event, and the `caplv_libvirt_machine_events_total` label, for what the step did.
pub(super) fn announcement(
    power: &Power,
    domain: &str,
    spec: &ShutdownSpec,
) -> Option<(EventType, &'static str, String, &'static str)> {
    let timeout = &spec.timeout;
    match power {
        Power::Off { asked_now: false } | Power::Stopping { asked_now: false } => None,
        Power::Off { asked_now: true } | Power::Stopping { asked_now: true } => Some((
            EventType::Normal,
            "ShutdownRequested",
            format!(
                "asked the guest of domain {domain} to power off (ACPI); it is destroyed if it still runs after {timeout}"
            ),
            "shutdown_requested",
        )),
        Power::Destroyed(Forced::TimedOut(_)) => Some((
            EventType::Warning,
            "ShutdownTimedOut",
            format!(
                "the guest of domain {domain} did not power off within {timeout} of the ACPI request; destroyed it"
            ),
            "shutdown_timed_out",
        )),
        Power::Destroyed(Forced::Refused(why)) => Some((
            EventType::Warning,
            "ShutdownRefused",
            format!("libvirt cannot ask the guest of domain {domain} to power off ({why}); destroyed it"),
            "shutdown_refused",
        )),
    }
}

/// `status.shutdownRequestedAt` set when this pass pressed the power button: `now` rounded up
/// to the second, since the API keeps timestamps to the second and a time rounded down would
/// cut the guest's timeout short.
pub(super) fn recorded(machine: &LibvirtMachine, power: &Power, now: &Time) -> LibvirtMachine {
    let mut updated = machine.clone();
    if let Power::Off { asked_now: true } | Power::Stopping { asked_now: true } = power {
        let millis = now.0.as_millisecond();
        let second = millis.div_euclid(1000) + i64::from(millis.rem_euclid(1000) > 0);
        let mut status = current(machine);
        status.shutdown_requested_at = Some(Time(Timestamp::from_second(second).unwrap_or(now.0)));
        updated.status = Some(status);
    }
    updated
}

/// `Ready=False/ShuttingDown` while the guest powers off; looked at again in `remaining` (at
/// most a few seconds). A `CleanupStalled` left from an earlier pass is cleared: cleanup goes on.
pub(super) fn stopping(machine: &LibvirtMachine, domain: &str, remaining: Duration, now: &Time) -> Outcome {
    let mut status = current(machine);
    let since = status
        .shutdown_requested_at
        .as_ref()
        .map_or_else(|| "now".to_owned(), |t| t.0.to_string());
    let message = format!(
        "asked the guest to power off (ACPI) at {since}; domain {domain} is destroyed if it still runs {} after that",
        machine.spec.shutdown.timeout
    );
    if condition::find(&status.conditions, MachineCondition::CleanupStalled.as_str()).is_some() {
        let cleared = DesiredCondition::new(
            MachineCondition::CleanupStalled,
            Status::False,
            MachineReason::ShuttingDown,
            "waiting for the guest to power off",
        );
        status.conditions = condition::merge_all(&status.conditions, &[cleared], now, machine.metadata.generation);
    }
    Outcome {
        status: with_ready(
            status,
            machine,
            Status::False,
            MachineReason::ShuttingDown,
            message,
            now,
        ),
        events: Vec::new(),
        action: Action::requeue(remaining.min(POLL).max(MIN_POLL)),
        counted: Vec::new(),
    }
}

#[cfg(test)]
mod tests;

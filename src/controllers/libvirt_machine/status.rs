//! The statuses a reconcile writes: the `Ready` and `Paused` conditions with their reasons, and
//! the fields of a provisioned machine.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::runtime::{controller::Action, events::EventType};

use crate::api::{
    condition::{self, DesiredCondition, Status},
    libvirt_machine::{LibvirtMachine, LibvirtMachineStatus, MachineCondition, MachineReason, Reason},
};

/// A status to write, the Events to publish with it and when to look again.
#[derive(Debug)]
pub(super) struct Outcome {
    pub status: LibvirtMachineStatus,
    pub events: Vec<(EventType, &'static str, String)>,
    pub action: Action,
    /// Labels of `caplv_machine_events_total` this pass counts.
    pub counted: Vec<&'static str>,
}

/// A reason, a message and when to look again: why a machine does not go on.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Wait {
    pub reason: Reason,
    pub message: String,
    pub action: Action,
}

impl Wait {
    pub fn new(reason: impl Into<Reason>, message: impl Into<String>, action: Action) -> Self {
        Self {
            reason: reason.into(),
            message: message.into(),
            action,
        }
    }
}

/// The machine's status so far.
pub(super) fn current(machine: &LibvirtMachine) -> LibvirtMachineStatus {
    machine.status.clone().unwrap_or_default()
}

/// `status` with `Ready` set (and `Paused` cleared).
pub(super) fn with_ready(
    mut status: LibvirtMachineStatus,
    machine: &LibvirtMachine,
    ready: Status,
    reason: impl Into<Reason>,
    message: impl Into<String>,
    now: &Time,
) -> LibvirtMachineStatus {
    let desired = [
        DesiredCondition::new(MachineCondition::Ready, ready, reason.into(), message),
        DesiredCondition::new(MachineCondition::Paused, Status::False, MachineReason::NotPaused, ""),
    ];
    status.conditions = condition::merge_all(&status.conditions, &desired, now, machine.metadata.generation);
    status.observed_generation = machine.metadata.generation;
    status
}

/// `Ready=False` for `wait`, nothing else changed.
pub(super) fn waiting(machine: &LibvirtMachine, wait: Wait, now: &Time) -> Outcome {
    Outcome {
        status: with_ready(current(machine), machine, Status::False, wait.reason, wait.message, now),
        events: Vec::new(),
        action: wait.action,
        counted: Vec::new(),
    }
}

/// How much longer `wait` goes unreported, if it does: while a machine without any status yet
/// is younger than `grace` and waits for its owner, its bootstrap data (named, or not yet in
/// the cache) or its host. The Machine and the bootstrap config are created together with it
/// (by a MachineSet, by 5-Spot), so these waits usually end within seconds, even in a burst of a
/// thousand: reporting each would cost every new machine a status write or two that no one
/// reads. `wall` is now on the API server's timeline, like `creationTimestamp`.
pub(super) fn unreported_for(
    machine: &LibvirtMachine,
    wait: &Wait,
    wall: &Time,
    grace: std::time::Duration,
) -> Option<std::time::Duration> {
    let first = matches!(
        wait.reason,
        Reason::Machine(
            MachineReason::WaitingForMachineOwner
                | MachineReason::WaitingForBootstrapData
                | MachineReason::BootstrapDataNotFound
                | MachineReason::WaitingForHost
        )
    );
    if machine.status.is_some() || !first {
        return None;
    }
    let created = machine.metadata.creation_timestamp.as_ref()?;
    let age = wall.0.duration_since(created.0).unsigned_abs();
    grace.checked_sub(age).filter(|left| !left.is_zero())
}

/// Nothing written yet: look again when the grace of [`unreported_for`] ends.
pub(super) fn unreported(machine: &LibvirtMachine, left: std::time::Duration) -> Outcome {
    Outcome {
        status: current(machine),
        events: Vec::new(),
        action: Action::requeue(left),
        counted: Vec::new(),
    }
}

/// `Paused=True`; `Ready` keeps what it said.
pub(super) fn paused(machine: &LibvirtMachine, now: &Time) -> Outcome {
    let mut status = current(machine);
    status.conditions = condition::merge_all(
        &status.conditions,
        &[DesiredCondition::new(
            MachineCondition::Paused,
            Status::True,
            MachineReason::Paused,
            crate::reconcile::owner::PAUSED_MESSAGE,
        )],
        now,
        machine.metadata.generation,
    );
    Outcome {
        status,
        events: Vec::new(),
        action: Action::await_change(),
        counted: Vec::new(),
    }
}

/// The reason the stored `Ready` condition names, when it is one of the machine's own.
pub(super) fn ready_reason(status: &LibvirtMachineStatus) -> Option<MachineReason> {
    condition::find(&status.conditions, MachineCondition::Ready.as_str()).and_then(|c| MachineReason::parse(&c.reason))
}

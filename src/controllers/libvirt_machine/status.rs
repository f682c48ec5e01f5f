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

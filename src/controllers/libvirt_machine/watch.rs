//! Watching a provisioned machine's domain: restart it when it stopped, report it when it
//! vanished. libvirt's state reason tells why it stopped: its guest shut it down, it crashed, or
//! it was destroyed on the host; each restart is announced by that. A guest that shuts down while
//! its Machine is being deleted (Cluster API drains it, then deletes this object) is left off.

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::{
    ResourceExt,
    runtime::{controller::Action, events::EventType},
};
use uuid::Uuid;

use super::{
    Error, HOST_RETRY, State, plan,
    provision::{self, ProvisionError},
    status::{Outcome, Wait, current, ready_reason, waiting, with_ready},
};
use crate::{
    api::{
        condition::Status,
        libvirt_host::LibvirtHost,
        libvirt_machine::{LibvirtMachine, MachineReason},
    },
    libvirt::hypervisor::{DomainState, Hypervisor, StopReason},
    reconcile::host_connections::HostCall,
};

/// What the check found on the host.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum DomainCheck {
    /// The domain exists in this state (running, or not yet restartable).
    Found(DomainState),
    /// It had stopped (`before`, for `why`) and was started again; `after` is its state now.
    Restarted {
        /// The state it was found in.
        before: DomainState,
        /// Why it had stopped.
        why: StopReason,
        /// Its state after `start`.
        after: DomainState,
    },
    /// Its guest shut it down while the owner Machine is being deleted: left off.
    LeftOff,
    /// Its guest shut it down and the cache says the owner Machine is not being deleted: not
    /// started yet, as the cache may lag a deletion that has just begun.
    GuestShutDown,
    /// No domain of ours under the machine's name.
    Missing,
}

/// What a check knows of the owner Machine, which decides whether a guest shutdown is undone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Owner {
    /// Being deleted: a guest shutdown is left off.
    Deleting,
    /// Not being deleted as far as the cache knows: a guest shutdown waits for a live read.
    Cached,
    /// Not being deleted by a live read: a guest shutdown is undone.
    Confirmed,
}

impl Owner {
    /// From a read of the Machine: deleting, or not (as `otherwise`).
    pub(super) fn of(deleting: bool, otherwise: Self) -> Self {
        if deleting { Self::Deleting } else { otherwise }
    }
}

/// Look at the domain and start it again if it stopped, unless its guest shut it down and the
/// owner Machine is (or may be) being deleted (blocking: run on the host's thread).
///
/// # Errors
/// Connection trouble, a foreign domain under our name, or a refused start.
pub(super) fn inspect_and_restart(
    hv: &dyn Hypervisor,
    name: &str,
    uuid: Uuid,
    owner: Owner,
) -> Result<DomainCheck, ProvisionError> {
    match provision::inspect(hv, name, uuid)? {
        Some(d) if !d.state.is_active() => {
            let why = d.stop_reason.unwrap_or(StopReason::Other);
            match owner {
                _ if why != StopReason::ShutDown => {}
                Owner::Deleting => return Ok(DomainCheck::LeftOff),
                Owner::Cached => return Ok(DomainCheck::GuestShutDown),
                Owner::Confirmed => {}
            }
            let after = provision::restart(hv, name)?;
            Ok(DomainCheck::Restarted {
                before: d.state,
                why,
                after: after.unwrap_or(d.state),
            })
        }
        Some(d) => Ok(DomainCheck::Found(d.state)),
        None => Ok(DomainCheck::Missing),
    }
}

/// The status after a check; `ready` stays latched whatever it found.
pub(super) fn outcome(
    machine: &LibvirtMachine,
    id: &plan::Identity,
    host_name: &str,
    called: HostCall<DomainCheck, ProvisionError>,
    interval: Duration,
    now: &Time,
) -> Outcome {
    let retry = Action::requeue(interval.min(HOST_RETRY));
    let check = match called {
        HostCall::Ran { result: Ok(check), .. } => check,
        HostCall::Ran { result: Err(e), .. } => {
            return waiting(machine, Wait::new(e.reason(), e.to_string(), retry), now);
        }
        HostCall::Unreachable(f) => {
            let message = format!("{}: {}", f.reason, f.message);
            return waiting(machine, Wait::new(MachineReason::HostUnreachable, message, retry), now);
        }
    };
    let mut status = current(machine);
    let mut seen = Seen::of(check, &id.node_name, host_name);
    // A state that lasts (vanished, left off) is counted when it begins, not on every check.
    if let Some(label) = seen.counted_once.filter(|_| ready_reason(&status) != Some(seen.reason)) {
        seen.counted.push(label);
    }
    status.domain_state = Some(seen.state);
    Outcome {
        status: with_ready(status, machine, seen.ready, seen.reason, seen.message, now),
        events: seen.events,
        action: Action::requeue(interval),
        counted: seen.counted,
    }
}

/// What a check's result means for the status, the Events and the metric.
struct Seen {
    ready: Status,
    reason: MachineReason,
    message: String,
    state: String,
    events: Vec<(EventType, &'static str, String)>,
    counted: Vec<&'static str>,
    counted_once: Option<&'static str>,
}

impl Seen {
    fn of(check: DomainCheck, node_name: &str, host_name: &str) -> Self {
        let (mut events, mut counted, mut counted_once) = (Vec::new(), Vec::new(), None);
        let (ready, reason, message, state) = match check {
            DomainCheck::Missing => {
                counted_once = Some("vanished");
                let message = format!(
                    "domain {node_name} no longer exists on {host_name}; replace the Machine (a MachineHealthCheck does this)"
                );
                (
                    Status::False,
                    MachineReason::DomainMissing,
                    message,
                    "missing".to_owned(),
                )
            }
            DomainCheck::LeftOff => {
                counted_once = Some("guest_shutdown");
                let message = format!(
                    "domain {node_name} was shut down by its guest while its Machine is being deleted; left off"
                );
                let state = DomainState::Shutoff.as_str().to_owned();
                (Status::False, MachineReason::DomainShutDown, message, state)
            }
            // Only between the two reads of a check; reported as found should it ever remain.
            DomainCheck::GuestShutDown => (
                Status::False,
                MachineReason::DomainNotRunning,
                format!("domain {node_name} is {}", DomainState::Shutoff.as_str()),
                DomainState::Shutoff.as_str().to_owned(),
            ),
            DomainCheck::Found(state) | DomainCheck::Restarted { after: state, .. } => {
                if let DomainCheck::Restarted { before, why, .. } = check {
                    counted.push("restarted");
                    counted.extend(restart_label(why));
                    let note = format!(
                        "domain {node_name} {} ({}) and has been started again",
                        why.describe(),
                        before.as_str()
                    );
                    events.push((EventType::Warning, restart_event(why), note));
                }
                let message = format!("domain {node_name} is {}", state.as_str());
                let (ready, reason) = if state.is_active() {
                    (Status::True, MachineReason::DomainRunning)
                } else {
                    (Status::False, MachineReason::DomainNotRunning)
                };
                (ready, reason, message, state.as_str().to_owned())
            }
        };
        Self {
            ready,
            reason,
            message,
            state,
            events,
            counted,
            counted_once,
        }
    }
}

/// The Event a restart is announced with: what had happened to the domain, when it says.
fn restart_event(why: StopReason) -> &'static str {
    match why {
        StopReason::ShutDown => "DomainShutDown",
        StopReason::Crashed => "DomainCrashed",
        StopReason::Destroyed | StopReason::Other => "DomainRestarted",
    }
}

/// The `caplv_libvirt_machine_events_total` label for why a restarted domain had stopped.
fn restart_label(why: StopReason) -> Option<&'static str> {
    match why {
        StopReason::ShutDown => Some("guest_shutdown"),
        StopReason::Crashed => Some("crashed"),
        StopReason::Destroyed | StopReason::Other => None,
    }
}

/// After provisioning: check the domain on `host`; `owner_deleting` while the owner Machine
/// is being deleted (Cluster API drains the Node, then deletes this object).
pub(super) async fn check(
    machine: &LibvirtMachine,
    state: &State,
    id: &plan::Identity,
    host: &LibvirtHost,
    owner_deleting: bool,
) -> Result<Outcome, Error> {
    let ctx = &state.ctx;
    let inspect = |owner: Owner| {
        let (name, uuid) = (id.node_name.clone(), id.uuid);
        state
            .shared
            .hosts
            .call(&ctx.client, host, move |hv| inspect_and_restart(hv, &name, uuid, owner))
    };
    let mut called = inspect(Owner::of(owner_deleting, Owner::Cached)).await?;
    if matches!(
        called,
        HostCall::Ran {
            result: Ok(DomainCheck::GuestShutDown),
            ..
        }
    ) {
        // Undoing a guest's shutdown is a write on the host: the cache may not show yet the
        // deletion that made Cluster API's drain power the guest off.
        let deleting = super::observe::owner_deleting_now(machine, ctx).await?;
        called = inspect(Owner::of(deleting, Owner::Confirmed)).await?;
    }
    let mut out = outcome(
        machine,
        id,
        &host.name_any(),
        called,
        ctx.settings.domain_check_interval,
        &ctx.timestamp(),
    );
    if plan::wants_leases(&machine.spec) && out.status.domain_state.as_deref() == Some("running") {
        let name = id.node_name.clone();
        let read = move |hv: &dyn Hypervisor| Ok::<_, ProvisionError>(hv.interface_addresses(&name)?);
        if let HostCall::Ran { result: Ok(found), .. } = state.shared.hosts.call(&ctx.client, host, read).await? {
            let spec = super::ipam::effective_spec(&machine.spec, super::ipam::recorded(machine));
            out.status.addresses = plan::addresses(id, &spec, &found);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests;

//! Watching a provisioned machine's domain: restart it when it stopped, report it when it vanished.

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
    libvirt::hypervisor::{DomainState, Hypervisor},
    reconcile::host_connections::HostCall,
};

/// What the check found on the host.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum DomainCheck {
    /// The domain exists in this state (running, or not yet restartable).
    Found(DomainState),
    /// It had stopped (`before`) and was started again; `after` is its state now.
    Restarted {
        /// The state it was found in.
        before: DomainState,
        /// Its state after `start`.
        after: DomainState,
    },
    /// No domain of ours under the machine's name.
    Missing,
}

/// Look at the domain and start it again if it stopped (blocking: run on the host's thread).
///
/// # Errors
/// Connection trouble, a foreign domain under our name, or a refused start.
pub(super) fn inspect_and_restart(hv: &dyn Hypervisor, name: &str, uuid: Uuid) -> Result<DomainCheck, ProvisionError> {
    match provision::inspect(hv, name, uuid)? {
        Some(d) if !d.state.is_active() => {
            let after = provision::restart(hv, name)?;
            Ok(DomainCheck::Restarted {
                before: d.state,
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
    let mut events = Vec::new();
    let mut counted = Vec::new();
    let (ready, reason, message) = match check {
        DomainCheck::Missing => {
            if ready_reason(&status) != Some(MachineReason::DomainMissing) {
                counted.push("vanished");
            }
            status.domain_state = Some("missing".to_owned());
            let message = format!(
                "domain {} no longer exists on {host_name}; replace the Machine (a MachineHealthCheck does this)",
                id.node_name
            );
            (Status::False, MachineReason::DomainMissing, message)
        }
        DomainCheck::Found(state) | DomainCheck::Restarted { after: state, .. } => {
            if let DomainCheck::Restarted { before, .. } = check {
                counted.push("restarted");
                let note = format!(
                    "domain {} was {} and has been started again",
                    id.node_name,
                    before.as_str()
                );
                events.push((EventType::Warning, "DomainRestarted", note));
            }
            status.domain_state = Some(state.as_str().to_owned());
            let message = format!("domain {} is {}", id.node_name, state.as_str());
            if state.is_active() {
                (Status::True, MachineReason::DomainRunning, message)
            } else {
                (Status::False, MachineReason::DomainNotRunning, message)
            }
        }
    };
    Outcome {
        status: with_ready(status, machine, ready, reason, message, now),
        events,
        action: Action::requeue(interval),
        counted,
    }
}

/// After provisioning: check the domain on `host`.
pub(super) async fn check(
    machine: &LibvirtMachine,
    state: &State,
    id: &plan::Identity,
    host: &LibvirtHost,
) -> Result<Outcome, Error> {
    let ctx = &state.ctx;
    let (name, uuid) = (id.node_name.clone(), id.uuid);
    let called = state
        .shared
        .hosts
        .call(&ctx.client, host, move |hv| inspect_and_restart(hv, &name, uuid))
        .await?;
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
            out.status.addresses = plan::addresses(id, &machine.spec, &found);
        }
    }
    Ok(out)
}

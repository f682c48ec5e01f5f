//! Watching a provisioned machine's domain: restart it when it stopped, report it when it vanished.

use kube::runtime::{controller::Action, events::EventType};

use super::{Error, HOST_RETRY, Outcome, State, current, host_of, plan, provision, waiting, with_ready};
use crate::{
    api::{
        condition::{self, Status},
        libvirt_machine::LibvirtMachine,
    },
    reconcile::host_connections::host_id,
};

/// After provisioning: check the domain, restart it if it stopped, report it if it vanished.
pub(super) async fn check(machine: &LibvirtMachine, state: &State, id: &plan::Identity) -> Result<Outcome, Error> {
    let ctx = &state.ctx;
    let interval = ctx.settings.domain_check_interval;
    let host_name = &machine.spec.host_ref.name;
    let Some(host) = host_of(machine, ctx).await? else {
        return Ok(waiting(
            machine,
            "HostNotFound",
            format!("LibvirtHost {host_name:?} does not exist"),
            Action::requeue(interval),
        ));
    };
    let conn = match state.shared.hosts.get(&ctx.client, &host).await? {
        Ok(c) => c,
        Err(f) => {
            return Ok(waiting(
                machine,
                "HostUnreachable",
                format!("{}: {}", f.reason, f.message),
                Action::requeue(interval.min(HOST_RETRY)),
            ));
        }
    };
    let hv = conn.hypervisor();
    let (name, uuid) = (id.node_name.clone(), id.uuid);
    let observed = tokio::task::spawn_blocking(move || {
        let found = provision::inspect(hv.as_ref(), &name, uuid)?;
        match found {
            Some(d) if !d.state.is_active() => {
                let before = d.state;
                let after = provision::restart(hv.as_ref(), &name)?;
                Ok((Some(after.unwrap_or(before)), Some(before)))
            }
            Some(d) => Ok((Some(d.state), None)),
            None => Ok::<_, provision::ProvisionError>((None, None)),
        }
    })
    .await
    .map_err(|e| Error::Task(e.to_string()))?;
    let mut status = current(machine);
    match observed {
        Ok((Some(state_now), restarted_from)) => {
            status.domain_state = Some(state_now.as_str().to_owned());
            let mut events = Vec::new();
            if let Some(before) = restarted_from {
                ctx.metrics.machine_events.with_label_values(&["restarted"]).inc();
                events.push((
                    EventType::Warning,
                    "DomainRestarted",
                    format!(
                        "domain {} was {} and has been started again",
                        id.node_name,
                        before.as_str()
                    ),
                ));
            }
            let (ready, reason) = if state_now.is_active() {
                (Status::True, "DomainRunning")
            } else {
                (Status::False, "DomainNotRunning")
            };
            let message = format!("domain {} is {}", id.node_name, state_now.as_str());
            Ok(Outcome {
                status: with_ready(status, machine, ready, reason, message),
                events,
                action: Action::requeue(interval),
            })
        }
        Ok((None, _)) => {
            let was_missing =
                condition::find(&status.conditions, condition::READY).is_some_and(|c| c.reason == "DomainMissing");
            if !was_missing {
                ctx.metrics.machine_events.with_label_values(&["vanished"]).inc();
            }
            status.domain_state = Some("missing".to_owned());
            Ok(Outcome {
                status: with_ready(
                    status,
                    machine,
                    Status::False,
                    "DomainMissing",
                    format!(
                        "domain {} no longer exists on {host_name}; replace the Machine (a MachineHealthCheck does this)",
                        id.node_name
                    ),
                ),
                events: Vec::new(),
                action: Action::requeue(interval),
            })
        }
        Err(e) => {
            if e.is_transient() {
                state.shared.hosts.forget(&host_id(&host)).await;
            }
            Ok(waiting(
                machine,
                e.reason(),
                e.to_string(),
                Action::requeue(interval.min(HOST_RETRY)),
            ))
        }
    }
}

//! Carrying out a [`Decision`]: the finalizer and `spec.providerID`, admission, and the
//! host-side steps off the reactor.

use std::time::{Duration, Instant};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::{
    ResourceExt,
    api::{Patch, PatchParams},
    runtime::{controller::Action, events::EventType},
};

use super::{
    Error, FINALIZER, HOST_RETRY, State, admission, api,
    decide::{Decision, ProvisionPlan, Step, host_invalid_spec},
    ipam, plan, provision,
    status::{Outcome, Wait, current, paused, unreported, unreported_for, waiting, with_ready},
    watch,
};
use crate::{
    api::{
        common::InfrastructureInitialization,
        condition::Status,
        libvirt_host::LibvirtHost,
        libvirt_machine::{AllocatedResources, LibvirtMachine, MachineReason},
    },
    reconcile::{finalizer, host_connections::HostCall},
};

/// Do what `decision` says and return the status to write.
pub(super) async fn act(
    machine: &LibvirtMachine,
    state: &State,
    id: &plan::Identity,
    decision: Decision,
) -> Result<Outcome, Error> {
    let now = state.ctx.timestamp();
    if decision.claim {
        claim(machine, state, &id.provider_id).await?;
    }
    match decision.step {
        Step::Wait(wait) => Ok(
            match unreported_for(
                machine,
                &wait,
                &state.ctx.wall_time(),
                state.ctx.settings.first_wait_grace,
            ) {
                Some(left) => unreported(machine, left),
                None => waiting(machine, wait, &now),
            },
        ),
        Step::Pause => Ok(paused(machine, &now)),
        Step::Watch { host, owner_deleting } => watch::check(machine, state, id, &host, owner_deleting).await,
        Step::Claim { cluster, claims } => {
            ipam::create(machine, &cluster, &claims, &state.ctx).await?;
            let names: Vec<&str> = claims.iter().map(|c| c.name.as_str()).collect();
            let wait = Wait::new(
                MachineReason::WaitingForIPAddress,
                format!(
                    "filed IPAddressClaims {}; waiting for their addresses",
                    names.join(", ")
                ),
                Action::requeue(ipam::POLL),
            );
            Ok(waiting(machine, wait, &now))
        }
        Step::Provision(plan) => {
            let stamps = Stamps {
                now,
                wall: state.ctx.wall_time(),
            };
            provision(machine, state, id, *plan, &stamps).await
        }
    }
}

/// Add the finalizer and set `spec.providerID` (one patch).
async fn claim(machine: &LibvirtMachine, state: &State, provider_id: &str) -> Result<(), Error> {
    let patch = serde_json::json!({
        "metadata": {
            "finalizers": finalizer::added(&machine.metadata, FINALIZER),
            "resourceVersion": machine.resource_version(),
        },
        "spec": {"providerID": provider_id},
    });
    let claimed = api(&state.ctx, machine)
        .patch(&machine.name_any(), &PatchParams::default(), &Patch::Merge(patch))
        .await
        .map_err(crate::reconcile::ApiError::write("finalizer and providerID"))?;
    state.own.wrote(machine, claimed);
    Ok(())
}

/// Admit (once), then bring the domain up on the host.
async fn provision(
    machine: &LibvirtMachine,
    state: &State,
    id: &plan::Identity,
    plan: ProvisionPlan,
    stamps: &Stamps,
) -> Result<Outcome, Error> {
    let ctx = &state.ctx;
    let now = &stamps.now;
    let ProvisionPlan {
        hosts,
        root,
        payload,
        claimed,
    } = plan;
    // The claimed addresses go into status with admission's write, and stay for the VM's life.
    let mut with_claims = machine.clone();
    with_claims.status.get_or_insert_default().claimed_addresses = claimed;
    let (admitted, host) = match admit_once(&with_claims, state, hosts, id, now).await? {
        Ok(admitted) => admitted,
        Err(wait) => return Ok(waiting(&with_claims, wait, now)),
    };
    let machine = &admitted;
    let Some(size) = current(machine).allocated else {
        return Err(Error::Task("admission recorded no allocation".to_owned()));
    };
    let planned = plan::domain(id, machine, &host, size).and_then(|d| Ok((d, plan::data_disks(id, &machine.spec)?)));
    let (domain, data_disks) = match planned {
        Ok(planned) => planned,
        Err(e) => {
            let wait = Wait::new(host_invalid_spec(), e.to_string(), Action::await_change());
            return Ok(waiting(machine, wait, now));
        }
    };
    let reservations = current(machine)
        .managed_artifacts
        .map(|a| a.dhcp_reservations)
        .unwrap_or_default();
    let read_addresses = plan::wants_leases(&machine.spec);
    let started = Instant::now();
    let called = state
        .shared
        .hosts
        .call(&ctx.client, &host, move |hv| {
            provision::provision(
                hv,
                &provision::Request {
                    root: &root,
                    domain: &domain,
                    ignition: &payload,
                    data_disks: &data_disks,
                    reservations: &reservations,
                    read_addresses,
                },
            )
        })
        .await?;
    ctx.metrics.provision_duration.observe(started.elapsed().as_secs_f64());
    let retry = ctx.settings.error_requeue.max(Duration::from_secs(1));
    let placed = Placed { host: &host, size };
    Ok(outcome(
        machine,
        id,
        placed,
        called,
        retry,
        ctx.settings.domain_check_interval,
        stamps,
    ))
}

/// The machine as admitted to its host, with the status admission wrote (host, allocation,
/// artifacts) to carry into every later write; admission runs only if it holds no allocation.
async fn admit_once(
    machine: &LibvirtMachine,
    state: &State,
    hosts: Vec<LibvirtHost>,
    id: &plan::Identity,
    now: &Time,
) -> Result<Result<(LibvirtMachine, LibvirtHost), Wait>, Error> {
    if current(machine).allocated.is_some() {
        let Some(host) = hosts.into_iter().next() else {
            return Err(Error::Task("a provisioning plan without its host".to_owned()));
        };
        return Ok(Ok((machine.clone(), host)));
    }
    Ok(match admission::admit_to_one(machine, state, hosts, id, now).await? {
        Ok((written, host)) => {
            let mut updated = machine.clone();
            updated.status = Some(*written);
            Ok((updated, host))
        }
        Err(wait) => Err(wait),
    })
}

/// The two clocks a provisioning pass stamps with.
pub(super) struct Stamps {
    /// The injected clock: condition transitions.
    pub now: Time,
    /// The API server's timeline: `status.provisionedAt`, which CSR approval compares with a
    /// CSR's `creationTimestamp`.
    pub wall: Time,
}

/// Where a machine was admitted, and with what.
#[derive(Clone, Copy)]
pub(super) struct Placed<'a> {
    pub host: &'a LibvirtHost,
    pub size: AllocatedResources,
}

/// The status after the host-side steps ran (or could not): `transient_retry` after connection
/// trouble, `check_interval` once the domain runs.
pub(super) fn outcome(
    machine: &LibvirtMachine,
    id: &plan::Identity,
    placed: Placed<'_>,
    called: HostCall<provision::Provisioned, provision::ProvisionError>,
    transient_retry: Duration,
    check_interval: Duration,
    stamps: &Stamps,
) -> Outcome {
    let now = &stamps.now;
    let done = match called {
        HostCall::Ran { result: Ok(done), .. } => done,
        HostCall::Ran { result: Err(e), .. } => {
            let retry = if e.is_transient() { transient_retry } else { HOST_RETRY };
            return waiting(
                machine,
                Wait::new(e.reason(), e.to_string(), Action::requeue(retry)),
                now,
            );
        }
        HostCall::Unreachable(f) => {
            return waiting(
                machine,
                Wait::new(f.reason, f.message, Action::requeue(HOST_RETRY)),
                now,
            );
        }
    };
    let Placed { host, size } = placed;
    let mut status = current(machine);
    status.ready = true;
    if status.provisioned_at.is_none() {
        status.provisioned_at = Some(stamps.wall.clone());
    }
    status.initialization = Some(InfrastructureInitialization {
        provisioned: Some(true),
    });
    let spec = ipam::effective_spec(&machine.spec, ipam::recorded(machine));
    status.addresses = plan::addresses(id, &spec, &done.addresses);
    status.node_name = Some(id.node_name.clone());
    status.domain_uuid = Some(id.uuid.hyphenated().to_string());
    status.domain_state = Some(done.domain.state.as_str().to_owned());
    status.allocated = Some(size);
    status.managed_artifacts = Some(plan::artifacts(id, &machine.spec, host));
    let message = format!(
        "domain {} {} on {} ({} vCPUs, {} MiB)",
        id.node_name,
        done.domain.state.as_str(),
        host.name_any(),
        size.vcpus,
        size.memory_mb
    );
    let mut events = vec![(EventType::Normal, "Provisioned", message.clone())];
    let mut counted = vec!["provisioned"];
    if done.started_now && !done.defined_now {
        counted.push("restarted");
        let note = format!(
            "domain {} was defined but not running and has been started",
            id.node_name
        );
        events.push((EventType::Warning, "DomainRestarted", note));
    }
    Outcome {
        status: with_ready(
            status,
            machine,
            Status::True,
            MachineReason::DomainRunning,
            message,
            now,
        ),
        events,
        action: Action::requeue(check_interval),
        counted,
    }
}

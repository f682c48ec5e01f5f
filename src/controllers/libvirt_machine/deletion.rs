//! Deleting a LibvirtMachine: power the VM off as `spec.shutdown` says ([`super::power_off`]),
//! remove everything `status.managedArtifacts` names from the host, prove nothing is left,
//! release the allocation and the IPAM claims, then drop the finalizer.
//!
//! A host that cannot be reached (or whose LibvirtHost is gone) holds the finalizer with
//! `CleanupStalled=True` and a retry every 30 s, so a network blip never leaks a VM. When the
//! host is gone for good, the escape is the annotation
//! `libvirtmachine.infrastructure.cluster.x-k8s.io/abandon-host-artifacts: "true"`: the
//! finalizer is dropped without touching the host, and a Warning Event lists what was left.
//!
//! `clusterctl move` deletes the source's copy (annotated [`MOVE_ANNOTATION`]) after creating the
//! target's: the VM and its addresses now belong to the target, so only the finalizer goes.

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::{
    ResourceExt,
    runtime::{controller::Action, events::EventType},
};

use super::{
    Error, FINALIZER, State, api, ipam,
    observe::host_of,
    plan, power_off, provision,
    status::{Outcome, current, with_ready},
};
use crate::{
    api::{
        condition::{self, DesiredCondition, Status},
        libvirt_host::LibvirtHost,
        libvirt_machine::{LibvirtMachine, MachineCondition, MachineReason, ManagedArtifacts, Reason},
    },
    reconcile::{
        finalizer,
        host_connections::{HostCall, host_id},
    },
};

/// Annotation that lets a machine go without cleaning its (unreachable, gone) host.
pub const ABANDON_ANNOTATION: &str = "libvirtmachine.infrastructure.cluster.x-k8s.io/abandon-host-artifacts";
const STALL_RETRY: Duration = Duration::from_secs(30);
/// What `clusterctl move` puts on the objects it deletes from the source cluster.
pub const MOVE_ANNOTATION: &str = "clusterctl.cluster.x-k8s.io/delete-for-move";

/// Run one deletion pass. `None` when the object is released (nothing more to write).
pub(super) async fn delete(machine: &LibvirtMachine, state: &State) -> Result<Option<Outcome>, Error> {
    if !finalizer::has(&machine.metadata, FINALIZER) {
        return Ok(None);
    }
    let ctx = &state.ctx;
    let namespace = machine.namespace().unwrap_or_default();
    // A machine that never got a host (an unplaced hostSelector) has nothing on any host.
    let host_key = (namespace.clone(), machine.host_name().unwrap_or_default().to_owned());
    let uid = machine.uid().unwrap_or_default();
    if machine.annotations().contains_key(MOVE_ANNOTATION) {
        state.shared.placement.record(&host_key, &uid, None);
        finalizer::release(&api(ctx, machine), machine, FINALIZER)
            .await
            .map_err(crate::reconcile::ApiError::write("finalizer"))?;
        return Ok(None);
    }
    let Some(artifacts) = current(machine).managed_artifacts else {
        // Never admitted: nothing exists on the host.
        state.shared.placement.record(&host_key, &uid, None);
        release(machine, state).await?;
        return Ok(None);
    };
    if machine.annotations().get(ABANDON_ANNOTATION).map(String::as_str) == Some("true") {
        abandon(machine, state, &artifacts).await;
        state.shared.placement.record(&host_key, &uid, None);
        release(machine, state).await?;
        return Ok(None);
    }
    let Some(uuid) = plan::identity(machine).map(|i| i.uuid) else {
        return Err(Error::NoUid);
    };
    let now = ctx.timestamp();
    let Some(host) = host_of(machine, ctx).await? else {
        let message = format!(
            "LibvirtHost {:?} does not exist; recreate it, or set the annotation {ABANDON_ANNOTATION}=\"true\" to leave {} behind",
            host_key.1,
            list(&artifacts)
        );
        return Ok(Some(stalled(machine, MachineReason::HostNotFound, message, &now)));
    };
    let machine = &*match power_off(machine, state, &host, &artifacts, uuid, &now).await? {
        Powered::Off(machine) => machine,
        Powered::Wait(outcome) => return Ok(Some(*outcome)),
    };
    let recorded = artifacts.clone();
    let called = state
        .shared
        .hosts
        .call(&ctx.client, &host, move |hv| {
            provision::teardown(hv, &recorded, uuid)?;
            Ok::<_, provision::ProvisionError>(provision::leftovers(hv, &recorded, uuid)?)
        })
        .await?;
    match called {
        HostCall::Ran { result: Ok(left), .. } if left.is_empty() => {
            ctx.metrics.machine_events.with_label_values(&["deleted"]).inc();
            state.shared.placement.record(&host_id(&host), &uid, None);
            release(machine, state).await?;
            Ok(None)
        }
        HostCall::Ran { result: Ok(left), .. } => Ok(Some(stalled(
            machine,
            MachineReason::ArtifactsRemain,
            format!("still on the host after teardown: {}", left.join(", ")),
            &now,
        ))),
        HostCall::Ran { result: Err(e), .. } => Ok(Some(stalled(machine, e.reason(), e.to_string(), &now))),
        HostCall::Unreachable(f) => Ok(Some(stalled(machine, f.reason, f.message, &now))),
    }
}

/// Where the power-off left the deletion.
enum Powered {
    /// The domain is off: tear down `machine` (its status carries a request made this pass).
    Off(Box<LibvirtMachine>),
    /// Not yet: write this and look again.
    Wait(Box<Outcome>),
}

/// Power the domain off as `spec.shutdown` says ([`power_off`]); the Events of what it did are
/// published at once, since a teardown in the same pass may release the object.
async fn power_off(
    machine: &LibvirtMachine,
    state: &State,
    host: &LibvirtHost,
    artifacts: &ManagedArtifacts,
    uuid: uuid::Uuid,
    now: &Time,
) -> Result<Powered, Error> {
    let spec = &machine.spec.shutdown;
    let requested = current(machine).shutdown_requested_at;
    let plan = match power_off::plan(spec, requested.as_ref(), now) {
        Ok(plan) => plan,
        Err(e) => {
            let outcome = stalled(machine, MachineReason::InvalidShutdownTimeout, e.to_string(), now);
            // Only a spec change helps.
            let outcome = Outcome {
                action: Action::await_change(),
                ..outcome
            };
            return Ok(Powered::Wait(Box::new(outcome)));
        }
    };
    let Some(name) = artifacts.domain_name.clone().filter(|_| plan != power_off::Plan::Hard) else {
        return Ok(Powered::Off(Box::new(machine.clone())));
    };
    let domain = name.clone();
    let called = state
        .shared
        .hosts
        .call(&state.ctx.client, host, move |hv| {
            power_off::step(hv, &domain, uuid, plan)
        })
        .await?;
    let power = match called {
        HostCall::Ran { result: Ok(power), .. } => power,
        HostCall::Ran { result: Err(e), .. } => {
            return Ok(Powered::Wait(Box::new(stalled(
                machine,
                e.reason(),
                e.to_string(),
                now,
            ))));
        }
        HostCall::Unreachable(f) => return Ok(Powered::Wait(Box::new(stalled(machine, f.reason, f.message, now)))),
    };
    if let Some((type_, reason, note, label)) = power_off::announcement(&power, &name, spec) {
        state.ctx.metrics.machine_events.with_label_values(&[label]).inc();
        let reference = kube::Resource::object_ref(machine, &());
        crate::reconcile::publish_event(&state.ctx.recorder, &reference, type_, reason, "Delete", note).await;
    }
    let machine = power_off::recorded(machine, &power, now);
    Ok(match power {
        power_off::Power::Stopping { .. } => {
            Powered::Wait(Box::new(power_off::stopping(&machine, &name, plan.remaining(), now)))
        }
        power_off::Power::Off { .. } | power_off::Power::Destroyed(_) => Powered::Off(Box::new(machine)),
    })
}

/// Let the machine go without touching its host: a Warning Event lists what is left behind.
async fn abandon(machine: &LibvirtMachine, state: &State, artifacts: &ManagedArtifacts) {
    let ctx = &state.ctx;
    ctx.metrics.machine_events.with_label_values(&["abandoned"]).inc();
    let note = format!(
        "finalizer dropped without cleaning the host; left behind: {}",
        list(artifacts)
    );
    crate::reconcile::publish_event(
        &ctx.recorder,
        &kube::Resource::object_ref(machine, &()),
        EventType::Warning,
        "ArtifactsAbandoned",
        "Delete",
        note,
    )
    .await;
}

fn list(a: &ManagedArtifacts) -> String {
    [
        a.domain_name.as_ref().map(|d| format!("domain {d}")),
        a.root_volume.as_ref().map(|v| format!("volume {v}")),
        a.ignition_volume.as_ref().map(|v| format!("volume {v}")),
        a.console_log.as_ref().map(|v| format!("volume {v}")),
        a.nvram_path.as_ref().map(|p| format!("NVRAM {p}")),
    ]
    .into_iter()
    .flatten()
    .chain(a.additional_volumes.iter().map(|v| format!("volume {v}")))
    .chain(
        a.dhcp_reservations
            .iter()
            .map(|r| format!("DHCP host {} {} in network {}", r.mac, r.ip, r.network)),
    )
    .collect::<Vec<_>>()
    .join(", ")
}

/// `Ready=False/Deleting` and `CleanupStalled=True` with why; retried.
fn stalled(machine: &LibvirtMachine, reason: impl Into<Reason>, message: String, now: &Time) -> Outcome {
    let mut status = with_ready(
        current(machine),
        machine,
        Status::False,
        MachineReason::Deleting,
        "waiting for the host-side cleanup",
        now,
    );
    status.conditions = condition::merge_all(
        &status.conditions,
        &[DesiredCondition::new(
            MachineCondition::CleanupStalled,
            Status::True,
            reason.into(),
            message.clone(),
        )],
        now,
        machine.metadata.generation,
    );
    Outcome {
        status,
        events: vec![(EventType::Warning, "CleanupStalled", message)],
        action: Action::requeue(STALL_RETRY),
        counted: Vec::new(),
    }
}

/// Release the IPAM claims and drop our finalizer.
async fn release(machine: &LibvirtMachine, state: &State) -> Result<(), Error> {
    // The VM is gone (or abandoned): its addresses may go back to their pools.
    ipam::release(machine, &state.ctx).await?;
    finalizer::release(&api(&state.ctx, machine), machine, FINALIZER)
        .await
        .map_err(crate::reconcile::ApiError::write("finalizer"))?;
    Ok(())
}

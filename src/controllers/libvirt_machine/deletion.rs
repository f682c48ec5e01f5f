//! Deleting a LibvirtMachine: remove everything `status.managedArtifacts` names from the host,
//! prove nothing is left, release the allocation, then drop the finalizer.
//!
//! A host that cannot be reached (or whose LibvirtHost is gone) holds the finalizer with
//! `CleanupStalled=True` and a retry every 30 s, so a network blip never leaks a VM. When the
//! host is gone for good, the escape is the annotation
//! `libvirtmachine.infrastructure.cluster.x-k8s.io/abandon-host-artifacts: "true"`: the
//! finalizer is dropped without touching the host, and a Warning Event lists what was left.

use std::time::Duration;

use kube::{
    ResourceExt,
    api::{Patch, PatchParams},
    runtime::{controller::Action, events::EventType},
};

use super::{Error, FINALIZER, Outcome, State, api, current, plan, provision, with_ready};
use crate::api::{
    condition::{self, DesiredCondition, Status},
    libvirt_machine::{LibvirtMachine, ManagedArtifacts},
};
use crate::reconcile::host_connections::host_id;

/// Annotation that lets a machine go without cleaning its (unreachable, gone) host.
pub const ABANDON_ANNOTATION: &str = "libvirtmachine.infrastructure.cluster.x-k8s.io/abandon-host-artifacts";
/// Condition set while deletion cannot finish.
pub const CLEANUP_STALLED: &str = "CleanupStalled";
const STALL_RETRY: Duration = Duration::from_secs(30);

/// Run one deletion pass. `None` when the object is released (nothing more to write).
pub(super) async fn delete(machine: &LibvirtMachine, state: &State) -> Result<Option<Outcome>, Error> {
    if !machine.finalizers().iter().any(|f| f == FINALIZER) {
        return Ok(None);
    }
    let ctx = &state.ctx;
    let namespace = machine.namespace().unwrap_or_default();
    let host_key = (namespace.clone(), machine.spec.host_ref.name.clone());
    let uid = machine.uid().unwrap_or_default();
    let Some(artifacts) = current(machine).managed_artifacts else {
        // Never admitted: nothing exists on the host.
        state.shared.placement.record(&host_key, &uid, None);
        release(machine, state).await?;
        return Ok(None);
    };
    if machine.annotations().get(ABANDON_ANNOTATION).map(String::as_str) == Some("true") {
        ctx.metrics.machine_events.with_label_values(&["abandoned"]).inc();
        let note = format!(
            "finalizer dropped without cleaning the host; left behind: {}",
            list(&artifacts)
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
        state.shared.placement.record(&host_key, &uid, None);
        release(machine, state).await?;
        return Ok(None);
    }
    let Some(uuid) = plan::identity(machine).map(|i| i.uuid) else {
        return Err(Error::NoUid);
    };
    let Some(host) = super::host_of(machine, ctx).await? else {
        return Ok(Some(stalled(
            machine,
            "HostNotFound",
            format!(
                "LibvirtHost {:?} does not exist; recreate it, or set the annotation {ABANDON_ANNOTATION}=\"true\" to leave {} behind",
                host_key.1,
                list(&artifacts)
            ),
        )));
    };
    let conn = match state.shared.hosts.get(&ctx.client, &host).await? {
        Ok(c) => c,
        Err(f) => return Ok(Some(stalled(machine, f.reason, f.message))),
    };
    let hv = conn.hypervisor();
    let recorded = artifacts.clone();
    let result = tokio::task::spawn_blocking(move || {
        provision::teardown(hv.as_ref(), &recorded, uuid)?;
        Ok::<_, provision::ProvisionError>(provision::leftovers(hv.as_ref(), &recorded, uuid)?)
    })
    .await
    .map_err(|e| Error::Task(e.to_string()))?;
    match result {
        Ok(left) if left.is_empty() => {
            ctx.metrics.machine_events.with_label_values(&["deleted"]).inc();
            state.shared.placement.record(&host_id(&host), &uid, None);
            release(machine, state).await?;
            Ok(None)
        }
        Ok(left) => Ok(Some(stalled(
            machine,
            "ArtifactsRemain",
            format!("still on the host after teardown: {}", left.join(", ")),
        ))),
        Err(e) => {
            if e.is_transient() {
                state.shared.hosts.forget(&host_id(&host)).await;
            }
            Ok(Some(stalled(machine, e.reason(), e.to_string())))
        }
    }
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
    .collect::<Vec<_>>()
    .join(", ")
}

/// `Ready=False/Deleting` and `CleanupStalled=True` with why; retried.
fn stalled(machine: &LibvirtMachine, reason: &'static str, message: String) -> Outcome {
    let mut status = with_ready(
        current(machine),
        machine,
        Status::False,
        "Deleting",
        "waiting for the host-side cleanup",
    );
    let now = k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(k8s_openapi::jiff::Timestamp::now());
    status.conditions = condition::merge_all(
        &status.conditions,
        &[DesiredCondition::new(
            CLEANUP_STALLED,
            Status::True,
            reason,
            message.clone(),
        )],
        &now,
        machine.metadata.generation,
    );
    Outcome {
        status,
        events: vec![(EventType::Warning, "CleanupStalled", message)],
        action: Action::requeue(STALL_RETRY),
    }
}

/// Drop our finalizer.
async fn release(machine: &LibvirtMachine, state: &State) -> Result<(), Error> {
    let finalizers: Vec<String> = machine
        .finalizers()
        .iter()
        .filter(|f| *f != FINALIZER)
        .cloned()
        .collect();
    let patch = serde_json::json!({
        "metadata": {"finalizers": finalizers, "resourceVersion": machine.resource_version()},
    });
    match api(&state.ctx, machine)
        .patch(&machine.name_any(), &PatchParams::default(), &Patch::Merge(patch))
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(source) => Err(Error::Patch {
            what: "finalizer",
            source,
        }),
    }
}

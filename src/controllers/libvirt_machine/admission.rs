//! Capacity admission of one machine to its host (the policy is in [`crate::reconcile::placement`]).

use kube::{ResourceExt, runtime::controller::Action};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::{
    CAPACITY_RECHECK, Error, FIELD_MANAGER, HOST_RETRY, State, api, plan,
    status::{Wait, current, with_ready},
};
use crate::{
    api::{
        common::LocalObjectReference,
        condition::Status,
        libvirt_host::LibvirtHost,
        libvirt_machine::{LibvirtMachine, LibvirtMachineStatus, MachineReason},
    },
    reconcile::{
        apply_status,
        host_connections::host_id,
        host_pool,
        placement::{self, Admission, Candidate, Resources},
    },
};

/// What admission gave.
pub(super) enum Admitted {
    /// Admitted: the written status, with the allocation and the artifacts to remove later.
    Now(Box<LibvirtMachineStatus>),
    /// Not now.
    Wait(Wait),
}

/// Admit the machine to the first of `hosts` that takes it: its own host, or a pool's hosts in
/// the order [`host_pool::rank`] gives (the least allocated first). `Err` is why it waits.
pub(super) async fn admit_to_one(
    machine: &LibvirtMachine,
    state: &State,
    hosts: Vec<LibvirtHost>,
    id: &plan::Identity,
    now: &Time,
) -> Result<Result<(Box<LibvirtMachineStatus>, LibvirtHost), Wait>, Error> {
    let pooled = hosts.len() > 1;
    let ranked = if pooled {
        host_pool::rank(hosts, |h| state.shared.placement.committed(&host_id(h)))
    } else {
        hosts
    };
    let mut waits = Vec::new();
    for host in ranked {
        match admit(machine, state, &host, id, now).await? {
            Admitted::Now(status) => return Ok(Ok((status, host))),
            Admitted::Wait(wait) => waits.push((host.name_any(), wait)),
        }
    }
    if !pooled && let Some((_, wait)) = waits.pop() {
        return Ok(Err(wait));
    }
    let each: Vec<String> = waits.iter().map(|(host, w)| format!("{host}: {}", w.message)).collect();
    Ok(Err(Wait::new(
        MachineReason::WaitingForCapacity,
        format!("no host of spec.hostSelector has room; {}", each.join("; ")),
        Action::requeue(CAPACITY_RECHECK),
    )))
}

/// Admit the machine to its host, or say why it waits. Holds the host's admission lock while
/// deciding and recording, so concurrent reconciles see each other's commitments.
pub(super) async fn admit(
    machine: &LibvirtMachine,
    state: &State,
    host: &LibvirtHost,
    id: &plan::Identity,
    now: &Time,
) -> Result<Admitted, Error> {
    let host_key = host_id(host);
    let placement = &state.shared.placement;
    let Some(_lock) = placement.lock(&host_key).await else {
        return Ok(Admitted::Wait(Wait::new(
            MachineReason::WaitingForCapacity,
            "admission state is unavailable",
            Action::requeue(CAPACITY_RECHECK),
        )));
    };
    let Some(offered) = placement::offered(host) else {
        return Ok(Admitted::Wait(Wait::new(
            MachineReason::WaitingForHost,
            "the host's capacity is not known yet",
            Action::requeue(HOST_RETRY),
        )));
    };
    let committed = placement.committed(&host_key);
    let free = Resources {
        vcpus: offered.vcpus - committed.vcpus,
        memory_mib: offered.memory_mib - committed.memory_mib,
    };
    let candidate = Candidate::of(machine);
    // Admitted before, and the cache has not caught up: keep that admission.
    let admitted = placement.admitted(&host_key, &candidate.uid);
    if admitted.is_none()
        && let Some(why) = crate::controllers::libvirt_host::maintenance::closed(host)
    {
        // In maintenance, or its owner needs it back: nothing new goes there meanwhile.
        return Ok(Admitted::Wait(Wait::new(
            MachineReason::WaitingForCapacity,
            format!("{why}; new machines wait until that ends"),
            Action::requeue(CAPACITY_RECHECK),
        )));
    }
    let decision = match admitted {
        Some(size) => Admission::Admitted(size),
        None => placement::decide(&candidate, &placement.waiting(host), free),
    };
    match decision {
        Admission::Admitted(size) => {
            let allocated = size.allocated();
            let mut status = current(machine);
            status.host_ref = Some(LocalObjectReference { name: host.name_any() });
            status.allocated = Some(allocated);
            status.managed_artifacts = Some(plan::artifacts(id, &machine.spec, host));
            let status = with_ready(
                status,
                machine,
                Status::False,
                MachineReason::Provisioning,
                format!(
                    "admitted to {} with {} vCPUs and {} MiB",
                    host.name_any(),
                    allocated.vcpus,
                    allocated.memory_mb
                ),
                now,
            );
            // Record the commitment (and the artifacts deletion must remove) before anything
            // exists on the host.
            apply_status(&api(&state.ctx, machine), &machine.name_any(), FIELD_MANAGER, &status)
                .await
                .map_err(crate::reconcile::ApiError::write("allocation"))?;
            placement.record(&host_key, &candidate.uid, Some(size));
            Ok(Admitted::Now(Box::new(status)))
        }
        Admission::Wait(why) => Ok(Admitted::Wait(Wait::new(
            MachineReason::WaitingForCapacity,
            format!("{why} ({})", placement::describe_host(host)),
            Action::requeue(CAPACITY_RECHECK),
        ))),
    }
}

//! What one provisioning pass does, decided from what [`super::observe`] read: pure, so every
//! branch is unit-tested without an API server or a host.

use std::time::Duration;

use kube::{ResourceExt, runtime::controller::Action};

use super::{
    BOOTSTRAP_DATA_KEY, FINALIZER, HOST_RETRY,
    ipam::{self, ClaimPlan, Ipam},
    observe::{Bootstrap, Observed, Owned},
    plan::{self, Identity, RootDiskPlan},
    status::Wait,
};
use crate::{
    api::{
        libvirt_host::LibvirtHost,
        libvirt_machine::{ClaimedAddress, LibvirtMachine, MachineReason, Reason},
    },
    reconcile::finalizer,
};

/// The step a machine takes now.
#[derive(Debug)]
pub(super) enum Step {
    /// It cannot go on: `Ready=False` with why, and when to look again.
    Wait(Wait),
    /// Reconciliation is paused.
    Pause,
    /// Provisioned: check the domain on its host.
    Watch {
        /// The host.
        host: Box<LibvirtHost>,
        /// The owner Machine is being deleted: a guest that shuts down stays off.
        owner_deleting: bool,
    },
    /// File these IPAM claims for the machine of this Cluster, then wait for their addresses.
    Claim {
        /// The Cluster the claims are labelled with.
        cluster: String,
        /// The claims to create.
        claims: Vec<ClaimPlan>,
    },
    /// Admit the machine to its host (unless it already holds an allocation) and bring its
    /// domain up.
    Provision(Box<ProvisionPlan>),
}

/// Everything the host-side steps need that can be known before admission.
#[derive(Debug)]
pub(super) struct ProvisionPlan {
    /// The ready hosts admission may try: the bound one, or the usable hosts of the pool.
    pub hosts: Vec<LibvirtHost>,
    /// The root disk to clone.
    pub root: RootDiskPlan,
    /// This VM's rendered Ignition.
    pub payload: Vec<u8>,
    /// The addresses its IPAM claims are bound to, for `status.claimedAddresses`.
    pub claimed: Vec<ClaimedAddress>,
}

/// A step, and whether the finalizer and `spec.providerID` must be written first.
#[derive(Debug)]
pub(super) struct Decision {
    /// Add the finalizer and set `spec.providerID` before the step.
    pub claim: bool,
    /// The step.
    pub step: Step,
}

impl Decision {
    fn before_claim(step: Step) -> Self {
        Self { claim: false, step }
    }
}

fn wait(reason: MachineReason, message: String, action: Action) -> Step {
    Step::Wait(Wait::new(reason, message, action))
}

/// Decide the pass for a machine that is not being deleted.
pub(super) fn decide(
    machine: &LibvirtMachine,
    id: &Identity,
    observed: Observed,
    check_interval: Duration,
) -> Decision {
    let owned = match observed {
        Observed::NoOwner => {
            return Decision::before_claim(wait(
                MachineReason::WaitingForMachineOwner,
                "waiting for Cluster API to set a Machine as owner".to_owned(),
                Action::await_change(),
            ));
        }
        Observed::MachineMissing(name) => {
            return Decision::before_claim(wait(
                MachineReason::MachineNotFound,
                format!("owner Machine {name:?} does not exist"),
                Action::await_change(),
            ));
        }
        Observed::ClusterMissing(name) => {
            return Decision::before_claim(wait(
                MachineReason::ClusterNotFound,
                format!("Cluster {name:?} does not exist"),
                Action::await_change(),
            ));
        }
        Observed::Paused => return Decision::before_claim(Step::Pause),
        Observed::Owned(owned) => *owned,
    };
    let claim =
        !finalizer::has(&machine.metadata, FINALIZER) || machine.spec.provider_id.as_deref() != Some(&id.provider_id);
    let provisioned = machine.status.as_ref().is_some_and(|s| s.ready);
    let step = if provisioned {
        match owned.host {
            Some(host) => Step::Watch {
                host: Box::new(host),
                owner_deleting: owned.machine.deleting,
            },
            None => wait(
                MachineReason::HostNotFound,
                format!(
                    "LibvirtHost {:?} does not exist",
                    machine.host_name().unwrap_or_default()
                ),
                Action::requeue(check_interval),
            ),
        }
    } else {
        provision_step(machine, id, owned)
    };
    Decision { claim, step }
}

/// The ready hosts the machine may go to: its own, or the usable hosts of its pool; or why it
/// waits.
fn ready_hosts(
    machine: &LibvirtMachine,
    host: Option<LibvirtHost>,
    pool: Option<Result<Vec<LibvirtHost>, String>>,
) -> Result<Vec<LibvirtHost>, Step> {
    let pool = match (machine.host_name(), pool) {
        (Some(name), _) => {
            let Some(host) = host else {
                return Err(wait(
                    MachineReason::HostNotFound,
                    format!("LibvirtHost {name:?} does not exist"),
                    Action::await_change(),
                ));
            };
            if !host.status.as_ref().is_some_and(|s| s.ready) {
                return Err(wait(
                    MachineReason::WaitingForHost,
                    format!("LibvirtHost {name:?} is not ready"),
                    Action::await_change(),
                ));
            }
            return Ok(vec![host]);
        }
        (None, Some(Err(message))) => {
            return Err(Step::Wait(Wait::new(
                host_invalid_spec(),
                message,
                Action::await_change(),
            )));
        }
        (None, Some(Ok(pool))) => pool,
        (None, None) => Vec::new(),
    };
    if pool.is_empty() {
        return Err(wait(
            MachineReason::HostNotFound,
            "no LibvirtHost matches spec.hostSelector (in the Machine's failure domain, if it names one)".to_owned(),
            Action::await_change(),
        ));
    }
    let (usable, unusable): (Vec<_>, Vec<_>) = pool
        .into_iter()
        .partition(|h| crate::reconcile::host_pool::unusable(h).is_none());
    if usable.is_empty() {
        let why: Vec<String> = unusable
            .iter()
            .map(|h| {
                format!(
                    "{} {}",
                    h.name_any(),
                    crate::reconcile::host_pool::unusable(h).unwrap_or_default()
                )
            })
            .collect();
        return Err(wait(
            MachineReason::WaitingForHost,
            format!("no host of spec.hostSelector can take machines: {}", why.join(", ")),
            Action::await_change(),
        ));
    }
    Ok(usable)
}

/// The next provisioning step: the first thing missing, or the plan.
fn provision_step(machine: &LibvirtMachine, id: &Identity, owned: Owned) -> Step {
    let Some(data_secret) = owned.machine.data_secret_name.clone() else {
        return wait(
            MachineReason::WaitingForBootstrapData,
            format!(
                "waiting for Machine {:?} to name its bootstrap data Secret",
                owned.machine.name
            ),
            Action::await_change(),
        );
    };
    let claimed = match owned.ipam {
        Ipam::Unused => Vec::new(),
        Ipam::Bound(claimed) => claimed,
        Ipam::Missing(claims) => {
            return Step::Claim {
                cluster: owned.machine.cluster_name,
                claims,
            };
        }
        Ipam::Pending(message) => {
            return wait(MachineReason::WaitingForIPAddress, message, Action::requeue(ipam::POLL));
        }
        Ipam::Invalid(message) => return Step::Wait(Wait::new(host_invalid_spec(), message, Action::await_change())),
    };
    let hosts = match ready_hosts(machine, owned.host, owned.pool) {
        Ok(hosts) => hosts,
        Err(step) => return step,
    };
    // Checked before admission, so a machine that cannot boot holds no capacity.
    let root = match plan::root_disk(id, &machine.spec) {
        Ok(root) => root,
        Err(e) => return Step::Wait(Wait::new(host_invalid_spec(), e.to_string(), Action::await_change())),
    };
    match payload(machine, id, &data_secret, owned.bootstrap, &claimed) {
        Ok(payload) => Step::Provision(Box::new(ProvisionPlan {
            hosts,
            root,
            payload,
            claimed,
        })),
        Err(wait) => Step::Wait(wait),
    }
}

/// `InvalidSpec`: the spec cannot become libvirt XML.
pub(super) const fn host_invalid_spec() -> Reason {
    Reason::Host(crate::api::libvirt_host::HostReason::InvalidSpec)
}

/// This machine's Ignition: the bootstrap Secret's `value` with its identity (and the addresses
/// claimed for it) injected.
fn payload(
    machine: &LibvirtMachine,
    id: &Identity,
    name: &str,
    bootstrap: Bootstrap,
    claimed: &[ClaimedAddress],
) -> Result<Vec<u8>, Wait> {
    let invalid = |message: String| {
        Wait::new(
            MachineReason::InvalidBootstrapData,
            message,
            Action::requeue(HOST_RETRY),
        )
    };
    let data = match bootstrap {
        Bootstrap::Found(data) => data,
        Bootstrap::Missing | Bootstrap::NotRead => {
            return Err(Wait::new(
                MachineReason::BootstrapDataNotFound,
                format!("bootstrap data Secret {name:?} does not exist"),
                Action::requeue(HOST_RETRY),
            ));
        }
    };
    if let Some(format) = data.get("format")
        && format.0 != b"ignition"
    {
        return Err(invalid(format!(
            "bootstrap data Secret {name:?} has a format other than \"ignition\""
        )));
    }
    let Some(value) = data.get(BOOTSTRAP_DATA_KEY) else {
        return Err(invalid(format!(
            "bootstrap data Secret {name:?} has no {BOOTSTRAP_DATA_KEY:?} key"
        )));
    };
    crate::ignition::render(
        &value.0,
        &plan::facts(id, &ipam::effective_spec(&machine.spec, claimed)),
    )
    .map(|rendered| rendered.json)
    .map_err(|e| Wait::new(Reason::Ignition(e.reason()), e.to_string(), Action::requeue(HOST_RETRY)))
}

#[cfg(test)]
mod tests;

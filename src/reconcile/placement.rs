//! Capacity admission: which LibvirtMachine may commit how much of its host.
//!
//! Every admitted machine records its size in `status.allocated`; a host's committed capacity is
//! the sum over its machines (read from the LibvirtMachine cache), united with a ledger of
//! admissions this process made and the cache has not shown yet, so two reconciles never admit
//! into the same free space. Admissions to one host are serialised by a per-host lock.
//!
//! Order: machines waiting on a host (condition `Ready=False/WaitingForCapacity`) form a queue
//! sorted by the `5spot.finos.org/priority` label (higher first, missing = 0), then age, then
//! name. A machine is admitted when it and every machine ahead of it fit, taken in queue order;
//! the first one that does not fit holds everyone behind it, so a large high-priority machine is
//! never starved by smaller ones. A request of 0 vCPUs or 0 MiB takes all that is free of that
//! resource at its turn.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
};

use k8s_openapi::jiff::Timestamp;
use kube::{ResourceExt, runtime::reflector::Store};
use tokio::sync::{Mutex as AsyncMutex, OwnedMutexGuard};

use super::host_connections::HostId;
use crate::api::{
    PRIORITY_LABEL,
    condition::{self, Status},
    libvirt_host::{LibvirtHost, LibvirtHostSpec},
    libvirt_machine::{AllocatedResources, LibvirtMachine, MachineCondition, MachineReason},
};

/// vCPUs and MiB.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Resources {
    /// Virtual CPUs.
    pub vcpus: i64,
    /// Memory, MiB.
    pub memory_mib: i64,
}

impl Resources {
    fn saturating_sub(self, other: Self) -> Self {
        Self {
            vcpus: self.vcpus.saturating_sub(other.vcpus),
            memory_mib: self.memory_mib.saturating_sub(other.memory_mib),
        }
    }

    fn add(self, other: Self) -> Self {
        Self {
            vcpus: self.vcpus.saturating_add(other.vcpus),
            memory_mib: self.memory_mib.saturating_add(other.memory_mib),
        }
    }

    /// As the status field.
    #[must_use]
    pub fn allocated(self) -> AllocatedResources {
        AllocatedResources {
            vcpus: i32::try_from(self.vcpus).unwrap_or(i32::MAX),
            memory_mb: self.memory_mib,
        }
    }
}

impl From<AllocatedResources> for Resources {
    fn from(a: AllocatedResources) -> Self {
        Self {
            vcpus: i64::from(a.vcpus),
            memory_mib: a.memory_mb,
        }
    }
}

/// One machine in a host's queue.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Candidate {
    /// Object uid (identifies the machine).
    pub uid: String,
    /// Object name (last tie-breaker).
    pub name: String,
    /// `5spot.finos.org/priority`, 0 when missing or not a number.
    pub priority: i64,
    /// Creation time.
    pub created: Option<Timestamp>,
    /// Requested vCPUs and MiB; 0 means "all that is free".
    pub request: Resources,
}

impl Candidate {
    /// The queue entry for `machine`.
    #[must_use]
    pub fn of(machine: &LibvirtMachine) -> Self {
        Self {
            uid: machine.uid().unwrap_or_default(),
            name: machine.name_any(),
            priority: machine
                .labels()
                .get(PRIORITY_LABEL)
                .and_then(|p| p.trim().parse().ok())
                .unwrap_or(0),
            created: machine.metadata.creation_timestamp.as_ref().map(|t| t.0),
            request: Resources {
                vcpus: i64::from(machine.spec.domain.vcpus.max(0)),
                memory_mib: machine.spec.domain.memory_mb.max(0),
            },
        }
    }
}

/// The outcome of an admission attempt.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Admission {
    /// Commit these resources.
    Admitted(Resources),
    /// Not now; the message says why (for the condition).
    Wait(String),
}

/// Decide for `candidate` given the host's free capacity (after reservation and commitments)
/// and the other machines waiting on it. Pure.
#[must_use]
pub fn decide(candidate: &Candidate, waiting: &[Candidate], free: Resources) -> Admission {
    let mut queue: Vec<&Candidate> = waiting.iter().filter(|c| c.uid != candidate.uid).collect();
    queue.push(candidate);
    queue.sort_by(|a, b| {
        b.priority
            .cmp(&a.priority)
            .then(a.created.cmp(&b.created))
            .then(a.name.cmp(&b.name))
    });
    let mut left = free;
    for (position, c) in queue.iter().enumerate() {
        let size = Resources {
            vcpus: if c.request.vcpus == 0 {
                left.vcpus
            } else {
                c.request.vcpus
            },
            memory_mib: if c.request.memory_mib == 0 {
                left.memory_mib
            } else {
                c.request.memory_mib
            },
        };
        let fits =
            size.vcpus >= 1 && size.memory_mib >= 1 && size.vcpus <= left.vcpus && size.memory_mib <= left.memory_mib;
        if c.uid == candidate.uid {
            return if fits {
                Admission::Admitted(size)
            } else {
                Admission::Wait(format!(
                    "needs {} vCPUs and {} MiB; {} vCPUs and {} MiB are free{}",
                    describe(c.request.vcpus),
                    describe(c.request.memory_mib),
                    left.vcpus.max(0),
                    left.memory_mib.max(0),
                    if position == 0 {
                        String::new()
                    } else {
                        format!(" after {position} machine(s) ahead in the queue")
                    }
                ))
            };
        }
        if !fits {
            return Admission::Wait(format!(
                "queued behind machine {:?} (priority {}), which does not fit yet",
                c.name, c.priority
            ));
        }
        left = left.saturating_sub(size);
    }
    Admission::Wait("not in the queue".to_owned())
}

fn describe(n: i64) -> String {
    if n == 0 { "all free".to_owned() } else { n.to_string() }
}

/// What a host offers to machines: its reported total minus `spec.reservedResources`, or
/// `None` before the host has been checked.
#[must_use]
pub fn offered(host: &LibvirtHost) -> Option<Resources> {
    let capacity = host.status.as_ref()?.capacity.as_ref()?;
    Some(offered_from(
        &host.spec,
        i64::from(capacity.total_vcpus),
        capacity.total_memory_mb,
    ))
}

/// Total minus reservation, clamped at zero, times the overcommit ratios.
#[must_use]
pub fn offered_from(spec: &LibvirtHostSpec, total_vcpus: i64, total_memory_mib: i64) -> Resources {
    let after_reservation = |total: i64, reserved: i32| total.saturating_sub(i64::from(reserved)).max(0);
    Resources {
        vcpus: spec
            .overcommit
            .cpu_ratio
            .scale(after_reservation(total_vcpus, spec.reserved_resources.vcpus)),
        memory_mib: spec
            .overcommit
            .memory_ratio
            .scale(after_reservation(total_memory_mib, spec.reserved_resources.memory_mb)),
    }
}

/// The host's side of a capacity wait: what it has, keeps back and overcommits.
#[must_use]
pub fn describe_host(host: &LibvirtHost) -> String {
    let spec = &host.spec;
    let total = host
        .status
        .as_ref()
        .and_then(|s| s.capacity.as_ref())
        .map_or_else(String::new, |c| {
            format!("{} vCPUs and {} MiB in all, ", c.total_vcpus, c.total_memory_mb)
        });
    format!(
        "host {}: {total}reservedResources {} vCPUs and {} MiB, overcommit cpuRatio {} and memoryRatio {}",
        host.name_any(),
        spec.reserved_resources.vcpus,
        spec.reserved_resources.memory_mb,
        spec.overcommit.cpu_ratio,
        spec.overcommit.memory_ratio
    )
}

/// Whether `machine` runs (or will run) on host `id`.
fn on_host(machine: &LibvirtMachine, id: &HostId) -> bool {
    machine.host_name() == Some(id.1.as_str()) && machine.namespace().unwrap_or_default() == id.0
}

/// Whether `machine` is queued for capacity.
fn is_waiting(machine: &LibvirtMachine) -> bool {
    machine.metadata.deletion_timestamp.is_none()
        && machine.status.as_ref().is_some_and(|s| {
            s.allocated.is_none()
                && condition::find(&s.conditions, MachineCondition::Ready.as_str()).is_some_and(|c| {
                    c.status == Status::False.as_str()
                        && MachineReason::parse(&c.reason) == Some(MachineReason::WaitingForCapacity)
                })
        })
}

/// The admission state shared by the LibvirtHost and LibvirtMachine controllers.
pub struct Placement {
    machines: Store<LibvirtMachine>,
    /// Admissions (and releases, as `None`) not yet visible in the cache, by host and uid.
    ledger: Mutex<HashMap<HostId, HashMap<String, Option<Resources>>>>,
    locks: Mutex<HashMap<HostId, Arc<AsyncMutex<()>>>>,
}

impl Placement {
    /// Placement over the LibvirtMachine cache.
    #[must_use]
    pub fn new(machines: Store<LibvirtMachine>) -> Self {
        Self {
            machines,
            ledger: Mutex::default(),
            locks: Mutex::default(),
        }
    }

    /// Hold host `id`'s admission lock.
    pub async fn lock(&self, id: &HostId) -> Option<OwnedMutexGuard<()>> {
        let lock = self.locks.lock().ok()?.entry(id.clone()).or_default().clone();
        Some(lock.lock_owned().await)
    }

    /// What is committed on host `id`: every cached machine's allocation, overridden by the
    /// ledger's newer knowledge.
    #[must_use]
    pub fn committed(&self, id: &HostId) -> Resources {
        let mut by_uid: HashMap<String, Resources> = self
            .machines
            .state()
            .iter()
            .filter(|m| on_host(m, id))
            .filter_map(|m| Some((m.uid()?, m.status.as_ref()?.allocated?.into())))
            .collect();
        if let Ok(ledger) = self.ledger.lock()
            && let Some(entries) = ledger.get(id)
        {
            for (uid, entry) in entries {
                match entry {
                    Some(r) => by_uid.insert(uid.clone(), *r),
                    None => by_uid.remove(uid),
                };
            }
        }
        by_uid.into_values().fold(Resources::default(), Resources::add)
    }

    /// The other machines queued on `host`: those bound to it, and those of a host pool it is
    /// in that have no host yet.
    #[must_use]
    pub fn waiting(&self, host: &LibvirtHost) -> Vec<Candidate> {
        let id = &super::host_connections::host_id(host);
        let admitted: Vec<String> = self
            .ledger
            .lock()
            .ok()
            .and_then(|l| l.get(id).map(|e| e.keys().cloned().collect()))
            .unwrap_or_default();
        self.machines
            .state()
            .iter()
            .filter(|m| (on_host(m, id) || super::host_pool::queues_on(m, host)) && is_waiting(m))
            .map(|m| Candidate::of(m))
            .filter(|c| !admitted.contains(&c.uid))
            .collect()
    }

    /// The admission this process recorded for machine `uid` on host `id`, if any.
    #[must_use]
    pub fn admitted(&self, id: &HostId, uid: &str) -> Option<Resources> {
        self.ledger.lock().ok()?.get(id)?.get(uid).copied().flatten()
    }

    /// Record an admission (`Some`) or a release (`None`) until the cache catches up.
    pub fn record(&self, id: &HostId, uid: &str, entry: Option<Resources>) {
        if let Ok(mut ledger) = self.ledger.lock() {
            ledger.entry(id.clone()).or_default().insert(uid.to_owned(), entry);
        }
    }

    /// Forget ledger entries the cache now agrees with (or whose object is gone).
    pub fn settle(&self, id: &HostId) {
        let machines = self.machines.state();
        let Ok(mut ledger) = self.ledger.lock() else {
            return;
        };
        if let Some(entries) = ledger.get_mut(id) {
            entries.retain(|uid, entry| {
                let cached = machines.iter().find(|m| m.uid().as_deref() == Some(uid.as_str()));
                match (cached, entry) {
                    (None, None) => false,
                    (None, Some(_)) => true,
                    (Some(m), e) => m.status.as_ref().and_then(|s| s.allocated).map(Resources::from) != *e,
                }
            });
        }
    }
}

#[cfg(test)]
mod tests;

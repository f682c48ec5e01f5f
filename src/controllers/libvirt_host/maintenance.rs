//! Host maintenance (pure): with `spec.maintenance`, the host's machines are removed one at a
//! time, lowest priority first, then the youngest; the one being removed is remembered in
//! `status.maintenance.removing` until it is gone, so a Machine whose deletion has not reached
//! its LibvirtMachine yet is never followed by a second one. Placement stops at once (see
//! [`closed`]).

use kube::ResourceExt;

use crate::{
    api::{
        PRIORITY_LABEL,
        condition::{self, Condition, DesiredCondition, Status},
        libvirt_host::{HostCondition, LibvirtHost, MaintenanceReason, MaintenanceStatus},
        libvirt_machine::LibvirtMachine,
    },
    reconcile::owner,
};

/// A machine on the host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resident {
    /// LibvirtMachine name.
    pub machine: String,
    /// Its owner Machine, if Cluster API set one.
    pub owner: Option<String>,
    /// Its `5spot.finos.org/priority` (0 when missing).
    pub priority: i32,
    /// Creation time, milliseconds since the epoch.
    pub created_ms: i64,
    /// Being deleted already.
    pub deleting: bool,
}

/// The machines on `host` among `machines`: admitted to it (one waiting to be admitted holds
/// nothing there, and waits for the maintenance to end).
pub fn residents<'a>(host: &LibvirtHost, machines: impl IntoIterator<Item = &'a LibvirtMachine>) -> Vec<Resident> {
    let (namespace, name) = (host.namespace(), host.name_any());
    machines
        .into_iter()
        .filter(|m| m.namespace() == namespace && m.host_name() == Some(name.as_str()))
        .filter(|m| m.status.as_ref().is_some_and(|s| s.allocated.is_some()))
        .map(|m| Resident {
            machine: m.name_any(),
            owner: owner::capi_owner(&m.metadata, "Machine").map(|o| o.name.clone()),
            priority: m.labels().get(PRIORITY_LABEL).and_then(|p| p.parse().ok()).unwrap_or(0),
            created_ms: m.creation_timestamp().map_or(0, |t| t.0.as_millisecond()),
            deleting: m.metadata.deletion_timestamp.is_some(),
        })
        .collect()
}

/// What maintenance decided.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outcome {
    /// `status.maintenance`.
    pub status: Option<MaintenanceStatus>,
    /// `Maintenance`, when there is anything to say.
    pub condition: Option<DesiredCondition>,
    /// Remove this machine now.
    pub remove: Option<Resident>,
}

/// Decide. `conditions` are the host's current ones (to say maintenance is over only after
/// there was one).
#[must_use]
pub fn decide(
    on: bool,
    current: Option<&MaintenanceStatus>,
    conditions: &[Condition],
    residents: &[Resident],
) -> Outcome {
    if !on {
        let was = condition::find(conditions, HostCondition::Maintenance.as_str()).is_some();
        return Outcome {
            status: None,
            condition: was.then(|| {
                DesiredCondition::new(
                    HostCondition::Maintenance,
                    Status::False,
                    MaintenanceReason::InService,
                    "maintenance is over; the host takes machines again",
                )
            }),
            remove: None,
        };
    }
    let remaining = i32::try_from(residents.len()).unwrap_or(i32::MAX);
    let draining = |removing: &str, remove: Option<Resident>| Outcome {
        status: Some(MaintenanceStatus {
            removing: Some(removing.to_owned()),
            remaining,
        }),
        condition: Some(DesiredCondition::new(
            HostCondition::Maintenance,
            Status::True,
            MaintenanceReason::Draining,
            format!("removing LibvirtMachine {removing}; {remaining} machine(s) left on the host"),
        )),
        remove,
    };
    // The one being removed is waited for, as is one someone else is deleting.
    if let Some(going) = current
        .and_then(|s| s.removing.as_deref())
        .and_then(|name| residents.iter().find(|r| r.machine == name))
        .or_else(|| residents.iter().find(|r| r.deleting))
    {
        return draining(&going.machine, None);
    }
    let next = residents
        .iter()
        .min_by(|a, b| (a.priority, -a.created_ms, &a.machine).cmp(&(b.priority, -b.created_ms, &b.machine)));
    match next {
        Some(next) => draining(&next.machine, Some(next.clone())),
        None => Outcome {
            status: Some(MaintenanceStatus {
                removing: None,
                remaining: 0,
            }),
            condition: Some(DesiredCondition::new(
                HostCondition::Maintenance,
                Status::True,
                MaintenanceReason::Drained,
                "no machine is left; the host can be taken down",
            )),
            remove: None,
        },
    }
}

/// Why `host` takes no new machine, if it does not: maintenance, or its owner's pressure.
#[must_use]
pub fn closed(host: &LibvirtHost) -> Option<String> {
    if host.spec.maintenance {
        return Some("the host is in maintenance".to_owned());
    }
    let status = host.status.as_ref()?;
    condition::find(&status.conditions, HostCondition::UnderPressure.as_str())
        .filter(|c| c.status == Status::True.as_str())
        .map(|c| format!("the host's owner needs it back ({})", c.message))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resident(machine: &str, priority: i32, created_ms: i64) -> Resident {
        Resident {
            machine: machine.into(),
            owner: Some(format!("m-{machine}")),
            priority,
            created_ms,
            deleting: false,
        }
    }

    #[test]
    fn machines_go_one_at_a_time_lowest_priority_then_youngest() {
        let mut on_host = vec![
            resident("old-low", 10, 1),
            resident("high", 90, 1),
            resident("young-low", 10, 5),
        ];
        let first = decide(true, None, &[], &on_host);
        assert_eq!(first.remove.as_ref().map(|r| r.machine.as_str()), Some("young-low"));
        let status = first.status.unwrap();
        assert_eq!((status.removing.as_deref(), status.remaining), (Some("young-low"), 3));
        assert_eq!(first.condition.unwrap().reason, "Draining");
        // Until it is gone, nothing else is removed, even before its deletion shows.
        let waiting = decide(true, Some(&status), &[], &on_host);
        assert_eq!(waiting.remove, None);
        on_host.retain(|r| r.machine != "young-low");
        let next = decide(true, Some(&status), &[], &on_host);
        assert_eq!(next.remove.map(|r| r.machine), Some("old-low".to_owned()));
        // A machine someone else is deleting is waited for too.
        on_host[1].deleting = true;
        assert_eq!(decide(true, None, &[], &on_host).remove, None);
    }

    #[test]
    fn an_empty_host_is_drained_and_turning_it_off_says_so_once() {
        let drained = decide(true, None, &[], &[]);
        let condition = drained.condition.unwrap();
        assert_eq!((condition.status, condition.reason), (Status::True, "Drained"));
        let merged = condition::merge_all(
            &[],
            &[condition],
            &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH),
            None,
        );
        let over = decide(false, drained.status.as_ref(), &merged, &[]);
        assert_eq!(over.status, None);
        assert_eq!(over.condition.unwrap().reason, "InService");
        assert_eq!(decide(false, None, &[], &[]).condition, None, "never in maintenance");
    }
}

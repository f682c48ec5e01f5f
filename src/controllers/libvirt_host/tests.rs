use super::*;
use crate::api::libvirt_host::HostLoad;
use kube::runtime::events::EventType;

fn time(s: &str) -> Time {
    Time(s.parse().unwrap())
}

fn spec() -> LibvirtHostSpec {
    serde_json::from_value(serde_json::json!({"uri": "test:///default"})).unwrap()
}

fn info() -> HostInfo {
    HostInfo {
        libvirt_version: "10.0.0".into(),
        driver: "QEMU".into(),
        hypervisor_version: "8.2.2".into(),
        kvm_available: true,
        cpus: 16,
        memory_mib: 31_560,
        free_memory_mib: None,
    }
}

fn probed() -> Observation {
    Observation::Probed {
        info: info(),
        fingerprint: Some("SHA256:abc".into()),
        committed: Resources::default(),
        measurement: None,
    }
}

#[test]
fn probed_host_is_ready_with_capacity_minus_reservation() {
    let p = plan(
        &LibvirtHostStatus::default(),
        &spec(),
        Some(2),
        &probed(),
        &OnHost::default(),
        &time("2026-01-01T00:00:00Z"),
    );
    assert!(p.status.ready);
    assert_eq!(
        p.status.capacity,
        Some(HostCapacity {
            total_vcpus: 16,
            total_memory_mb: 31_560,
            allocatable_vcpus: 14,
            allocatable_memory_mb: 27_464,
            available_vcpus: 14,
            available_memory_mb: 27_464,
        })
    );
    assert_eq!(p.status.kvm_available, Some(true));
    assert_eq!(p.status.libvirt_version.as_deref(), Some("10.0.0"));
    assert_eq!(p.status.observed_host_key_fingerprint.as_deref(), Some("SHA256:abc"));
    assert!(condition::is_true(
        &p.status.conditions,
        HostCondition::Reachable.as_str()
    ));
    assert!(condition::is_true(&p.status.conditions, condition::READY));
    assert_eq!(p.status.observed_generation, Some(2));
    assert_eq!(p.requeue, Duration::from_secs(300));
}

#[test]
fn reservation_larger_than_the_host_clamps_at_zero() {
    let mut big = spec();
    big.reserved_resources = crate::api::libvirt_host::ReservedResources {
        vcpus: 64,
        memory_mb: 100_000,
    };
    let c = capacity(&info(), &big, Resources::default());
    assert_eq!((c.available_vcpus, c.available_memory_mb), (0, 0));
}

#[test]
fn machines_allocations_come_off_the_available_capacity() {
    let committed = Resources {
        vcpus: 4,
        memory_mib: 8192,
    };
    let c = capacity(&info(), &spec(), committed);
    // 16 - 2 reserved - 4; 31560 - 4096 reserved - 8192.
    assert_eq!((c.available_vcpus, c.available_memory_mb), (10, 19_272));
    assert_eq!((c.total_vcpus, c.total_memory_mb), (16, 31_560));
}

#[test]
fn host_key_refusal_reports_the_fingerprint_and_retries_sooner() {
    let up = plan(
        &LibvirtHostStatus::default(),
        &spec(),
        None,
        &probed(),
        &OnHost::default(),
        &time("2026-01-01T00:00:00Z"),
    );
    let down = plan(
        &up.status,
        &spec(),
        None,
        &Observation::Failed(Failure {
            reason: HostReason::HostKeyMismatch,
            message: "host key differs".into(),
            observed_fingerprint: Some("SHA256:other".into()),
        }),
        &OnHost::default(),
        &time("2026-01-01T00:01:00Z"),
    );
    assert!(!down.status.ready);
    assert_eq!(
        down.status.observed_host_key_fingerprint.as_deref(),
        Some("SHA256:other")
    );
    let reachable = condition::find(&down.status.conditions, HostCondition::Reachable.as_str()).unwrap();
    assert_eq!(
        (reachable.status.as_str(), reachable.reason.as_str()),
        ("False", "HostKeyMismatch")
    );
    assert_eq!(down.requeue, FAILURE_RETRY);
    assert_eq!(down.status.capacity, up.status.capacity, "last known capacity is kept");
    let events = crate::reconcile::condition_events(&up.status.conditions, &down.status.conditions);
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].0, EventType::Warning);
}

#[test]
fn unchanged_host_does_not_rewrite_last_checked_within_half_an_interval() {
    let first = plan(
        &LibvirtHostStatus::default(),
        &spec(),
        Some(1),
        &probed(),
        &OnHost::default(),
        &time("2026-01-01T00:00:00Z"),
    );
    let soon = plan(
        &first.status,
        &spec(),
        Some(1),
        &probed(),
        &OnHost::default(),
        &time("2026-01-01T00:01:00Z"),
    );
    assert_eq!(first.status, soon.status, "no write, so no watch event, so no hot loop");
    let later = plan(
        &first.status,
        &spec(),
        Some(1),
        &probed(),
        &OnHost::default(),
        &time("2026-01-01T00:05:00Z"),
    );
    assert_eq!(later.status.last_checked, Some(time("2026-01-01T00:05:00Z")));
    assert_eq!(later.status.conditions, first.status.conditions);
}

#[test]
fn the_load_goes_into_status_and_stays_when_a_check_fails() {
    let load = HostLoad {
        available_memory_mb: Some(812),
        host_cpu_percent: Some(35),
    };
    let loaded = probed_with(Measurement {
        available_memory_mib: Some(812),
        host_cpu_percent: Some(35.2),
    });
    let p = plan(
        &LibvirtHostStatus::default(),
        &spec(),
        Some(1),
        &loaded,
        &OnHost::default(),
        &time("2026-01-01T00:00:00Z"),
    );
    assert_eq!(p.status.load, Some(load.clone()));
    let failed = Observation::Failed(Failure::from(
        crate::libvirt::hypervisor::HypervisorError::ConnectionFailed {
            uri: "qemu:///system".into(),
            message: "gone".into(),
        },
    ));
    let p = plan(
        &p.status,
        &spec(),
        Some(1),
        &failed,
        &OnHost::default(),
        &time("2026-01-01T00:01:00Z"),
    );
    assert_eq!(p.status.load, Some(load), "the last known load, like the capacity");
}

/// A successful check that also read the host's statistics.
fn probed_with(measurement: Measurement) -> Observation {
    let Observation::Probed {
        info,
        fingerprint,
        committed,
        ..
    } = probed()
    else {
        unreachable!()
    };
    Observation::Probed {
        info,
        fingerprint,
        committed,
        measurement: Some(measurement),
    }
}

fn measured(memory: u64) -> Observation {
    probed_with(Measurement {
        available_memory_mib: Some(memory),
        host_cpu_percent: Some(5.0),
    })
}

fn reclaiming_spec(policy: serde_json::Value) -> LibvirtHostSpec {
    serde_json::from_value(serde_json::json!({"uri": "test:///default", "reclaim": policy})).unwrap()
}

fn spot(machine: &str) -> Candidate {
    Candidate {
        machine: machine.into(),
        scheduled_machine: format!("sm-{machine}"),
        priority: 50,
        created_ms: 0,
        deleting: false,
    }
}

fn under_pressure(status: &LibvirtHostStatus) -> Option<(&str, &str)> {
    condition::find(&status.conditions, HostCondition::UnderPressure.as_str())
        .map(|c| (c.status.as_str(), c.reason.as_str()))
}

#[test]
fn a_reclaim_policy_samples_often_and_names_a_victim_once_the_pressure_lasts() {
    let spec = reclaiming_spec(serde_json::json!({"minFreeMemoryMB": 2048, "for": "10s"}));
    let on_host = OnHost {
        spot: vec![spot("a")],
        ..OnHost::default()
    };
    let fine = plan(
        &LibvirtHostStatus::default(),
        &spec,
        Some(1),
        &measured(8192),
        &on_host,
        &time("2026-01-01T00:00:00Z"),
    );
    assert_eq!(under_pressure(&fine.status), Some(("False", "WithinLimits")));
    assert_eq!(
        fine.requeue,
        Duration::from_secs(5),
        "half of `for`, not the health interval"
    );
    // A load that changes between samples is not written each time.
    let next = plan(
        &fine.status,
        &spec,
        Some(1),
        &measured(8000),
        &on_host,
        &time("2026-01-01T00:00:05Z"),
    );
    assert_eq!(next.status, fine.status);
    // Below the floor: building, rechecked at the moment it will have lasted `for`.
    let low = plan(
        &next.status,
        &spec,
        Some(1),
        &measured(1000),
        &on_host,
        &time("2026-01-01T00:00:07Z"),
    );
    assert_eq!(under_pressure(&low.status), Some(("False", "PressureBuilding")));
    assert_eq!(low.status.load.as_ref().and_then(|l| l.available_memory_mb), Some(1000));
    assert_eq!(low.reclaiming, None);
    let held = plan(
        &low.status,
        &spec,
        Some(1),
        &measured(1000),
        &on_host,
        &time("2026-01-01T00:00:17Z"),
    );
    assert_eq!(under_pressure(&held.status), Some(("True", "MemoryPressure")));
    let victim = held.reclaiming.expect("a victim");
    assert_eq!(victim.scheduled_machine, "sm-a");
    assert_eq!(held.status.reclaim.unwrap().victim, Some(victim));
}

#[test]
fn a_bad_policy_is_named_and_no_policy_leaves_no_trace() {
    let bad_spec = reclaiming_spec(serde_json::json!({"maxHostCPUPercent": 80, "for": "99999999999999999h"}));
    let bad = plan(
        &LibvirtHostStatus::default(),
        &bad_spec,
        Some(1),
        &measured(100),
        &OnHost {
            spot: vec![spot("a")],
            ..OnHost::default()
        },
        &time("2026-01-01T00:00:00Z"),
    );
    assert_eq!(under_pressure(&bad.status), Some(("False", "InvalidReclaim")));
    let message = &condition::find(&bad.status.conditions, "UnderPressure")
        .unwrap()
        .message;
    assert!(message.contains("spec.reclaim.for"), "{message}");
    assert_eq!(bad.reclaiming, None);
    let off = plan(
        &bad.status,
        &spec(),
        Some(2),
        &measured(100),
        &OnHost {
            spot: vec![spot("a")],
            ..OnHost::default()
        },
        &time("2026-01-01T00:00:01Z"),
    );
    assert_eq!(under_pressure(&off.status), None);
    assert_eq!(off.status.reclaim, None);
    assert_eq!(off.requeue, Duration::from_secs(300));
}

#[test]
fn a_small_host_whose_reservation_leaves_nothing_says_so() {
    let two_cpus = Observation::Probed {
        info: HostInfo {
            cpus: 2,
            memory_mib: 8192,
            ..info()
        },
        fingerprint: None,
        committed: Resources::default(),
        measurement: None,
    };
    let p = plan(
        &LibvirtHostStatus::default(),
        &spec(),
        Some(1),
        &two_cpus,
        &OnHost::default(),
        &time("2026-01-01T00:00:00Z"),
    );
    let capacity = p.status.capacity.clone().unwrap();
    assert_eq!((capacity.allocatable_vcpus, capacity.available_vcpus), (0, 0));
    let ready = condition::find(&p.status.conditions, condition::READY).unwrap();
    assert!(
        ready
            .message
            .ends_with("reservedResources (2 vCPUs, 4096 MiB) and overcommit leave no vCPUs for machines"),
        "{}",
        ready.message
    );
    // Overcommit gives the small host something to offer.
    let mut overcommitted = spec();
    overcommitted.overcommit.cpu_ratio = crate::api::libvirt_host::Ratio(4.0);
    overcommitted.reserved_resources.vcpus = 1;
    let p = plan(
        &LibvirtHostStatus::default(),
        &overcommitted,
        Some(1),
        &two_cpus,
        &OnHost::default(),
        &time("2026-01-01T00:00:00Z"),
    );
    assert_eq!(p.status.capacity.unwrap().available_vcpus, 4);
}

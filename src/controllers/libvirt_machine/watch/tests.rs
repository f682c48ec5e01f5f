//! The domain watch on the in-memory hypervisor: why a stopped domain stopped decides how its
//! restart is announced, and a guest that shuts down while its Machine is being deleted stays
//! off.

use serde_json::json;

use super::*;
use crate::{
    api::condition,
    libvirt::fake::{FakeHypervisor, Op},
};

const INTERVAL: Duration = Duration::from_secs(60);

fn machine() -> LibvirtMachine {
    plan::tests::machine(json!({"metadata": {"generation": 1}, "status": {"ready": true}}))
}

fn id(m: &LibvirtMachine) -> plan::Identity {
    plan::identity(m).unwrap()
}

fn now() -> Time {
    Time("2026-12-01T12:00:00Z".parse().unwrap())
}

/// A host where our domain stopped for `why`.
fn stopped(m: &LibvirtMachine, why: StopReason) -> FakeHypervisor {
    let hv = FakeHypervisor::new();
    let name = id(m).node_name;
    hv.insert_domain(&name, id(m).uuid, DomainState::Running);
    hv.stop_domain(&name, why);
    hv
}

fn check(hv: &FakeHypervisor, m: &LibvirtMachine, owner_deleting: bool) -> Outcome {
    check_as(hv, m, Owner::of(owner_deleting, Owner::Confirmed))
}

fn check_as(hv: &FakeHypervisor, m: &LibvirtMachine, owner: Owner) -> Outcome {
    let identity = id(m);
    let result = inspect_and_restart(hv, &identity.node_name, identity.uuid, owner);
    let called = HostCall::Ran {
        result,
        fingerprint: None,
    };
    outcome(m, &identity, "laptop", called, INTERVAL, &now())
}

fn ready(out: &Outcome) -> (String, String) {
    let c = condition::find(&out.status.conditions, "Ready").unwrap();
    (c.status.clone(), c.reason.clone())
}

#[test]
fn a_restart_is_announced_by_why_the_domain_stopped() {
    let m = machine();
    let cases = [
        (
            StopReason::ShutDown,
            "DomainShutDown",
            vec!["restarted", "guest_shutdown"],
            "was shut down by its guest",
        ),
        (
            StopReason::Crashed,
            "DomainCrashed",
            vec!["restarted", "crashed"],
            "crashed",
        ),
        (
            StopReason::Destroyed,
            "DomainRestarted",
            vec!["restarted"],
            "was destroyed on the host",
        ),
        (StopReason::Other, "DomainRestarted", vec!["restarted"], "stopped"),
    ];
    for (why, event, counted, says) in cases {
        let hv = stopped(&m, why);
        let out = check(&hv, &m, false);
        assert_eq!(ready(&out), ("True".into(), "DomainRunning".into()), "{why:?}");
        assert_eq!(out.counted, counted, "{why:?}");
        let [(t, reason, note)] = out.events.as_slice() else {
            panic!("one Event for {why:?}: {:?}", out.events);
        };
        assert_eq!((*t, *reason), (EventType::Warning, event), "{why:?}");
        assert!(note.contains(says) && note.contains("started again"), "{note}");
        assert_eq!(hv.calls(Op::Start), 1);
    }
}

#[test]
fn a_guest_shutdown_while_the_machine_is_deleted_stays_off_and_is_counted_once() {
    let m = machine();
    let hv = stopped(&m, StopReason::ShutDown);
    let out = check(&hv, &m, true);
    assert_eq!(ready(&out), ("False".into(), "DomainShutDown".into()));
    assert_eq!(out.counted, ["guest_shutdown"]);
    assert!(out.events.is_empty(), "the Ready change is the Event");
    assert_eq!(out.status.domain_state.as_deref(), Some("shutoff"));
    assert!(out.status.ready, "ready stays latched");
    assert_eq!(hv.calls(Op::Start), 0, "not restarted");
    let mut again = m.clone();
    again.status = Some(out.status.clone());
    let next = check(&hv, &again, true);
    assert!(next.counted.is_empty(), "counted when it began");
    assert_eq!(next.status, out.status, "nothing new to write");
    assert_eq!(hv.calls(Op::Start), 0);
}

#[test]
fn while_the_machine_is_deleted_only_a_guest_shutdown_is_left_off() {
    let m = machine();
    for why in [StopReason::Crashed, StopReason::Destroyed, StopReason::Other] {
        let hv = stopped(&m, why);
        let out = check(&hv, &m, true);
        assert_eq!(ready(&out).1, "DomainRunning", "{why:?} is restarted");
        assert_eq!(hv.calls(Op::Start), 1);
    }
    // A running domain is just watched.
    let hv = FakeHypervisor::new();
    hv.insert_domain(&id(&m).node_name, id(&m).uuid, DomainState::Running);
    let out = check(&hv, &m, true);
    assert!(out.events.is_empty() && out.counted.is_empty());
    assert_eq!(ready(&out).1, "DomainRunning");
}

#[test]
fn a_guest_shutdown_is_not_undone_on_the_cache_alone() {
    let m = machine();
    let hv = stopped(&m, StopReason::ShutDown);
    let identity = id(&m);
    let found = inspect_and_restart(&hv, &identity.node_name, identity.uuid, Owner::Cached).unwrap();
    assert_eq!(found, DomainCheck::GuestShutDown);
    assert_eq!(hv.calls(Op::Start), 0, "waits for the live read");
    let out = check_as(&hv, &m, Owner::Cached);
    assert_eq!(ready(&out), ("False".into(), "DomainNotRunning".into()));
    assert!(out.events.is_empty() && out.counted.is_empty());
    // Other stops are restarted on the cache: no drain powers a guest off by crashing it.
    for why in [StopReason::Crashed, StopReason::Destroyed] {
        let hv = stopped(&m, why);
        assert_eq!(ready(&check_as(&hv, &m, Owner::Cached)).1, "DomainRunning", "{why:?}");
    }
}

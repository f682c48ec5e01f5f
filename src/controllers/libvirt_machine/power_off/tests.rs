//! The graceful power-off's decisions: the plan from the spec, the recorded request and the
//! clock; what the step does to guests that honour or ignore ACPI on the in-memory hypervisor;
//! and the status and Events it leads to.

use serde_json::json;

use super::*;
use crate::{
    api::libvirt_machine::MachineReason,
    controllers::libvirt_machine::plan,
    libvirt::{
        fake::{FakeHypervisor, Op},
        hypervisor::{DomainState, StopReason},
    },
};

const NAME: &str = "spot-worker-01";

fn at(s: &str) -> Time {
    Time(s.parse().unwrap())
}

fn spec(mode: ShutdownMode, timeout: &str) -> ShutdownSpec {
    ShutdownSpec {
        mode,
        timeout: timeout.to_owned(),
    }
}

fn machine(extra: serde_json::Value) -> LibvirtMachine {
    plan::tests::machine(extra)
}

fn uuid() -> Uuid {
    plan::identity(&machine(json!({}))).unwrap().uuid
}

/// A host running our domain.
fn host() -> FakeHypervisor {
    let hv = FakeHypervisor::new();
    hv.insert_domain(NAME, uuid(), DomainState::Running);
    hv
}

fn state(hv: &FakeHypervisor) -> (DomainState, Option<StopReason>) {
    let d = hv.domain(NAME).unwrap().unwrap();
    (d.state, d.stop_reason)
}

#[test]
fn the_plan_follows_the_mode_the_request_and_the_clock() {
    let graceful = ShutdownSpec::default();
    assert_eq!(
        (graceful.mode, graceful.timeout.as_str()),
        (ShutdownMode::Graceful, "60s")
    );
    let now = at("2026-12-01T12:00:00Z");
    let minute = Duration::from_secs(60);
    assert_eq!(plan(&graceful, None, &now).unwrap(), Plan::Request { timeout: minute });
    assert_eq!(
        plan(&graceful, Some(&at("2026-12-01T11:59:45Z")), &now).unwrap(),
        Plan::Wait {
            remaining: Duration::from_secs(45)
        }
    );
    assert_eq!(
        plan(&graceful, Some(&at("2026-12-01T11:59:00Z")), &now).unwrap(),
        Plan::TimedOut { timeout: minute },
        "exactly the timeout is up"
    );
    assert_eq!(
        plan(&graceful, Some(&at("2026-12-01T12:05:00Z")), &now).unwrap(),
        Plan::Wait { remaining: minute },
        "a request stamped in the future counts as made now"
    );
    assert_eq!(plan(&spec(ShutdownMode::Hard, "60s"), None, &now).unwrap(), Plan::Hard);
    assert_eq!(
        plan(&spec(ShutdownMode::Graceful, "0s"), None, &now).unwrap(),
        Plan::Hard
    );
    assert_eq!(
        plan(&spec(ShutdownMode::Hard, "nonsense"), None, &now).unwrap(),
        Plan::Hard,
        "Hard never reads the timeout"
    );
    // The CRD pattern admits this; it is past what a duration holds.
    let e = plan(&spec(ShutdownMode::Graceful, "3000000h"), None, &now).unwrap_err();
    assert!(e.to_string().starts_with("spec.shutdown.timeout: "), "{e}");
    assert_eq!(Plan::Wait { remaining: minute }.remaining(), minute);
    assert_eq!(Plan::Request { timeout: minute }.remaining(), minute);
}

#[test]
fn a_guest_that_honours_acpi_is_off_after_the_request() {
    let hv = host();
    let power = step(
        &hv,
        NAME,
        uuid(),
        Plan::Request {
            timeout: Duration::from_secs(60),
        },
    )
    .unwrap();
    assert_eq!(power, Power::Off { asked_now: true });
    assert_eq!(state(&hv), (DomainState::Shutoff, Some(StopReason::ShutDown)));
    assert_eq!(hv.calls(Op::Destroy), 0, "nothing was pulled");
}

#[test]
fn a_guest_that_ignores_acpi_is_waited_for_then_destroyed() {
    let hv = host();
    hv.ignore_acpi(NAME);
    let timeout = Duration::from_secs(60);
    assert_eq!(
        step(&hv, NAME, uuid(), Plan::Request { timeout }).unwrap(),
        Power::Stopping { asked_now: true }
    );
    let waiting = Plan::Wait {
        remaining: Duration::from_secs(30),
    };
    assert_eq!(
        step(&hv, NAME, uuid(), waiting).unwrap(),
        Power::Stopping { asked_now: false }
    );
    assert_eq!(hv.calls(Op::Shutdown), 1, "asked once");
    assert_eq!(state(&hv).0, DomainState::Running);
    assert_eq!(
        step(&hv, NAME, uuid(), Plan::TimedOut { timeout }).unwrap(),
        Power::Destroyed(Forced::TimedOut(timeout))
    );
    assert_eq!(state(&hv), (DomainState::Shutoff, Some(StopReason::Destroyed)));
    // A rerun (the teardown failed after the destroy) finds it off and destroys nothing more.
    assert_eq!(
        step(&hv, NAME, uuid(), Plan::TimedOut { timeout }).unwrap(),
        Power::Off { asked_now: false }
    );
    assert_eq!(hv.calls(Op::Destroy), 1);
}

#[test]
fn stopped_missing_and_foreign_domains_are_not_asked() {
    let request = Plan::Request {
        timeout: Duration::from_secs(60),
    };
    let hv = host();
    hv.stop_domain(NAME, StopReason::Crashed);
    assert_eq!(
        step(&hv, NAME, uuid(), request).unwrap(),
        Power::Off { asked_now: false }
    );
    let hv = FakeHypervisor::new();
    assert_eq!(
        step(&hv, NAME, uuid(), request).unwrap(),
        Power::Off { asked_now: false }
    );
    let hv = FakeHypervisor::new();
    hv.insert_domain(NAME, Uuid::from_u128(7), DomainState::Running);
    assert_eq!(
        step(&hv, NAME, uuid(), request).unwrap(),
        Power::Off { asked_now: false }
    );
    assert_eq!(
        step(&hv, NAME, uuid(), Plan::Hard).unwrap(),
        Power::Off { asked_now: false }
    );
    assert_eq!(
        (hv.calls(Op::Shutdown), hv.calls(Op::Destroy)),
        (0, 0),
        "a foreign domain is never touched"
    );
    assert_eq!(hv.calls(Op::Domain), 1, "Hard does not even look");
}

#[test]
fn a_driver_without_acpi_gets_its_domain_destroyed_and_errors_are_retried() {
    let hv = host();
    hv.fail_next(
        Op::Shutdown,
        HypervisorError::Unsupported {
            operation: "shut down domain",
            message: "no ACPI".into(),
        },
    );
    let request = Plan::Request {
        timeout: Duration::from_secs(60),
    };
    let Power::Destroyed(Forced::Refused(why)) = step(&hv, NAME, uuid(), request).unwrap() else {
        panic!("expected a forced destroy");
    };
    assert!(why.contains("no ACPI"), "{why}");
    assert_eq!(state(&hv).0, DomainState::Shutoff);

    let hv = host();
    let transient = HypervisorError::ConnectionFailed {
        uri: "u".into(),
        message: "gone".into(),
    };
    hv.fail_next(Op::Shutdown, transient.clone());
    let e = step(&hv, NAME, uuid(), request).unwrap_err();
    assert!(e.is_transient(), "{e}");
    hv.fail_next(Op::Destroy, transient);
    let timed_out = Plan::TimedOut {
        timeout: Duration::from_secs(60),
    };
    assert!(step(&hv, NAME, uuid(), timed_out).is_err());
    assert_eq!(state(&hv).0, DomainState::Running, "retried on the next pass");
}

#[test]
fn each_power_action_has_its_event_and_metric_label() {
    let spec = ShutdownSpec::default();
    let none = [Power::Off { asked_now: false }, Power::Stopping { asked_now: false }];
    for power in none {
        assert_eq!(announcement(&power, NAME, &spec), None, "{power:?}");
    }
    let (t, reason, note, label) = announcement(&Power::Stopping { asked_now: true }, NAME, &spec).unwrap();
    assert_eq!(
        (t, reason, label),
        (EventType::Normal, "ShutdownRequested", "shutdown_requested")
    );
    assert!(note.contains(NAME) && note.contains("60s"), "{note}");
    let forced = Power::Destroyed(Forced::TimedOut(Duration::from_secs(60)));
    let (t, reason, note, label) = announcement(&forced, NAME, &spec).unwrap();
    assert_eq!(
        (t, reason, label),
        (EventType::Warning, "ShutdownTimedOut", "shutdown_timed_out")
    );
    assert!(note.contains("within 60s"), "{note}");
    let refused = Power::Destroyed(Forced::Refused("nope".into()));
    assert_eq!(announcement(&refused, NAME, &spec).unwrap().1, "ShutdownRefused");
}

#[test]
fn waiting_records_the_request_once_and_rewrites_nothing_on_later_passes() {
    let m = machine(json!({"metadata": {"generation": 1},
        "status": {"conditions": [{"type": "CleanupStalled", "status": "True", "reason": "ConnectionFailed",
            "message": "cannot reach", "lastTransitionTime": "2026-12-01T11:00:00Z"}]}}));
    // Stored to the second, rounded up: the guest never gets less than its timeout.
    let asked = recorded(
        &m,
        &Power::Stopping { asked_now: true },
        &at("2026-12-01T11:59:59.250Z"),
    );
    let now = at("2026-12-01T12:00:00Z");
    assert_eq!(current(&asked).shutdown_requested_at, Some(now.clone()));
    let whole = recorded(&m, &Power::Off { asked_now: true }, &now);
    assert_eq!(current(&whole).shutdown_requested_at, Some(now.clone()));
    assert_eq!(
        recorded(&m, &Power::Stopping { asked_now: false }, &now).status,
        m.status,
        "a later pass keeps the first request's time"
    );
    let first = stopping(&asked, NAME, Duration::from_secs(60), &now);
    let ready = condition::find(&first.status.conditions, "Ready").unwrap();
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_str()),
        ("False", "ShuttingDown")
    );
    assert!(
        ready.message.contains("2026-12-01T12:00:00Z") && ready.message.contains("60s"),
        "{}",
        ready.message
    );
    let stalled = condition::find(&first.status.conditions, "CleanupStalled").unwrap();
    assert_eq!(
        (stalled.status.as_str(), stalled.reason.as_str()),
        ("False", MachineReason::ShuttingDown.as_str()),
        "cleanup is under way again"
    );
    assert_eq!(first.action, Action::requeue(POLL), "bounded by the poll");
    let mut written = asked.clone();
    written.status = Some(first.status.clone());
    let later = at("2026-12-01T12:00:59.950Z");
    let second = stopping(&written, NAME, Duration::from_millis(50), &later);
    assert_eq!(second.status, first.status, "nothing new to write while waiting");
    assert_eq!(second.action, Action::requeue(MIN_POLL), "never a zero requeue");
}

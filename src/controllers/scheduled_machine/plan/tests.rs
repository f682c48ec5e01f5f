use super::*;
use crate::api::{ScheduledMachine, capi::CapiVersion, scheduled_machine::ScheduledCondition};
use crate::controllers::scheduled_machine::taints;

fn at(s: &str) -> DateTime<Utc> {
    s.parse().unwrap()
}

fn refs() -> CreatedRefs {
    let sm: ScheduledMachine =
        serde_yaml::from_str(include_str!("../../../../examples/seed/05-scheduledmachine.yaml")).unwrap();
    super::super::objects::references("w", &sm.spec, CapiVersion::V1beta1)
}

fn valid(active: bool) -> Validity {
    let next = Some(at("2026-12-01T17:00:00Z"));
    Validity::Valid(Timing {
        plan: Plan {
            open: active,
            next_edge: next,
            wanted: active,
            next_wanted_change: next,
        },
        lead: None,
        edge: None,
        drain_before_end: false,
        drain_timeout: Duration::from_secs(300),
        graceful_timeout: Duration::from_secs(600),
    })
}

fn observed(active: bool) -> Observed {
    Observed {
        now: at("2026-12-01T16:00:00Z"),
        generation: Some(1),
        deleting: false,
        enabled: true,
        kill_switch: false,
        validity: valid(active),
        refs: refs(),
        machine: None,
        bootstrap_exists: false,
        infrastructure_exists: false,
        node: None,
        node_taints: Vec::new(),
        forced: None,
        expired_overrides: Vec::new(),
        reclaim_request: None,
    }
}

fn with_machine(mut o: Observed, phase: &str) -> Observed {
    o.machine = Some(MachineSeen {
        phase: Some(phase.into()),
        node_name: Some("w".into()),
        ..MachineSeen::default()
    });
    o.bootstrap_exists = true;
    o.infrastructure_exists = true;
    o
}

fn node(pods: usize, cordoned: bool, by_us: bool) -> Option<NodeSeen> {
    Some(NodeSeen {
        name: "w".into(),
        ready: true,
        cordoned,
        cordoned_by_us: by_us,
        pods_to_evict: pods,
        ..NodeSeen::default()
    })
}

fn reason(status: &ScheduledMachineStatus, type_: &str) -> String {
    condition::find(&status.conditions, type_).unwrap().reason.clone()
}

#[test]
fn window_open_without_machine_creates_and_requeues_at_the_close() {
    let d = decide(&ScheduledMachineStatus::default(), &observed(true));
    assert_eq!(d.action, Action::Create);
    assert_eq!(d.status.phase, Some(Phase::Pending));
    assert_eq!(d.status.in_schedule, Some(true));
    assert_eq!(d.requeue, Some(Duration::from_secs(3600)));
    assert_eq!(d.status.next_cleanup, d.status.next_transition);
    assert!(d.status.next_activation.is_none());
    assert_eq!(
        reason(&d.status, ScheduledCondition::ScheduleValid.as_str()),
        "ScheduleValid"
    );
    assert_eq!(
        reason(&d.status, ScheduledCondition::MachineReady.as_str()),
        "NoMachine"
    );
}

#[test]
fn once_created_the_window_is_active_with_every_reference() {
    let seen = observed(true);
    let create = decide(&ScheduledMachineStatus::default(), &seen);
    assert_eq!(create.action, Action::Create);
    let d = decide(&create.status, &seen.as_created());
    assert_eq!((d.action, d.status.phase), (Action::None, Some(Phase::Active)));
    assert!(d.status.window.is_some(), "the window recorded by the create is kept");
    assert_eq!(d.status.window, create.status.window);
    assert!(d.status.machine_ref.is_some() && d.status.infrastructure_ref.is_some());
    assert_eq!(d.status.bootstrap_ref.is_some(), seen.refs.bootstrap.is_some());
    assert_eq!(
        d.requeue,
        Some(Duration::from_secs(3600)),
        "still looks again at the close"
    );
}

#[test]
fn running_machine_is_active_and_ready() {
    let d = decide(
        &ScheduledMachineStatus::default(),
        &with_machine(observed(true), "Running"),
    );
    assert_eq!(d.action, Action::None);
    assert_eq!(d.status.phase, Some(Phase::Active));
    assert!(condition::is_true(&d.status.conditions, condition::READY));
    assert_eq!(d.status.node_ref.unwrap().name, "w");
    assert_eq!(d.status.machine_ref.unwrap().name, "w");
}

#[test]
fn window_closed_with_nothing_is_inactive_and_sleeps_until_it_opens() {
    let d = decide(&ScheduledMachineStatus::default(), &observed(false));
    assert_eq!((d.action, d.status.phase), (Action::None, Some(Phase::Inactive)));
    assert_eq!(d.status.next_activation, d.status.next_transition);
    assert_eq!(d.requeue, Some(Duration::from_secs(3600)));
    assert!(d.status.machine_ref.is_none());
}

#[test]
fn window_closed_drains_then_deletes_within_the_drain_timeout() {
    let mut o = with_machine(observed(false), "Running");
    o.node = node(3, false, false);
    let d = decide(&ScheduledMachineStatus::default(), &o);
    assert_eq!(d.action, Action::Drain { node: "w".into() });
    assert_eq!(d.status.phase, Some(Phase::ShuttingDown));
    assert_eq!(d.requeue, Some(DRAIN_RETRY));
    let started = d.status.shutdown_started_at.clone().unwrap();

    // Still blocked 4 minutes later: keep draining; the start time is kept.
    o.now = at("2026-12-01T16:04:00Z");
    let d = decide(&d.status, &o);
    assert_eq!(d.action, Action::Drain { node: "w".into() });
    assert_eq!(d.status.shutdown_started_at, Some(started));

    // Past nodeDrainTimeout (5m): delete the Machine anyway; CAPI's own drain still applies.
    o.now = at("2026-12-01T16:05:00Z");
    let d = decide(&d.status, &o);
    assert_eq!(d.action, Action::DeleteMachine { skip_drain: false });

    // Drained before the timeout: delete at once.
    let mut o = with_machine(observed(false), "Running");
    o.node = node(0, true, true);
    assert_eq!(
        decide(&ScheduledMachineStatus::default(), &o).action,
        Action::DeleteMachine { skip_drain: false }
    );
}

#[test]
fn grace_period_exhausted_tells_capi_to_skip_its_drain() {
    let mut o = with_machine(observed(false), "Deleting");
    o.machine.as_mut().unwrap().deleting = true;
    let d = decide(&ScheduledMachineStatus::default(), &o);
    assert_eq!(d.action, Action::None);
    // Rechecked often while the Machine is removed (the cache may lag the trigger) ...
    assert_eq!(d.requeue, Some(REMOVAL_RECHECK));
    // ... and exactly at the grace deadline once that is nearer.
    o.now = at("2026-12-01T16:09:59Z");
    let d = decide(&d.status, &o);
    assert_eq!(d.requeue, Some(Duration::from_secs(1)));
    o.now = at("2026-12-01T16:10:00Z");
    let d = decide(&d.status, &o);
    assert_eq!(d.action, Action::DeleteMachine { skip_drain: true });
}

#[test]
fn leftovers_without_a_machine_are_removed_then_inactive() {
    let mut o = observed(false);
    o.infrastructure_exists = true;
    let d = decide(&ScheduledMachineStatus::default(), &o);
    assert_eq!(
        (d.action, d.status.phase),
        (Action::DeleteLeftovers, Some(Phase::ShuttingDown))
    );
    assert!(d.status.infrastructure_ref.is_some());
    o.infrastructure_exists = false;
    let d = decide(&d.status, &o);
    assert_eq!(d.status.phase, Some(Phase::Inactive));
    assert!(d.status.shutdown_started_at.is_none());
}

#[test]
fn reopening_during_shutdown_uncordons_and_goes_back_to_active() {
    let mut o = with_machine(observed(true), "Running");
    o.node = node(0, true, true);
    let shutting = ScheduledMachineStatus {
        phase: Some(Phase::ShuttingDown),
        ..Default::default()
    };
    let d = decide(&shutting, &o);
    assert_eq!(d.action, Action::Uncordon { node: "w".into() });
    assert_eq!(d.status.phase, Some(Phase::Active));
    assert!(d.status.shutdown_started_at.is_none());
    // A node cordoned by someone else is left alone.
    o.node = node(0, true, false);
    assert_eq!(decide(&shutting, &o).action, Action::None);
}

#[test]
fn kill_switch_deletes_without_drain_and_is_not_sticky() {
    let mut o = with_machine(observed(true), "Running");
    o.node = node(5, false, false);
    o.kill_switch = true;
    let d = decide(&ScheduledMachineStatus::default(), &o);
    assert_eq!(
        (d.action.clone(), d.status.phase),
        (Action::DeleteMachine { skip_drain: true }, Some(Phase::Terminated))
    );
    let mut gone = observed(true);
    gone.kill_switch = true;
    let d = decide(&d.status, &gone);
    assert_eq!((d.action, d.status.phase), (Action::None, Some(Phase::Terminated)));
    assert_eq!(
        d.status.message.as_deref(),
        Some("kill switch on; machine removed without draining")
    );
    gone.kill_switch = false;
    let d = decide(&d.status, &gone);
    assert_eq!((d.action, d.status.phase), (Action::Create, Some(Phase::Pending)));
}

#[test]
fn disabled_removes_gracefully_then_rests() {
    let mut o = with_machine(observed(true), "Running");
    o.enabled = false;
    let d = decide(&ScheduledMachineStatus::default(), &o);
    assert_eq!(
        (d.action, d.status.phase),
        (Action::DeleteMachine { skip_drain: false }, Some(Phase::ShuttingDown))
    );
    assert!(d.status.message.unwrap().starts_with("schedule disabled"));
    let mut o = observed(true);
    o.enabled = false;
    assert_eq!(
        decide(&ScheduledMachineStatus::default(), &o).status.phase,
        Some(Phase::Disabled)
    );
}

#[test]
fn invalid_spec_is_an_error_condition_that_removes_an_active_machine_and_recovers() {
    let invalid = Validity::Invalid {
        reason: crate::schedule::Reason::InvalidTimezone.into(),
        message: "spec.schedule.timezone: unknown time zone \"Mars/Base\"".into(),
    };
    let mut o = with_machine(observed(true), "Running");
    o.validity = invalid.clone();
    let d = decide(&ScheduledMachineStatus::default(), &o);
    assert_eq!(
        (d.action, d.status.phase),
        (Action::DeleteMachine { skip_drain: false }, Some(Phase::ShuttingDown))
    );
    assert_eq!(
        reason(&d.status, ScheduledCondition::ScheduleValid.as_str()),
        "InvalidTimezone"
    );
    assert_eq!(d.status.in_schedule, None);

    let mut o = observed(true);
    o.validity = invalid;
    let d = decide(&ScheduledMachineStatus::default(), &o);
    assert_eq!(
        (d.action.clone(), d.status.phase, d.requeue),
        (Action::None, Some(Phase::Error), None),
        "no hot loop"
    );
    let fixed = decide(&d.status, &observed(true));
    assert_eq!(fixed.status.phase, Some(Phase::Pending));
    assert_eq!(
        reason(&fixed.status, ScheduledCondition::ScheduleValid.as_str()),
        "ScheduleValid"
    );
}

#[test]
fn deletion_removes_gracefully_and_releases_the_finalizer_when_nothing_is_left() {
    let mut o = with_machine(observed(true), "Running");
    o.deleting = true;
    let d = decide(&ScheduledMachineStatus::default(), &o);
    assert_eq!(d.action, Action::DeleteMachine { skip_drain: false });
    assert!(!d.release_finalizer);
    let mut gone = observed(true);
    gone.deleting = true;
    let d = decide(&d.status, &gone);
    assert!(d.release_finalizer);
    assert_eq!(d.requeue, None);
}

#[test]
fn a_machine_still_deleting_when_the_window_reopens_is_awaited_before_recreating() {
    let mut o = with_machine(observed(true), "Deleting");
    o.machine.as_mut().unwrap().deleting = true;
    let d = decide(&ScheduledMachineStatus::default(), &o);
    assert_eq!((d.action, d.status.phase), (Action::None, Some(Phase::Pending)));
    assert_eq!(
        reason(&d.status, ScheduledCondition::MachineReady.as_str()),
        "MachineDeleting"
    );
}

#[test]
fn the_same_world_twice_gives_the_same_status() {
    let o = with_machine(observed(true), "Running");
    let first = decide(&ScheduledMachineStatus::default(), &o);
    let mut later = o.clone();
    later.now = at("2026-12-01T16:30:00Z");
    let second = decide(&first.status, &later);
    assert_eq!(first.status, second.status, "status written only when it changes");
}

#[test]
fn a_ready_node_gets_the_spec_taints_and_then_nothing_more() {
    use crate::api::node_taint::{NodeTaint, TaintEffect};
    let mut o = with_machine(observed(true), "Running");
    o.node_taints = vec![NodeTaint {
        key: "spot.example.com/ephemeral".into(),
        value: Some("true".into()),
        effect: TaintEffect::NoSchedule,
    }];
    o.node = node(0, false, false);
    let Action::SetTaints { node: name, update, .. } = decide(&ScheduledMachineStatus::default(), &o).action else {
        panic!("expected the taints to be written");
    };
    assert_eq!(name, "w");
    assert_eq!(update.taints.len(), 1);
    assert_eq!(
        decide(&ScheduledMachineStatus::default(), &o).status.phase,
        Some(Phase::Active)
    );

    let mut converged = o.clone();
    if let Some(n) = converged.node.as_mut() {
        n.taints = update.taints.clone();
        n.owned_taints = update.owned.clone();
    }
    assert_eq!(
        decide(&ScheduledMachineStatus::default(), &converged).action,
        Action::None
    );

    let mut not_ready = o;
    if let Some(n) = not_ready.node.as_mut() {
        n.ready = false;
    }
    assert_eq!(
        decide(&ScheduledMachineStatus::default(), &not_ready).action,
        Action::None,
        "taints wait for a Ready Node"
    );
}

/// A schedule opening at 09:00 and closing at 17:00 on 2026-12-01, with a 10-minute lead and
/// the world at `now`.
fn lead_observed(now: &str) -> Observed {
    let now = at(now);
    let (opens, closes) = (at("2026-12-01T09:00:00Z"), at("2026-12-01T17:00:00Z"));
    let lead = Duration::from_secs(600);
    let open = now >= opens && now < closes;
    let wanted = now >= opens - chrono::Duration::minutes(10) && now < closes;
    let mut o = observed(open);
    o.now = now;
    o.validity = Validity::Valid(Timing {
        plan: Plan {
            open,
            next_edge: Some(if open { closes } else { opens }),
            wanted,
            next_wanted_change: Some(if wanted {
                closes
            } else {
                opens - chrono::Duration::minutes(10)
            }),
        },
        lead: Some(lead),
        edge: Some(opens),
        drain_before_end: false,
        drain_timeout: Duration::from_secs(300),
        graceful_timeout: Duration::from_secs(600),
    });
    o
}

fn taint_update(d: &Decision) -> TaintUpdate {
    match &d.action {
        Action::SetTaints { update, .. } => update.clone(),
        other => panic!("expected a taint write, got {other:?}"),
    }
}

#[test]
fn a_lead_time_window_is_provisioned_early_held_tainted_and_released_at_the_edge() {
    // 08:50: the lead begins. Create, as phase Preparing, and wake at the edge.
    let d = decide(
        &ScheduledMachineStatus::default(),
        &lead_observed("2026-12-01T08:50:00Z"),
    );
    assert_eq!(
        (d.action.clone(), d.status.phase),
        (Action::Create, Some(Phase::Preparing))
    );
    assert_eq!(d.requeue, Some(Duration::from_secs(600)));
    assert_eq!(d.status.in_schedule, Some(false));
    assert_eq!(d.status.lead_time.as_deref(), Some("10m0s"));
    let record = d.status.window.clone().unwrap();
    assert_eq!(
        record.opens_at.and_then(|t| chrono_of(&t)),
        Some(at("2026-12-01T09:00:00Z"))
    );
    assert_eq!(
        record.provisioning_started_at.and_then(|t| chrono_of(&t)),
        Some(at("2026-12-01T08:50:00Z"))
    );
    assert!(d.status.message.as_deref().unwrap().contains("leadTime 10m0s"));
    // A second create pass keeps the record it started.
    let again = decide(&d.status, &lead_observed("2026-12-01T08:50:01Z"));
    assert_eq!(again.status.window, d.status.window);

    // 08:53: the Node registers, not Ready yet: it gets the window-closed taint at once.
    let mut o = with_machine(lead_observed("2026-12-01T08:53:00Z"), "Provisioned");
    o.node = node(0, false, false);
    o.node.as_mut().unwrap().ready = false;
    let d = decide(&d.status, &o);
    let update = taint_update(&d);
    assert!(taints::window_closed(&update.taints));
    assert_eq!(d.status.phase, Some(Phase::Preparing));
    assert!(d.status.window.as_ref().unwrap().node_ready_at.is_none());

    // 08:54: Ready, still tainted: nothing to write, but the provisioning took 4 minutes.
    let mut o = with_machine(lead_observed("2026-12-01T08:54:00Z"), "Running");
    o.node = node(0, false, false);
    let n = o.node.as_mut().unwrap();
    (n.taints, n.owned_taints) = (update.taints.clone(), update.owned.clone());
    let d = decide(&d.status, &o);
    assert_eq!(d.action, Action::None);
    assert_eq!(d.status.provisioning_durations, ["4m0s"]);
    assert!(d.schedulable_lag.is_none(), "not schedulable before the edge");
    assert_eq!(
        reason(&d.status, ScheduledCondition::Ready.as_str()),
        "Preparing",
        "not Ready before the window"
    );

    // 09:00:00.005: the window opens; the taint comes off and the Node is schedulable 5 ms late.
    let mut edge = o.clone();
    edge.now = at("2026-12-01T09:00:00.005Z");
    edge.validity = lead_observed("2026-12-01T09:00:00.005Z").validity;
    let d = decide(&d.status, &edge);
    assert!(!taints::window_closed(&taint_update(&d).taints));
    assert_eq!(d.status.phase, Some(Phase::Active));
    assert_eq!(d.schedulable_lag, Some(Duration::from_millis(5)));
    let record = d.status.window.clone().unwrap();
    assert_eq!(record.schedulable_lag.as_deref(), Some("5ms"));
    assert_eq!(d.status.provisioning_durations, ["4m0s"], "counted once");

    // Afterwards the record stands and nothing is measured again.
    let mut after = edge;
    after.now = at("2026-12-01T09:00:01Z");
    let n = after.node.as_mut().unwrap();
    let update = taint_update(&d);
    (n.taints, n.owned_taints) = (update.taints, update.owned);
    let later = decide(&d.status, &after);
    assert_eq!(later.action, Action::None);
    assert!(later.schedulable_lag.is_none());
    assert_eq!(later.status.window, d.status.window);
}

#[test]
fn a_late_node_is_measured_from_the_edge_and_history_is_capped() {
    // No lead time worth the name: created at the edge, Ready and schedulable four minutes on.
    let mut o = lead_observed("2026-12-01T09:00:00Z");
    let mut status = ScheduledMachineStatus {
        provisioning_durations: ["1m0s", "2m0s", "3m0s", "4m0s", "5m0s"].map(String::from).to_vec(),
        ..ScheduledMachineStatus::default()
    };
    status = decide(&status, &o).status;
    assert_eq!(status.phase, Some(Phase::Pending));
    o = with_machine(lead_observed("2026-12-01T09:04:00Z"), "Running");
    o.node = node(0, false, false);
    let d = decide(&status, &o);
    assert_eq!(d.action, Action::None);
    assert_eq!(d.schedulable_lag, Some(Duration::from_secs(240)));
    assert_eq!(d.status.window.unwrap().schedulable_lag.as_deref(), Some("4m0s"));
    assert_eq!(
        d.status.provisioning_durations,
        ["2m0s", "3m0s", "4m0s", "5m0s", "4m0s"],
        "the last five, oldest first"
    );
}

#[test]
fn drain_before_end_removes_the_machine_while_the_window_is_still_open() {
    let mut o = with_machine(lead_observed("2026-12-01T16:50:00Z"), "Running");
    o.node = node(1, false, false);
    if let Validity::Valid(t) = &mut o.validity {
        t.plan.wanted = false;
        t.plan.next_wanted_change = None;
        t.drain_before_end = true;
    }
    let d = decide(&ScheduledMachineStatus::default(), &o);
    assert_eq!(d.action, Action::Drain { node: "w".into() });
    assert_eq!(d.status.phase, Some(Phase::ShuttingDown));
    assert_eq!(d.status.in_schedule, Some(true));
    assert!(
        d.status
            .message
            .as_deref()
            .unwrap()
            .contains("endPolicy DrainBeforeEnd"),
        "{:?}",
        d.status.message
    );
}

fn reclaim_request() -> reclaim::Request {
    reclaim::Request {
        host: "laptop".into(),
        reason: crate::api::libvirt_host::PressureReason::MemoryPressure,
        message: "available memory 900 MiB is below minFreeMemoryMB 2048".into(),
        drain_timeout: Duration::from_secs(60),
        cool_down: Duration::from_secs(1800),
    }
}

#[test]
fn a_reclaim_drains_within_the_hosts_bound_stays_off_for_the_cool_down_then_returns() {
    // Active, then the host names us.
    let mut seen = with_machine(observed(true), "Running");
    seen.node = node(2, false, false);
    let active = decide(&ScheduledMachineStatus::default(), &seen);
    assert_eq!(active.status.phase, Some(Phase::Active));
    assert!(
        condition::find(&active.status.conditions, "Reclaimed").is_none(),
        "never reclaimed"
    );
    seen.reclaim_request = Some(reclaim_request());
    let draining = decide(&active.status, &seen);
    assert_eq!(draining.status.phase, Some(Phase::Reclaimed));
    assert_eq!(draining.action, Action::Drain { node: "w".into() });
    assert!(
        draining.status.message.as_deref().unwrap().starts_with(
            "reclaimed by LibvirtHost laptop: available memory 900 MiB is below minFreeMemoryMB 2048; draining"
        ),
        "{:?}",
        draining.status.message
    );
    assert_eq!(reason(&draining.status, "Reclaimed"), "MemoryPressure");
    // The host has moved on; the record holds. Past the host's 60 s drain bound (the spec's is
    // 300 s) the Machine is deleted though pods remain.
    seen.reclaim_request = None;
    seen.now = at("2026-12-01T16:01:00Z");
    let deleting = decide(&draining.status, &seen);
    assert_eq!(deleting.action, Action::DeleteMachine { skip_drain: false });
    assert_eq!(deleting.status.phase, Some(Phase::Reclaimed));
    // Gone: off for the cool-down although the window is open.
    let mut gone = observed(true);
    gone.now = at("2026-12-01T16:02:00Z");
    let off = decide(&deleting.status, &gone);
    assert_eq!((off.status.phase, &off.action), (Some(Phase::Reclaimed), &Action::None));
    assert_eq!(
        off.requeue,
        Some(Duration::from_secs(1800)),
        "wakes when the cool-down ends"
    );
    assert!(
        off.status
            .message
            .as_deref()
            .unwrap()
            .ends_with("off until 2026-12-01T16:32:00Z")
    );
    // Over: the schedule decides again and the machine returns.
    gone.now = at("2026-12-01T16:32:00Z");
    let back = decide(&off.status, &gone);
    assert_eq!(back.action, Action::Create);
    assert_eq!(back.status.reclaim, None);
    assert_eq!(reason(&back.status, "Reclaimed"), "CoolDownOver");
}

#[test]
fn a_reclaim_outranks_a_force_on_but_not_the_kill_switch() {
    let mut seen = with_machine(observed(true), "Running");
    seen.forced = Some(crate::controllers::scheduled_machine::overrides::Forced {
        active: true,
        until: at("2026-12-02T00:00:00Z"),
        annotation: crate::controllers::scheduled_machine::overrides::FORCE_ON_UNTIL,
    });
    seen.reclaim_request = Some(reclaim_request());
    let d = decide(&ScheduledMachineStatus::default(), &seen);
    assert_eq!(d.status.phase, Some(Phase::Reclaimed));
    assert_eq!(
        d.action,
        Action::DeleteMachine { skip_drain: false },
        "no Node: straight to deletion"
    );
    seen.kill_switch = true;
    let killed = decide(&ScheduledMachineStatus::default(), &seen);
    assert_eq!(killed.status.phase, Some(Phase::Terminated));
}

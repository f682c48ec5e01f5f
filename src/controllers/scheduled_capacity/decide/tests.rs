//! The decision on its own: desired replicas across edges, exclusions and overrides, when an
//! apply is sent, and what the status reports for each outcome.

use super::*;
use crate::{
    api::{condition::find, scheduled_capacity::ScheduledCapacity},
    controllers::scheduled_capacity::observe::plan,
};

/// Monday 2026-12-07 in New York (UTC-5): the window `mon-fri 9-17` opens at 14:00Z.
const BEFORE_OPEN: &str = "2026-12-07T13:59:59Z";
const MIDDAY: &str = "2026-12-07T17:00:00Z";

fn at(s: &str) -> DateTime<Utc> {
    s.parse().unwrap()
}

/// A ScheduledCapacity from YAML, `extra` merged into its spec and annotations.
fn capacity(spec_extra: serde_json::Value, annotations: serde_json::Value) -> ScheduledCapacity {
    let mut sc = serde_json::json!({
        "apiVersion": "5spot.finos.org/v1alpha1", "kind": "ScheduledCapacity",
        "metadata": {"name": "office-hours", "namespace": "default", "generation": 1, "annotations": annotations},
        "spec": {
            "targetRef": {"apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "MachineDeployment", "name": "workers"},
            "schedule": {"daysOfWeek": ["mon-fri"], "hoursOfDay": ["9-17"], "timezone": "America/New_York"},
            "onReplicas": 3,
        },
    });
    json_patch::merge(&mut sc["spec"], &spec_extra);
    serde_json::from_value(sc).unwrap()
}

fn found(value: Option<i64>, ours: bool) -> Target {
    Target::Found(Replicas {
        describe: "MachineDeployment workers".into(),
        value,
        ours,
    })
}

fn observed(sc: &ScheduledCapacity, now: &str, target: Target) -> Observed {
    let now = at(now);
    Observed {
        now,
        generation: sc.metadata.generation,
        on_replicas: sc.spec.on_replicas,
        off_replicas: sc.spec.off_replicas,
        plan: plan(sc, now).0,
        target,
        known_conflict: None,
    }
}

#[test]
fn the_schedule_picks_on_or_off_replicas_and_requeues_at_the_edge() {
    let sc = capacity(serde_json::json!({"offReplicas": 1}), serde_json::json!({}));
    let before = observed(&sc, BEFORE_OPEN, found(Some(1), true));
    assert_eq!(before.desired(), Some((false, 1)));
    assert_eq!(requeue(&before), Some(Duration::from_secs(1)), "exactly at the opening");
    assert_eq!(decide(&before), Step::Report(Outcome::Applied), "already 1, and ours");

    let open = observed(&sc, MIDDAY, found(Some(1), true));
    assert_eq!(open.desired(), Some((true, 3)));
    assert_eq!(decide(&open), Step::Apply(3));
    assert_eq!(
        requeue(&open),
        Some(Duration::from_secs(6 * 3600)),
        "17:59:59 New York is the last second on"
    );
}

#[test]
fn the_field_is_claimed_even_when_the_value_already_matches() {
    let sc = capacity(serde_json::json!({}), serde_json::json!({}));
    assert_eq!(decide(&observed(&sc, MIDDAY, found(Some(3), false))), Step::Apply(3));
    assert_eq!(decide(&observed(&sc, MIDDAY, found(None, false))), Step::Apply(3));
    assert_eq!(
        decide(&observed(&sc, BEFORE_OPEN, found(Some(3), true))),
        Step::Apply(0),
        "offReplicas defaults to 0"
    );
}

#[test]
fn a_known_conflict_is_reported_without_sending_the_apply_again() {
    let sc = capacity(serde_json::json!({}), serde_json::json!({}));
    let mut seen = observed(&sc, MIDDAY, found(Some(5), false));
    seen.known_conflict = Some("owned by \"kubectl\"".into());
    assert_eq!(
        decide(&seen),
        Step::Report(Outcome::Conflict("owned by \"kubectl\"".into()))
    );
    let status = status(
        &ScheduledCapacityStatus::default(),
        &seen,
        &Outcome::Conflict("owned by \"kubectl\"".into()),
        &time(at(MIDDAY)),
    );
    for type_ in ["Ready", "ReplicasApplied"] {
        let c = find(&status.conditions, type_).unwrap();
        assert_eq!(
            (c.status.as_str(), c.reason.as_str(), c.message.as_str()),
            ("False", "FieldConflict", "owned by \"kubectl\"")
        );
    }
    assert_eq!(status.desired_replicas, Some(3), "what it wants, though not applied");
    assert_eq!(
        requeue(&seen),
        Some(Duration::from_secs(6 * 3600)),
        "tries again at the edge"
    );
}

#[test]
fn missing_and_invalid_targets_are_reported_as_such() {
    let sc = capacity(serde_json::json!({}), serde_json::json!({}));
    let missing = observed(
        &sc,
        MIDDAY,
        Target::Missing("MachineDeployment \"workers\" not found".into()),
    );
    let Step::Report(outcome) = decide(&missing) else {
        panic!("nothing to apply to")
    };
    let s = status(
        &ScheduledCapacityStatus::default(),
        &missing,
        &outcome,
        &time(at(MIDDAY)),
    );
    assert_eq!(find(&s.conditions, "ReplicasApplied").unwrap().reason, "TargetNotFound");
    assert_eq!(find(&s.conditions, "Ready").unwrap().reason, "TargetNotFound");
    assert_eq!(find(&s.conditions, "ScheduleValid").unwrap().status, "True");

    let invalid = observed(&sc, MIDDAY, Target::Invalid("controlled by MachineDeployment".into()));
    assert_eq!(
        decide(&invalid),
        Step::Report(Outcome::InvalidTarget("controlled by MachineDeployment".into()))
    );
}

#[test]
fn an_invalid_schedule_applies_nothing_and_waits_for_a_change() {
    let sc = capacity(
        serde_json::json!({"schedule": {"timezone": "Mars/Olympus_Mons"}}),
        serde_json::json!({}),
    );
    let seen = observed(&sc, MIDDAY, found(Some(5), false));
    assert_eq!(decide(&seen), Step::Report(Outcome::ScheduleInvalid));
    assert_eq!(requeue(&seen), None);
    let s = status(
        &ScheduledCapacityStatus::default(),
        &seen,
        &Outcome::ScheduleInvalid,
        &time(at(MIDDAY)),
    );
    let valid = find(&s.conditions, "ScheduleValid").unwrap();
    assert_eq!(
        (valid.status.as_str(), valid.reason.as_str()),
        ("False", "InvalidTimezone")
    );
    assert!(valid.message.starts_with("spec.schedule.timezone"), "{}", valid.message);
    assert_eq!(find(&s.conditions, "Ready").unwrap().reason, "InvalidTimezone");
    assert_eq!(
        find(&s.conditions, "ReplicasApplied").unwrap().reason,
        "ScheduleInvalid"
    );
    assert_eq!(
        (s.in_schedule, s.desired_replicas, s.next_transition),
        (None, None, None)
    );
}

#[test]
fn exclusions_and_disabling_keep_it_off() {
    let excluded = capacity(
        serde_json::json!({"schedule": {"exclusions": [{"date": "2026-12-07"}]}}),
        serde_json::json!({}),
    );
    let seen = observed(&excluded, MIDDAY, found(Some(3), true));
    assert_eq!(seen.desired(), Some((false, 0)));
    let Plan::Valid { next, .. } = seen.plan else { panic!() };
    assert_eq!(next, Some(at("2026-12-08T14:00:00Z")), "Tuesday 09:00 New York");

    let disabled = capacity(
        serde_json::json!({"schedule": {"enabled": false}}),
        serde_json::json!({}),
    );
    let seen = observed(&disabled, MIDDAY, found(Some(0), true));
    assert_eq!((seen.desired(), requeue(&seen)), (Some((false, 0)), None));
    let s = status(
        &ScheduledCapacityStatus::default(),
        &seen,
        &Outcome::Applied,
        &time(at(MIDDAY)),
    );
    let ready = find(&s.conditions, "Ready").unwrap();
    assert_eq!(
        (ready.reason.as_str(), ready.message.as_str()),
        (
            "OutsideSchedule",
            "MachineDeployment workers has 0 replicas (offReplicas): schedule disabled"
        )
    );
}

#[test]
fn overrides_decide_until_their_instant() {
    let forced = capacity(
        serde_json::json!({}),
        serde_json::json!({"5spot.finos.org/force-off-until": "2026-12-07T18:00:00Z"}),
    );
    let seen = observed(&forced, MIDDAY, found(Some(3), true));
    assert_eq!(seen.desired(), Some((false, 0)));
    assert_eq!(requeue(&seen), Some(Duration::from_secs(3600)));
    let s = status(
        &ScheduledCapacityStatus::default(),
        &seen,
        &Outcome::Applied,
        &time(at(MIDDAY)),
    );
    assert!(
        find(&s.conditions, "Ready")
            .unwrap()
            .message
            .ends_with("forced off by 5spot.finos.org/force-off-until until 2026-12-07T18:00:00Z"),
        "{:?}",
        s.conditions
    );

    let (plan_after, expired) = plan(&forced, at("2026-12-07T18:00:01Z"));
    assert_eq!(expired, ["5spot.finos.org/force-off-until"]);
    assert!(
        matches!(plan_after, Plan::Valid { on: true, .. }),
        "the window decides again"
    );

    let bad = capacity(
        serde_json::json!({}),
        serde_json::json!({"5spot.finos.org/force-on-until": "tomorrow"}),
    );
    let Plan::Invalid { reason, message } = plan(&bad, at(MIDDAY)).0 else {
        panic!("a bad override is refused")
    };
    assert_eq!(reason.as_str(), "InvalidOverride");
    assert!(message.contains("force-on-until"), "{message}");
}

#[test]
fn an_edge_moves_ready_between_in_and_outside_schedule_keeping_its_transition_time() {
    let sc = capacity(serde_json::json!({}), serde_json::json!({}));
    let off = observed(&sc, BEFORE_OPEN, found(Some(0), true));
    let first = status(
        &ScheduledCapacityStatus::default(),
        &off,
        &Outcome::Applied,
        &time(at(BEFORE_OPEN)),
    );
    let ready = find(&first.conditions, "Ready").unwrap();
    assert_eq!(ready.reason, "OutsideSchedule");
    assert!(
        ready
            .message
            .ends_with("outside the schedule until 2026-12-07T14:00:00Z"),
        "{}",
        ready.message
    );
    let on = observed(&sc, MIDDAY, found(Some(3), true));
    let second = status(&first, &on, &Outcome::Applied, &time(at(MIDDAY)));
    let ready = find(&second.conditions, "Ready").unwrap();
    assert_eq!(
        (ready.reason.as_str(), ready.last_transition_time.clone()),
        ("InSchedule", time(at(BEFORE_OPEN))),
        "still True: the transition time stays"
    );
    assert_eq!(second.in_schedule, Some(true));
    assert_eq!(
        second.next_transition.as_ref().map(|t| t.0.to_string()).as_deref(),
        Some("2026-12-07T23:00:00Z")
    );
    assert_eq!(second.observed_generation, Some(1));
    assert_eq!(
        second,
        status(&second, &on, &Outcome::Applied, &time(at(MIDDAY))),
        "stable"
    );
}

#[test]
fn lead_time_raises_the_count_early_and_auto_counts_as_zero() {
    let early = capacity(
        serde_json::json!({"schedule": {"leadTime": "10m"}}),
        serde_json::json!({}),
    );
    let waiting = observed(&early, "2026-12-07T13:45:00Z", found(Some(0), true));
    assert_eq!(waiting.desired(), Some((false, 0)));
    assert_eq!(
        requeue(&waiting),
        Some(Duration::from_secs(5 * 60)),
        "at 08:50, ten minutes early"
    );

    let ahead = observed(&early, "2026-12-07T13:55:00Z", found(Some(3), true));
    assert_eq!(ahead.desired(), Some((true, 3)));
    assert_eq!(
        requeue(&ahead),
        Some(Duration::from_secs(5 * 60)),
        "at the opening: inSchedule turns true"
    );
    let s = status(
        &ScheduledCapacityStatus::default(),
        &ahead,
        &Outcome::Applied,
        &time(at(MIDDAY)),
    );
    assert_eq!(s.in_schedule, Some(false));
    let ready = find(&s.conditions, "Ready").unwrap();
    assert_eq!(
        (ready.reason.as_str(), ready.message.as_str()),
        (
            "AheadOfWindow",
            "MachineDeployment workers has 3 replicas (onReplicas): leadTime ahead of the window which opens at 2026-12-07T14:00:00Z"
        )
    );

    let auto = capacity(
        serde_json::json!({"schedule": {"leadTime": "auto"}}),
        serde_json::json!({}),
    );
    assert_eq!(
        observed(&auto, "2026-12-07T13:55:00Z", found(None, false)).desired(),
        Some((false, 0))
    );
    let bad = capacity(
        serde_json::json!({"schedule": {"leadTime": "soon"}}),
        serde_json::json!({}),
    );
    let Plan::Invalid { reason, message } = plan(&bad, at(MIDDAY)).0 else {
        panic!("a bad lead time is refused")
    };
    assert_eq!(reason.as_str(), "InvalidDuration");
    assert!(message.starts_with("spec.schedule.leadTime"), "{message}");
}

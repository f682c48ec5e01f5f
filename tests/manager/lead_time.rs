//! 5-Spot's window edges on memkube + capi-sim with an injected clock: a worker provisioned
//! `leadTime` ahead is held with the window-closed taint and released at the edge on its own;
//! `DrainBeforeEnd` has the Machine gone before the window closes; `auto` learns the lead.

use caplv::{
    api::{
        ScheduledMachine,
        scheduled_machine::{Phase, ScheduledMachineStatus},
    },
    clock::Clock,
};
use k8s_openapi::api::core::v1::Node;
use kube::{
    Api,
    api::{ApiResource, DynamicObject},
};
use serde_json::json;

use crate::{
    scheduled_machine::{
        at, cluster, machines, node_taints, nudge, phase, provision, scheduled_machine, sms, wait_phase,
    },
    support::{Env, wait_until},
};

const WINDOW_CLOSED: &str = "5spot.finos.org/window-closed=:NoSchedule";

async fn status(env: &Env, name: &str) -> ScheduledMachineStatus {
    sms(env).get(name).await.unwrap().status.unwrap_or_default()
}

#[tokio::test]
async fn a_worker_provisioned_ahead_is_held_until_the_edge_and_released_on_its_own() {
    let env = Env::start().await;
    let _endpoint = cluster(&env, "v1beta1").await;
    // Monday 2026-12-07 08:49:58 in New York: two seconds before a 10-minute lead begins.
    env.clock.set(at("2026-12-07T13:49:58Z"));
    scheduled_machine(&env, "lead", json!({"schedule": {"leadTime": "10m"}})).await;
    wait_phase(&env, "lead", Phase::Inactive).await;
    let s = status(&env, "lead").await;
    assert_eq!(s.next_transition.unwrap().0.to_string(), "2026-12-07T13:50:00Z");
    assert_eq!(s.next_activation.unwrap().0.to_string(), "2026-12-07T14:00:00Z");
    assert_eq!(s.lead_time.as_deref(), Some("10m0s"));

    // The lead begins by itself: objects are created before the window opens.
    wait_phase(&env, "lead", Phase::Preparing).await;
    provision(&env, "lead").await;
    let nodes: Api<Node> = Api::all(env.client.clone());
    wait_until("the early Node held with the window-closed taint", || async {
        nodes.get_opt("lead").await.unwrap().is_some()
            && node_taints(&env, "lead").await.contains(&WINDOW_CLOSED.to_owned())
    })
    .await;
    wait_until("the Node's readiness recorded", || async {
        status(&env, "lead").await.provisioning_durations.len() == 1
    })
    .await;
    let s = status(&env, "lead").await;
    assert_eq!(s.phase, Some(Phase::Preparing));
    assert_eq!(s.in_schedule, Some(false));
    let record = s.window.unwrap();
    assert_eq!(record.opens_at.unwrap().0.to_string(), "2026-12-07T14:00:00Z");
    assert!(record.node_ready_at.is_some() && record.schedulable_at.is_none());
    let ready = caplv::api::condition::find(&s.conditions, "Ready").unwrap();
    assert_eq!((ready.status.as_str(), ready.reason.as_str()), ("False", "Preparing"));

    // Two seconds before the edge; the nudge only makes the controller read the moved clock.
    env.clock.set(at("2026-12-07T13:59:58Z"));
    nudge(&env, "lead").await;
    wait_phase(&env, "lead", Phase::Active).await;
    wait_until("the window-closed taint gone", || async {
        !node_taints(&env, "lead").await.contains(&WINDOW_CLOSED.to_owned())
    })
    .await;
    let record = status(&env, "lead").await.window.unwrap();
    let (opens, schedulable) = (record.opens_at.unwrap().0, record.schedulable_at.unwrap().0);
    assert!(
        schedulable >= opens,
        "released at the edge, not before: {schedulable} < {opens}"
    );
    let lag = record.schedulable_lag.unwrap();
    caplv::schedule::parse_duration("lag", &lag).unwrap();
    eprintln!("memkube sandbox: edge -> schedulable lag {lag}");
    assert_eq!(env.shared.metrics.edge_schedulable_lag.get_sample_count(), 1);
    env.stop().await;
}

#[tokio::test]
async fn drain_before_end_has_the_machine_gone_before_the_window_closes_and_auto_learns() {
    let env = Env::start().await;
    let _endpoint = cluster(&env, "v1beta1").await;
    env.clock.set(at("2026-12-07T17:00:00Z"));
    let schedule = json!({"schedule": {"leadTime": "auto", "endPolicy": "DrainBeforeEnd"}});
    scheduled_machine(&env, "early", schedule).await;
    wait_phase(&env, "early", Phase::Active).await;
    assert_eq!(
        status(&env, "early").await.lead_time.as_deref(),
        Some("0s"),
        "auto without history"
    );
    provision(&env, "early").await;
    wait_until("a provisioning duration recorded", || async {
        status(&env, "early").await.provisioning_durations.len() == 1
    })
    .await;
    wait_until("auto is the median of one", || async {
        let s = status(&env, "early").await;
        s.lead_time.is_some() && s.lead_time == s.provisioning_durations.first().cloned()
    })
    .await;

    // The window closes at 18:00 New York (23:00Z); the grace period is 5 minutes, so the drain
    // starts at 22:55Z by itself, and the Machine is gone with the window still open.
    env.clock.set(at("2026-12-07T22:54:58Z"));
    nudge(&env, "early").await;
    wait_phase(&env, "early", Phase::ShuttingDown).await;
    assert_eq!(status(&env, "early").await.in_schedule, Some(true));
    wait_phase(&env, "early", Phase::Inactive).await;
    assert!(machines(&env, "v1beta1").get_opt("early").await.unwrap().is_none());
    assert!(
        env.clock.now() < at("2026-12-07T23:00:00Z"),
        "gone before the window closed, at {}",
        env.clock.now()
    );
    let s = status(&env, "early").await;
    assert_eq!(s.in_schedule, Some(true), "still inside the window");
    assert!(s.message.unwrap().contains("DrainBeforeEnd"));
    assert_eq!(phase(&env, "early").await, Some(Phase::Inactive));
    env.stop().await;
}

#[tokio::test]
async fn a_bad_lead_time_is_refused_naming_the_field() {
    let env = Env::start().await;
    let _endpoint = cluster(&env, "v1beta1").await;
    env.clock.set(at("2026-12-07T17:00:00Z"));
    // The schema lets 200h through (it is a duration); the engine's limit names the field.
    scheduled_machine(&env, "far", json!({"schedule": {"leadTime": "200h"}})).await;
    wait_phase(&env, "far", Phase::Error).await;
    let s = status(&env, "far").await;
    let valid = caplv::api::condition::find(&s.conditions, "ScheduleValid").unwrap();
    assert_eq!(
        (valid.status.as_str(), valid.reason.as_str()),
        ("False", "InvalidDuration")
    );
    assert!(
        valid
            .message
            .starts_with(r#"spec.schedule.leadTime: invalid duration "200h""#),
        "{}",
        valid.message
    );
    assert!(machines(&env, "v1beta1").get_opt("far").await.unwrap().is_none());

    // What is neither a duration nor `auto` never gets past the API server.
    for (field, value) in [("leadTime", "soon"), ("endPolicy", "Whenever")] {
        let mut sm: serde_json::Value =
            serde_yaml::from_str(include_str!("../../examples/seed/05-scheduledmachine.yaml")).unwrap();
        sm["metadata"]["name"] = json!("bad");
        sm["spec"]["schedule"][field] = json!(value);
        let raw: Api<DynamicObject> = Api::namespaced_with(
            env.client.clone(),
            "default",
            &ApiResource::erase::<ScheduledMachine>(&()),
        );
        let err = raw
            .create(&Default::default(), &serde_json::from_value(sm).unwrap())
            .await
            .unwrap_err()
            .to_string();
        assert!(err.contains(&format!("spec.schedule.{field}")), "{err}");
    }
    env.stop().await;
}

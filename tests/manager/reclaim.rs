//! A host's owner takes it back: with `spec.reclaim` on the LibvirtHost and faked node
//! statistics on the test driver, pressure that lasts `for` removes the host's spot machines,
//! lowest priority first and one at a time, stops once relieved, keeps new machines off while
//! it lasts, and lets a reclaimed machine return after its cool-down.

use caplv::api::{
    LibvirtHost, condition,
    scheduled_machine::{Phase, ScheduledMachineStatus},
};
use kube::{
    Api,
    api::{Patch, PatchParams},
};
use serde_json::json;

use crate::{
    libvirt_host::fake_stats,
    scheduled_machine::{at, cluster, libvirt_machines, provision, scheduled_machine, sms, wait_phase, wait_running},
    support::{Env, events_about, wait_until},
};

/// Plenty, and below the floor of [`policy`].
const PLENTY_MIB: u64 = 16_000;
const SHORT_MIB: u64 = 1024;

fn hosts(env: &Env) -> Api<LibvirtHost> {
    Api::namespaced(env.client.clone(), "default")
}

async fn status(env: &Env, name: &str) -> ScheduledMachineStatus {
    sms(env).get(name).await.unwrap().status.unwrap_or_default()
}

/// The seed's cluster with the window open, `laptop` under a reclaim policy with plenty of
/// memory, and two running spot workers: `low` (priority 10) and `high` (priority 90).
async fn two_workers_on_a_reclaiming_host(
    env: &Env,
    policy: serde_json::Value,
) -> (String, (tokio::net::TcpListener, tempfile::TempDir)) {
    let fixtures = cluster(env, "v1beta1").await;
    // Monday 10:00 in New York: the seed's window is open.
    env.clock.set(at("2026-12-07T15:00:00Z"));
    let uri = hosts(env).get("laptop").await.unwrap().spec.uri;
    fake_stats(&uri, PLENTY_MIB, 0, 0, 0);
    hosts(env)
        .patch(
            "laptop",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"reclaim": policy}})),
        )
        .await
        .unwrap();
    for (name, priority, address) in [("low", 10, "192.168.122.101/24"), ("high", 90, "192.168.122.102/24")] {
        let edits =
            json!({"priority": priority, "infrastructureSpec": {"spec": {"network": {"addresses": [address]}}}});
        scheduled_machine(env, name, edits).await;
        wait_phase(env, name, Phase::Active).await;
        provision(env, name).await;
        wait_running(env, name).await;
    }
    (uri, fixtures)
}

async fn under_pressure(env: &Env) -> Option<(String, String, String)> {
    let host = hosts(env).get("laptop").await.unwrap();
    let status = host.status?;
    let c = condition::find(&status.conditions, "UnderPressure")?;
    Some((c.status.clone(), c.reason.clone(), c.message.clone()))
}

/// The host's `Reclaiming` Events, oldest first.
async fn reclaiming_notes(env: &Env) -> Vec<String> {
    let mut events: Vec<_> = events_about(env, "laptop")
        .await
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("Reclaiming"))
        .collect();
    events.sort_by_key(|e| e.event_time.clone().map(|t| t.0));
    events.into_iter().filter_map(|e| e.note).collect()
}

fn reclaims_counted(env: &Env) -> u64 {
    env.shared
        .metrics
        .host_reclaims
        .with_label_values(&["MemoryPressure"])
        .get()
}

#[tokio::test]
async fn the_owner_takes_the_lowest_priority_worker_and_it_returns_after_the_cool_down() {
    let env = Env::start().await;
    let policy = json!({"minFreeMemoryMB": 4096, "for": "3s", "drainTimeout": "5s", "coolDown": "3s"});
    let (uri, _fixtures) = two_workers_on_a_reclaiming_host(&env, policy).await;
    wait_until("the host within its limits", || async {
        under_pressure(&env)
            .await
            .is_some_and(|(s, r, _)| s == "False" && r == "WithinLimits")
    })
    .await;

    fake_stats(&uri, SHORT_MIB, 0, 0, 0);
    wait_phase(&env, "low", Phase::Reclaimed).await;
    // Relief while the first removal is under way: nobody else goes.
    fake_stats(&uri, PLENTY_MIB, 0, 0, 0);
    let low = status(&env, "low").await;
    let reclaimed = condition::find(&low.conditions, "Reclaimed").unwrap();
    assert_eq!(
        (reclaimed.status.as_str(), reclaimed.reason.as_str()),
        ("True", "MemoryPressure")
    );
    assert!(
        reclaimed
            .message
            .starts_with("reclaimed by LibvirtHost laptop: available memory 1024 MiB is below minFreeMemoryMB 4096"),
        "{}",
        reclaimed.message
    );
    wait_until("low's machine gone and cooling down", || async {
        let s = status(&env, "low").await;
        s.machine_ref.is_none() && s.reclaim.is_some_and(|r| r.off_until.is_some())
    })
    .await;
    wait_until("the host within its limits again", || async {
        under_pressure(&env).await.is_some_and(|(_, r, _)| r == "WithinLimits")
    })
    .await;
    let high = status(&env, "high").await;
    assert_eq!(high.phase, Some(Phase::Active), "{:?}", high.message);
    assert_eq!(high.reclaim, None);
    let notes = reclaiming_notes(&env).await;
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert!(
        notes[0].contains("reclaiming ScheduledMachine low (LibvirtMachine low)"),
        "{notes:?}"
    );
    assert_eq!(reclaims_counted(&env), 1);
    let events = events_about(&env, "low").await;
    assert!(
        events.iter().any(|e| e.reason.as_deref() == Some("Reclaimed")),
        "a phase Event: {events:?}"
    );

    // The cool-down over, low returns inside its window.
    wait_phase(&env, "low", Phase::Active).await;
    provision(&env, "low").await;
    wait_running(&env, "low").await;
    let low = status(&env, "low").await;
    let over = condition::find(&low.conditions, "Reclaimed").unwrap();
    assert_eq!((over.status.as_str(), over.reason.as_str()), ("False", "CoolDownOver"));
    assert_eq!(low.reclaim, None);
    env.stop().await;
}

#[tokio::test]
async fn lasting_pressure_takes_every_worker_one_at_a_time_and_admits_nothing_new() {
    let env = Env::start().await;
    let policy = json!({"minFreeMemoryMB": 4096, "for": "2s", "drainTimeout": "5s", "coolDown": "1h"});
    let (uri, _fixtures) = two_workers_on_a_reclaiming_host(&env, policy).await;

    fake_stats(&uri, SHORT_MIB, 0, 0, 0);
    wait_phase(&env, "high", Phase::Reclaimed).await;
    wait_until("no spot machine left", || async {
        under_pressure(&env)
            .await
            .is_some_and(|(s, _, m)| s == "True" && m.ends_with("no spot machines left to reclaim"))
    })
    .await;
    let notes = reclaiming_notes(&env).await;
    assert_eq!(notes.len(), 2, "{notes:?}");
    assert!(
        notes[0].contains("ScheduledMachine low"),
        "lowest priority first: {notes:?}"
    );
    assert!(notes[1].contains("ScheduledMachine high"), "{notes:?}");
    // One at a time: high was named only after low was gone (its cool-down starts then).
    let low_gone = status(&env, "low").await.reclaim.unwrap().off_until.unwrap().0 - jiff_hour();
    let high_named = status(&env, "high").await.reclaim.unwrap().started_at.0;
    assert!(
        high_named >= low_gone,
        "high named at {high_named}, low gone at {low_gone}"
    );
    assert_eq!(reclaims_counted(&env), 2);

    // While the owner needs the host, a new machine waits instead of going there.
    scheduled_machine(
        &env,
        "late",
        json!({"infrastructureSpec": {"spec": {"network": {"addresses": ["192.168.122.103/24"]}}}}),
    )
    .await;
    let machines = libvirt_machines(&env.client);
    wait_until("late's LibvirtMachine waiting for the host", || async {
        machines.get_opt("late").await.unwrap().is_some_and(|m| {
            m.data["status"]["conditions"].as_array().is_some_and(|cs| {
                cs.iter().any(|c| {
                    c["type"] == "Ready"
                        && c["reason"] == "WaitingForCapacity"
                        && c["message"].as_str().is_some_and(|m| m.contains("owner needs it back"))
                })
            })
        })
    })
    .await;
    env.stop().await;
}

fn jiff_hour() -> k8s_openapi::jiff::SignedDuration {
    k8s_openapi::jiff::SignedDuration::from_hours(1)
}

#[tokio::test]
async fn a_policy_without_a_limit_or_with_one_out_of_range_is_refused_naming_it() {
    let env = Env::start().await;
    let host = |name: &str, policy: &str| {
        format!(
            "apiVersion: infrastructure.cluster.x-k8s.io/v1alpha1\nkind: LibvirtHost\nmetadata: {{name: {name}, namespace: default}}\nspec:\n  uri: \"test:///default\"\n  reclaim: {policy}\n"
        )
    };
    for (name, policy, refusal) in [
        ("nolimit", "{for: 1m}", "set minFreeMemoryMB, maxHostCPUPercent or both"),
        ("cpu", "{maxHostCPUPercent: 0}", "spec.reclaim.maxHostCPUPercent"),
        ("memory", "{minFreeMemoryMB: -5}", "spec.reclaim.minFreeMemoryMB"),
        (
            "cooldown",
            "{minFreeMemoryMB: 1024, coolDown: soon}",
            "spec.reclaim.coolDown",
        ),
        (
            "ratio",
            "{minFreeMemoryMB: 1024}\n  overcommit: {cpuRatio: 0}",
            "spec.overcommit.cpuRatio",
        ),
    ] {
        let object: LibvirtHost = serde_yaml::from_str(&host(name, policy)).unwrap();
        let err = hosts(&env)
            .create(&kube::api::PostParams::default(), &object)
            .await
            .expect_err(policy);
        assert!(err.to_string().contains(refusal), "{policy}: {err}");
    }
    env.stop().await;
}

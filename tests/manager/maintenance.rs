//! Host maintenance on memkube + capi-sim + test-driver hosts: the host's machines are removed
//! one at a time, lowest priority first, nothing new is placed on it (a pool machine goes to
//! another host), and turning maintenance off makes it usable again.

use kube::api::{Patch, PatchParams};
use serde_json::json;

use crate::{
    libvirt_machine::{capi_machines, fixture, hosts, lvms, machine, wait_reason},
    support::{Env, events_about, wait_until},
};

async fn set_maintenance(env: &Env, host: &str, on: bool) {
    hosts(&env.client)
        .patch(
            host,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"maintenance": on}})),
        )
        .await
        .unwrap();
}

async fn maintenance(env: &Env, host: &str) -> Option<(String, String)> {
    let h = hosts(&env.client).get(host).await.unwrap();
    let c = caplv::api::condition::find(&h.status?.conditions, "Maintenance")?.clone();
    Some((c.status, c.reason))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn maintenance_empties_the_host_lowest_priority_first_and_ends_cleanly() {
    let f = fixture(&["a", "b"], 0).await;
    let env = &f.env;
    for name in ["a", "b"] {
        hosts(&env.client)
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"labels": {"pool": "lab"}}})),
            )
            .await
            .unwrap();
    }
    let priority = |p: &str| json!({"metadata": {"labels": {"5spot.finos.org/priority": p}}});
    machine(env, "low", "a", priority("10"), Some("boot")).await;
    machine(env, "high", "a", priority("90"), Some("boot")).await;
    for name in ["low", "high"] {
        wait_reason(env, name, "DomainRunning").await;
    }

    set_maintenance(env, "a", true).await;
    wait_until("a drained", || async {
        maintenance(env, "a").await == Some(("True".into(), "Drained".into()))
    })
    .await;
    for name in ["low", "high"] {
        assert!(lvms(&env.client).get_opt(name).await.unwrap().is_none(), "{name} gone");
        wait_until(&format!("{name}'s Machine removed"), || async {
            capi_machines(&env.client).get_opt(name).await.unwrap().is_none()
        })
        .await;
    }
    let mut removals: Vec<_> = events_about(env, "a")
        .await
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("MaintenanceRemoving"))
        .collect();
    removals.sort_by_key(|e| e.event_time.clone().map(|t| t.0));
    let notes: Vec<String> = removals.into_iter().filter_map(|e| e.note).collect();
    assert_eq!(notes.len(), 2, "{notes:?}");
    assert!(notes[0].contains("Machine low"), "lowest priority first: {notes:?}");

    // Nothing new goes there: a machine naming it waits, a pool machine goes to b.
    machine(env, "pinned", "a", json!({}), Some("boot")).await;
    let waiting = wait_reason(env, "pinned", "WaitingForCapacity").await;
    assert!(
        waiting.message.contains("the host is in maintenance"),
        "{}",
        waiting.message
    );
    let pool = json!({"spec": {"hostRef": null, "hostSelector": {"matchLabels": {"pool": "lab"}}}});
    machine(env, "pooled", "unused", pool, Some("boot")).await;
    wait_reason(env, "pooled", "DomainRunning").await;
    let placed = lvms(&env.client)
        .get("pooled")
        .await
        .unwrap()
        .status
        .unwrap()
        .host_ref
        .unwrap();
    assert_eq!(placed.name, "b");

    // Over: the host takes machines again.
    set_maintenance(env, "a", false).await;
    wait_reason(env, "pinned", "DomainRunning").await;
    assert_eq!(maintenance(env, "a").await, Some(("False".into(), "InService".into())));
    f.env.stop().await;
}

//! API faults on memkube, through its fault hooks: a flaky server that answers the manager's
//! requests with 429 and 5xx (some after carrying the write out, so the manager cannot tell
//! whether it happened), and a 409 storm from another writer. Each runs a whole window (open,
//! provision, run, close, teardown) for several ScheduledMachines. What must hold: every
//! machine comes up and goes away, no object is created twice, nothing is left on the host, and
//! the manager's requests stay within a small multiple of a fault-free window's.

use kube::{
    Api,
    api::{DynamicObject, Patch, PatchParams},
};
use memkube::Fault;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::{
    scheduled_machine::{cluster, libvirt_machines},
    support::{Env, MANAGER_USER},
    window_cycle::{Incarnations, KindAndName, setup, weekday, window},
};

/// Three: the seed's host has room for three of the seed's machines.
const NAMES: [&str; 3] = ["f0", "f1", "f2"];

/// After a window under faults: one incarnation per object, and requests within `limit`
/// times the fault-free window's (a retry loop or a write at every watch event exceeds it).
fn assert_held(what: &str, seen: &Incarnations, requests: u64, clean: u64, limit: u64) {
    eprintln!("{what}: {requests} requests by the manager for the window, {clean} without faults");
    assert_eq!(seen.twice(), Vec::<KindAndName>::new(), "{what}: objects created twice");
    assert!(
        requests <= limit * clean,
        "{what}: {requests} requests against {clean} without faults: retries are not bounded"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flaky_server_loses_no_machine_doubles_none_and_bounds_the_retries() {
    let env = Env::start().await;
    let _host = cluster(&env, "v1beta1").await;
    let stop = CancellationToken::new();
    let server = env.server();
    let secret_writes = || {
        ["create", "patch", "update"]
            .iter()
            .map(|verb| server.request_count(verb, "secrets", ""))
            .sum::<u64>()
    };
    let seen = setup(&env, &NAMES, &stop).await;
    let clean = window(&env, weekday(0), &NAMES).await;
    assert_held("without faults", &seen, clean, clean, 1);
    // The test's clock runs days ahead of the server's, so every token seems expired when
    // minted: the kubeconfig is renewed at the minimum delay, not at each of its watch events.
    let written = secret_writes();
    assert!(
        written <= NAMES.len() as u64 + 4,
        "{written} Secret writes: the bootstrap data once each, the kubeconfig a few times"
    );
    seen.clear();

    // About one request in ten refused as overloaded, one in twenty failing inside the server,
    // and one create in four and one patch in six carried out with the answer lost.
    for (verb, code, reason, one_in) in [
        ("*", 429, "TooManyRequests", 10),
        ("*", 500, "InternalError", 20),
        ("create", 500, "InternalError", 4),
        ("patch", 503, "ServiceUnavailable", 6),
    ] {
        let mut fault = Fault::new(verb, "*", code)
            .reason(reason)
            .user(MANAGER_USER)
            .one_in(one_in)
            .times(usize::MAX);
        if verb != "*" {
            fault = fault.after_applying();
        }
        server.inject_fault(fault);
    }
    let flaky = window(&env, weekday(1), &NAMES).await;
    server.clear_faults();
    assert_held("429 and 5xx answers", &seen, flaky, clean, 2);
    stop.cancel();
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conflict_storm_from_another_writer_loses_no_machine_and_bounds_the_retries() {
    let env = Env::start().await;
    let _host = cluster(&env, "v1beta1").await;
    let stop = CancellationToken::new();
    let seen = setup(&env, &NAMES, &stop).await;
    let clean = window(&env, weekday(0), &NAMES).await;
    seen.clear();

    // Another writer keeps touching every object the window involves, so writes made from a
    // cached copy meet a newer resourceVersion; memkube refuses about one manager write in three on top.
    for verb in ["patch", "update"] {
        env.server().inject_fault(
            Fault::new(verb, "*", 409)
                .reason("Conflict")
                .message("the object has been modified; please apply your changes to the latest version and try again")
                .user(MANAGER_USER)
                .one_in(3)
                .times(usize::MAX),
        );
    }
    let writer = tokio::spawn(other_writer(env.client.clone(), stop.clone()));
    let storm = window(&env, weekday(1), &NAMES).await;
    stop.cancel();
    let touches = writer.await.unwrap();
    env.server().clear_faults();
    assert!(touches > 0, "the other writer wrote");
    assert_held("a 409 storm", &seen, storm, clean, 2);
    env.stop().await;
}

/// Touch an annotation on every ScheduledMachine, Machine and LibvirtMachine in turn until
/// `stop`; returns how many writes landed.
async fn other_writer(client: kube::Client, stop: CancellationToken) -> u64 {
    let apis: Vec<Api<DynamicObject>> = vec![
        Api::namespaced_with(
            client.clone(),
            "default",
            &kube::core::ApiResource::erase::<caplv::api::ScheduledMachine>(&()),
        ),
        Api::namespaced_with(
            client.clone(),
            "default",
            &kube::core::ApiResource::from_gvk(&kube::core::GroupVersionKind::gvk(
                "cluster.x-k8s.io",
                "v1beta1",
                "Machine",
            )),
        ),
        libvirt_machines(&client),
    ];
    let (mut touches, mut round) = (0u64, 0u64);
    // A busy neighbour, not a flood: a round of writes every 20 ms.
    let mut pace = tokio::time::interval(std::time::Duration::from_millis(20));
    while !stop.is_cancelled() {
        pace.tick().await;
        round += 1;
        for api in &apis {
            for name in NAMES {
                let patch = json!({"metadata": {"annotations": {"test/other-writer": round.to_string()}}});
                if api
                    .patch(name, &PatchParams::default(), &Patch::Merge(patch))
                    .await
                    .is_ok()
                {
                    touches += 1;
                }
            }
        }
    }
    touches
}

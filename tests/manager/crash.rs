//! The manager killed at every one of its writes in a window (5-Spot's creates, the bootstrap
//! data, the LibvirtMachine's claim and statuses, the cordon, the deletes, the Events), as
//! SIGKILL would kill it: the write lands, its answer never comes, and a new manager starts from
//! what the API server holds. Each window must still open, run and close, with one incarnation
//! of every Machine, IgnitionConfig and LibvirtMachine, and nothing left after it. And two
//! replicas with leader election, the leader killed while it provisions.

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use caplv::{api::scheduled_machine::Phase, app::leader::LeaderConfig};
use k8s_openapi::api::coordination::v1::Lease;
use kube::{
    Api,
    api::{Patch, PatchParams},
};
use memkube::Fault;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::{
    scheduled_machine::{at, cluster, ignition_configs, nudge, wait_phase, wait_running},
    support::{Env, MANAGER_USER, crashable::Crashable, fast_settings, wait_until},
    window_cycle::{KindAndName, assert_nothing_left, domains, setup, weekday, window},
};

const NAMES: [&str; 1] = ["k0"];

/// The manager's writes so far.
fn manager_writes(env: &Env) -> u64 {
    env.server()
        .request_counts_of(MANAGER_USER)
        .iter()
        .filter(|((verb, ..), _)| matches!(verb.as_str(), "create" | "update" | "patch" | "delete"))
        .map(|(_, n)| n)
        .sum()
}

/// Kill the manager as soon as the injected fault has caught its write (the write landed, the
/// manager waits for an answer that never comes).
async fn kill_when_caught(server: memkube::Server, manager: Arc<Crashable>) {
    while server.pending_faults() > 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    manager.crash_and_restart().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_at_every_write_of_a_window_it_doubles_nothing_and_leaves_nothing() {
    let (env, manager) = Env::start_crashable(None).await;
    let _host = cluster(&env, "v1beta1").await;
    let stop = CancellationToken::new();
    let seen = setup(&env, &NAMES, &stop).await;
    // The first window also writes what a manager writes once (host and cluster statuses, the
    // kubeconfig): the second tells how many writes a window takes.
    window(&env, weekday(0), &NAMES).await;
    let before = manager_writes(&env);
    window(&env, weekday(1), &NAMES).await;
    let per_window = manager_writes(&env) - before;
    assert!(per_window >= 8, "a window takes the manager's writes: {per_window}");

    let mut missed = Vec::new();
    for step in 0..per_window {
        eprintln!("kill test: step {step} of {per_window}");
        seen.clear();
        env.server().inject_fault(
            Fault::new("write", "*", 500)
                .user(MANAGER_USER)
                .skip(usize::try_from(step).unwrap())
                .hang_after_applying(),
        );
        let kills = manager.kills();
        let killer = tokio::spawn(kill_when_caught(env.server().clone(), manager.clone()));
        window(&env, weekday(u32::try_from(step).unwrap() + 2), &NAMES).await;
        if manager.kills() == kills {
            // This window took fewer writes than the first (a reconcile fewer): nothing caught.
            killer.abort();
            env.server().clear_faults();
            missed.push(step);
        } else {
            killer.await.unwrap();
        }
        assert_eq!(
            seen.twice(),
            Vec::<KindAndName>::new(),
            "killed after write {step}: objects created twice"
        );
    }
    eprintln!(
        "killed {} times, once after each of {per_window} writes but {missed:?}",
        manager.kills()
    );
    // A later window may take a few writes fewer than the one measured (a reconcile that a
    // watch event folded into another): its last steps are then never reached.
    assert!(
        u64::from(manager.kills()) + per_window / 4 >= per_window,
        "killed {} times in {per_window} windows: steps {missed:?} were never reached",
        manager.kills()
    );
    stop.cancel();
    env.stop().await;
}

fn lease(identity: &str) -> LeaderConfig {
    LeaderConfig {
        name: "caplv-manager".into(),
        namespace: "default".into(),
        identity: identity.into(),
        duration_seconds: 3,
    }
}

/// Two replicas with leader election; the leader is killed right after its first status write
/// of a provisioning (the host's capacity is taken, the domain not yet defined). The standby
/// takes over once the Lease runs out, provisions each machine once, and the window closes
/// cleanly. Never do both replicas run the controllers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_killed_while_provisioning_is_replaced_without_double_provisioning() {
    const THREE: [&str; 3] = ["h0", "h1", "h2"];
    let (env, a) = Env::start_crashable(Some(lease("a"))).await;
    wait_until("a leads", || async { a.leads() }).await;
    let b = Arc::new(Crashable::start(env.server(), fast_settings(), env.clock.clone(), Some(lease("b"))).await);
    let both = Arc::new(AtomicBool::new(false));
    let watch_both = tokio::spawn({
        let (a, b, both) = (a.clone(), b.clone(), both.clone());
        async move {
            loop {
                if a.leads() && b.leads() {
                    both.store(true, Ordering::SeqCst);
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
    });
    let _host = cluster(&env, "v1beta1").await;
    let stop = CancellationToken::new();
    let seen = setup(&env, &THREE, &stop).await;
    let hosts: Api<caplv::api::LibvirtHost> = Api::namespaced(env.client.clone(), "default");
    wait_until("the host reports its capacity", || async {
        hosts.get("laptop").await.unwrap().status.is_some_and(|s| s.ready)
    })
    .await;
    let free_before = hosts
        .get("laptop")
        .await
        .unwrap()
        .status
        .and_then(|s| s.capacity)
        .unwrap();
    env.clock.set(at("2026-12-07T13:59:58Z"));
    for name in THREE {
        nudge(&env, name).await;
    }
    for name in THREE {
        wait_phase(&env, name, Phase::Active).await;
    }
    env.server().inject_fault(
        Fault::new("patch", "libvirtmachines", 500)
            .subresource("status")
            .user(MANAGER_USER)
            .hang_after_applying(),
    );
    for name in THREE {
        bootstrap_data_ready(&env, name).await;
    }
    wait_until("the leader caught provisioning", || async {
        env.server().pending_faults() == 0
    })
    .await;
    let killed = Instant::now();
    a.kill();
    wait_until("b leads", || async { b.leads() }).await;
    eprintln!(
        "leader handover: {:.1} s after the kill",
        killed.elapsed().as_secs_f64()
    );
    for name in THREE {
        wait_running(&env, name).await;
    }
    let view = b.shared().unwrap();
    assert_eq!(domains(&env, &view).await, THREE, "one domain per machine");
    // The host reports its capacity after the machines' claims: wait for it to catch up. A
    // machine allocated twice would keep it below this for good.
    wait_until("each machine's vCPUs allocated once", || async {
        hosts
            .get("laptop")
            .await
            .unwrap()
            .status
            .and_then(|s| s.capacity)
            .is_some_and(|c| c.available_vcpus == free_before.available_vcpus - 3 * 2)
    })
    .await;
    assert_eq!(seen.twice(), Vec::<KindAndName>::new(), "objects created twice");
    let leases: Api<Lease> = Api::namespaced(env.client.clone(), "default");
    let holder = leases
        .get("caplv-manager")
        .await
        .unwrap()
        .spec
        .and_then(|s| s.holder_identity);
    assert_eq!(holder.as_deref(), Some("b"));

    env.clock.set(at("2026-12-07T22:59:58Z"));
    for name in THREE {
        nudge(&env, name).await;
    }
    for name in THREE {
        wait_phase(&env, name, Phase::Inactive).await;
    }
    assert_nothing_left(&env, &THREE, &view).await;
    watch_both.abort();
    assert!(
        !both.load(Ordering::SeqCst),
        "both replicas ran the controllers at once"
    );
    stop.cancel();
    b.stop().await;
    env.stop().await;
}

/// Act as the bootstrap provider: the IgnitionConfig's data is ready.
async fn bootstrap_data_ready(env: &Env, name: &str) {
    let ready =
        json!({"status": {"ready": true, "dataSecretName": name, "initialization": {"dataSecretCreated": true}}});
    ignition_configs(&env.client)
        .patch_status(name, &PatchParams::default(), &Patch::Merge(ready))
        .await
        .unwrap();
}

//! Many ScheduledMachines appearing at once, outside their window: every one is judged and
//! reported once, the manager then goes quiet, and its requests and memory stay in proportion
//! (a hostile amount of objects, not a benchmark: the figures are printed). The short form puts
//! 1,000; `CAPLV_LONG=1` (set by `scripts/test.sh --long`) puts 10,000.

use std::time::Duration;

use memkube::Fault;
use serde_json::json;

use crate::{
    scheduled_machine::{at, cluster},
    support::{Env, MANAGER_USER, wait_until, wait_until_within},
    window_cycle::manager_requests,
};

const SCHEDULED_MACHINES: &str = "scheduledmachines.5spot.finos.org";
/// How long the relist and its reconciles may take: beyond the watcher's longest backoff.
const RELIST_WITHIN: Duration = Duration::from_secs(60);

/// How many the load test puts.
fn count() -> usize {
    if std::env::var_os("CAPLV_LONG").is_some_and(|v| v == "1") {
        10_000
    } else {
        1_000
    }
}

/// Resident memory of this process (API server, CAPI core and manager together), in MiB.
fn rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let kib: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap();
    kib / 1024.0
}

fn inactive(env: &Env) -> usize {
    env.server()
        .list_objects("5spot.finos.org/v1alpha1", "ScheduledMachine", Some("default"))
        .iter()
        .filter(|sm| sm["status"]["phase"] == "Inactive")
        .count()
}

/// Put `count` copies of the seed ScheduledMachine named `{prefix}{i:05}`, without yielding:
/// the manager sees them all at once.
fn put_many(env: &Env, prefix: &str, count: usize) {
    let mut sm: serde_json::Value =
        serde_yaml::from_str(include_str!("../../examples/seed/05-scheduledmachine.yaml")).unwrap();
    for i in 0..count {
        sm["metadata"]["name"] = json!(format!("{prefix}{i:05}"));
        env.server().put_object(sm.clone()).unwrap();
    }
}

/// Objects that the manager first sees in a relist (its watch expired while they appeared)
/// are reconciled too. kube-runtime's controller used to drop them: it looked each listed
/// object up in a store that still held the list before, found nothing, and never retried.
#[tokio::test]
async fn scheduled_machines_first_seen_in_a_relist_are_each_reconciled() {
    let env = Env::start().await;
    let _endpoint = cluster(&env, "v1beta1").await;
    // Monday 03:00 in New York: every seed window (weekdays 9-17) is closed.
    env.clock.set(at("2026-12-07T08:00:00Z"));
    put_many(&env, "first", 1);
    wait_until("the first ScheduledMachine reported", || async { inactive(&env) == 1 }).await;

    // Take the manager's ScheduledMachine watch down and keep it down while more appear.
    let watches = env.server().request_count("watch", SCHEDULED_MACHINES, "");
    env.server()
        .inject_fault(Fault::new("watch", SCHEDULED_MACHINES, 500).times(usize::MAX));
    env.server().cut_watches();
    wait_until("the manager re-watching and refused", || async {
        env.server().request_count("watch", SCHEDULED_MACHINES, "") > watches
    })
    .await;
    // More than one list page (500), so the controller runs between pages.
    const LATER: usize = 700;
    put_many(&env, "later", LATER);
    // Its resourceVersion is now too old: the manager must list again. Answers that take a
    // while, as over a network, let the controller run between the list's pages.
    let lists = env.server().request_count("list", SCHEDULED_MACHINES, "");
    env.server().compact();
    env.server().set_latency(Some(Duration::from_millis(20)));
    env.server().clear_faults();

    // The watcher comes back after its backoff, which grew with every refused watch (up to
    // kube's 30 s cap, plus jitter): the wait allows for that, not for slowness.
    wait_until_within("the manager listing again, in pages", RELIST_WITHIN, || async {
        env.server().request_count("list", SCHEDULED_MACHINES, "") >= lists + 2
    })
    .await;
    // The second page is asked for, so the controller has had the first: the latency has done
    // its part, and 700 reconciles need not each pay it.
    env.server().set_latency(None);
    wait_until_within(
        "every ScheduledMachine of the relist reported",
        RELIST_WITHIN,
        || async { inactive(&env) == LATER + 1 },
    )
    .await;
    env.stop().await;
}

#[tokio::test]
async fn many_scheduled_machines_are_each_reported_once_and_then_left_alone() {
    let count = count();
    let env = Env::start().await;
    let _endpoint = cluster(&env, "v1beta1").await;
    // Monday 03:00 in New York: every seed window (weekdays 9-17) is closed.
    env.clock.set(at("2026-12-07T08:00:00Z"));
    let rss_before = rss_mib();
    put_many(&env, "w", count);
    // The manager has not run yet (the puts never yield): this much is the API server's.
    let rss_stored = rss_mib();

    let deadline = tokio::time::Instant::now()
        + Duration::from_secs(
            std::env::var("CAPLV_MANY_DEADLINE")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(600),
        );
    let started = tokio::time::Instant::now();
    let mut reported = 0;
    let mut progress_at = started;
    while reported < count {
        if progress_at.elapsed() >= Duration::from_secs(30) {
            println!(
                "{reported} Inactive after {:.0?}, {} requests",
                started.elapsed(),
                manager_requests(&env)
            );
            progress_at = tokio::time::Instant::now();
        }
        if tokio::time::Instant::now() >= deadline {
            let stuck = env
                .server()
                .list_objects("5spot.finos.org/v1alpha1", "ScheduledMachine", Some("default"))
                .into_iter()
                .find(|sm| sm["status"]["phase"] != "Inactive");
            panic!(
                "only {reported} of {count} ScheduledMachines reported Inactive; requests {:?}; one not: {}",
                env.server().request_counts_of(MANAGER_USER),
                serde_json::to_string(&stuck).unwrap()
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        reported = inactive(&env);
    }
    let requests = manager_requests(&env);
    let rss_growth = rss_mib() - rss_before;
    let by_kind = env.server().request_counts_of(MANAGER_USER);
    let status_writes: u64 = by_kind
        .iter()
        .filter(|((verb, resource, sub), _)| {
            verb == "patch" && resource.starts_with("scheduledmachines") && sub == "status"
        })
        .map(|(_, n)| n)
        .sum();
    println!(
        "{count} ScheduledMachines in {:.0?}: {requests} requests, {status_writes} status writes, \
         {rss_growth:.0} MiB grown ({:.0} MiB of it stored before the manager ran); {by_kind:?}",
        started.elapsed(),
        rss_stored - rss_before,
    );
    assert_eq!(
        env.server()
            .list_objects("cluster.x-k8s.io/v1beta1", "Machine", Some("default"))
            .len(),
        0,
        "nothing created outside the window"
    );
    assert_eq!(status_writes, count as u64, "one status write each");
    // Each: its finalizer, its status, one Event and a read of each child that a crash could
    // have left behind (IgnitionConfig, LibvirtMachine); plus the manager's start-up.
    assert!(
        requests <= 5 * count as u64 + 200,
        "{requests} requests for {count} ScheduledMachines"
    );
    // Objects of a few KiB each, stored with their history by the API server and cached by the
    // manager, in one process that runs other tests too: generous, but bounded per object
    // (10,000 measured 1,469 MiB).
    let bound = 512.0 + 160.0 * count as f64 / 1024.0;
    assert!(rss_growth < bound, "{rss_growth:.0} MiB grown, more than {bound:.0}");

    // Settled (the last Events may trail the statuses): then quiet until the window opens,
    // which is hours away.
    let mut quiet_checks = 0;
    loop {
        let settled = env.server().request_counts_of(MANAGER_USER);
        tokio::time::sleep(Duration::from_secs(3)).await;
        let now = env.server().request_counts_of(MANAGER_USER);
        let grown: Vec<_> = now
            .iter()
            .filter(|(kind, n)| settled.get(*kind).is_none_or(|before| before < *n))
            .map(|(kind, n)| (kind, n - settled.get(kind).copied().unwrap_or(0)))
            .collect();
        if grown.is_empty() {
            break;
        }
        quiet_checks += 1;
        assert!(
            quiet_checks < 10,
            "requests 30 s after the last report; in the last 3 s: {grown:?}"
        );
    }
    env.stop().await;
}

//! Host faults on real libvirt under a running manager: its SSH sessions cut, sshd down for a
//! while, libvirtd restarted, the network to the host dropping every packet, the host's key
//! rotated (as a reinstall would), and a storage pool full. Through all of them the running
//! machine keeps its one domain (the manager never recreates or deletes what it cannot see), the
//! host or machine reports why and recovers by itself once the fault is gone, and the manager's
//! connects, host calls and API requests a minute stay bounded (no hot loop against a dead host).
//! A machine asked for after the faults is provisioned, and all are torn down cleanly.

use std::{
    path::{Path, PathBuf},
    process::Command,
    time::{Duration, Instant},
};

use super::{Genuine, kill_switch, run, runs_on, secrets, var, virsh, wait};
use crate::support::genuine::manager_requests;

const FIRST: &str = "sys-hostfault-a";
const SECOND: &str = "sys-hostfault-b";
/// Asked for in the small pool while it is full.
const ON_FULL_POOL: &str = "sys-hostfault-c";
/// How long rates are measured when nothing is wrong, and after each fault has cleared.
const SETTLE: Duration = Duration::from_secs(20);
/// How long a lasting fault is held once the host reports it.
const HOLD: Duration = Duration::from_secs(60);
/// SSH connections a minute the manager may open while a host is down or recovering: it retries
/// with backoff (a hot loop opens hundreds).
const MAX_CONNECTS_PER_MINUTE: f64 = 16.0;
/// Host calls (libvirt work, or attempts refused for want of a connection) a minute.
const MAX_CALLS_PER_MINUTE: f64 = 300.0;
/// Kubernetes API requests a minute (a status patch per failed attempt would be thousands).
const MAX_REQUESTS_PER_MINUTE: f64 = 600.0;

/// Runs `scripts/libvirt-env.sh fault` on the test's hypervisor; undoes every fault when
/// dropped, so a failed assertion leaves the next test a working host with its pinned key.
struct Faults {
    workdir: String,
}

impl Faults {
    fn inject(&self, fault: &str) -> String {
        run(Command::new("bash").args(["scripts/libvirt-env.sh", "fault", &self.workdir, fault]))
    }
}

impl Drop for Faults {
    fn drop(&mut self) {
        for fault in ["partition-off", "restore-hostkey", "sshd-start", "pool-unfill"] {
            let _ = Command::new("bash")
                .args(["scripts/libvirt-env.sh", "fault", &self.workdir, fault])
                .status();
        }
    }
}

/// What the manager has done so far: from its metrics and the API server's audit log.
struct Counters {
    connects: f64,
    opened: f64,
    calls: f64,
    requests: usize,
    at: Instant,
}

fn sum_of(metrics: &str, name: &str, labels: &str) -> f64 {
    metrics
        .lines()
        .filter(|l| l.starts_with(&format!("{name}{{")) && l.contains(labels))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

fn counters(env: &Genuine, audit: &Path) -> Counters {
    let text = secrets::metrics(&secrets::manager_log(env));
    Counters {
        connects: sum_of(&text, "caplv_host_connects_total", ""),
        opened: sum_of(&text, "caplv_host_connects_total", r#"result="opened""#),
        calls: sum_of(&text, "caplv_host_calls_total", ""),
        requests: manager_requests(audit),
        at: Instant::now(),
    }
}

/// Connects, host calls and API requests a minute between `from` and `to`.
#[derive(Debug)]
struct Rates {
    connects: f64,
    calls: f64,
    requests: f64,
}

fn rates(from: &Counters, to: &Counters) -> Rates {
    let minutes = to.at.duration_since(from.at).as_secs_f64() / 60.0;
    Rates {
        connects: (to.connects - from.connects) / minutes,
        calls: (to.calls - from.calls) / minutes,
        requests: to.requests.saturating_sub(from.requests) as f64 / minutes,
    }
}

fn assert_bounded(fault: &str, r: &Rates) {
    assert!(
        r.connects <= MAX_CONNECTS_PER_MINUTE
            && r.calls <= MAX_CALLS_PER_MINUTE
            && r.requests <= MAX_REQUESTS_PER_MINUTE,
        "{fault}: {r:?} a minute (bounds: {MAX_CONNECTS_PER_MINUTE} connects, {MAX_CALLS_PER_MINUTE} calls, \
         {MAX_REQUESTS_PER_MINUTE} requests)"
    );
}

/// The LibvirtHost `sys`'s `Reachable` status and reason, e.g. `False ConnectionFailed`.
fn reachable(env: &Genuine) -> String {
    env.get(&[
        "-n",
        kill_switch::NS,
        "get",
        "libvirthost",
        "sys",
        "-o",
        r#"jsonpath={.status.conditions[?(@.type=="Reachable")].status} {.status.conditions[?(@.type=="Reachable")].reason}"#,
    ])
}

async fn wait_reachable(env: &Genuine, what: &str) {
    wait(what, || reachable(env) == "True Connected").await;
}

/// The LibvirtMachine `name`'s `Ready` status and reason, e.g. `False StoragePoolFull`.
fn machine_ready(env: &Genuine, name: &str) -> String {
    kill_switch::get(
        env,
        &[
            "libvirtmachine",
            name,
            "-o",
            r#"jsonpath={.status.conditions[?(@.type=="Ready")].status} {.status.conditions[?(@.type=="Ready")].reason}"#,
        ],
    )
}

/// An always-on ScheduledMachine `name` whose root disk goes in the small pool.
fn on_small_pool(name: &str, address: &str) -> String {
    let worker = kill_switch::Worker {
        name,
        schedule: r#"{daysOfWeek: [mon-sun], hoursOfDay: ["0-23"], timezone: UTC}"#,
        address,
        base_image: &var("CAPLV_SYS_BASE_IMAGE"),
        pool: &var("CAPLV_SYS_SMALL_POOL"),
        shutdown: "{mode: Hard}",
    };
    kill_switch::worker_manifests(&var("CAPLV_CP_API_PORT"), &worker)
}

/// A machine asked for in a full pool reports `StoragePoolFull` and is retried slowly, on the
/// connection the host already has (a full pool says nothing against it); once there is room
/// it is provisioned.
async fn full_pool(env: &Genuine, faults: &Faults, audit: &Path) {
    let from = counters(env, audit);
    faults.inject("pool-fill");
    env.apply(&on_small_pool(ON_FULL_POOL, "192.168.122.59/24"));
    wait("the machine in the full pool reporting StoragePoolFull", || {
        machine_ready(env, ON_FULL_POOL) == "False StoragePoolFull"
    })
    .await;
    let held = counters(env, audit);
    tokio::time::sleep(HOLD).await;
    let after = counters(env, audit);
    let full = rates(&held, &after);
    assert_eq!(
        after.opened, held.opened,
        "a full pool leaves the host's connection alone"
    );
    assert_eq!(
        reachable(env),
        "True Connected",
        "a full pool says nothing against the host"
    );
    assert!(
        !kill_switch::domain_running(env, ON_FULL_POOL),
        "no domain without its disk"
    );
    faults.inject("pool-unfill");
    wait("the machine running once the pool has room", || {
        kill_switch::domain_running(env, ON_FULL_POOL)
    })
    .await;
    let r = rates(&from, &counters(env, audit));
    eprintln!("host faults: pool-fill (StoragePoolFull): {full:?} a minute while full, {r:?} through pool-unfill");
    assert_bounded("pool-fill", &full);
    assert_bounded("pool-fill", &r);
}

#[tokio::test]
#[ignore = "needs root, real libvirt and the genuine control plane: scripts/system-test.sh runs it"]
async fn host_faults_neither_double_nor_lose_a_machine_and_never_hot_loop() {
    // Once, on the newest Cluster API (the crash suite takes the v1.10 run): it takes minutes.
    if !runs_on("v1beta2", "host faults") {
        return;
    }
    let faults = Faults {
        workdir: var("CAPLV_SYS_WORKDIR"),
    };
    let env = Genuine::start().await;
    let audit = PathBuf::from(var("CAPLV_CP_AUDIT_LOG"));
    env.apply(&kill_switch::always_on(FIRST, "192.168.122.57/24"));
    kill_switch::room_for_three(&env);
    let get = |args: &[&str]| kill_switch::get(&env, args);
    let running = |name: &str| kill_switch::domain_running(&env, name);
    wait("the first machine running", || running(FIRST)).await;
    wait_reachable(&env, "the host reachable").await;
    let identity = || {
        (
            get(&["libvirtmachine", FIRST, "-o", "jsonpath={.metadata.uid}"]),
            virsh(&["domuuid", FIRST]).trim().to_owned(),
        )
    };
    let before = identity();
    let start = counters(&env, &audit);
    tokio::time::sleep(SETTLE).await;
    let quiet = rates(&start, &counters(&env, &audit));
    eprintln!("host faults: quiet {quiet:?} a minute");

    // Faults the manager meets on its next call: it reconnects by itself.
    for fault in ["cut-sessions", "libvirtd-restart"] {
        let from = counters(&env, &audit);
        faults.inject(fault);
        wait(&format!("a new connection after {fault}"), || {
            counters(&env, &audit).opened > from.opened
        })
        .await;
        wait_reachable(&env, &format!("the host reachable after {fault}")).await;
        tokio::time::sleep(SETTLE).await;
        let r = rates(&from, &counters(&env, &audit));
        eprintln!("host faults: {fault}: {r:?} a minute");
        assert_bounded(fault, &r);
        assert_eq!(identity(), before, "{fault}: one incarnation of the machine");
    }

    // Faults that last: the host reports them, the manager backs off, then recovers.
    for (fault, undo) in [("sshd-stop", "sshd-start"), ("partition-on", "partition-off")] {
        let from = counters(&env, &audit);
        faults.inject(fault);
        wait(&format!("the host unreachable after {fault}"), || {
            reachable(&env).starts_with("False ")
        })
        .await;
        let why = reachable(&env);
        // Held long enough for several retries, so a hot loop would show in the rate.
        let held = counters(&env, &audit);
        tokio::time::sleep(HOLD).await;
        let down = rates(&held, &counters(&env, &audit));
        faults.inject(undo);
        wait_reachable(&env, &format!("the host reachable after {undo}")).await;
        tokio::time::sleep(SETTLE).await;
        let r = rates(&from, &counters(&env, &audit));
        eprintln!("host faults: {fault} ({why}): {down:?} a minute while down, {r:?} through {undo}");
        assert_bounded(fault, &down);
        assert_bounded(fault, &r);
        assert!(running(FIRST), "{fault}: the machine still runs");
        assert_eq!(identity(), before, "{fault}: one incarnation of the machine");
    }

    // A reinstalled host answers with a new key: refused before authenticating, the machine
    // left alone; the pinned key back, the host is used again.
    let rotated = faults.inject("rotate-hostkey").trim().to_owned();
    assert_ne!(rotated, var("CAPLV_SYS_FINGERPRINT"), "the host key changed");
    wait("the host refused with HostKeyMismatch and the key it saw", || {
        reachable(&env) == "False HostKeyMismatch"
            && get(&[
                "libvirthost",
                "sys",
                "-o",
                "jsonpath={.status.observedHostKeyFingerprint}",
            ]) == rotated
    })
    .await;
    assert_eq!(identity(), before, "a host key mismatch leaves the machine alone");
    faults.inject("restore-hostkey");
    wait_reachable(&env, "the host reachable with its pinned key again").await;

    full_pool(&env, &faults, &audit).await;
    assert_eq!(identity(), before, "a full pool leaves the running machine alone");

    // New work is done after the faults; then both go without a trace.
    env.apply(&kill_switch::always_on(SECOND, "192.168.122.58/24"));
    wait("the second machine running", || running(SECOND)).await;
    assert_eq!(identity(), before, "the first machine kept its one domain");
    kill_switch::remove_cleanly(&env, &[FIRST, SECOND, ON_FULL_POOL], "sys-hostfault").await;
    env.stop().await;
    drop(faults);
}

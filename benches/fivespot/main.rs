//! 5-Spot benchmark: 1000 ScheduledMachines whose windows open at the same instant, against the
//! real `caplv-manager` process. Their LibvirtMachines wait for a host that never becomes ready,
//! so the figures are the opening's: 5-Spot's creates and what the other controllers do about
//! the new objects. Reports the time from the edge until every Machine exists, the API
//! requests per ScheduledMachine for the whole opening (until the manager has been quiet for
//! 2 s), the requests made while nothing is due, and the manager's resident memory. Run with
//! `cargo bench --bench fivespot`.
//!
//! Requests are counted per client: the CAPI simulator and the bench name themselves
//! (`Impersonate-User`), so the manager's requests are those of the clients that name no one.
//! The bench waits on watches of its own, never by listing, so that it loads the server no more
//! than the manager's own watches do. The last line of output is one JSON object with the
//! figures.

#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    reason = "a benchmark aborts on the first failure, like a test"
)]

use std::{
    collections::BTreeMap,
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use chrono::{Timelike, Utc};
use kube::{Api, api::PostParams};

const COUNT: usize = 1000;
/// memkube's user for clients that impersonate no one: here, only the manager.
const MANAGER: &str = "";

/// Two decimals are all a figure needs.
fn round(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

/// The manager's resident memory, in KiB: total, anonymous (heap, stacks) and file-backed
/// (binary text, shared libraries).
#[derive(Clone, Copy)]
struct Rss {
    total: u64,
    anon: u64,
    file: u64,
}

impl Rss {
    fn of(pid: u32) -> Self {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.trim().trim_end_matches(" kB").parse().ok())
                .unwrap_or_else(|| panic!("{name} in /proc/{pid}/status"))
        };
        Self {
            total: field("VmRSS:"),
            anon: field("RssAnon:"),
            file: field("RssFile:"),
        }
    }

    fn mib(self) -> f64 {
        self.total as f64 / 1024.0
    }
}

impl std::fmt::Display for Rss {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:.1} MiB ({:.1} anonymous, {:.1} file-backed)",
            self.mib(),
            self.anon as f64 / 1024.0,
            self.file as f64 / 1024.0
        )
    }
}

/// CPU seconds process `pid` has used so far, all its threads, user and system
/// (`/proc/PID/stat` counts in USER_HZ ticks, 100 per second on Linux).
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("proc stat");
    // Fields after the command name, which is in parentheses and may hold spaces.
    let rest = &stat[stat.rfind(')').expect("comm") + 2..];
    let fields: Vec<&str> = rest.split(' ').collect();
    let ticks = |i: usize| fields[i].parse::<u64>().expect("tick count");
    // utime and stime are fields 14 and 15, so 11 and 12 after the state field at 3.
    (ticks(11) + ticks(12)) as f64 / 100.0
}

/// What the bench waits on, kept current by two watches, so waiting costs the server nothing
/// beyond the events it sends anyway (listing 1000 objects every 100 ms would).
#[derive(Clone, Default)]
struct Seen {
    machines: usize,
    phases: BTreeMap<String, String>,
}

impl Seen {
    fn in_phase(&self, phase: &str) -> usize {
        self.phases.values().filter(|p| *p == phase).count()
    }
}

/// Call `seen` with every object `api` lists or watches, from a task of its own.
fn on_each<K>(api: Api<K>, mut seen: impl FnMut(K) + Send + 'static)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    use futures::StreamExt;
    use kube::runtime::{WatchStreamExt, watcher};
    tokio::spawn(async move {
        let stream = watcher(api, watcher::Config::default())
            .default_backoff()
            .applied_objects();
        let mut stream = std::pin::pin!(stream);
        while let Some(obj) = stream.next().await {
            // The watcher retries on its own after an error.
            if let Ok(obj) = obj {
                seen(obj);
            }
        }
    });
}

fn probe(client: &kube::Client) -> tokio::sync::watch::Receiver<Seen> {
    let (tx, rx) = tokio::sync::watch::channel(Seen::default());
    let tx = std::sync::Arc::new(tx);
    let machines: Api<kube::api::DynamicObject> = Api::namespaced_with(
        client.clone(),
        "default",
        &kube::api::ApiResource::from_gvk(&kube::api::GroupVersionKind::gvk(
            "cluster.x-k8s.io",
            "v1beta1",
            "Machine",
        )),
    );
    let names = tx.clone();
    let mut seen = std::collections::HashSet::new();
    on_each(machines, move |m| {
        if seen.insert(m.metadata.name.unwrap_or_default()) {
            names.send_modify(|s| s.machines = seen.len());
        }
    });
    let sms: Api<caplv::api::ScheduledMachine> = Api::namespaced(client.clone(), "default");
    on_each(sms, move |sm| {
        let phase = sm
            .status
            .and_then(|s| s.phase)
            .map(|p| format!("{p:?}"))
            .unwrap_or_default();
        tx.send_modify(|s| {
            s.phases.insert(sm.metadata.name.unwrap_or_default(), phase);
        });
    });
    rx
}

fn non_watch_requests(counts: &BTreeMap<(String, String, String), u64>) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for ((verb, resource, sub), n) in counts {
        if verb != "watch" {
            let key = if sub.is_empty() {
                format!("{verb} {resource}")
            } else {
                format!("{verb} {resource}/{sub}")
            };
            *out.entry(key).or_default() += n;
        }
    }
    out
}

/// Where the manager's reconciles spent their time: the mean duration per controller, from its
/// own metrics.
fn print_reconcile_times(addr: std::net::SocketAddr) {
    use std::io::{Read, Write};
    let mut text = String::new();
    let mut conn = std::net::TcpStream::connect(addr).expect("metrics endpoint");
    conn.write_all(b"GET /metrics HTTP/1.0\r\nHost: bench\r\n\r\n").unwrap();
    conn.read_to_string(&mut text).unwrap();
    let value = |line: &str| {
        line.rsplit(' ')
            .next()
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    let mut per_controller: BTreeMap<String, (f64, f64)> = BTreeMap::new();
    for line in text.lines() {
        for (suffix, sum) in [("_sum{", true), ("_count{", false)] {
            if let Some(rest) = line.strip_prefix(&format!("caplv_reconcile_duration_seconds{suffix}")) {
                let controller = rest.split('"').nth(1).unwrap_or("?").to_owned();
                let entry = per_controller.entry(controller).or_default();
                if sum {
                    entry.0 += value(line)
                } else {
                    entry.1 += value(line)
                }
            }
        }
    }
    for (controller, (sum, count)) in per_controller {
        println!(
            "  reconciles of {controller}: {count} since start, mean {:.1} ms",
            1000.0 * sum / count.max(1.0)
        );
    }
}

async fn wait(
    what: &str,
    limit: Duration,
    seen: &mut tokio::sync::watch::Receiver<Seen>,
    done: impl FnMut(&Seen) -> bool,
) -> Duration {
    let start = Instant::now();
    if tokio::time::timeout(limit, seen.wait_for(done)).await.is_err() {
        let now = seen.borrow();
        panic!(
            "timed out: {what}; {} Machines, {} Inactive, {} Active",
            now.machines,
            now.in_phase("Inactive"),
            now.in_phase("Active")
        );
    }
    start.elapsed()
}

/// Wait until the manager has sent no request (watches aside) for two seconds: the opening is
/// over only once the other controllers have done what the new objects asked of them.
async fn settle(server: &memkube::Server, limit: Duration) -> Duration {
    const QUIET: Duration = Duration::from_secs(2);
    let start = Instant::now();
    let total = || {
        non_watch_requests(&server.request_counts_of(MANAGER))
            .values()
            .sum::<u64>()
    };
    let (mut last, mut since) = (total(), Instant::now());
    loop {
        assert!(start.elapsed() < limit, "the manager never went quiet");
        tokio::time::sleep(Duration::from_millis(250)).await;
        let now = total();
        if now != last {
            (last, since) = (now, Instant::now());
        } else if since.elapsed() >= QUIET {
            return since.duration_since(start);
        }
    }
}

/// The manager binary the one-family figures are taken from: `FIVESPOT_MANAGER`
/// (`scripts/bench-fivespot.sh` builds the image's profile with only the 5-Spot family, so
/// without libvirt), else this build's.
fn one_family_binary() -> String {
    std::env::var("FIVESPOT_MANAGER").unwrap_or_else(|_| env!("CARGO_BIN_EXE_caplv-manager").to_owned())
}

/// The 5-Spot family alone (`run --controllers fivespot`, as finos/5-spot runs): its memory
/// with one ScheduledMachine active, then with 100. The windows are forced open with the
/// override annotation, so nothing waits for a minute boundary.
async fn one_family_rss() -> (Rss, Rss) {
    let server = memkube::Server::new();
    server.install_crds(&caplv::api::crds()).expect("crds");
    capi_sim::install(&server.client(), capi_sim::CapiVersions::V1beta1)
        .await
        .expect("capi crds");
    let addr = server.serve("127.0.0.1:0".parse().unwrap()).await.expect("serve");
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(&kubeconfig, memkube::kubeconfig_yaml(addr)).unwrap();
    let mut child = Command::new(one_family_binary())
        .env("KUBECONFIG", &kubeconfig)
        .args([
            "run",
            "--log-filter",
            "warn",
            "--metrics-addr",
            "127.0.0.1:0",
            "--controllers",
            "fivespot",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn the 5-Spot family");
    let mut seen = probe(&server.client_as("bench"));
    let api: Api<caplv::api::ScheduledMachine> = Api::namespaced(server.client_as("bench"), "default");
    let seed: serde_json::Value =
        serde_yaml::from_str(include_str!("../examples/seed/05-scheduledmachine.yaml")).unwrap();
    let until = (Utc::now() + chrono::Duration::hours(1)).to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let mut sample = Vec::new();
    let mut created = 0;
    for total in [1, 100] {
        for i in created..total {
            let mut sm = seed.clone();
            sm["metadata"]["name"] = format!("f{i:03}").into();
            sm["metadata"]["annotations"] = serde_json::json!({"5spot.finos.org/force-on-until": until});
            api.create(&PostParams::default(), &serde_json::from_value(sm).unwrap())
                .await
                .expect("create");
        }
        created = total;
        wait("forced windows Active", Duration::from_secs(120), &mut seen, |s| {
            s.in_phase("Active") == total
        })
        .await;
        // Let the burst's transient allocations go back before sampling.
        tokio::time::sleep(Duration::from_secs(2)).await;
        sample.push(Rss::of(child.id()));
    }
    let _ = child.kill();
    let _ = child.wait();
    server.shutdown();
    (sample[0], sample[1])
}

/// The manager of the 1000-window opening: `BENCH_MANAGER` (`scripts/bench-fivespot.sh` builds
/// the image's binary), else this build's; run under `BENCH_MANAGER_WRAPPER` when that is set (a
/// profiler such as `heaptrack`; the memory figures are then the wrapper's).
fn manager_command() -> Command {
    let binary = std::env::var("BENCH_MANAGER").unwrap_or_else(|_| env!("CARGO_BIN_EXE_caplv-manager").to_owned());
    println!("the manager: {binary}");
    match std::env::var("BENCH_MANAGER_WRAPPER") {
        Ok(wrapper) if !wrapper.trim().is_empty() => {
            let mut words = wrapper.split_whitespace();
            let mut command = Command::new(words.next().unwrap_or_default());
            command.args(words).arg(&binary);
            command
        }
        _ => Command::new(binary),
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let (one, hundred) = one_family_rss().await;
    println!(
        "the 5-Spot family alone ({}): 1 active: {one}; 100 active: {hundred}",
        one_family_binary()
    );
    let server = memkube::Server::new();
    let client = server.client();
    server.install_crds(&caplv::api::crds()).expect("crds");
    capi_sim::install(&client, capi_sim::CapiVersions::V1beta1)
        .await
        .expect("capi crds");
    let sim = capi_sim::Simulator::builder(server.client_as("capi-sim"))
        .versions(capi_sim::CapiVersions::V1beta1)
        .build()
        .spawn();
    let addr = server.serve("127.0.0.1:0".parse().unwrap()).await.expect("serve");
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(&kubeconfig, memkube::kubeconfig_yaml(addr)).unwrap();

    let endpoint = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = endpoint.local_addr().unwrap().port();
    for doc in [
        "apiVersion: cluster.x-k8s.io/v1beta1\nkind: Cluster\nmetadata: {name: spot, namespace: default}\nspec:\n  infrastructureRef: {apiVersion: infrastructure.cluster.x-k8s.io/v1alpha1, kind: LibvirtCluster, name: spot}\n".to_owned(),
        format!("apiVersion: infrastructure.cluster.x-k8s.io/v1alpha1\nkind: LibvirtCluster\nmetadata: {{name: spot, namespace: default}}\nspec:\n  controlPlaneEndpoint: {{host: 127.0.0.1, port: {port}}}\n"),
        include_str!("../examples/seed/04-secret-worker-ignition.yaml").to_owned(),
        // The seed's host, which every LibvirtMachine names. Its SSH key Secret is absent, so it
        // is never connected to (the bench stays on loopback) and the machines wait for it:
        // provisioning is the caplv bench's part.
        include_str!("../examples/seed/02-libvirthost.yaml")
            .replace("192.168.122.1", "127.0.0.1:1"),
    ] {
        server.put_object(serde_yaml::from_str(&doc).unwrap()).expect("seed object");
    }

    let metrics_addr = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port");
    let mut child = manager_command()
        .env("KUBECONFIG", &kubeconfig)
        .args(["--metrics-addr", &metrics_addr.to_string(), "--log-filter", "warn"])
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn manager");

    // Every window opens at the same minute boundary, at least 25 s away, for an hour.
    let mut edge = (Utc::now() + chrono::Duration::seconds(25))
        .with_second(0)
        .unwrap()
        .with_nanosecond(0)
        .unwrap()
        + chrono::Duration::minutes(1);
    if edge - Utc::now() > chrono::Duration::seconds(85) {
        edge -= chrono::Duration::minutes(1);
    }
    let cron = format!("{} {} * * *", edge.minute(), edge.hour());
    let seed: serde_json::Value =
        serde_yaml::from_str(include_str!("../examples/seed/05-scheduledmachine.yaml")).unwrap();
    let api: Api<caplv::api::ScheduledMachine> = Api::namespaced(server.client_as("bench"), "default");
    let mut seen = probe(&server.client_as("bench"));
    let created = Instant::now();
    for i in 0..COUNT {
        let mut sm = seed.clone();
        sm["metadata"]["name"] = format!("w{i:04}").into();
        sm["spec"]["schedule"] = serde_json::json!({"cron": cron, "duration": "1h", "timezone": "UTC"});
        sm["spec"]["priority"] = ((i * 37) % 101).into();
        api.create(&PostParams::default(), &serde_json::from_value(sm).unwrap())
            .await
            .expect("create");
    }
    wait("all Inactive", Duration::from_secs(120), &mut seen, |s| {
        s.in_phase("Inactive") == COUNT
    })
    .await;
    println!(
        "created {COUNT} ScheduledMachines and saw them Inactive in {:.1}s",
        created.elapsed().as_secs_f64()
    );
    let idle_rss = Rss::of(child.id());

    println!("the windows open at {edge}");
    let until_edge = (edge - Utc::now()).to_std().expect("edge still ahead");
    tokio::time::sleep(until_edge.saturating_sub(Duration::from_secs(3))).await;
    server.reset_counts();
    let cpu_before = (cpu_seconds(child.id()), cpu_seconds(std::process::id()));
    tokio::time::sleep((edge - Utc::now()).to_std().unwrap_or_default()).await;
    let all_machines = wait("all Machines", Duration::from_secs(120), &mut seen, |s| {
        s.machines == COUNT
    })
    .await;
    let all_active = wait("all Active", Duration::from_secs(300), &mut seen, |s| {
        s.in_phase("Active") == COUNT
    })
    .await;
    let settled = settle(&server, Duration::from_secs(120)).await;
    let manager_cpu = cpu_seconds(child.id()) - cpu_before.0;
    println!(
        "CPU for the opening, until quiet: the manager {manager_cpu:.1} s; this process (memkube, the CAPI \
         simulator, the probes) {:.1} s",
        cpu_seconds(std::process::id()) - cpu_before.1
    );
    println!(
        "window edge -> all {COUNT} Machines exist: {:.2}s; -> all Active: {:.2}s (after the Machines); \
         the manager quiet again {:.1}s later",
        all_machines.as_secs_f64(),
        all_active.as_secs_f64(),
        settled.as_secs_f64()
    );
    let all_clients: u64 = non_watch_requests(&server.request_counts()).values().sum();
    let transition = non_watch_requests(&server.request_counts_of(MANAGER));
    let simulator: u64 = non_watch_requests(&server.request_counts_of("capi-sim")).values().sum();
    println!(
        "the CAPI simulator's requests per ScheduledMachine: {:.2} {:?}",
        simulator as f64 / COUNT as f64,
        non_watch_requests(&server.request_counts_of("capi-sim"))
    );
    println!("the manager's API requests for the opening, until it was quiet:");
    for (k, n) in &transition {
        println!("  {k}: {n} ({:.2} per ScheduledMachine)", *n as f64 / COUNT as f64);
    }
    let mut events: BTreeMap<String, u64> = BTreeMap::new();
    for e in server.list_objects("events.k8s.io/v1", "Event", Some("default")) {
        let key = format!(
            "{} {}",
            e["regarding"]["kind"].as_str().unwrap_or("?"),
            e["reason"].as_str().unwrap_or("?")
        );
        *events.entry(key).or_default() += 1;
    }
    println!("Events stored, by the kind they regard and their reason: {events:?}");
    let manager_requests: u64 = transition.values().sum();
    let creates: u64 = ["ignitionconfigs", "libvirtmachines", "machines"]
        .iter()
        .filter_map(|kind| {
            transition
                .iter()
                .find(|(k, _)| k.starts_with(&format!("create {kind}.")))
                .map(|(_, n)| n)
        })
        .sum();
    let repeated_creates = creates.saturating_sub(3 * COUNT as u64);
    println!(
        "requests per ScheduledMachine: the manager's {:.2}, all clients' {:.2}; repeated creates: {repeated_creates}",
        manager_requests as f64 / COUNT as f64,
        all_clients as f64 / COUNT as f64
    );
    print_reconcile_times(metrics_addr);
    let burst_rss = Rss::of(child.id());

    // Nothing is due for an hour: nothing but watches should reach the server.
    server.reset_counts();
    tokio::time::sleep(Duration::from_secs(10)).await;
    let quiet = non_watch_requests(&server.request_counts_of(MANAGER));
    let quiet_total: u64 = quiet.values().sum();
    println!("the manager's requests in 10 s between transitions (besides watches): {quiet_total} {quiet:?}");
    // What the manager holds while the 1000 stay Active: the burst's connections and buffers
    // have been released by now (the manager trims its heap every 10 s).
    let active_rss = Rss::of(child.id());
    println!("caplv-manager RSS with {COUNT} Inactive: {idle_rss}");
    println!("caplv-manager RSS with {COUNT} Active: {active_rss}; 2 s after the opening: {burst_rss}");
    println!(
        "{}",
        serde_json::json!({
            "control_plane": "memkube",
            "edge_to_all_machines_s": round(all_machines.as_secs_f64()),
            "requests_per_sm": round(manager_requests as f64 / COUNT as f64),
            "repeated_creates": repeated_creates,
            "rss_active_mib": round(active_rss.mib()),
            "rss_active_after_opening_mib": round(burst_rss.mib()),
            "rss_inactive_mib": round(idle_rss.mib()),
            "idle_requests_per_10s": quiet_total,
            "manager_cpu_s": round(manager_cpu),
            "rss_fivespot_only_1_mib": round(one.mib()),
            "rss_fivespot_only_100_mib": round(hundred.mib()),
        })
    );
    let _ = child.kill();
    let _ = child.wait();
    sim.stop().await.expect("sim");
    server.shutdown();
}

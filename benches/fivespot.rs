//! 5-Spot benchmark: 1000 ScheduledMachines whose windows open at the same instant, against the
//! real `caplv-manager` process. Reports the time from the edge until every Machine exists, the
//! API requests per ScheduledMachine for that transition, the requests made while nothing is
//! due, and the manager's resident memory. Run with `cargo bench --bench fivespot`.
//!
//! Requests are counted per client: the CAPI simulator and the bench name themselves
//! (`Impersonate-User`), so the manager's requests are those of the clients that name no one.
//! The last line of output is one JSON object with the figures.

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

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches(" kB").parse().ok())
        .expect("VmRSS")
}

fn count_phase(server: &memkube::Server, phase: &str) -> usize {
    server
        .list_objects("5spot.finos.org/v1alpha1", "ScheduledMachine", Some("default"))
        .iter()
        .filter(|o| o["status"]["phase"] == phase)
        .count()
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

async fn wait(what: &str, limit: Duration, mut done: impl FnMut() -> bool) -> Duration {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < limit, "timed out: {what}");
        // Listing clones every object: poll gently so the probe does not eat the machine.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    start.elapsed()
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
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
    ] {
        server.put_object(serde_yaml::from_str(&doc).unwrap()).expect("seed object");
    }

    let metrics_addr = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port");
    let mut child = Command::new(env!("CARGO_BIN_EXE_caplv-manager"))
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
    wait("all Inactive", Duration::from_secs(120), || {
        count_phase(&server, "Inactive") == COUNT
    })
    .await;
    println!(
        "created {COUNT} ScheduledMachines and saw them Inactive in {:.1}s",
        created.elapsed().as_secs_f64()
    );
    let idle_rss = rss_kib(child.id());

    let until_edge = (edge - Utc::now()).to_std().expect("edge still ahead");
    tokio::time::sleep(until_edge.saturating_sub(Duration::from_secs(3))).await;
    server.reset_counts();
    tokio::time::sleep((edge - Utc::now()).to_std().unwrap_or_default()).await;
    let all_machines = wait("all Machines", Duration::from_secs(300), || {
        server
            .list_objects("cluster.x-k8s.io/v1beta1", "Machine", Some("default"))
            .len()
            == COUNT
    })
    .await;
    let all_active = wait("all Active", Duration::from_secs(300), || {
        count_phase(&server, "Active") == COUNT
    })
    .await;
    println!(
        "window edge -> all {COUNT} Machines exist: {:.2}s; -> all Active: {:.2}s (after the Machines)",
        all_machines.as_secs_f64(),
        all_active.as_secs_f64()
    );
    let all_clients: u64 = non_watch_requests(&server.request_counts()).values().sum();
    let transition = non_watch_requests(&server.request_counts_of(MANAGER));
    println!("the manager's API requests during the transition:");
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
    let active_rss = rss_kib(child.id());

    // Nothing is due for an hour: nothing but watches should reach the server.
    tokio::time::sleep(Duration::from_secs(3)).await;
    server.reset_counts();
    tokio::time::sleep(Duration::from_secs(10)).await;
    let quiet = non_watch_requests(&server.request_counts_of(MANAGER));
    let quiet_total: u64 = quiet.values().sum();
    println!("the manager's requests in 10 s between transitions (besides watches): {quiet_total} {quiet:?}");
    println!(
        "caplv-manager RSS: {:.1} MiB with {COUNT} Inactive, {:.1} MiB with {COUNT} Active",
        idle_rss as f64 / 1024.0,
        active_rss as f64 / 1024.0
    );
    println!(
        "{}",
        serde_json::json!({
            "control_plane": "memkube",
            "edge_to_all_machines_s": round(all_machines.as_secs_f64()),
            "requests_per_sm": round(manager_requests as f64 / COUNT as f64),
            "repeated_creates": repeated_creates,
            "rss_active_mib": round(active_rss as f64 / 1024.0),
            "rss_inactive_mib": round(idle_rss as f64 / 1024.0),
            "idle_requests_per_10s": quiet_total,
        })
    );
    let _ = child.kill();
    let _ = child.wait();
    sim.stop().await.expect("sim");
    server.shutdown();
}

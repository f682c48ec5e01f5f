//! 5-Spot benchmark: 1000 ScheduledMachines whose windows open at the same instant, against the
//! real `caplv-manager` process. Their LibvirtMachines wait for a host that never becomes ready,
//! so the figures are the opening's: 5-Spot's creates and what the other controllers do about
//! the new objects. Reports the time from the edge until every Machine exists, the API
//! requests per ScheduledMachine for the whole opening (until the manager has been quiet for
//! 2 s), the requests made while nothing is due, and the manager's resident memory. Run with
//! `cargo bench --bench fivespot`.
//!
//! The opening runs on memkube with the CAPI simulator, or with `BENCH_CONTROL_PLANE=real` on
//! the genuine control plane with Cluster API core and the chart's RBAC (`scripts/bench-fivespot.sh
//! --genuine` starts it; see `plane.rs`). Requests are counted per client: on memkube the CAPI
//! simulator and the bench name themselves (`Impersonate-User`), so the manager's requests are
//! those of the clients that name no one; on the genuine server the audit log names every
//! client. The bench waits on watches of its own, never by listing, so that it loads the server
//! no more than the manager's own watches do. The last line of output is one JSON object with
//! the figures.

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

mod measure;
mod plane;
mod probe;

use measure::{Rss, cpu_seconds, non_watch_requests, print_reconcile_times, round};
use plane::Plane;
use probe::{probe, wait};

const COUNT: usize = 1000;

/// Wait until the manager has sent no request (watches aside) for two seconds: the opening is
/// over only once the other controllers have done what the new objects asked of them.
async fn settle(plane: &Plane, limit: Duration) -> Duration {
    const QUIET: Duration = Duration::from_secs(2);
    let start = Instant::now();
    let total = || non_watch_requests(&plane.manager_counts()).values().sum::<u64>();
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
        serde_yaml::from_str(include_str!("../../examples/seed/05-scheduledmachine.yaml")).unwrap();
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

/// What every ScheduledMachine refers to: the Cluster, its LibvirtCluster (endpoint `port` on
/// loopback), the worker Ignition Secret and the seed's host.
fn seed_docs(port: u16) -> Vec<String> {
    vec![
        "apiVersion: cluster.x-k8s.io/v1beta1\nkind: Cluster\nmetadata: {name: spot, namespace: default}\nspec:\n  infrastructureRef: {apiVersion: infrastructure.cluster.x-k8s.io/v1alpha1, kind: LibvirtCluster, name: spot}\n".to_owned(),
        format!("apiVersion: infrastructure.cluster.x-k8s.io/v1alpha1\nkind: LibvirtCluster\nmetadata: {{name: spot, namespace: default}}\nspec:\n  controlPlaneEndpoint: {{host: 127.0.0.1, port: {port}}}\n"),
        include_str!("../../examples/seed/04-secret-worker-ignition.yaml").to_owned(),
        // The seed's host, which every LibvirtMachine names. Its SSH key Secret is absent, so it
        // is never connected to (the bench stays on loopback) and the machines wait for it:
        // provisioning is the caplv bench's part.
        include_str!("../../examples/seed/02-libvirthost.yaml").replace("192.168.122.1", "127.0.0.1:1"),
    ]
}

/// The next minute boundary at least `lead` away (and less than a minute more): the instant
/// every window opens.
fn next_edge(lead: Duration) -> chrono::DateTime<Utc> {
    let lead = chrono::Duration::from_std(lead).unwrap();
    let mut edge =
        (Utc::now() + lead).with_second(0).unwrap().with_nanosecond(0).unwrap() + chrono::Duration::minutes(1);
    if edge - Utc::now() > lead + chrono::Duration::seconds(60) {
        edge -= chrono::Duration::minutes(1);
    }
    edge
}

/// Create the 1000 ScheduledMachines, each a copy of the seed's opening at `edge` for an hour.
async fn create_windows(api: &Api<caplv::api::ScheduledMachine>, edge: chrono::DateTime<Utc>) {
    let cron = format!("{} {} * * *", edge.minute(), edge.hour());
    let seed: serde_json::Value =
        serde_yaml::from_str(include_str!("../../examples/seed/05-scheduledmachine.yaml")).unwrap();
    for i in 0..COUNT {
        let mut sm = seed.clone();
        sm["metadata"]["name"] = format!("w{i:04}").into();
        sm["spec"]["schedule"] = serde_json::json!({"cron": cron, "duration": "1h", "timezone": "UTC"});
        sm["spec"]["priority"] = ((i * 37) % 101).into();
        api.create(&PostParams::default(), &serde_json::from_value(sm).unwrap())
            .await
            .expect("create");
    }
}

/// The Events the manager stored, by the kind they regard and their reason.
async fn print_events(client: &kube::Client) {
    let resource = kube::api::ApiResource::from_gvk(&kube::api::GroupVersionKind::gvk("events.k8s.io", "v1", "Event"));
    let api: Api<kube::api::DynamicObject> = Api::namespaced_with(client.clone(), "default", &resource);
    let mut events: BTreeMap<String, u64> = BTreeMap::new();
    for e in api.list(&Default::default()).await.expect("list Events") {
        if !e.data["reportingController"]
            .as_str()
            .unwrap_or_default()
            .contains("caplv")
        {
            continue;
        }
        let key = format!(
            "{} {}",
            e.data["regarding"]["kind"].as_str().unwrap_or("?"),
            e.data["reason"].as_str().unwrap_or("?")
        );
        *events.entry(key).or_default() += 1;
    }
    println!("the manager's Events, by the kind they regard and their reason: {events:?}");
}

/// The opening's request figures: the manager's per ScheduledMachine, every client's, and the
/// creates beyond one per object.
struct Requests {
    manager_per_sm: f64,
    repeated_creates: u64,
}

fn report_requests(plane: &Plane) -> Requests {
    let per_sm = |n: u64| n as f64 / COUNT as f64;
    let capi = non_watch_requests(&plane.capi_counts());
    println!(
        "Cluster API's requests per ScheduledMachine ({}): {:.2} {capi:?}",
        if plane.name() == "real" {
            "genuine core"
        } else {
            "the simulator"
        },
        per_sm(capi.values().sum())
    );
    let transition = non_watch_requests(&plane.manager_counts());
    println!("the manager's API requests for the opening, until it was quiet:");
    for (k, n) in &transition {
        println!("  {k}: {n} ({:.2} per ScheduledMachine)", per_sm(*n));
    }
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
    let all_clients: u64 = non_watch_requests(&plane.all_counts()).values().sum();
    println!(
        "requests per ScheduledMachine: the manager's {:.2}, all clients' {:.2}; repeated creates: {repeated_creates}",
        per_sm(manager_requests),
        per_sm(all_clients)
    );
    Requests {
        manager_per_sm: per_sm(manager_requests),
        repeated_creates,
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let plane = Plane::start().await;
    // The one-family figures are memkube's: they compare with finos/5-spot on that sandbox.
    let one_family = if plane.name() == "memkube" {
        let (one, hundred) = one_family_rss().await;
        println!(
            "the 5-Spot family alone ({}): 1 active: {one}; 100 active: {hundred}",
            one_family_binary()
        );
        Some((one, hundred))
    } else {
        None
    };
    let bench = plane.bench_client();
    let endpoint = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    plane.seed(&seed_docs(endpoint.local_addr().unwrap().port())).await;

    let metrics_addr = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port");
    let mut child = manager_command()
        .env("KUBECONFIG", plane.manager_kubeconfig())
        .envs(plane.manager_env())
        .args(["--metrics-addr", &metrics_addr.to_string(), "--log-filter", "warn"])
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn manager");

    let edge = next_edge(plane.lead());
    let api: Api<caplv::api::ScheduledMachine> = Api::namespaced(bench.clone(), "default");
    let mut seen = probe(&bench);
    let created = Instant::now();
    create_windows(&api, edge).await;
    let before_edge = (edge - Utc::now() - chrono::Duration::seconds(3))
        .to_std()
        .unwrap_or_default();
    wait("all Inactive before the edge", before_edge, &mut seen, |s| {
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
    plane.reset_counts();
    let cpu_before = (cpu_seconds(child.id()), cpu_seconds(std::process::id()));
    let components = plane.components();
    let components_before: Vec<f64> = components.iter().map(|(_, pid)| cpu_seconds(*pid)).collect();
    tokio::time::sleep((edge - Utc::now()).to_std().unwrap_or_default()).await;
    let all_machines = wait("all Machines", Duration::from_secs(300), &mut seen, |s| {
        s.machines == COUNT
    })
    .await;
    let all_active = wait("all Active", Duration::from_secs(300), &mut seen, |s| {
        s.in_phase("Active") == COUNT
    })
    .await;
    // The opening is over once every LibvirtMachine reports the wait it stays in (its host
    // never becomes ready) and the manager has gone quiet: a pause in the manager's requests
    // alone may only be it waiting on Cluster API core.
    wait(
        "all LibvirtMachines waiting for their host",
        Duration::from_secs(300),
        &mut seen,
        |s| s.reporting("WaitingForHost") == COUNT,
    )
    .await;
    let settled = settle(&plane, Duration::from_secs(300)).await;
    let manager_cpu = cpu_seconds(child.id()) - cpu_before.0;
    println!(
        "CPU for the opening, until quiet: the manager {manager_cpu:.1} s; this process ({}, the probes) {:.1} s",
        if plane.name() == "real" {
            "the API client"
        } else {
            "memkube, the CAPI simulator"
        },
        cpu_seconds(std::process::id()) - cpu_before.1
    );
    for ((name, pid), before) in components.iter().zip(components_before) {
        println!("  CPU of {name} for the opening: {:.1} s", cpu_seconds(*pid) - before);
    }
    println!(
        "window edge -> all {COUNT} Machines exist: {:.2}s; -> all Active: {:.2}s (after the Machines); \
         the manager quiet again {:.1}s later",
        all_machines.as_secs_f64(),
        all_active.as_secs_f64(),
        settled.as_secs_f64()
    );
    let requests = report_requests(&plane);
    print_events(&bench).await;
    print_reconcile_times(metrics_addr);
    let burst_rss = Rss::of(child.id());

    // Nothing is due for an hour: nothing but watches should reach the server.
    plane.reset_counts();
    tokio::time::sleep(Duration::from_secs(10)).await;
    let quiet = non_watch_requests(&plane.manager_counts());
    let quiet_total: u64 = quiet.values().sum();
    println!("the manager's requests in 10 s between transitions (besides watches): {quiet_total} {quiet:?}");
    // What the manager holds while the 1000 stay Active: the burst's connections and buffers
    // have been released by now (the manager trims its heap every 10 s).
    let active_rss = Rss::of(child.id());
    println!("caplv-manager RSS with {COUNT} Inactive: {idle_rss}");
    println!("caplv-manager RSS with {COUNT} Active: {active_rss}; 2 s after the opening: {burst_rss}");
    let mut figures = serde_json::json!({
        "control_plane": plane.name(),
        "edge_to_all_machines_s": round(all_machines.as_secs_f64()),
        "requests_per_sm": round(requests.manager_per_sm),
        "repeated_creates": requests.repeated_creates,
        "rss_active_mib": round(active_rss.mib()),
        "rss_active_after_opening_mib": round(burst_rss.mib()),
        "rss_inactive_mib": round(idle_rss.mib()),
        "idle_requests_per_10s": quiet_total,
        "manager_cpu_s": round(manager_cpu),
    });
    if let Some((one, hundred)) = one_family {
        figures["rss_fivespot_only_1_mib"] = round(one.mib()).into();
        figures["rss_fivespot_only_100_mib"] = round(hundred.mib()).into();
    }
    let _ = child.kill();
    let _ = child.wait();
    plane.stop().await;
    println!("{figures}");
}

//! Foundation benchmark: memkube create throughput and watch fan-out, and the manager's idle
//! memory. Not a test: it prints figures. Run with `cargo bench --bench foundation`.

#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    reason = "a benchmark aborts on the first failure, like a test"
)]

use std::{
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::{
    Api, Client,
    api::PostParams,
    runtime::{WatchStreamExt, watcher},
};

const OBJECTS: usize = 10_000;
const WATCHERS: usize = 10;

fn config_map(i: usize) -> ConfigMap {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": format!("cm-{i:05}"), "labels": {"bench": "yes"}},
        "data": {"index": i.to_string()}
    }))
    .expect("static ConfigMap")
}

/// Create `OBJECTS` ConfigMaps with `concurrency` requests in flight; returns creates per second.
async fn create_all(client: Client, concurrency: usize) -> f64 {
    let api: Api<ConfigMap> = Api::namespaced(client, "default");
    let start = Instant::now();
    futures::stream::iter(0..OBJECTS)
        .map(|i| {
            let api = api.clone();
            async move {
                api.create(&PostParams::default(), &config_map(i))
                    .await
                    .expect("create")
            }
        })
        .buffer_unordered(concurrency)
        .for_each(|_| async {})
        .await;
    OBJECTS as f64 / start.elapsed().as_secs_f64()
}

/// Start `WATCHERS` watchers, create `OBJECTS` objects, and time until every watcher saw all of them.
async fn fan_out(client: Client) -> (Duration, f64) {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let mut watchers = Vec::new();
    for _ in 0..WATCHERS {
        let stream = watcher(api.clone(), watcher::Config::default().labels("bench=yes")).applied_objects();
        let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
        watchers.push((
            tokio::spawn(async move {
                let mut stream = std::pin::pin!(stream);
                let mut ready_tx = Some(ready_tx);
                let mut seen = std::collections::HashSet::new();
                loop {
                    if let Some(tx) = ready_tx.take() {
                        let _ = tx.send(());
                    }
                    match stream.try_next().await {
                        Ok(Some(cm)) => {
                            seen.insert(cm.metadata.name.unwrap_or_default());
                            if seen.len() == OBJECTS {
                                return Instant::now();
                            }
                        }
                        Ok(None) | Err(_) => panic!("watch ended early"),
                    }
                }
            }),
            ready_rx,
        ));
    }
    for (_, ready) in &mut watchers {
        ready.await.expect("watcher started");
    }
    // Let every watcher finish its initial list before the first create.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let start = Instant::now();
    create_all(client, 32).await;
    let mut last = start;
    for (task, _) in watchers {
        last = last.max(task.await.expect("watcher"));
    }
    let total = last - start;
    (total, (OBJECTS * WATCHERS) as f64 / total.as_secs_f64())
}

fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches(" kB").parse().ok())
}

/// Run the real manager binary against a memkube over TCP and read its resident memory once idle.
async fn manager_idle_rss() -> u64 {
    let server = memkube::Server::new();
    server.install_crds(&caplv::api::crds()).expect("crds");
    capi_sim::install(&server.client(), capi_sim::CapiVersions::V1beta1)
        .await
        .expect("capi crds");
    let addr = server.serve("127.0.0.1:0".parse().expect("addr")).await.expect("serve");
    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(&kubeconfig, memkube::kubeconfig_yaml(addr)).expect("kubeconfig");
    let mut child = Command::new(env!("CARGO_BIN_EXE_caplv-manager"))
        .env("KUBECONFIG", &kubeconfig)
        .args(["--metrics-addr", "127.0.0.1:0"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn manager");
    // Idle means: started, caches synced, nothing to do. Sample after it settles.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let rss = rss_kib(child.id()).expect("rss");
    let _ = child.kill();
    let _ = child.wait();
    server.shutdown();
    rss
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let in_process = memkube::Server::new();
    let creates = create_all(in_process.client(), 32).await;
    println!("memkube creates (in-process, 32 in flight, {OBJECTS} ConfigMaps): {creates:.0}/s");

    let tcp = memkube::Server::new();
    let addr = tcp.serve("127.0.0.1:0".parse().expect("addr")).await.expect("serve");
    let config = kube::Config::new(format!("http://{addr}").parse().expect("url"));
    let client = Client::try_from(config).expect("client");
    let creates = create_all(client, 32).await;
    println!("memkube creates (TCP, 32 in flight, {OBJECTS} ConfigMaps): {creates:.0}/s");

    let fan = memkube::Server::new();
    let (total, events) = fan_out(fan.client()).await;
    println!(
        "memkube watch fan-out ({WATCHERS} watchers, {OBJECTS} creates): all events delivered in {:.2}s, {events:.0} events/s",
        total.as_secs_f64()
    );

    let rss = manager_idle_rss().await;
    println!(
        "caplv-manager idle RSS (debug or release as built): {:.1} MiB",
        rss as f64 / 1024.0
    );
}

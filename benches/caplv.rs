//! CAPLV benchmark. Run with `cargo bench --bench caplv`.
//!
//! 1. **50 machines on 50 hosts**: 50 LibvirtHosts, each a private `test:///` driver shaped like
//!    the seed's laptop, and 50 Machines created at once; reports the time until every domain
//!    runs and until every machine is deleted again.
//! 2. **Real libvirt over SSH** (when the `CAPLV_SYS_*` variables of `scripts/libvirt-env.sh`
//!    are set, e.g. `scripts/bench-real-libvirt.sh`): a few Machines one after another on real
//!    libvirtd + QEMU (TCG) + OVMF through the pinned-key SSH tunnel; reports Machine created →
//!    domain running, Machine deleted → everything gone, and the libvirt RPC messages (round
//!    trips over SSH) each took.
//!
//! The manager runs in this process (as in the integration tests) so the benchmark can read its
//! connection cache; memkube and the CAPI simulator run alongside. The last line of output is
//! one JSON object: `provision_s`, `teardown_s`, `rpc_per_provision` and `rpc_per_teardown`
//! (real libvirt, medians of the rounds; null when that part is skipped), and the 50-host
//! figures `test_hosts_provision_all_s` and `test_hosts_teardown_all_s`.

#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    reason = "a benchmark aborts on the first failure, like a test"
)]

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use caplv::{
    api::{LibvirtHost, LibvirtMachine},
    app::{self, ManagerConfig, Shared},
    clock::SystemClock,
    controllers::Family,
    endpoint::AlwaysReachable,
    libvirt::simulated,
    reconcile::Settings,
};
use kube::{
    Api, Client,
    api::{DeleteParams, DynamicObject, Patch, PatchParams},
    core::{ApiResource, GroupVersionKind},
};
use serde_json::json;
use tokio_util::sync::CancellationToken;

const HOSTS: usize = 50;
const REAL_ROUNDS: usize = 3;
const IGNITION: &str = r#"{"ignition":{"version":"3.4.0"}}"#;

fn settings() -> Settings {
    Settings {
        error_requeue: Duration::from_secs(1),
        ..Settings::default()
    }
}

struct Bench {
    server: memkube::Server,
    client: Client,
    shared: Shared,
    shutdown: CancellationToken,
    manager: tokio::task::JoinHandle<anyhow::Result<()>>,
    sim: capi_sim::SimulatorHandle,
}

async fn start() -> Bench {
    let server = memkube::Server::new();
    let client = server.client();
    server.install_crds(&caplv::api::crds()).unwrap();
    capi_sim::install(&client, capi_sim::CapiVersions::V1beta1)
        .await
        .unwrap();
    let sim = capi_sim::Simulator::builder(client.clone())
        .versions(capi_sim::CapiVersions::V1beta1)
        .build()
        .spawn();
    let shared = Shared::new().unwrap();
    let shutdown = CancellationToken::new();
    let config = ManagerConfig {
        families: vec![Family::Caplv],
        metrics_addr: "127.0.0.1:0".parse().unwrap(),
        settings: settings(),
        leader: None,
        probe: Arc::new(AlwaysReachable),
        clock: Arc::new(SystemClock),
    };
    let manager = tokio::spawn(app::run(client.clone(), config, shared.clone(), shutdown.clone()));
    for doc in [
        json!({"apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Cluster",
               "metadata": {"name": "spot", "namespace": "default"}, "spec": {}}),
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "boot", "namespace": "default"},
               "data": {"value": base64(IGNITION)}}),
    ] {
        server.put_object(doc).unwrap();
    }
    Bench {
        server,
        client,
        shared,
        shutdown,
        manager,
        sim,
    }
}

fn base64(s: &str) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(s)
}

async fn stop(b: Bench) {
    b.shutdown.cancel();
    b.manager.await.unwrap().unwrap();
    b.sim.stop().await.unwrap();
    b.server.shutdown();
}

fn machines(client: &Client) -> Api<DynamicObject> {
    Api::namespaced_with(
        client.clone(),
        "default",
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("cluster.x-k8s.io", "v1beta1", "Machine"),
            "machines",
        ),
    )
}

fn lvm(name: &str, host: &str, spec: &serde_json::Value) -> serde_json::Value {
    let mut spec = spec.clone();
    spec["hostRef"] = json!({"name": host});
    json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1", "kind": "LibvirtMachine",
           "metadata": {"name": name, "namespace": "default"}, "spec": spec})
}

fn machine(name: &str) -> serde_json::Value {
    json!({"apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Machine",
           "metadata": {"name": name, "namespace": "default"},
           "spec": {"clusterName": "spot", "bootstrap": {"dataSecretName": "boot"},
                    "infrastructureRef": {"apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1",
                                          "kind": "LibvirtMachine", "name": name}}})
}

async fn create(client: &Client, obj: serde_json::Value) {
    let obj: DynamicObject = serde_json::from_value(obj).unwrap();
    let gvk = GroupVersionKind::try_from(obj.types.as_ref().unwrap()).unwrap();
    let (ar, _) = kube::discovery::pinned_kind(client, &gvk).await.unwrap();
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &ar);
    let name = obj.metadata.name.clone().unwrap();
    api.patch(&name, &PatchParams::apply("bench").force(), &Patch::Apply(obj))
        .await
        .unwrap();
}

fn running(server: &memkube::Server, name: &str) -> bool {
    server
        .get_object(
            "infrastructure.cluster.x-k8s.io/v1alpha1",
            "LibvirtMachine",
            "default",
            name,
        )
        .is_some_and(|o| o["status"]["domainState"] == "running")
}

fn lvm_count(server: &memkube::Server) -> usize {
    server
        .list_objects(
            "infrastructure.cluster.x-k8s.io/v1alpha1",
            "LibvirtMachine",
            Some("default"),
        )
        .len()
}

async fn wait(what: &str, limit: Duration, mut done: impl FnMut() -> bool) -> Duration {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < limit, "timed out: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    start.elapsed()
}

fn test_spec() -> serde_json::Value {
    json!({"domain": {"vcpus": 2, "memoryMB": 4096, "type": "qemu"},
           "rootDisk": {"baseImage": simulated::BASE_IMAGE, "storagePool": "default", "size": "20Gi"},
           "network": {"type": "network", "name": "default", "addresses": ["192.168.122.100/24"]}})
}

async fn fifty_hosts() -> (Duration, Duration) {
    let b = start().await;
    let dir = tempfile::tempdir().unwrap();
    let start_hosts = Instant::now();
    for i in 0..HOSTS {
        let name = format!("host-{i:02}");
        let uri = simulated::host_uri(dir.path(), "default", &name).unwrap();
        create(
            &b.client,
            json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1", "kind": "LibvirtHost",
                   "metadata": {"name": name, "namespace": "default"}, "spec": {"uri": uri}}),
        )
        .await;
    }
    wait("hosts ready", Duration::from_secs(120), || {
        b.server
            .list_objects(
                "infrastructure.cluster.x-k8s.io/v1alpha1",
                "LibvirtHost",
                Some("default"),
            )
            .iter()
            .filter(|h| h["status"]["ready"] == true)
            .count()
            == HOSTS
    })
    .await;
    let hosts_ready = start_hosts.elapsed();
    let start = Instant::now();
    for i in 0..HOSTS {
        let name = format!("w-{i:02}");
        create(&b.client, lvm(&name, &format!("host-{i:02}"), &test_spec())).await;
        create(&b.client, machine(&name)).await;
    }
    let created = start.elapsed();
    wait("50 domains running", Duration::from_secs(300), || {
        (0..HOSTS).all(|i| running(&b.server, &format!("w-{i:02}")))
    })
    .await;
    let provisioned = start.elapsed();
    let start = Instant::now();
    for i in 0..HOSTS {
        machines(&b.client)
            .delete(&format!("w-{i:02}"), &DeleteParams::default())
            .await
            .unwrap();
    }
    wait("50 machines deleted", Duration::from_secs(300), || {
        lvm_count(&b.server) == 0
    })
    .await;
    let deleted = start.elapsed();
    println!("50 machines on 50 test:/// hosts (release build, in-process memkube + CAPI simulator):");
    println!(
        "  50 hosts created -> all ready:      {:>8.2} s",
        hosts_ready.as_secs_f64()
    );
    println!("  objects created (100 applies):      {:>8.2} s", created.as_secs_f64());
    println!(
        "  created -> all 50 domains running:  {:>8.2} s",
        provisioned.as_secs_f64()
    );
    println!("  Machines deleted -> all gone:       {:>8.2} s", deleted.as_secs_f64());
    stop(b).await;
    (provisioned, deleted)
}

/// One real-libvirt round: Machine created -> domain running, and Machine deleted -> all gone,
/// each with the libvirt RPC messages it took.
struct Round {
    up: Duration,
    rpc_up: u64,
    down: Duration,
    rpc_down: u64,
}

/// The middle value (the upper one of an even count); rounds vary with the host's load.
fn median<T: PartialOrd + Copy>(mut values: Vec<T>) -> Option<T> {
    values.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    values.get(values.len() / 2).copied()
}

fn var(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

/// The RPC messages between two tallies by procedure, most frequent first: where a round's
/// round trips went (procedure numbers as in libvirt's `remote_protocol.x`).
fn print_procedures(
    what: &str,
    from: &std::collections::BTreeMap<(u32, i32), u64>,
    to: &std::collections::BTreeMap<(u32, i32), u64>,
) {
    let mut made: Vec<_> = to
        .iter()
        .map(|(p, n)| (*p, n - from.get(p).copied().unwrap_or(0)))
        .filter(|(_, n)| *n > 0)
        .collect();
    made.sort_by_key(|(p, n)| (std::cmp::Reverse(*n), *p));
    let list: Vec<String> = made
        .iter()
        .map(|((program, procedure), n)| format!("{program:#x}/{procedure}: {n}"))
        .collect();
    println!("  last round's {what} RPCs by program/procedure: {}", list.join(", "));
}

async fn real_libvirt() -> Vec<Round> {
    let (Some(uri), Some(pin), Some(key), Some(pool), Some(base), Some(code), Some(vars)) = (
        var("CAPLV_SYS_URI"),
        var("CAPLV_SYS_FINGERPRINT"),
        var("CAPLV_SYS_CLIENT_KEY"),
        var("CAPLV_SYS_POOL"),
        var("CAPLV_SYS_BASE_IMAGE"),
        var("CAPLV_SYS_OVMF_CODE"),
        var("CAPLV_SYS_OVMF_VARS"),
    ) else {
        println!("real libvirt: skipped (run scripts/bench-real-libvirt.sh to include it)");
        return Vec::new();
    };
    let b = start().await;
    let key = std::fs::read_to_string(key).unwrap();
    b.server
        .put_object(
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "ssh", "namespace": "default"},
                           "data": {"ssh-privatekey": base64(&key)}}),
        )
        .unwrap();
    create(
        &b.client,
        json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1", "kind": "LibvirtHost",
               "metadata": {"name": "real", "namespace": "default"},
               "spec": {"uri": uri, "secretRef": {"name": "ssh"}, "hostKeyFingerprint": pin,
                        "firmwarePath": code, "nvramTemplatePath": vars,
                        "reservedResources": {"vcpus": 0, "memoryMB": 0}}}),
    )
    .await;
    let connect = wait("real host ready", Duration::from_secs(120), || {
        b.server
            .get_object(
                "infrastructure.cluster.x-k8s.io/v1alpha1",
                "LibvirtHost",
                "default",
                "real",
            )
            .is_some_and(|h| h["status"]["ready"] == true)
    })
    .await;
    let host: LibvirtHost = Api::namespaced(b.client.clone(), "default").get("real").await.unwrap();
    let conn = b.shared.hosts.get(&b.client, &host).await.unwrap().into_open().unwrap();
    // The blank base image boots no OS, so nothing would answer a Graceful power-off: Hard
    // measures the teardown itself.
    let spec = json!({"domain": {"vcpus": 1, "memoryMB": 512, "type": "qemu"},
                      "rootDisk": {"baseImage": base, "storagePool": pool, "size": "128Mi"},
                      "network": {"type": "network", "name": "default", "addresses": ["192.168.122.60/24"]},
                      "shutdown": {"mode": "Hard"}});
    println!(
        "real libvirtd + QEMU (TCG) + OVMF over the SSH tunnel (host connected in {:.2} s):",
        connect.as_secs_f64()
    );
    println!("  round  created->running  RPCs  deleted->gone  RPCs");
    let lvms: Api<LibvirtMachine> = Api::namespaced(b.client.clone(), "default");
    let mut rounds = Vec::new();
    for round in 0..REAL_ROUNDS {
        let name = format!("bench-{round}");
        let before = conn.rpc_messages().unwrap_or(0);
        let procedures_before = conn.rpc_procedures().unwrap_or_default();
        let start = Instant::now();
        create(&b.client, lvm(&name, "real", &spec)).await;
        create(&b.client, machine(&name)).await;
        wait("domain running", Duration::from_secs(180), || running(&b.server, &name)).await;
        let up = start.elapsed();
        let mid = conn.rpc_messages().unwrap_or(0);
        let procedures_mid = conn.rpc_procedures().unwrap_or_default();
        let start = Instant::now();
        machines(&b.client)
            .delete(&name, &DeleteParams::default())
            .await
            .unwrap();
        wait("machine gone", Duration::from_secs(180), || lvm_count(&b.server) == 0).await;
        let down = start.elapsed();
        let after = conn.rpc_messages().unwrap_or(0);
        if round + 1 == REAL_ROUNDS {
            let procedures_after = conn.rpc_procedures().unwrap_or_default();
            print_procedures("provision", &procedures_before, &procedures_mid);
            print_procedures("teardown", &procedures_mid, &procedures_after);
        }
        assert!(lvms.get_opt(&name).await.unwrap().is_none());
        println!(
            "  {round:>5}  {:>14.2} s  {:>4}  {:>11.2} s  {:>4}",
            up.as_secs_f64(),
            mid - before,
            down.as_secs_f64(),
            after - mid
        );
        rounds.push(Round {
            up,
            rpc_up: mid - before,
            down,
            rpc_down: after - mid,
        });
    }
    println!("  (RPCs include the periodic host health check that may fall inside a round)");
    stop(b).await;
    rounds
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let (provisioned, deleted) = fifty_hosts().await;
    let rounds = real_libvirt().await;
    let seconds = |d: Option<Duration>| d.map(|d| (d.as_secs_f64() * 100.0).round() / 100.0);
    // The real-libvirt figures are medians over the rounds; null when that part was skipped.
    println!(
        "{}",
        json!({
            "test_hosts_provision_all_s": seconds(Some(provisioned)),
            "test_hosts_teardown_all_s": seconds(Some(deleted)),
            "provision_s": seconds(median(rounds.iter().map(|r| r.up).collect())),
            "teardown_s": seconds(median(rounds.iter().map(|r| r.down).collect())),
            "rpc_per_provision": median(rounds.iter().map(|r| r.rpc_up).collect()),
            "rpc_per_teardown": median(rounds.iter().map(|r| r.rpc_down).collect()),
        })
    );
}

//! LibvirtHost reconcile paths: a private test-driver node, a missing node, an SSH host on a
//! closed port, a missing Secret, and no status rewrite loop.
//!
//! A real-sshd test is not here: the test sshd (`src/libvirt/ssh/testsshd.rs`) is `cfg(test)` in
//! the library and so not reachable from this binary.

use std::time::Duration;

use caplv::api::{
    LibvirtHost,
    condition::{self, Condition},
};
use kube::Api;
use tokio::net::TcpListener;

use crate::support::{Env, apply_yaml, wait_until};

/// A throwaway ed25519 key made for these tests; it opens nothing.
const TEST_KEY: &str = "-----BEGIN OPENSSH PRIVATE KEY-----
b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW
QyNTUxOQAAACC49XiJohsS4PBvrrunLDOTNQm5wWhp1pp263e6/BuoKAAAAJCQtU1nkLVN
ZwAAAAtzc2gtZWQyNTUxOQAAACC49XiJohsS4PBvrrunLDOTNQm5wWhp1pp263e6/BuoKA
AAAEBIBdI6Cdv0G5tdBa5C1eOO5FYIGv7pO9+rjxVWEIfdkrj1eImiGxLg8G+uu6csM5M1
CbnBaGnWmnbrd7r8G6goAAAACmNhcGx2LXRlc3QBAgM=
-----END OPENSSH PRIVATE KEY-----
";

const PIN: &str = "SHA256:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA";

/// A private test-driver node with 16 CPUs and 31560 MiB, in its own temp directory.
fn test_node() -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("node.xml");
    std::fs::write(
        &file,
        "<node>\n  <cpu><nodes>1</nodes><sockets>1</sockets><cores>16</cores><threads>1</threads>\
         <active>16</active><mhz>2000</mhz><model>x86_64</model></cpu>\n  <memory>32317440</memory>\n</node>\n",
    )
    .unwrap();
    let uri = format!("test://{}", file.display());
    (dir, uri)
}

fn host_yaml(name: &str, uri: &str, extra: &str) -> String {
    format!(
        "apiVersion: infrastructure.cluster.x-k8s.io/v1alpha1\nkind: LibvirtHost\n\
         metadata: {{name: {name}, namespace: default}}\nspec:\n  uri: \"{uri}\"\n{extra}"
    )
}

fn ssh_host_yaml(name: &str, port: u16, secret: &str) -> String {
    host_yaml(
        name,
        &format!("qemu+ssh://root@127.0.0.1:{port}/system"),
        &format!("  secretRef: {{name: {secret}}}\n  hostKeyFingerprint: \"{PIN}\"\n"),
    )
}

fn secret_yaml(name: &str, key: &str) -> String {
    let indented: String = key.lines().map(|l| format!("    {l}\n")).collect();
    format!(
        "apiVersion: v1\nkind: Secret\nmetadata: {{name: {name}, namespace: default}}\nstringData:\n  ssh-privatekey: |\n{indented}"
    )
}

async fn condition_of(api: &Api<LibvirtHost>, name: &str, type_: &str) -> Option<Condition> {
    let obj = api.get(name).await.ok()?;
    condition::find(&obj.status?.conditions, type_).cloned()
}

async fn wait_for(api: &Api<LibvirtHost>, name: &str, type_: &str, status: &str, reason: &str) -> Condition {
    wait_until(&format!("{name} {type_}={status} ({reason})"), || async {
        condition_of(api, name, type_)
            .await
            .is_some_and(|c| c.status == status && c.reason == reason)
    })
    .await;
    condition_of(api, name, type_).await.unwrap()
}

/// A port on loopback that refuses connections.
async fn closed_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    listener.local_addr().unwrap().port()
}

#[tokio::test]
async fn libvirt_host_on_a_test_node_becomes_ready_with_capacity_and_stays_quiet() {
    let env = Env::start().await;
    let (_dir, uri) = test_node();
    apply_yaml(&env.client, &host_yaml("node", &uri, "")).await;
    let api: Api<LibvirtHost> = Api::namespaced(env.client.clone(), "default");
    wait_for(&api, "node", "Reachable", "True", "Connected").await;
    wait_for(&api, "node", condition::READY, "True", "Connected").await;
    let status = api.get("node").await.unwrap().status.unwrap();
    assert!(status.ready);
    let capacity = status.capacity.unwrap();
    assert_eq!((capacity.total_vcpus, capacity.total_memory_mb), (16, 31_560));
    assert_eq!((capacity.available_vcpus, capacity.available_memory_mb), (14, 27_464));
    assert_eq!(status.kvm_available, Some(false));
    assert!(status.libvirt_version.is_some());
    assert!(status.last_checked.is_some());
    assert_eq!(status.observed_host_key_fingerprint, None);
    assert_eq!(status.observed_generation, Some(1));

    // No status rewrite loop.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let patches = || {
        env.server()
            .request_count("patch", "libvirthosts.infrastructure.cluster.x-k8s.io", "status")
    };
    let before = patches();
    assert!(before >= 1, "the status was written through this path");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(patches(), before, "status is not rewritten while nothing changes");
    // One connection, kept and reused by every check.
    let metrics = &env.shared.metrics;
    let connects = |r: &str| metrics.host_connects.with_label_values(&[r]).get();
    let calls = |r: &str| metrics.host_calls.with_label_values(&[r]).get();
    assert_eq!((connects("opened"), connects("failed")), (1, 0));
    assert!(calls("ok") >= 1 && calls("unreachable") == 0, "{}", metrics.render());
    env.stop().await;
}

#[tokio::test]
async fn libvirt_host_with_a_missing_test_node_is_not_reachable() {
    let env = Env::start().await;
    apply_yaml(
        &env.client,
        &host_yaml("gone", "test:///nonexistent/caplv/node.xml", ""),
    )
    .await;
    let api: Api<LibvirtHost> = Api::namespaced(env.client.clone(), "default");
    wait_for(&api, "gone", "Reachable", "False", "ConnectionFailed").await;
    wait_for(&api, "gone", condition::READY, "False", "ConnectionFailed").await;
    assert!(!api.get("gone").await.unwrap().status.unwrap().ready);
    let metrics = &env.shared.metrics;
    assert_eq!(metrics.host_connects.with_label_values(&["opened"]).get(), 0);
    assert!(metrics.host_connects.with_label_values(&["failed"]).get() >= 1);
    assert!(metrics.host_calls.with_label_values(&["unreachable"]).get() >= 1);
    env.stop().await;
}

#[tokio::test]
async fn libvirt_host_over_ssh_reports_a_missing_secret_then_the_closed_port() {
    let env = Env::start().await;
    let port = closed_port().await;
    apply_yaml(&env.client, &ssh_host_yaml("remote", port, "remote-key")).await;
    let api: Api<LibvirtHost> = Api::namespaced(env.client.clone(), "default");
    let c = wait_for(&api, "remote", "Reachable", "False", "SecretNotFound").await;
    assert!(c.message.contains("default/remote-key"), "{}", c.message);

    // The Secret appears: its watch event triggers a reconnect without waiting for a requeue.
    apply_yaml(&env.client, &secret_yaml("remote-key", TEST_KEY)).await;
    let c = wait_for(&api, "remote", "Reachable", "False", "ConnectionFailed").await;
    assert!(c.message.contains(&format!("127.0.0.1:{port}")), "{}", c.message);
    assert!(!c.message.contains("PRIVATE KEY"), "{}", c.message);
    wait_for(&api, "remote", condition::READY, "False", "ConnectionFailed").await;
    env.stop().await;
}

#[tokio::test]
async fn libvirt_host_with_an_unusable_key_says_so() {
    let env = Env::start().await;
    let port = closed_port().await;
    apply_yaml(&env.client, &secret_yaml("bad-key", "not a key")).await;
    apply_yaml(&env.client, &ssh_host_yaml("badkey", port, "bad-key")).await;
    let api: Api<LibvirtHost> = Api::namespaced(env.client.clone(), "default");
    let c = wait_for(&api, "badkey", "Reachable", "False", "InvalidPrivateKey").await;
    assert!(!c.message.contains("not a key"), "{}", c.message);
    env.stop().await;
}

/// Write faked node statistics for a test-driver host (its own are constant, without memory).
pub(crate) fn fake_stats(uri: &str, available_mib: u64, busy_s: u64, total_s: u64, guests_s: u64) {
    let ns = 1_000_000_000u64;
    let json = serde_json::json!({
        "availableMemoryMib": available_mib,
        "cpuBusyNs": busy_s * ns,
        "cpuTotalNs": total_s * ns,
        "guestCpuNs": guests_s * ns,
    });
    let path = caplv::libvirt::virt_backend::faked_stats_path(uri).unwrap();
    std::fs::write(path, json.to_string()).unwrap();
}

#[tokio::test]
async fn libvirt_host_reports_its_owners_load_from_node_statistics() {
    let env = Env::start().await;
    let (_dir, uri) = test_node();
    fake_stats(&uri, 812, 100, 1000, 40);
    apply_yaml(&env.client, &host_yaml("loaded", &uri, "")).await;
    let api: Api<LibvirtHost> = Api::namespaced(env.client.clone(), "default");
    wait_for(&api, "loaded", condition::READY, "True", "Connected").await;
    let load = api.get("loaded").await.unwrap().status.unwrap().load.unwrap();
    assert_eq!(load.available_memory_mb, Some(812));
    assert_eq!(load.host_cpu_percent, None, "a rate needs two samples");

    // A later check, past the rate's five-second window: 16 CPUs for 10 s is 160 s of CPU
    // time, 80 s busy, 48 s of it the guests', so the owner's load is 20%.
    tokio::time::sleep(Duration::from_secs(5)).await;
    fake_stats(&uri, 700, 180, 1160, 88);
    let nudge = serde_json::json!({"metadata": {"annotations": {"test/nudge": "1"}}});
    api.patch(
        "loaded",
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(nudge),
    )
    .await
    .unwrap();
    wait_until("the owner's CPU load reported", || async {
        api.get("loaded")
            .await
            .unwrap()
            .status
            .and_then(|s| s.load)
            .is_some_and(|l| l.host_cpu_percent == Some(20) && l.available_memory_mb == Some(700))
    })
    .await;
    env.stop().await;
}

/// A host whose SSH port accepts connections and never says a word: the connection attempt ends
/// at its timeout with a condition naming the host, the key never shows, and another host's
/// reconciles do not wait for it.
#[tokio::test]
async fn a_host_whose_port_accepts_and_never_answers_times_out_without_holding_others_up() {
    let env = Env::start().await;
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let accepted = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let silent = tokio::spawn({
        let accepted = accepted.clone();
        async move {
            let mut held = Vec::new();
            while let Ok((conn, _)) = listener.accept().await {
                accepted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                held.push(conn);
            }
        }
    });
    apply_yaml(&env.client, &secret_yaml("silent-key", TEST_KEY)).await;
    apply_yaml(&env.client, &ssh_host_yaml("silent", port, "silent-key")).await;
    let api: Api<LibvirtHost> = Api::namespaced(env.client.clone(), "default");
    wait_until("the silent port reached", || async {
        accepted.load(std::sync::atomic::Ordering::SeqCst) > 0
    })
    .await;
    let (_dir, uri) = test_node();
    apply_yaml(&env.client, &host_yaml("node", &uri, "")).await;
    wait_for(&api, "node", condition::READY, "True", "Connected").await;
    assert!(
        condition_of(&api, "silent", "Reachable").await.is_none(),
        "the other host was ready while the silent one still waited for its answer"
    );
    let c = wait_for(&api, "silent", "Reachable", "False", "ConnectionFailed").await;
    assert!(c.message.contains(&format!("127.0.0.1:{port}")), "{}", c.message);
    assert!(c.message.contains("timed out"), "{}", c.message);
    assert!(!c.message.contains("PRIVATE KEY"), "{}", c.message);
    silent.abort();
    env.stop().await;
}

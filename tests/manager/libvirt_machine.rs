//! LibvirtMachine against memkube + capi-sim + private libvirt test-driver hosts: the full
//! lifecycle, capacity admission by priority, failure conditions, recovery from partial state
//! left by a crash, the domain watch, and the deletion paths.
//!
//! The test inspects each host through the manager's own connection cache (`Shared::hosts`):
//! a private `test:///<file>` driver keeps its state in that one connection. Graceful power-off
//! and the watch's view of guest shutdowns are in [`shutdown`].

mod shutdown;

use std::sync::Arc;

use caplv::{
    api::{
        LibvirtHost, LibvirtMachine,
        condition::{self, Condition},
    },
    libvirt::{
        hypervisor::{DomainState, Hypervisor},
        simulated,
        volume_xml::{VolumeXml, ignition_volume, overlay_volume},
    },
};
use kube::{
    Api, Client, ResourceExt,
    api::{DeleteParams, DynamicObject, Patch, PatchParams},
    core::{ApiResource, GroupVersionKind},
};
use serde_json::json;

use crate::support::{Env, apply_yaml, wait_until};

pub(crate) const IGNITION: &str = r#"{"ignition":{"version":"3.4.0"}}"#;

pub(crate) struct Fixture {
    pub(crate) env: Env,
    _dir: tempfile::TempDir,
}

fn machines_ar() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("cluster.x-k8s.io", "v1beta1", "Machine"),
        "machines",
    )
}

pub(crate) fn capi_machines(client: &Client) -> Api<DynamicObject> {
    Api::namespaced_with(client.clone(), "default", &machines_ar())
}

pub(crate) fn lvms(client: &Client) -> Api<LibvirtMachine> {
    Api::namespaced(client.clone(), "default")
}

pub(crate) fn hosts(client: &Client) -> Api<LibvirtHost> {
    Api::namespaced(client.clone(), "default")
}

/// A manager, a Cluster, the bootstrap Secret `boot`, and LibvirtHost `name`s served by private
/// test drivers shaped like the seed's laptop (16 vCPUs, 31560 MiB, pool `default` with the
/// base image, network `default`), each reserving `reserved_vcpus`.
pub(crate) async fn fixture(host_names: &[&str], reserved_vcpus: i32) -> Fixture {
    let env = Env::start().await;
    let dir = tempfile::tempdir().unwrap();
    apply_yaml(
        &env.client,
        "apiVersion: cluster.x-k8s.io/v1beta1\nkind: Cluster\nmetadata: {name: spot, namespace: default}\nspec: {}\n",
    )
    .await;
    let secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "boot", "namespace": "default"},
        "type": "cluster.x-k8s.io/secret", "stringData": {"value": IGNITION, "format": "ignition"}});
    apply_yaml(&env.client, &secret.to_string()).await;
    for name in host_names {
        let uri = simulated::host_uri(dir.path(), "default", name).unwrap();
        let host = json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1", "kind": "LibvirtHost",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"uri": uri, "reservedResources": {"vcpus": reserved_vcpus, "memoryMB": 4096},
                     "healthCheckIntervalSeconds": 30}});
        apply_yaml(&env.client, &host.to_string()).await;
    }
    for name in host_names {
        wait_until(&format!("host {name} ready"), || async {
            hosts(&env.client)
                .get(name)
                .await
                .ok()
                .and_then(|h| h.status)
                .is_some_and(|s| s.ready)
        })
        .await;
    }
    Fixture { env, _dir: dir }
}

/// Create LibvirtMachine `name` on `host` (spec edits merged in) and its Machine (bootstrap data
/// Secret `data_secret`, if any).
pub(crate) async fn machine(env: &Env, name: &str, host: &str, edits: serde_json::Value, data_secret: Option<&str>) {
    let mut lvm = json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1", "kind": "LibvirtMachine",
    "metadata": {"name": name, "namespace": "default", "labels": {"cluster.x-k8s.io/cluster-name": "spot"}},
    "spec": {
        "hostRef": {"name": host},
        "domain": {"vcpus": 4, "memoryMB": 4096, "type": "qemu"},
        "rootDisk": {"baseImage": simulated::BASE_IMAGE, "storagePool": "default", "size": "20Gi"},
        "network": {"type": "network", "name": "default", "addresses": ["192.168.122.100/24"],
                    "gateway": "192.168.122.1"}
    }});
    json_patch::merge(&mut lvm, &edits);
    apply_yaml(&env.client, &lvm.to_string()).await;
    let mut bootstrap = json!({});
    if let Some(s) = data_secret {
        bootstrap = json!({"dataSecretName": s});
    }
    let m = json!({"apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Machine",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"clusterName": "spot", "bootstrap": bootstrap,
                 "infrastructureRef": {"apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1",
                                       "kind": "LibvirtMachine", "name": name}}});
    apply_yaml(&env.client, &m.to_string()).await;
}

async fn ready_condition(env: &Env, name: &str) -> Option<Condition> {
    let m = lvms(&env.client).get(name).await.ok()?;
    condition::find(&m.status?.conditions, condition::READY).cloned()
}

/// Wait until `name`'s Ready condition has `reason`; returns it.
pub(crate) async fn wait_reason(env: &Env, name: &str, reason: &str) -> Condition {
    let deadline = tokio::time::Instant::now() + crate::support::deadline();
    loop {
        let last = ready_condition(env, name).await;
        if let Some(c) = last.as_ref().filter(|c| c.reason == reason) {
            return c.clone();
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {name} Ready reason {reason}; last: {last:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
}

pub(crate) async fn wait_gone(env: &Env, name: &str) {
    wait_until(&format!("LibvirtMachine {name} gone"), || async {
        lvms(&env.client).get_opt(name).await.unwrap().is_none()
    })
    .await;
}

/// The manager's own connection to host `name`.
pub(crate) async fn hv(env: &Env, name: &str) -> Arc<dyn Hypervisor> {
    let host = hosts(&env.client).get(name).await.unwrap();
    let conn = env
        .shared
        .hosts
        .get(&env.client, &host)
        .await
        .unwrap()
        .into_open()
        .unwrap();
    conn.hypervisor()
}

async fn available(env: &Env, host: &str) -> (i32, i64) {
    let c = hosts(&env.client)
        .get(host)
        .await
        .unwrap()
        .status
        .unwrap()
        .capacity
        .unwrap();
    (c.available_vcpus, c.available_memory_mb)
}

async fn wait_available(env: &Env, host: &str, want: (i32, i64)) {
    wait_until(&format!("{host} available {want:?}"), || async {
        available(env, host).await == want
    })
    .await;
}

fn volumes(hv: &dyn Hypervisor) -> Vec<String> {
    let mut v = hv.list_volumes("default").unwrap();
    v.retain(|n| n != simulated::BASE_IMAGE);
    v.sort();
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_machine_is_provisioned_joined_and_removed_without_a_trace() {
    let f = fixture(&["laptop"], 2).await;
    let env = &f.env;
    wait_available(env, "laptop", (14, 27_464)).await;
    machine(env, "spot-worker-01", "laptop", json!({}), Some("boot")).await;
    let ready = wait_reason(env, "spot-worker-01", "DomainRunning").await;
    assert_eq!(ready.status, "True");

    let lm = lvms(&env.client).get("spot-worker-01").await.unwrap();
    let uid = lm.uid().unwrap();
    assert_eq!(
        lm.spec.provider_id.as_deref(),
        Some(format!("libvirt:///{uid}").as_str())
    );
    assert!(
        lm.finalizers()
            .iter()
            .any(|f| f == "libvirtmachine.infrastructure.cluster.x-k8s.io")
    );
    let status = lm.status.unwrap();
    assert!(status.ready);
    assert_eq!(status.initialization.unwrap().provisioned, Some(true));
    assert_eq!(status.domain_uuid.as_deref(), Some(uid.as_str()));
    assert_eq!(status.domain_state.as_deref(), Some("running"));
    let addresses: Vec<String> = status.addresses.iter().map(|a| a.address.clone()).collect();
    assert_eq!(addresses, ["192.168.122.100", "spot-worker-01", "spot-worker-01"]);
    let allocated = status.allocated.unwrap();
    assert_eq!((allocated.vcpus, allocated.memory_mb), (4, 4096));
    wait_available(env, "laptop", (10, 23_368)).await;

    // On the host: one domain with our UUID, the overlay root disk and this VM's Ignition.
    let hv = hv(env, "laptop").await;
    let domain = hv.domain("spot-worker-01").unwrap().unwrap();
    assert_eq!(domain.uuid.to_string(), uid);
    assert_eq!(domain.state, DomainState::Running);
    assert_eq!(
        volumes(hv.as_ref()),
        ["spot-worker-01-ignition.ign", "spot-worker-01-root.qcow2"]
    );
    let root = hv.volume("default", "spot-worker-01-root.qcow2").unwrap().unwrap();
    assert_eq!(root.capacity, 20 << 30);
    let ignition = hv
        .download_volume("default", "spot-worker-01-ignition.ign", 1 << 20)
        .unwrap();
    let text = String::from_utf8(ignition).unwrap();
    assert!(text.contains("/etc/hostname") && text.contains(&uid), "{text}");

    // CAPI core copies the provider ID and the Node (emulated kubelet) is linked.
    wait_until("Machine Running with nodeRef", || async {
        let m = capi_machines(&env.client).get("spot-worker-01").await.unwrap();
        m.data["status"]["phase"] == "Running" && m.data["status"]["nodeRef"]["name"] == "spot-worker-01"
    })
    .await;

    capi_machines(&env.client)
        .delete("spot-worker-01", &DeleteParams::default())
        .await
        .unwrap();
    wait_gone(env, "spot-worker-01").await;
    assert!(hv.domain("spot-worker-01").unwrap().is_none(), "domain removed");
    assert!(
        volumes(hv.as_ref()).is_empty(),
        "volumes removed: {:?}",
        volumes(hv.as_ref())
    );
    wait_available(env, "laptop", (14, 27_464)).await;
    f.env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn capacity_is_admitted_by_priority_then_age() {
    // 16 vCPUs, 2 reserved: 14 offered; machines of 8 vCPUs fit one at a time.
    let f = fixture(&["laptop"], 2).await;
    let env = &f.env;
    let size = json!({"spec": {"domain": {"vcpus": 8, "memoryMB": 2048}}});
    machine(env, "first", "laptop", size.clone(), Some("boot")).await;
    wait_reason(env, "first", "DomainRunning").await;
    let prio = |p: &str| {
        let mut e = size.clone();
        json_patch::merge(
            &mut e,
            &json!({"metadata": {"labels": {"5spot.finos.org/priority": p}}}),
        );
        e
    };
    machine(env, "low", "laptop", prio("10"), Some("boot")).await;
    wait_reason(env, "low", "WaitingForCapacity").await;
    machine(env, "high", "laptop", prio("90"), Some("boot")).await;
    let waiting = wait_reason(env, "high", "WaitingForCapacity").await;
    assert!(waiting.message.contains("needs 8 vCPUs"), "{}", waiting.message);
    wait_available(env, "laptop", (6, 25_416)).await;

    // Freeing the host admits the higher priority first, although it is younger.
    capi_machines(&env.client)
        .delete("first", &DeleteParams::default())
        .await
        .unwrap();
    wait_reason(env, "high", "DomainRunning").await;
    let low = wait_reason(env, "low", "WaitingForCapacity").await;
    assert!(
        low.message.contains("\"high\"") || low.message.contains("needs 8"),
        "{}",
        low.message
    );
    assert!(
        lvms(&env.client)
            .get("low")
            .await
            .unwrap()
            .status
            .unwrap()
            .allocated
            .is_none()
    );
    f.env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_sized_machines_take_what_is_free() {
    let f = fixture(&["laptop"], 2).await;
    let env = &f.env;
    machine(
        env,
        "auto",
        "laptop",
        json!({"spec": {"domain": {"vcpus": 0, "memoryMB": 0}}}),
        Some("boot"),
    )
    .await;
    wait_reason(env, "auto", "DomainRunning").await;
    let allocated = lvms(&env.client)
        .get("auto")
        .await
        .unwrap()
        .status
        .unwrap()
        .allocated
        .unwrap();
    assert_eq!((allocated.vcpus, allocated.memory_mb), (14, 27_464));
    wait_available(env, "laptop", (0, 0)).await;
    machine(env, "late", "laptop", json!({}), Some("boot")).await;
    wait_reason(env, "late", "WaitingForCapacity").await;
    f.env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_blocking_problem_is_a_specific_condition() {
    let f = fixture(&["laptop"], 2).await;
    let env = &f.env;
    machine(env, "no-data", "laptop", json!({}), None).await;
    machine(env, "no-secret", "laptop", json!({}), Some("missing")).await;
    machine(env, "no-host", "nowhere", json!({}), Some("boot")).await;
    machine(
        env,
        "no-pool",
        "laptop",
        json!({"spec": {"rootDisk": {"storagePool": "nope"}}}),
        Some("boot"),
    )
    .await;
    machine(
        env,
        "no-image",
        "laptop",
        json!({"spec": {"rootDisk": {"baseImage": "missing.qcow2"}}}),
        Some("boot"),
    )
    .await;
    machine(
        env,
        "too-small",
        "laptop",
        json!({"spec": {"rootDisk": {"size": "1Gi"}}}),
        Some("boot"),
    )
    .await;
    let bad = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "bad", "namespace": "default"},
        "stringData": {"value": "{not json"}});
    apply_yaml(&env.client, &bad.to_string()).await;
    machine(env, "bad-data", "laptop", json!({}), Some("bad")).await;

    let lone = json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1", "kind": "LibvirtMachine",
        "metadata": {"name": "lone", "namespace": "default"},
        "spec": {"hostRef": {"name": "laptop"},
                 "rootDisk": {"baseImage": simulated::BASE_IMAGE, "storagePool": "default", "size": "20Gi"},
                 "network": {"type": "network", "name": "default", "addresses": ["192.168.122.9/24"]}}});
    apply_yaml(&env.client, &lone.to_string()).await;
    let broken = json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1", "kind": "LibvirtHost",
        "metadata": {"name": "broken", "namespace": "default"},
        "spec": {"uri": "test:///nonexistent/node.xml"}});
    apply_yaml(&env.client, &broken.to_string()).await;
    machine(env, "host-down", "broken", json!({}), Some("boot")).await;
    machine(
        env,
        "odd-size",
        "laptop",
        json!({"spec": {"rootDisk": {"size": "1.5Gi"}}}),
        Some("boot"),
    )
    .await;

    wait_reason(env, "lone", "WaitingForMachineOwner").await;
    wait_reason(env, "host-down", "WaitingForHost").await;
    let c = wait_reason(env, "odd-size", "InvalidSpec").await;
    assert!(
        c.message.contains("1.5Gi") || c.message.contains("fraction"),
        "{}",
        c.message
    );
    wait_reason(env, "no-data", "WaitingForBootstrapData").await;
    wait_reason(env, "no-secret", "BootstrapDataNotFound").await;
    let c = wait_reason(env, "no-host", "HostNotFound").await;
    assert!(c.message.contains("nowhere"), "{}", c.message);
    let c = wait_reason(env, "no-pool", "StoragePoolNotFound").await;
    assert!(c.message.contains("nope"), "{}", c.message);
    wait_reason(env, "no-image", "BaseImageNotFound").await;
    wait_reason(env, "too-small", "RootDiskTooSmall").await;
    let c = wait_reason(env, "bad-data", "InvalidJSON").await;
    assert!(!c.message.contains("{not json"), "never echoes the data: {}", c.message);

    // Deleting every machine leaves nothing on the host and frees every allocation.
    let all = [
        "no-data",
        "no-secret",
        "no-host",
        "no-pool",
        "no-image",
        "too-small",
        "bad-data",
        "host-down",
        "odd-size",
    ];
    for name in all {
        capi_machines(&env.client)
            .delete(name, &DeleteParams::default())
            .await
            .unwrap();
    }
    lvms(&env.client)
        .delete("lone", &DeleteParams::default())
        .await
        .unwrap();
    for name in all.iter().chain(&["lone"]) {
        wait_gone(env, name).await;
    }
    let hv = hv(env, "laptop").await;
    assert!(volumes(hv.as_ref()).is_empty(), "{:?}", volumes(hv.as_ref()));
    assert!(hv.list_domains().unwrap().is_empty());
    wait_available(env, "laptop", (14, 27_464)).await;
    f.env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partial_state_from_a_crash_is_finished_not_duplicated() {
    let f = fixture(&["laptop"], 2).await;
    let env = &f.env;
    let hv = hv(env, "laptop").await;
    let base = hv.volume("default", simulated::BASE_IMAGE).unwrap().unwrap();

    // Crash after the root disk and half an Ignition upload: the payload is replaced.
    machine(env, "half", "laptop", json!({}), None).await;
    wait_reason(env, "half", "WaitingForBootstrapData").await;
    let root: VolumeXml = overlay_volume("half-root.qcow2", 20 << 30, &base.path, Default::default()).unwrap();
    hv.create_volume("default", &root).unwrap();
    hv.create_volume("default", &ignition_volume("half", 7).unwrap())
        .unwrap();
    hv.upload_volume("default", "half-ignition.ign", b"garbage").unwrap();
    set_data_secret(env, "half", "boot").await;
    wait_reason(env, "half", "DomainRunning").await;
    let payload = hv.download_volume("default", "half-ignition.ign", 1 << 20).unwrap();
    assert!(payload.starts_with(b"{") && payload.len() > 7, "payload rewritten");

    // Crash after define, before start: the defined domain is started, not defined again.
    machine(env, "defined", "laptop", json!({}), None).await;
    wait_reason(env, "defined", "WaitingForBootstrapData").await;
    let uid = lvms(&env.client).get("defined").await.unwrap().uid().unwrap();
    let first = define_stopped(hv.as_ref(), "defined", &uid);
    set_data_secret(env, "defined", "boot").await;
    wait_reason(env, "defined", "DomainRunning").await;
    let d = hv.domain("defined").unwrap().unwrap();
    assert_eq!((d.uuid, d.state), (first, DomainState::Running));
    assert_eq!(hv.list_domains().unwrap().iter().filter(|n| *n == "defined").count(), 1);

    // A domain of that name that is not ours is never touched, not even on deletion.
    machine(env, "foreign", "laptop", json!({}), None).await;
    wait_reason(env, "foreign", "WaitingForBootstrapData").await;
    let other = define_stopped(hv.as_ref(), "foreign", "0b0e7d7c-3a4f-4e0e-9d5a-7f6d3b2a1c00");
    set_data_secret(env, "foreign", "boot").await;
    let c = wait_reason(env, "foreign", "DomainNameConflict").await;
    assert!(c.message.contains(&other.to_string()), "{}", c.message);
    capi_machines(&env.client)
        .delete("foreign", &DeleteParams::default())
        .await
        .unwrap();
    wait_gone(env, "foreign").await;
    assert_eq!(
        hv.domain("foreign").unwrap().unwrap().uuid,
        other,
        "foreign domain kept"
    );
    f.env.stop().await;
}

/// Define (and stop) a domain named `name` with UUID `uuid` directly on the host.
fn define_stopped(hv: &dyn Hypervisor, name: &str, uuid: &str) -> uuid::Uuid {
    let xml = format!(
        "<domain type='test'><name>{name}</name><uuid>{uuid}</uuid><memory unit='MiB'>512</memory>\
         <vcpu>1</vcpu><os><type arch='x86_64'>hvm</type></os></domain>"
    );
    let def = caplv::libvirt::domain_xml::DomainXml {
        name: name.to_owned(),
        uuid: uuid.parse().unwrap(),
        xml,
    };
    let info = hv.define_and_start(&def).unwrap();
    hv.destroy(name).unwrap();
    info.uuid
}

async fn set_data_secret(env: &Env, machine: &str, secret: &str) {
    capi_machines(&env.client)
        .patch(
            machine,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"bootstrap": {"dataSecretName": secret}}})),
        )
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_domain_is_restarted_and_a_vanished_one_reported() {
    let f = fixture(&["laptop"], 2).await;
    let env = &f.env;
    machine(env, "watched", "laptop", json!({}), Some("boot")).await;
    wait_reason(env, "watched", "DomainRunning").await;
    let hv = hv(env, "laptop").await;
    hv.destroy("watched").unwrap();
    wait_until("domain restarted", || async {
        hv.domain("watched")
            .unwrap()
            .is_some_and(|d| d.state == DomainState::Running)
    })
    .await;
    wait_until("DomainRestarted event", || async {
        let events: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(env.client.clone(), "default");
        events
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .iter()
            .any(|e| e.reason.as_deref() == Some("DomainRestarted"))
    })
    .await;

    hv.destroy("watched").unwrap();
    hv.undefine_with_nvram("watched").unwrap();
    let c = wait_reason(env, "watched", "DomainMissing").await;
    assert_eq!(c.status, "False");
    let status = lvms(&env.client).get("watched").await.unwrap().status.unwrap();
    assert!(status.ready, "ready stays latched, as the contract requires");
    assert_eq!(status.domain_state.as_deref(), Some("missing"));
    f.env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deletion_with_the_host_gone_stalls_until_the_user_abandons_the_artifacts() {
    let f = fixture(&["laptop"], 2).await;
    let env = &f.env;
    machine(env, "orphan", "laptop", json!({}), Some("boot")).await;
    wait_reason(env, "orphan", "DomainRunning").await;
    hosts(&env.client)
        .delete("laptop", &DeleteParams::default())
        .await
        .unwrap();
    capi_machines(&env.client)
        .delete("orphan", &DeleteParams::default())
        .await
        .unwrap();
    wait_until("CleanupStalled HostNotFound", || async {
        lvms(&env.client)
            .get("orphan")
            .await
            .ok()
            .and_then(|m| m.status)
            .and_then(|s| condition::find(&s.conditions, "CleanupStalled").cloned())
            .is_some_and(|c| {
                c.status == "True" && c.reason == "HostNotFound" && c.message.contains("abandon-host-artifacts")
            })
    })
    .await;
    lvms(&env.client)
        .patch(
            "orphan",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {
                "libvirtmachine.infrastructure.cluster.x-k8s.io/abandon-host-artifacts": "true"}}})),
        )
        .await
        .unwrap();
    wait_gone(env, "orphan").await;
    f.env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_cluster_stops_provisioning_until_resumed() {
    let f = fixture(&["laptop"], 2).await;
    let env = &f.env;
    let clusters: Api<DynamicObject> = Api::namespaced_with(
        env.client.clone(),
        "default",
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("cluster.x-k8s.io", "v1beta1", "Cluster"),
            "clusters",
        ),
    );
    let pause = |p: bool| Patch::Merge(json!({"spec": {"paused": p}}));
    // CAPI core adopts the machine first (it too stops for a paused Cluster).
    machine(env, "held", "laptop", json!({}), None).await;
    wait_reason(env, "held", "WaitingForBootstrapData").await;
    clusters
        .patch("spot", &PatchParams::default(), &pause(true))
        .await
        .unwrap();
    set_data_secret(env, "held", "boot").await;
    wait_until("Paused condition", || async {
        lvms(&env.client)
            .get("held")
            .await
            .ok()
            .and_then(|m| m.status)
            .is_some_and(|s| condition::is_true(&s.conditions, condition::PAUSED))
    })
    .await;
    assert!(hv(env, "laptop").await.domain("held").unwrap().is_none());
    clusters
        .patch("spot", &PatchParams::default(), &pause(false))
        .await
        .unwrap();
    wait_reason(env, "held", "DomainRunning").await;
    f.env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_clone_is_an_independent_copy_removed_with_the_machine() {
    let f = fixture(&["laptop"], 2).await;
    let env = &f.env;
    machine(
        env,
        "cloned",
        "laptop",
        json!({"spec": {"rootDisk": {"cloneStrategy": "full-clone"}}}),
        Some("boot"),
    )
    .await;
    wait_reason(env, "cloned", "DomainRunning").await;
    let hv = hv(env, "laptop").await;
    assert!(hv.volume("default", "cloned-root.qcow2").unwrap().is_some());
    capi_machines(&env.client)
        .delete("cloned", &DeleteParams::default())
        .await
        .unwrap();
    wait_gone(env, "cloned").await;
    assert!(volumes(hv.as_ref()).is_empty(), "{:?}", volumes(hv.as_ref()));
    assert!(
        hv.volume("default", simulated::BASE_IMAGE).unwrap().is_some(),
        "base image kept"
    );
    f.env.stop().await;
}

//! `clusterctl move` between two genuine control planes, both set up by `clusterctl init` with
//! caplv's generated provider files (`scripts/clusterctl-test.sh init`). Runs with
//! `CAPLV_TEST_CONTROL_PLANE=real` and `CAPLV_CLUSTERCTL` (the binary), as
//! `scripts/clusterctl-test.sh` does; the second control plane's ports start at
//! `CAPLV_CP_TARGET_PORT_BASE` (default 28000).
//!
//! A provisioned Cluster (its LibvirtCluster, a control-plane Machine with its LibvirtMachine and
//! Node, the LibvirtHost and its Secret, those two labelled for move) goes to the target; the
//! manager then pointed at the target finds the running domain and adopts it: same UUID and
//! provider ID, no second domain. Both managers reach the host as `test:///default`: the libvirt
//! test driver shares that one instance among all connections of this process while one stays
//! open (the test's own), so what the first manager created is what the second one sees.

use std::{path::Path, process::Command, sync::Arc, time::Duration};

use capi_sim::{CapiVersions, KubeletMode};
use caplv::{
    api::{LibvirtHost, LibvirtMachine},
    app::{self, ManagerConfig, Shared},
    clock::OffsetClock,
    controllers::Family,
    endpoint::TcpProbe,
    libvirt::{
        hypervisor::{DomainState, Hypervisor},
        simulated,
        virt_backend::VirtHypervisor,
        volume_xml::VolumeXml,
    },
};
use k8s_openapi::api::core::v1::Secret;
use kube::{
    Api, Client,
    api::DynamicObject,
    core::{ApiResource, GroupVersionKind},
};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::support::{apply_yaml, fast_settings, genuine, wait_until};

const HOST_URI: &str = "test:///default";
const POOL: &str = "move-pool";
const MACHINE: &str = "spot-cp-0";

/// A manager (the caplv family: what the infrastructure components' RBAC grants) on `cp`.
struct Manager {
    shutdown: CancellationToken,
    task: tokio::task::JoinHandle<anyhow::Result<()>>,
}

impl Manager {
    async fn start(cp: &genuine::ControlPlane, workload_api: &str) -> Self {
        let mut settings = fast_settings();
        settings.api_server_ca = cp.manager_ca.clone();
        settings.workload_api_server = Some(workload_api.to_owned());
        let config = ManagerConfig {
            families: vec![Family::Caplv],
            metrics_addr: "127.0.0.1:0".parse().unwrap(),
            settings,
            leader: None,
            probe: Arc::new(TcpProbe {
                timeout: Duration::from_secs(2),
            }),
            clock: Arc::new(OffsetClock::default()),
        };
        let shared = Shared::new().unwrap();
        let shutdown = CancellationToken::new();
        let task = tokio::spawn(app::run(cp.manager.clone(), config, shared.clone(), shutdown.clone()));
        wait_until("manager ready", || {
            let ready = shared.readiness.clone();
            async move { ready.is_ready() }
        })
        .await;
        Self { shutdown, task }
    }

    async fn stop(self) {
        self.shutdown.cancel();
        self.task.await.unwrap().unwrap();
    }
}

fn capi(client: &Client, kind: &str) -> Api<DynamicObject> {
    let ar = ApiResource::from_gvk(&GroupVersionKind::gvk("cluster.x-k8s.io", "v1beta1", kind));
    Api::namespaced_with(client.clone(), "default", &ar)
}

fn lvms(client: &Client) -> Api<LibvirtMachine> {
    Api::namespaced(client.clone(), "default")
}

/// `scripts/clusterctl-test.sh init`: cert-manager and `clusterctl init` on control plane `dir`.
fn clusterctl_init(dir: &Path) {
    genuine::script("clusterctl-test.sh", &[Path::new("init"), dir], &[]);
}

/// The Cluster has what `clusterctl move` demands of it, and its Machine a Node.
async fn wait_provisioned(client: &Client, what: &str) {
    let deadline = tokio::time::Instant::now() + genuine::DEADLINE;
    loop {
        let cluster = capi(client, "Cluster").get("spot").await.unwrap();
        let machine = capi(client, "Machine").get(MACHINE).await.unwrap();
        let initialized = cluster.data["status"]["conditions"].as_array().is_some_and(|c| {
            c.iter()
                .any(|c| c["type"] == "ControlPlaneInitialized" && c["status"] == "True")
        });
        if cluster.data["status"]["infrastructureReady"] == true
            && initialized
            && machine.data["status"]["nodeRef"]["name"].is_string()
        {
            return;
        }
        if tokio::time::Instant::now() > deadline {
            let lvm = lvms(client).get(MACHINE).await.unwrap();
            panic!(
                "{what}: Cluster not provisioned or Machine without nodeRef; Cluster status {}; Machine status {}; \
                 LibvirtMachine status {:?}",
                cluster.data["status"], machine.data["status"], lvm.status
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The domains on the host other than the test driver's own `test`.
fn our_domains(hv: &dyn Hypervisor) -> Vec<String> {
    let mut d = hv.list_domains().unwrap();
    d.retain(|n| n != "test");
    d
}

async fn create_cluster(client: &Client, source_dir: &Path, api_port: &str) {
    let kubeconfig = std::fs::read_to_string(source_dir.join("admin.kubeconfig")).unwrap();
    let objects = [
        // The workload cluster's kubeconfig: its Nodes live on the source API server.
        json!({"apiVersion": "v1", "kind": "Secret", "type": "cluster.x-k8s.io/secret",
               "metadata": {"name": "spot-kubeconfig", "labels": {"cluster.x-k8s.io/cluster-name": "spot"}},
               "stringData": {"value": kubeconfig}}),
        // Bootstrap data the user provides: clusterctl links only Secrets with an owner or a
        // name it knows (<cluster>-kubeconfig, -ca, ...) to a Cluster; this one needs the label.
        json!({"apiVersion": "v1", "kind": "Secret", "type": "cluster.x-k8s.io/secret",
               "metadata": {"name": "spot-boot", "labels": {"cluster.x-k8s.io/cluster-name": "spot",
                                                            "clusterctl.cluster.x-k8s.io/move": ""}},
               "stringData": {"value": crate::libvirt_machine::IGNITION, "format": "ignition"}}),
        // A host is shared by clusters, so only the user can tell clusterctl to move it.
        json!({"apiVersion": "v1", "kind": "Secret",
               "metadata": {"name": "laptop-ssh", "labels": {"clusterctl.cluster.x-k8s.io/move": ""}},
               "stringData": {"ssh-privatekey": "unused: test:/// hosts take no SSH"}}),
        json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1", "kind": "LibvirtHost",
               "metadata": {"name": "laptop", "labels": {"clusterctl.cluster.x-k8s.io/move": ""}},
               "spec": {"uri": HOST_URI, "secretRef": {"name": "laptop-ssh"}, "healthCheckIntervalSeconds": 30,
                        // test:///default has 3 GiB.
                        "reservedResources": {"vcpus": 2, "memoryMB": 512}}}),
        json!({"apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Cluster", "metadata": {"name": "spot"},
               "spec": {"infrastructureRef": {"apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1",
                                              "kind": "LibvirtCluster", "name": "spot"}}}),
        json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1", "kind": "LibvirtCluster",
               "metadata": {"name": "spot"},
               "spec": {"controlPlaneEndpoint": {"host": "127.0.0.1", "port": api_port.parse::<u16>().unwrap()}}}),
        json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1", "kind": "LibvirtMachine",
               "metadata": {"name": MACHINE, "labels": {"cluster.x-k8s.io/cluster-name": "spot"}},
               "spec": {"hostRef": {"name": "laptop"},
                        "domain": {"vcpus": 2, "memoryMB": 1024, "type": "qemu"},
                        "rootDisk": {"baseImage": simulated::BASE_IMAGE, "storagePool": POOL, "size": "20Gi"},
                        "network": {"type": "network", "name": "default", "addresses": ["192.168.122.100/24"],
                                    "gateway": "192.168.122.1"}}}),
        json!({"apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Machine",
               "metadata": {"name": MACHINE, "labels": {"cluster.x-k8s.io/control-plane": ""}},
               "spec": {"clusterName": "spot", "bootstrap": {"dataSecretName": "spot-boot"},
                        "infrastructureRef": {"apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1",
                                              "kind": "LibvirtMachine", "name": MACHINE}}}),
    ];
    for o in objects {
        apply_yaml(client, &o.to_string()).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_moved_cluster_keeps_its_machine_and_domain() {
    let Some(clusterctl) = std::env::var_os("CAPLV_CLUSTERCTL") else {
        eprintln!("skipped: CAPLV_CLUSTERCTL names no clusterctl (scripts/clusterctl-test.sh sets it)");
        return;
    };
    if !genuine::selected() {
        eprintln!("skipped: needs CAPLV_TEST_CONTROL_PLANE=real");
        return;
    }
    // The test's own connections keep the shared test-driver host alive throughout. Its own
    // pool points at /default-pool; the manager writes a volume's bytes into the pool's
    // directory itself (the test driver has no streams), so the test gives it a real one.
    let pool_dir = tempfile::tempdir().unwrap();
    let conn = virt::connect::Connect::open(Some(HOST_URI)).unwrap();
    conn.create_storage_pool_xml(
        &format!(
            "<pool type='dir'><name>{POOL}</name><target><path>{}</path></target></pool>",
            pool_dir.path().display()
        ),
        0,
    )
    .unwrap();
    let hv = VirtHypervisor::connect(HOST_URI).unwrap();
    hv.create_volume(POOL, &VolumeXml {
        name: simulated::BASE_IMAGE.to_owned(),
        xml: format!(
            "<volume><name>{}</name><capacity unit='GiB'>16</capacity><target><format type='qcow2'/></target></volume>",
            simulated::BASE_IMAGE
        ),
    })
    .unwrap();

    let source = genuine::ControlPlane::start(CapiVersions::V1beta1, KubeletMode::WithProviderId).await;
    clusterctl_init(source.dir());
    let target_base = std::env::var("CAPLV_CP_TARGET_PORT_BASE").unwrap_or_else(|_| "28000".to_owned());
    let target = genuine::ControlPlane::start_at(CapiVersions::V1beta1, KubeletMode::Off, Some(&target_base)).await;
    clusterctl_init(target.dir());

    let api_port = source
        .api_url
        .rsplit(':')
        .next()
        .unwrap()
        .trim_end_matches('/')
        .to_owned();
    let manager = Manager::start(&source, &source.api_url).await;
    create_cluster(&source.admin, source.dir(), &api_port).await;
    wait_provisioned(&source.admin, "source").await;
    let before = lvms(&source.admin).get(MACHINE).await.unwrap();
    let uuid = before.status.as_ref().unwrap().domain_uuid.clone().unwrap();
    let provider_id = before.spec.provider_id.clone().unwrap();
    assert_eq!(our_domains(&hv).len(), 1, "one domain before the move");

    // The source manager runs through the move, as an operator's would: it must let go of
    // the copies clusterctl deletes (annotated delete-for-move) without touching the domain.
    let out = Command::new(&clusterctl)
        .args(["move", "--namespace", "default", "--kubeconfig"])
        .arg(source.dir().join("admin.kubeconfig"))
        .arg("--to-kubeconfig")
        .arg(target.dir().join("admin.kubeconfig"))
        .arg("--config")
        .arg(source.dir().join("clusterctl/clusterctl.yaml"))
        .env("XDG_CONFIG_HOME", source.dir().join("clusterctl/xdg"))
        .env("CLUSTERCTL_DISABLE_VERSIONCHECK", "true")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "clusterctl move failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(our_domains(&hv).len(), 1, "the source manager left the domain alone");
    manager.stop().await;

    // Everything left the source and arrived in the target.
    assert!(
        lvms(&source.admin).get_opt(MACHINE).await.unwrap().is_none(),
        "left the source"
    );
    let hosts: Api<LibvirtHost> = Api::namespaced(target.admin.clone(), "default");
    assert!(hosts.get_opt("laptop").await.unwrap().is_some(), "LibvirtHost moved");
    let secrets: Api<Secret> = Api::namespaced(target.admin.clone(), "default");
    for name in ["laptop-ssh", "spot-kubeconfig", "spot-boot"] {
        assert!(secrets.get_opt(name).await.unwrap().is_some(), "Secret {name} moved");
    }
    let moved = lvms(&target.admin).get(MACHINE).await.unwrap();
    assert_eq!(
        moved.spec.provider_id.as_deref(),
        Some(provider_id.as_str()),
        "spec moved"
    );
    assert_ne!(moved.metadata.uid, before.metadata.uid, "a new object in the target");
    assert_eq!(our_domains(&hv).len(), 1, "the move touched no domain");

    // The manager on the target adopts the running domain: status rebuilt, nothing recreated.
    let manager = Manager::start(&target, &source.api_url).await;
    wait_until("target LibvirtMachine ready with the same domain", || async {
        let m = lvms(&target.admin).get(MACHINE).await.unwrap();
        m.status
            .is_some_and(|s| s.ready && s.domain_uuid.as_deref() == Some(uuid.as_str()))
    })
    .await;
    wait_provisioned(&target.admin, "target").await;
    let domains = our_domains(&hv);
    assert_eq!(domains.len(), 1, "no second domain: {domains:?}");
    let domain = hv.domain(&domains[0]).unwrap().unwrap();
    assert_eq!(domain.uuid.to_string(), uuid);
    assert_eq!(domain.state, DomainState::Running);
    let after = lvms(&target.admin).get(MACHINE).await.unwrap();
    assert_eq!(after.spec.provider_id.as_deref(), Some(provider_id.as_str()));
    let machine = capi(&target.admin, "Machine").get(MACHINE).await.unwrap();
    assert_eq!(machine.data["spec"]["providerID"], provider_id.as_str());

    manager.stop().await;
    target.stop().await;
    source.stop().await;
}

//! System tests on genuine components only, but for the kubelet: kube-apiserver, etcd,
//! kube-controller-manager and Cluster API core built from their Go modules
//! (`scripts/control-plane.sh`), libvirtd + QEMU (TCG) + OVMF in the test's own network namespace
//! and a private sshd on 127.0.0.1 (`scripts/libvirt-env.sh`), the chart's default install
//! applied to the real API server, and the manager as its own process authenticated as the
//! chart's ServiceAccount, so the real RBAC authorizer judges every request it makes.
//!
//! The kubelet is [`capi_sim::kubelet_agent`]: it files real CSRs with OpenShift's
//! node-bootstrapper identity, which the manager approves and kube-controller-manager signs, and
//! registers its Node with the certificate it got.
//!
//! `scripts/system-test.sh` prepares all of it, once per Cluster API contract version, and runs
//! these tests with the `CAPLV_CP_*` and `CAPLV_SYS_*` variables it writes; `cargo test` alone
//! skips them (ignored), because they need root and that environment.

mod api_restart;
mod crash;
mod host_faults;
mod kill_switch;
mod lead_time;
mod machine_deployment;
mod maintenance;
mod networking;
mod power_off;
mod reclaim;
mod secrets;
mod seed_flow;
mod upgrade;

use std::{
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::Duration,
};

use capi_sim::kubelet_agent::{AgentHandle, ApiAccess, KubeletAgent};

use crate::{
    cli::manager,
    support::genuine::{audit_position, config_from, refused_outside},
};

/// Real libvirt is slower than the test driver: first define probes QEMU, TCG boots slowly.
const DEADLINE: Duration = Duration::from_secs(180);

fn var(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("{name} is not set; run scripts/system-test.sh"))
}

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn virsh(args: &[&str]) -> String {
    run(Command::new("virsh").args(["-c", "qemu:///system"]).args(args))
}

/// Files in the pool directory whose names mention `name`.
fn pool_files(name: &str) -> Vec<String> {
    std::fs::read_dir(var("CAPLV_SYS_POOL_DIR"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(name))
        .collect()
}

fn indent(text: &str, by: usize) -> String {
    text.lines().map(|l| format!("{}{l}\n", " ".repeat(by))).collect()
}

/// Whether this run is on the control plane of Cluster API `contract`; a suite that runs once,
/// on one contract, says so and skips the other.
fn runs_on(contract: &str, suite: &str) -> bool {
    let here = var("CAPLV_CAPI_VERSION") == contract;
    if !here {
        eprintln!("{suite}: runs on the {contract} control plane only");
    }
    here
}

async fn wait(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + DEADLINE;
    while !check() {
        assert!(tokio::time::Instant::now() < deadline, "timed out waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// The manager process and the emulated kubelet on the genuine control plane.
struct Genuine {
    /// Where this test's requests begin in the API server's audit log: refusals before it
    /// belong to earlier tests (a restarted API server's own, say).
    audit_from: usize,
    manager: Child,
    kubelet: Option<AgentHandle>,
    admin: PathBuf,
    dir: tempfile::TempDir,
}

impl Drop for Genuine {
    fn drop(&mut self) {
        let _ = self.manager.kill();
        let _ = self.manager.wait();
    }
}

impl Genuine {
    async fn start() -> Self {
        Self::start_logging("info").await
    }

    /// Like [`Genuine::start`], the manager logging at `filter` (into `manager.log`).
    async fn start_logging(filter: &str) -> Self {
        Self::start_with(filter, &["--leader-elect"]).await
    }

    /// Like [`Genuine::start`], the manager run with `args` added (a `--controllers` choice).
    async fn start_with(filter: &str, args: &[&str]) -> Self {
        Self::start_from(manager(), filter, args).await
    }

    /// Like [`Genuine::start_with`], the manager being `binary` (another build of it).
    async fn start_from(binary: Command, filter: &str, args: &[&str]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let audit_from = audit_position(Path::new(&var("CAPLV_CP_AUDIT_LOG")));
        let manager = spawn_manager(binary, &dir.path().join("manager.log"), filter, args);
        let admin = PathBuf::from(var("KUBECONFIG"));
        let admin_config = config_from(&admin).await;
        let agent = KubeletAgent {
            observer: kube::Client::try_from(admin_config.clone()).unwrap(),
            bootstrap: kube::Client::try_from(config_from(Path::new(&var("CAPLV_SYS_BOOTSTRAP_KUBECONFIG"))).await)
                .unwrap(),
            api: ApiAccess::of(&admin_config),
            infra: kube::api::ApiResource::erase::<caplv::api::libvirt_machine::LibvirtMachine>(&()),
            kubelet_version: var("CAPLV_CP_KUBERNETES_VERSION"),
            with_provider_id: true,
        };
        Self {
            audit_from,
            manager,
            kubelet: Some(agent.spawn()),
            admin,
            dir,
        }
    }

    /// A rollout: the running manager gets SIGTERM and must exit cleanly, then `next` starts in
    /// its place with `args`, logging to the same file.
    fn replace_manager(&mut self, next: Command, filter: &str, args: &[&str]) {
        crate::cli::signal(&self.manager, "TERM");
        let status = self.manager.wait().unwrap();
        let log = self.dir.path().join("manager.log");
        assert!(
            status.success(),
            "the replaced manager exited with {status}; log:\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        self.manager = spawn_manager(next, &log, filter, args);
    }

    fn kubectl(&self, args: &[&str]) -> std::process::Output {
        crate::support::kubectl(&self.admin, args)
    }

    fn get(&self, args: &[&str]) -> String {
        String::from_utf8_lossy(&self.kubectl(args).stdout).into_owned()
    }

    fn apply(&self, yaml: &str) {
        let file = self.dir.path().join("apply.yaml");
        std::fs::write(&file, yaml).unwrap();
        self.apply_path(&file);
    }

    fn apply_path(&self, path: &Path) {
        let out = self.kubectl(&["apply", "-f", path.to_str().unwrap()]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }

    fn patch(&self, args: &[&str], patch: &str) {
        let mut all = vec!["patch"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["--type", "merge", "-p", patch]);
        let out = self.kubectl(&all);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }

    /// `kubectl scale` `what` (e.g. `machinedeployment/workers`) in `namespace` to `replicas`.
    fn scale(&self, namespace: &str, what: &str, replicas: u32) {
        let replicas = format!("--replicas={replicas}");
        let out = self.kubectl(&["-n", namespace, "scale", what, &replicas]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }

    /// Stop the kubelet and the manager; the API server must not have refused the manager
    /// anything (the chart's RBAC covers every request), and the manager must exit cleanly.
    async fn stop(self) {
        self.stop_excusing(&[]).await;
    }

    /// [`Genuine::stop`], but refusals at the audit-log positions in `excused` (while a
    /// restarted API server filled its RBAC caches) are not held against the chart.
    async fn stop_excusing(mut self, excused: &[std::ops::Range<usize>]) {
        if let Some(kubelet) = self.kubelet.take() {
            kubelet.stop().await;
        }
        crate::cli::signal(&self.manager, "TERM");
        let status = self.manager.wait().unwrap();
        let log = std::fs::read_to_string(self.dir.path().join("manager.log")).unwrap();
        assert!(status.success(), "manager exited with {status}; log:\n{log}");
        let mut excused = excused.to_vec();
        excused.push(0..self.audit_from);
        let refused = refused_outside(Path::new(&var("CAPLV_CP_AUDIT_LOG")), &excused);
        assert!(
            refused.is_empty(),
            "the API server refused the manager (the chart's RBAC lacks a rule): {refused:#?}"
        );
    }
}

/// Start `binary run` (a `caplv-manager`) with `args` added, as the chart's ServiceAccount,
/// logging at `filter` to the end of `log`.
fn spawn_manager(mut binary: Command, log: &Path, filter: &str, args: &[&str]) -> Child {
    let log = std::fs::OpenOptions::new().create(true).append(true).open(log).unwrap();
    binary
        .args(["run", "--metrics-addr", "127.0.0.1:0"])
        .args(args)
        .args(["--log-filter", filter])
        .env("KUBECONFIG", var("CAPLV_SYS_MANAGER_KUBECONFIG"))
        .env("CAPLV_DOMAIN_CHECK_INTERVAL_SECONDS", "5")
        // Cluster API core's kubeconfigs name this API server, whatever a Cluster names.
        .env("CAPLV_WORKLOAD_API_SERVER", var("CAPLV_CP_API_URL"))
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap()
}

/// The SSH key Secret a LibvirtHost names, holding the test account's private key.
fn ssh_key_secret(name: &str) -> String {
    ssh_key_secret_in("default", name)
}

fn ssh_key_secret_in(namespace: &str, name: &str) -> String {
    let key = std::fs::read_to_string(var("CAPLV_SYS_CLIENT_KEY")).unwrap();
    format!(
        "apiVersion: v1\nkind: Secret\nmetadata: {{name: {name}, namespace: {namespace}}}\nstringData:\n  ssh-privatekey: |\n{}",
        indent(&key, 4)
    )
}

/// What a system test's workers stand on, in namespace `ns`: the namespace, the SSH key Secret
/// `<host>-ssh`, the pinned LibvirtHost `host` (with `labels`, a YAML flow mapping) that reserves
/// nothing, and a LibvirtCluster and Cluster `cluster` at the control plane's endpoint (port
/// `api_port` on loopback).
fn host_and_cluster(ns: &str, host: &str, labels: &str, cluster: &str, api_port: &str) -> String {
    let (uri, pin, code, vars) = (
        var("CAPLV_SYS_URI"),
        var("CAPLV_SYS_FINGERPRINT"),
        var("CAPLV_SYS_OVMF_CODE"),
        var("CAPLV_SYS_OVMF_VARS"),
    );
    format!(
        r#"apiVersion: v1
kind: Namespace
metadata: {{name: {ns}}}
---
{secret}---
apiVersion: infrastructure.cluster.x-k8s.io/v1alpha1
kind: LibvirtHost
metadata: {{name: {host}, namespace: {ns}, labels: {labels}}}
spec:
  uri: "{uri}"
  secretRef: {{name: {host}-ssh}}
  hostKeyFingerprint: "{pin}"
  firmwarePath: {code}
  nvramTemplatePath: {vars}
  reservedResources: {{vcpus: 0, memoryMB: 0}}
  healthCheckIntervalSeconds: 30
---
apiVersion: infrastructure.cluster.x-k8s.io/v1alpha1
kind: LibvirtCluster
metadata: {{name: {cluster}, namespace: {ns}}}
spec:
  controlPlaneEndpoint: {{host: 127.0.0.1, port: {api_port}}}
---
apiVersion: cluster.x-k8s.io/v1beta1
kind: Cluster
metadata: {{name: {cluster}, namespace: {ns}}}
spec:
  controlPlaneEndpoint: {{host: 127.0.0.1, port: {api_port}}}
  infrastructureRef: {{apiVersion: infrastructure.cluster.x-k8s.io/v1alpha1, kind: LibvirtCluster, name: {cluster}}}
"#,
        secret = ssh_key_secret_in(ns, &format!("{host}-ssh")),
    )
}

//! The integration tests on a genuine control plane: with `CAPLV_TEST_CONTROL_PLANE=real`, each
//! [`super::Env`] starts kube-apiserver, etcd, kube-controller-manager and Cluster API core of
//! its own (`scripts/control-plane.sh`, about 10 s once built), installs the chart as a user
//! does (`scripts/install-genuine.sh`), and runs the manager as the chart's ServiceAccount, so
//! the real RBAC authorizer judges it; the kubelet is [`capi_sim::kubelet_agent`]. The control
//! planes share fixed ports: run these tests one at a time (`--test-threads=1`), as
//! `scripts/genuine-test.sh` does.

use std::{
    path::{Path, PathBuf},
    process::Command,
    time::Duration,
};

use capi_sim::{
    CapiVersions, KubeletMode,
    kubelet_agent::{AgentHandle, ApiAccess, KubeletAgent},
};
use kube::config::{KubeConfigOptions, Kubeconfig};

/// The identity the chart gives the manager.
const MANAGER_USER: &str = "system:serviceaccount:caplv-system:caplv";

/// How long an awaited condition may take on genuine components.
pub const DEADLINE: Duration = Duration::from_secs(90);

/// Whether the tests run on a genuine control plane.
pub fn selected() -> bool {
    std::env::var("CAPLV_TEST_CONTROL_PLANE").is_ok_and(|v| v == "real")
}

pub fn script(name: &str, args: &[&Path], env: &[(&str, &str)]) {
    let out = Command::new("bash")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts").join(name))
        .args(args)
        .envs(env.iter().copied())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{name} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The client configuration a kubeconfig file holds.
pub async fn config_from(path: &Path) -> kube::Config {
    let kubeconfig = Kubeconfig::read_from(path).unwrap();
    kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .unwrap()
}

/// One test's genuine control plane, the chart installed, and the emulated kubelet.
pub struct ControlPlane {
    /// A cluster administrator (system:masters), with `default` as its namespace.
    pub admin: kube::Client,
    /// The chart's ServiceAccount.
    pub manager: kube::Client,
    /// The CA bundle the manager trusts the API server with.
    pub manager_ca: Option<String>,
    /// The API server's URL: what every kubeconfig the manager writes must name, so that genuine
    /// Cluster API core never dials an endpoint a test's Cluster names.
    pub api_url: String,
    dir: PathBuf,
    kubelet: Option<AgentHandle>,
    _tmp: tempfile::TempDir,
}

impl ControlPlane {
    /// Start everything for one test.
    pub async fn start(versions: CapiVersions, kubelet: KubeletMode) -> Self {
        Self::start_at(versions, kubelet, None).await
    }

    /// Like [`ControlPlane::start`], on the ports from `port_base` (`CAPLV_CP_PORT_BASE`), so
    /// that two control planes can run at once.
    pub async fn start_at(versions: CapiVersions, kubelet: KubeletMode, port_base: Option<&str>) -> Self {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("cp");
        let contract = match versions {
            CapiVersions::V1beta1 => "v1beta1",
            _ => "v1beta2",
        };
        let mut env = vec![("CAPLV_CAPI_VERSION", contract)];
        env.extend(port_base.map(|base| ("CAPLV_CP_PORT_BASE", base)));
        script("control-plane.sh", &[Path::new("up"), &dir], &env);
        script("install-genuine.sh", &[&dir], &[]);
        let admin_config = config_from(&dir.join("admin.kubeconfig")).await;
        let manager_config = config_from(&dir.join("manager.kubeconfig")).await;
        let manager_ca = manager_config.root_cert.as_deref().map(caplv::app::pem_bundle);
        let admin = kube::Client::try_from(admin_config.clone()).unwrap();
        let api_url = admin_config.cluster_url.to_string();
        let kubelet = (kubelet != KubeletMode::Off).then(|| {
            KubeletAgent {
                observer: admin.clone(),
                bootstrap: futures::executor::block_on(config_from(&dir.join("bootstrap.kubeconfig")))
                    .try_into()
                    .unwrap(),
                api: ApiAccess::of(&admin_config),
                infra: kube::api::ApiResource::erase::<caplv::api::libvirt_machine::LibvirtMachine>(&()),
                kubelet_version: "v1.33.0".into(),
                with_provider_id: kubelet == KubeletMode::WithProviderId,
            }
            .spawn()
        });
        Self {
            admin,
            manager: kube::Client::try_from(manager_config).unwrap(),
            manager_ca,
            api_url,
            dir,
            kubelet,
            _tmp: tmp,
        }
    }

    /// The directory `control-plane.sh up` was given (its `env`, kubeconfigs, logs).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Stop the kubelet, check the API server refused the manager nothing, and stop the
    /// control plane.
    pub async fn stop(mut self) {
        if let Some(kubelet) = self.kubelet.take() {
            kubelet.stop().await;
        }
        let refused = refused(&self.dir.join("audit.log"));
        down(&self.dir);
        assert!(
            refused.is_empty(),
            "the API server refused the manager (the chart's RBAC lacks a rule): {refused:#?}"
        );
    }
}

/// A test that panics (or never calls `stop`) must not leave its control plane running: the
/// next test needs the ports.
impl Drop for ControlPlane {
    fn drop(&mut self) {
        down(&self.dir);
    }
}

/// Stop the control plane in `dir`, if it still runs.
fn down(dir: &Path) {
    if dir.exists() {
        script("control-plane.sh", &[Path::new("down"), dir], &[]);
    }
}

/// The manager's events in the audit log `text`, each with its position (line) in the log.
fn manager_events(text: &str) -> impl Iterator<Item = (usize, serde_json::Value)> + '_ {
    text.lines()
        .enumerate()
        .filter(|(_, line)| line.contains(MANAGER_USER))
        .filter_map(|(i, line)| Some((i, serde_json::from_str::<serde_json::Value>(line).ok()?)))
        .filter(|(_, e)| e["user"]["username"] == MANAGER_USER)
}

/// A string field of an audit event (`""` where it is absent).
fn text_of(v: &serde_json::Value) -> &str {
    v.as_str().unwrap_or("")
}

/// How many requests of the manager the audit log holds so far.
pub fn manager_requests(audit_log: &Path) -> usize {
    manager_events(&std::fs::read_to_string(audit_log).unwrap()).count()
}

/// The manager's writes (create, update, patch, delete) the audit log records from position
/// `from` on, as `verb resource/subresource name`, in order.
pub fn manager_writes(audit_log: &Path, from: usize) -> Vec<String> {
    let text = std::fs::read_to_string(audit_log).unwrap();
    manager_events(&text)
        .filter(|(i, e)| *i >= from && matches!(e["verb"].as_str(), Some("create" | "update" | "patch" | "delete")))
        .map(|(_, e)| {
            let r = &e["objectRef"];
            let (verb, resource) = (text_of(&e["verb"]), text_of(&r["resource"]));
            format!(
                "{verb} {resource}/{} {}",
                text_of(&r["subresource"]),
                text_of(&r["name"])
            )
        })
        .collect()
}

/// How many events the audit log holds so far (a position in it).
pub fn audit_position(audit_log: &Path) -> usize {
    std::fs::read_to_string(audit_log).unwrap().lines().count()
}

/// `verb resource/subresource (namespace/name)` of each request of the manager the audit log
/// records as refused (403).
pub fn refused(audit_log: &Path) -> Vec<String> {
    refused_outside(audit_log, &[])
}

/// [`refused`], but for the events at the audit-log positions in `excused`: an API server that
/// has just started answers 403 until its RBAC caches are filled.
pub fn refused_outside(audit_log: &Path, excused: &[std::ops::Range<usize>]) -> Vec<String> {
    let text = std::fs::read_to_string(audit_log).unwrap();
    manager_events(&text)
        .filter(|(i, e)| !excused.iter().any(|r| r.contains(i)) && e["responseStatus"]["code"] == 403)
        .map(|(_, e)| {
            let r = &e["objectRef"];
            format!(
                "{} {}.{}/{} ({}/{})",
                text_of(&e["verb"]),
                text_of(&r["resource"]),
                text_of(&r["apiGroup"]),
                text_of(&r["subresource"]),
                text_of(&r["namespace"]),
                text_of(&r["name"]),
            )
        })
        .collect()
}

//! The API server the opening runs against: memkube in this process, with the CAPI simulator
//! (the default), or the genuine control plane of `scripts/control-plane.sh` with Cluster API
//! core and the chart installed (`BENCH_CONTROL_PLANE=real`, from `scripts/bench-fivespot.sh
//! --genuine`). Both count requests by client: memkube itself, the genuine one from the API
//! server's audit log.

use std::{
    collections::BTreeMap,
    io::{Read, Seek, SeekFrom},
    path::{Path, PathBuf},
    sync::Mutex,
    time::Duration,
};

use kube::api::{Api, DynamicObject, GroupVersionKind, Patch, PatchParams};

/// Requests counted by (verb, `plural[.group]`, subresource).
pub type Counts = BTreeMap<(String, String, String), u64>;

/// The identity the chart gives the manager on the genuine control plane.
const GENUINE_MANAGER: &str = "system:serviceaccount:caplv-system:caplv";
/// Genuine Cluster API core's identity (`scripts/control-plane.sh`'s certificate).
const GENUINE_CAPI: &str = "capi-manager";
/// memkube's user for clients that impersonate no one: here, only the manager.
const MEMKUBE_MANAGER: &str = "";

pub enum Plane {
    Memkube {
        server: memkube::Server,
        sim: capi_sim::SimulatorHandle,
        kubeconfig: PathBuf,
        _dir: tempfile::TempDir,
    },
    Genuine {
        admin: kube::Client,
        manager_kubeconfig: PathBuf,
        api_url: String,
        audit: Mutex<AuditCounts>,
        dir: PathBuf,
    },
}

impl Plane {
    /// The plane `BENCH_CONTROL_PLANE` names (`memkube` unless it says `real`).
    pub async fn start() -> Self {
        match std::env::var("BENCH_CONTROL_PLANE").as_deref() {
            Ok("real") => Self::genuine().await,
            Ok("memkube") | Err(_) => Self::memkube().await,
            Ok(other) => panic!("BENCH_CONTROL_PLANE={other}: expected memkube or real"),
        }
    }

    async fn memkube() -> Self {
        let server = memkube::Server::new();
        server.install_crds(&caplv::api::crds()).expect("crds");
        capi_sim::install(&server.client(), capi_sim::CapiVersions::V1beta1)
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
        Self::Memkube {
            server,
            sim,
            kubeconfig,
            _dir: dir,
        }
    }

    /// The control plane `scripts/control-plane.sh up` started in `CAPLV_CP_DIR`, with the
    /// chart installed by `scripts/install-genuine.sh`.
    async fn genuine() -> Self {
        let dir = PathBuf::from(std::env::var("CAPLV_CP_DIR").expect("CAPLV_CP_DIR: the genuine control plane"));
        let kubeconfig = kube::config::Kubeconfig::read_from(dir.join("admin.kubeconfig")).expect("admin kubeconfig");
        let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
            .await
            .expect("admin config");
        Self::Genuine {
            admin: kube::Client::try_from(config).expect("admin client"),
            manager_kubeconfig: dir.join("manager.kubeconfig"),
            api_url: std::env::var("CAPLV_CP_API_URL").expect("CAPLV_CP_API_URL"),
            audit: Mutex::new(AuditCounts::new(dir.join("audit.log"))),
            dir,
        }
    }

    /// `memkube` or `real`, as the bench's JSON reports it.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Memkube { .. } => "memkube",
            Self::Genuine { .. } => "real",
        }
    }

    /// The bench's own client: its requests are not the manager's.
    pub fn bench_client(&self) -> kube::Client {
        match self {
            Self::Memkube { server, .. } => server.client_as("bench"),
            Self::Genuine { admin, .. } => admin.clone(),
        }
    }

    /// What the manager process connects with.
    pub fn manager_kubeconfig(&self) -> &Path {
        match self {
            Self::Memkube { kubeconfig, .. } => kubeconfig,
            Self::Genuine { manager_kubeconfig, .. } => manager_kubeconfig,
        }
    }

    /// The manager's settings for this plane: on the genuine one, the workload kubeconfigs it
    /// writes name the API server (as in the system tests), whatever endpoint a Cluster names.
    pub fn manager_env(&self) -> Vec<(&'static str, String)> {
        match self {
            Self::Memkube { .. } => Vec::new(),
            Self::Genuine { api_url, .. } => vec![("CAPLV_WORKLOAD_API_SERVER", api_url.clone())],
        }
    }

    /// How far ahead of its creation the edge must be for 1000 ScheduledMachines to be created
    /// and seen Inactive first: the genuine server is slower at it.
    pub fn lead(&self) -> Duration {
        match self {
            Self::Memkube { .. } => Duration::from_secs(25),
            Self::Genuine { .. } => Duration::from_secs(90),
        }
    }

    /// Store the objects every ScheduledMachine refers to.
    pub async fn seed(&self, docs: &[String]) {
        for doc in docs {
            let object: serde_json::Value = serde_yaml::from_str(doc).expect("seed YAML");
            match self {
                Self::Memkube { server, .. } => {
                    server.put_object(object).expect("seed object");
                }
                Self::Genuine { admin, .. } => apply(admin, object).await,
            }
        }
    }

    /// The manager's requests since the last reset.
    pub fn manager_counts(&self) -> Counts {
        match self {
            Self::Memkube { server, .. } => server.request_counts_of(MEMKUBE_MANAGER),
            Self::Genuine { audit, .. } => audit.lock().unwrap().of(GENUINE_MANAGER),
        }
    }

    /// Cluster API's requests (the simulator's or core's) since the last reset.
    pub fn capi_counts(&self) -> Counts {
        match self {
            Self::Memkube { server, .. } => server.request_counts_of("capi-sim"),
            Self::Genuine { audit, .. } => audit.lock().unwrap().of(GENUINE_CAPI),
        }
    }

    /// Every client's requests since the last reset.
    pub fn all_counts(&self) -> Counts {
        match self {
            Self::Memkube { server, .. } => server.request_counts(),
            Self::Genuine { audit, .. } => audit.lock().unwrap().all(),
        }
    }

    /// The control plane's processes by name (etcd, kube-apiserver, Cluster API core...), whose
    /// CPU time tells where an opening's time went; none on memkube, which runs in this process.
    pub fn components(&self) -> Vec<(String, u32)> {
        let Self::Genuine { dir, .. } = self else {
            return Vec::new();
        };
        let mut found: Vec<(String, u32)> = std::fs::read_dir(dir.join("pids"))
            .expect("the control plane's pids")
            .filter_map(Result::ok)
            .filter_map(|entry| {
                let pid = std::fs::read_to_string(entry.path()).ok()?.trim().parse().ok()?;
                Some((entry.file_name().to_string_lossy().into_owned(), pid))
            })
            .collect();
        found.sort();
        found
    }

    pub fn reset_counts(&self) {
        match self {
            Self::Memkube { server, .. } => server.reset_counts(),
            Self::Genuine { audit, .. } => audit.lock().unwrap().reset(),
        }
    }

    pub async fn stop(self) {
        if let Self::Memkube { server, sim, .. } = self {
            sim.stop().await.expect("sim");
            server.shutdown();
        }
    }
}

/// Server-side apply `object` as the bench, wherever its kind lives.
async fn apply(client: &kube::Client, object: serde_json::Value) {
    let (group, version) = match object["apiVersion"].as_str().expect("apiVersion").split_once('/') {
        Some((g, v)) => (g.to_owned(), v.to_owned()),
        None => (
            String::new(),
            object["apiVersion"].as_str().unwrap_or_default().to_owned(),
        ),
    };
    let gvk = GroupVersionKind::gvk(&group, &version, object["kind"].as_str().expect("kind"));
    let (resource, caps) = kube::discovery::pinned_kind(client, &gvk).await.expect("discovery");
    let name = object["metadata"]["name"].as_str().expect("name").to_owned();
    let api: Api<DynamicObject> = match caps.scope {
        kube::discovery::Scope::Namespaced => Api::namespaced_with(
            client.clone(),
            object["metadata"]["namespace"].as_str().unwrap_or("default"),
            &resource,
        ),
        kube::discovery::Scope::Cluster => Api::all_with(client.clone(), &resource),
    };
    api.patch(&name, &PatchParams::apply("bench").force(), &Patch::Apply(&object))
        .await
        .expect("apply a seed object");
}

/// Requests per user, read from the API server's audit log as it grows: one
/// `ResponseComplete` event per request (the policy omits `RequestReceived`).
pub struct AuditCounts {
    path: PathBuf,
    offset: u64,
    by_user: BTreeMap<String, Counts>,
}

impl AuditCounts {
    fn new(path: PathBuf) -> Self {
        let mut counts = Self {
            path,
            offset: 0,
            by_user: BTreeMap::new(),
        };
        counts.reset();
        counts
    }

    /// Forget what was counted; count from the log's current end.
    fn reset(&mut self) {
        self.read_new();
        self.by_user.clear();
    }

    fn of(&mut self, user: &str) -> Counts {
        self.read_new();
        self.by_user.get(user).cloned().unwrap_or_default()
    }

    fn all(&mut self) -> Counts {
        self.read_new();
        let mut all = Counts::new();
        for counts in self.by_user.values() {
            for (key, n) in counts {
                *all.entry(key.clone()).or_default() += n;
            }
        }
        all
    }

    /// Count the complete lines written since the last read.
    fn read_new(&mut self) {
        let mut file = std::fs::File::open(&self.path).expect("audit log");
        file.seek(SeekFrom::Start(self.offset)).expect("seek the audit log");
        let mut text = String::new();
        file.read_to_string(&mut text).expect("read the audit log");
        let complete = text.rfind('\n').map_or(0, |end| end + 1);
        for line in text[..complete].lines() {
            self.count(line);
        }
        self.offset += complete as u64;
    }

    fn count(&mut self, line: &str) {
        let Ok(event) = serde_json::from_str::<serde_json::Value>(line) else {
            return;
        };
        if event["stage"] != "ResponseComplete" {
            return;
        }
        let s = |v: &serde_json::Value| v.as_str().unwrap_or_default().to_owned();
        let object = &event["objectRef"];
        let resource = match (s(&object["resource"]), s(&object["apiGroup"])) {
            (resource, group) if group.is_empty() => resource,
            (resource, group) => format!("{resource}.{group}"),
        };
        let user = s(&event["user"]["username"]);
        let key = (s(&event["verb"]), resource, s(&object["subresource"]));
        *self.by_user.entry(user).or_default().entry(key).or_default() += 1;
    }
}

//! A manager running against memkube + capi-sim (or, with `CAPLV_TEST_CONTROL_PLANE=real`, a
//! genuine control plane), and waiting helpers with deadlines.

pub mod crashable;
pub mod genuine;

use std::{future::Future, sync::Arc, time::Duration};

use capi_sim::{CapiVersions, Simulator, SimulatorHandle};
use caplv::{
    app::{self, ManagerConfig, Shared},
    clock::OffsetClock,
    controllers::Family,
    endpoint::TcpProbe,
    reconcile::Settings,
};
use kube::Client;
use tokio_util::sync::CancellationToken;

/// The identity the manager's requests carry in these tests.
pub const MANAGER_USER: &str = "caplv-manager";

/// The CA bundle the manager is told it trusts for its API server (memkube serves plain HTTP,
/// so nothing verifies it; the kubeconfig Secrets must carry it all the same).
pub const TEST_CA_PEM: &str =
    "-----BEGIN CERTIFICATE-----\nMIIBdGVzdC1jYS1mb3ItY2FwbHYtdGVzdHM=\n-----END CERTIFICATE-----\n";

/// How long any awaited condition may take before the test fails, on memkube.
pub const DEADLINE: Duration = Duration::from_secs(20);

/// How long any awaited condition may take: longer on a genuine control plane, whose Cluster API
/// core retries its connection to the workload cluster every few seconds.
pub fn deadline() -> Duration {
    if genuine::selected() {
        genuine::DEADLINE
    } else {
        DEADLINE
    }
}

/// A running manager with its API server and CAPI core.
pub struct Env {
    pub client: Client,
    pub shared: Shared,
    pub clock: OffsetClock,
    shutdown: CancellationToken,
    manager: Manager,
    backend: Backend,
}

/// The manager: a task of the test's runtime, or one that can be killed ([`crashable`]).
enum Manager {
    Task(tokio::task::JoinHandle<anyhow::Result<()>>),
    Crashable(Arc<crashable::Crashable>),
}

/// memkube and capi-sim in this process, or a genuine control plane (see [`genuine`]).
enum Backend {
    Memkube {
        server: memkube::Server,
        sim: SimulatorHandle,
    },
    Genuine(Box<genuine::ControlPlane>),
}

/// Settings that make periodic work quick in tests.
pub fn fast_settings() -> Settings {
    Settings {
        endpoint_probe_interval: Duration::from_millis(300),
        error_requeue: Duration::from_millis(200),
        domain_check_interval: Duration::from_millis(500),
        max_concurrent_host_connects: 4,
        api_server_ca: Some(TEST_CA_PEM.to_owned()),
        first_wait_grace: Duration::from_secs(10),
        ..Settings::default()
    }
}

impl Env {
    /// Start the API server with every CRD, CAPI core (v1beta1) and the manager (all families,
    /// real TCP probe).
    pub async fn start() -> Self {
        Self::start_with(CapiVersions::V1beta1).await
    }

    /// Like [`Env::start`], with the given CAPI core version.
    pub async fn start_with(versions: CapiVersions) -> Self {
        Self::start_custom(versions, capi_sim::KubeletMode::WithProviderId).await
    }

    /// Like [`Env::start`], with the given CAPI core version and emulated kubelet. The kubelet
    /// waits for its client CSR to be approved (by the manager) before registering its Node.
    ///
    /// With `CAPLV_TEST_CONTROL_PLANE=real` the API server and CAPI core are genuine ones,
    /// started for this test alone ([`genuine`]).
    pub async fn start_custom(versions: CapiVersions, kubelet: capi_sim::KubeletMode) -> Self {
        let mut settings = fast_settings();
        let (client, manager_client, backend) = if genuine::selected() {
            let cp = genuine::ControlPlane::start(versions, kubelet).await;
            settings.api_server_ca = cp.manager_ca.clone();
            settings.workload_api_server = Some(cp.api_url.clone());
            (cp.admin.clone(), cp.manager.clone(), Backend::Genuine(Box::new(cp)))
        } else {
            let (server, sim) = start_memkube(versions, kubelet).await;
            let client = server.client();
            // The manager's requests are tagged so `stop` can check them against the RBAC rules.
            let manager_client = server.client_as(MANAGER_USER);
            (client, manager_client, Backend::Memkube { server, sim })
        };
        let clock = OffsetClock::default();
        let config = manager_config(settings, &clock);
        let shared = Shared::new().unwrap();
        let shutdown = CancellationToken::new();
        let manager = tokio::spawn(app::run(manager_client, config, shared.clone(), shutdown.clone()));
        let env = Self {
            client,
            shared,
            clock,
            shutdown,
            manager: Manager::Task(manager),
            backend,
        };
        let ready = env.shared.readiness.clone();
        wait_until("manager ready", || {
            let ready = ready.clone();
            async move { ready.is_ready() }
        })
        .await;
        env
    }

    /// memkube and the CAPI simulator (v1beta1) with a manager that the test can kill as
    /// SIGKILL kills a process ([`crashable::Crashable::crash_and_restart`]), with leader
    /// election when `leader` is given.
    pub async fn start_crashable(
        leader: Option<caplv::app::leader::LeaderConfig>,
    ) -> (Self, Arc<crashable::Crashable>) {
        let (server, sim) = start_memkube(CapiVersions::V1beta1, capi_sim::KubeletMode::WithProviderId).await;
        let clock = OffsetClock::default();
        let manager = Arc::new(crashable::Crashable::start(&server, fast_settings(), clock.clone(), leader).await);
        let env = Self {
            client: server.client(),
            shared: Shared::new().unwrap(),
            clock,
            shutdown: CancellationToken::new(),
            manager: Manager::Crashable(manager.clone()),
            backend: Backend::Memkube { server, sim },
        };
        (env, manager)
    }

    /// The running manager's shared state: `shared`, or the crashable manager's current one.
    pub fn manager_shared(&self) -> Shared {
        match &self.manager {
            Manager::Task(_) => self.shared.clone(),
            Manager::Crashable(manager) => manager.shared().expect("the manager runs"),
        }
    }

    /// The in-memory API server, for tests that count or fail its requests; such a test does
    /// not run on a genuine control plane.
    pub fn server(&self) -> &memkube::Server {
        match &self.backend {
            Backend::Memkube { server, .. } => server,
            Backend::Genuine(_) => panic!("this test needs memkube's request hooks; it runs on memkube only"),
        }
    }

    /// Stop everything; the manager must exit cleanly and must not have made a request its
    /// RBAC rules do not allow (memkube: checked against `src/cmd/rbac.rs`; genuine: no 403 in the
    /// API server's audit log, under the chart's RBAC).
    pub async fn stop(self) {
        if let Backend::Memkube { server, .. } = &self.backend {
            let used = server.requests_by(MANAGER_USER);
            let missing = caplv::cmd::rbac::uncovered(&Family::compiled(), &used);
            assert!(
                missing.is_empty(),
                "the manager made requests its RBAC rules (src/cmd/rbac.rs) do not allow: {missing:?}"
            );
        }
        match self.manager {
            Manager::Task(task) => {
                self.shutdown.cancel();
                task.await.unwrap().unwrap();
            }
            Manager::Crashable(manager) => manager.stop().await,
        }
        match self.backend {
            Backend::Memkube { server, sim } => {
                sim.stop().await.unwrap();
                server.shutdown();
            }
            Backend::Genuine(cp) => cp.stop().await,
        }
    }
}

/// The manager's configuration in these tests: every family, the real TCP probe, `clock`.
fn manager_config(settings: Settings, clock: &OffsetClock) -> ManagerConfig {
    ManagerConfig {
        families: Family::compiled(),
        metrics_addr: "127.0.0.1:0".parse().unwrap(),
        settings,
        leader: None,
        probe: Arc::new(TcpProbe {
            timeout: Duration::from_secs(2),
        }),
        clock: Arc::new(clock.clone()),
    }
}

/// memkube with every CRD and the chart's workload ServiceAccount, and the CAPI simulator.
async fn start_memkube(versions: CapiVersions, kubelet: capi_sim::KubeletMode) -> (memkube::Server, SimulatorHandle) {
    let server = memkube::Server::new();
    let client = server.client();
    server.install_crds(&caplv::api::crds()).unwrap();
    capi_sim::install(&client, versions).await.unwrap();
    // What the chart creates: the ServiceAccount whose token the kubeconfig Secrets carry.
    apply_yaml(
        &client,
        &format!(
            "apiVersion: v1\nkind: ServiceAccount\nmetadata: {{name: {}, namespace: default}}\n",
            caplv::reconcile::DEFAULT_WORKLOAD_SERVICE_ACCOUNT
        ),
    )
    .await;
    let sim = Simulator::builder(client)
        .versions(versions)
        .kubelet(kubelet)
        .kubelet_waits_for_client_csr(true)
        .drain_retry(Duration::from_millis(200))
        .build()
        .spawn();
    (server, sim)
}

/// Poll `check` until it returns true, failing the test with `what` after [`deadline`].
pub async fn wait_until<F, Fut>(what: &str, check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    wait_until_within(what, deadline(), check).await;
}

/// [`wait_until`] with a deadline of its own, for a wait whose length a test sets itself (a
/// watcher's backoff, say).
pub async fn wait_until_within<F, Fut>(what: &str, within: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + within;
    loop {
        if check().await {
            return;
        }
        assert!(tokio::time::Instant::now() < deadline, "timed out waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// The Events in namespace `default` about the object called `name`.
pub async fn events_about(env: &Env, name: &str) -> Vec<k8s_openapi::api::events::v1::Event> {
    let events: kube::Api<k8s_openapi::api::events::v1::Event> = kube::Api::namespaced(env.client.clone(), "default");
    events
        .list(&kube::api::ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
        .collect()
}

/// Apply a YAML document with server-side apply as a test user.
pub async fn apply_yaml(client: &Client, yaml: &str) {
    let value: serde_json::Value = serde_yaml::from_str(yaml).unwrap();
    let obj: kube::api::DynamicObject = serde_json::from_value(value.clone()).unwrap();
    let gvk = kube::core::GroupVersionKind::try_from(obj.types.as_ref().unwrap()).unwrap();
    let (ar, caps) = kube::discovery::pinned_kind(client, &gvk).await.unwrap();
    let ns = obj.metadata.namespace.clone().unwrap_or_else(|| "default".to_owned());
    let api: kube::Api<kube::api::DynamicObject> = if caps.scope == kube::discovery::Scope::Namespaced {
        kube::Api::namespaced_with(client.clone(), &ns, &ar)
    } else {
        kube::Api::all_with(client.clone(), &ar)
    };
    let name = obj.metadata.name.clone().unwrap();
    api.patch(
        &name,
        &kube::api::PatchParams::apply("test").force(),
        &kube::api::Patch::Apply(value),
    )
    .await
    .unwrap();
}

/// Run kubectl against `kubeconfig` with `args`.
pub fn kubectl(kubeconfig: &std::path::Path, args: &[&str]) -> std::process::Output {
    std::process::Command::new("kubectl")
        .env("KUBECONFIG", kubeconfig)
        .args(args)
        .output()
        .unwrap()
}

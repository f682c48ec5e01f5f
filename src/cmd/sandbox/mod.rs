//! The sandbox: an in-memory API server with our CRDs and Cluster API core's, the CAPI
//! simulator and every enabled controller, in one process, for trying the product and for
//! system tests. With `--control-plane real` the API server and Cluster API core are genuine ones
//! started outside (`scripts/sandbox.sh --real`), and only the kubelet is emulated here. It never
//! dials an address a manifest names unless `--libvirt real` says so.

use std::{net::SocketAddr, path::Path, sync::Arc, time::Duration};

use anyhow::Context as _;
use capi_sim::{CapiVersions, KubeletMode, Simulator};
use kube::api::DynamicObject;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::{
    api,
    app::health::Readiness,
    app::{self, ManagerConfig, Shared},
    cli::{Command, ControlPlaneMode, LibvirtMode, LogArgs, SandboxArgs},
    endpoint::{AlwaysReachable, EndpointProbe, TcpProbe},
    reconcile::host_connections::{Failure, HostConnections, HostLocator, host_id},
};

/// The demo narrates on stdout; controller logs would drown it unless asked for.
pub fn adjust_logging(command: Option<&Command>, log: &mut LogArgs) {
    if matches!(command, Some(Command::Sandbox(a)) if a.demo)
        && std::env::var_os("CAPLV_LOG").is_none()
        && log.log_filter == "info"
    {
        "error".clone_into(&mut log.log_filter);
    }
}

/// The sandbox's `--libvirt test`: every LibvirtHost is a private libvirt test driver whose node
/// file lives in this directory, whatever its URI names.
struct SimulatedHosts(std::path::PathBuf);

impl HostLocator for SimulatedHosts {
    fn uri(&self, host: &api::LibvirtHost) -> Result<String, Failure> {
        let (namespace, name) = host_id(host);
        crate::libvirt::simulated::host_uri(&self.0, &namespace, &name).map_err(|e| {
            Failure::new(
                api::libvirt_host::HostReason::HypervisorUnavailable,
                format!("cannot prepare the simulated host: {e}"),
            )
        })
    }
}

/// How long start-up may take before the sandbox gives up.
const READY_TIMEOUT: Duration = Duration::from_secs(60);

pub mod demo;
mod genuine;

/// A running sandbox.
pub struct Sandbox {
    /// An administrator's client: what the demo applies and reads with.
    pub client: kube::Client,
    backend: Backend,
    readiness: Readiness,
    shutdown: CancellationToken,
    manager: tokio::task::JoinHandle<anyhow::Result<()>>,
    /// What the manager shares (its libvirt connections, metrics).
    pub shared: Shared,
    /// The settings the controllers run with.
    pub settings: crate::reconcile::Settings,
    /// The temporary directory of the simulated libvirt hosts' node files (`--libvirt test`
    /// without `--hosts-dir`); removed on drop.
    _hosts: Option<tempfile::TempDir>,
}

/// Where the API server and Cluster API core come from.
enum Backend {
    /// In this process: memkube and the CAPI simulator with its emulated kubelet.
    Memkube {
        server: memkube::Server,
        addr: SocketAddr,
        simulator: capi_sim::SimulatorHandle,
    },
    /// A genuine control plane started outside (`scripts/sandbox.sh --real`); only the kubelet
    /// is emulated, here.
    Genuine(Box<genuine::Genuine>),
}

impl Sandbox {
    /// Start everything and wait until the controllers' caches have synced.
    ///
    /// # Errors
    /// When the listen address cannot be bound, a CRD is refused, a kubeconfig of
    /// `--control-plane real` is unusable, or start-up times out.
    pub async fn start(args: &SandboxArgs) -> anyhow::Result<Self> {
        if args.libvirt == LibvirtMode::Real && args.hosts_dir.is_some() {
            anyhow::bail!("--hosts-dir applies to --libvirt test only");
        }
        let (client, manager_client, manager_ca, backend) = match args.control_plane {
            ControlPlaneMode::Memkube => {
                let (server, addr, simulator) = start_memkube(args).await?;
                let client = server.client();
                (
                    client.clone(),
                    client,
                    None,
                    Backend::Memkube {
                        server,
                        addr,
                        simulator,
                    },
                )
            }
            ControlPlaneMode::Real => {
                let real = genuine::Genuine::start(args).await?;
                let ca = real.manager_ca.clone();
                (
                    real.admin.clone(),
                    real.manager.clone(),
                    ca,
                    Backend::Genuine(Box::new(real)),
                )
            }
        };
        let probe: Arc<dyn EndpointProbe> = match args.libvirt {
            LibvirtMode::Test => Arc::new(AlwaysReachable),
            LibvirtMode::Real => Arc::new(TcpProbe {
                timeout: args.run.endpoint_probe_timeout(),
            }),
        };
        let mut config = ManagerConfig::from_args(&args.run, manager_client.default_namespace());
        if matches!(backend, Backend::Memkube { .. }) {
            // A genuine control plane has the chart's; memkube starts empty.
            create_workload_service_account(&client, &config.settings).await?;
        }
        config.settings.api_server_ca = manager_ca;
        if let Backend::Genuine(real) = &backend {
            // Cluster API core's kubeconfigs name this API server: the seed's endpoint names
            // the user's lab, which is never dialled.
            config.settings.workload_api_server = Some(real.api.url.to_string());
        }
        config.probe = probe;
        config.leader = None;
        let (hosts_dir, hosts) = match (args.libvirt, &args.hosts_dir) {
            (LibvirtMode::Test, Some(dir)) => {
                std::fs::create_dir_all(dir)
                    .with_context(|| format!("--hosts-dir {}: cannot create it", dir.display()))?;
                (Some(dir.clone()), None)
            }
            (LibvirtMode::Test, None) => {
                let temp = tempfile::tempdir().context("cannot create a directory for simulated hosts")?;
                (Some(temp.path().to_path_buf()), Some(temp))
            }
            (LibvirtMode::Real, _) => (None, None),
        };
        let mut shared = Shared::new()?;
        if let Some(dir) = hosts_dir {
            let locator = Arc::new(SimulatedHosts(dir));
            shared.hosts = Arc::new(HostConnections::default().with_locator(locator));
        }
        let readiness = shared.readiness.clone();
        let shutdown = CancellationToken::new();
        let settings = config.settings.clone();
        let manager = tokio::spawn(app::run(manager_client, config, shared.clone(), shutdown.clone()));
        let sandbox = Self {
            client,
            backend,
            readiness,
            shutdown,
            manager,
            shared,
            settings,
            _hosts: hosts,
        };
        sandbox.wait_ready().await?;
        Ok(sandbox)
    }

    /// A kubeconfig for kubectl, to write where the user asked.
    #[must_use]
    pub fn kubeconfig(&self) -> String {
        match &self.backend {
            Backend::Memkube { addr, .. } => memkube::kubeconfig_yaml(*addr),
            Backend::Genuine(real) => real.admin_kubeconfig.clone(),
        }
    }

    /// Where the API server listens, for people.
    #[must_use]
    pub fn api_url(&self) -> String {
        match &self.backend {
            Backend::Memkube { addr, .. } => format!("http://{addr}"),
            Backend::Genuine(real) => real.api.url.to_string(),
        }
    }

    /// Whether the API server and Cluster API core are the genuine ones.
    #[must_use]
    pub const fn is_genuine(&self) -> bool {
        matches!(self.backend, Backend::Genuine(_))
    }

    /// One object as JSON, or None when it does not exist (or cannot be read).
    pub async fn get_object(&self, api_version: &str, kind: &str, namespace: &str, name: &str) -> Option<Value> {
        match &self.backend {
            Backend::Memkube { server, .. } => server.get_object(api_version, kind, namespace, name),
            Backend::Genuine(_) => {
                let api = dynamic_api(&self.client, api_version, kind, namespace)?;
                serde_json::to_value(api.get_opt(name).await.ok()??).ok()
            }
        }
    }

    /// Every object of a cluster-scoped kind, as JSON.
    pub async fn list_objects(&self, api_version: &str, kind: &str) -> Vec<Value> {
        match &self.backend {
            Backend::Memkube { server, .. } => server.list_objects(api_version, kind, None),
            Backend::Genuine(_) => {
                let Some(api) = dynamic_api(&self.client, api_version, kind, "") else {
                    return Vec::new();
                };
                let items = api.list(&kube::api::ListParams::default()).await.map(|l| l.items);
                items
                    .unwrap_or_default()
                    .into_iter()
                    .filter_map(|o| serde_json::to_value(o).ok())
                    .collect()
            }
        }
    }

    async fn wait_ready(&self) -> anyhow::Result<()> {
        let deadline = tokio::time::Instant::now() + READY_TIMEOUT;
        while !self.readiness.is_ready() {
            if self.manager.is_finished() {
                anyhow::bail!("the manager stopped during start-up");
            }
            if tokio::time::Instant::now() > deadline {
                anyhow::bail!(
                    "controllers not ready after {READY_TIMEOUT:?}: waiting for {:?}",
                    self.readiness.pending()
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(())
    }

    /// Stop the controllers (letting in-flight reconciles finish), then the simulator and the
    /// server, or the emulated kubelet.
    ///
    /// # Errors
    /// When the manager or simulator failed while running.
    pub async fn stop(self) -> anyhow::Result<()> {
        self.shutdown.cancel();
        let manager = self.manager.await.context("manager task failed")?;
        match self.backend {
            Backend::Memkube { server, simulator, .. } => {
                let simulator = simulator.stop().await.context("CAPI simulator failed");
                server.shutdown();
                manager.and(simulator)
            }
            Backend::Genuine(real) => {
                real.stop().await;
                manager
            }
        }
    }
}

/// The ServiceAccount the chart creates for Cluster API core's kubeconfig, so SelfManagedControlPlanes
/// can mint its token here too.
async fn create_workload_service_account(
    client: &kube::Client,
    settings: &crate::reconcile::Settings,
) -> anyhow::Result<()> {
    let namespace = settings
        .workload_service_account_namespace
        .as_deref()
        .unwrap_or_else(|| client.default_namespace());
    let api: kube::Api<k8s_openapi::api::core::v1::ServiceAccount> = kube::Api::namespaced(client.clone(), namespace);
    let body = serde_json::json!({
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {"name": settings.workload_service_account},
    });
    api.patch(
        &settings.workload_service_account,
        &kube::api::PatchParams::apply("caplv-sandbox"),
        &kube::api::Patch::Apply(body),
    )
    .await
    .with_context(|| {
        format!(
            "cannot create the workload ServiceAccount {namespace}/{}",
            settings.workload_service_account
        )
    })?;
    Ok(())
}

/// The in-memory API server with every CRD, serving on `args.listen`, and the CAPI simulator.
async fn start_memkube(args: &SandboxArgs) -> anyhow::Result<(memkube::Server, SocketAddr, capi_sim::SimulatorHandle)> {
    let server = memkube::Server::new();
    let addr = server
        .serve(args.listen)
        .await
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    let client = server.client();
    server
        .install_crds(&api::crds())
        .map_err(|e| anyhow::anyhow!("our CRDs were refused: {e}"))?;
    let versions = match args.capi_version {
        crate::cli::CapiVersionArg::V1beta1 => CapiVersions::V1beta1,
        crate::cli::CapiVersionArg::V1beta2 => CapiVersions::V1beta2,
    };
    capi_sim::install(&client, versions)
        .await
        .context("cannot install the Cluster API CRDs")?;
    let simulator = Simulator::builder(client)
        .versions(versions)
        .kubelet(KubeletMode::WithProviderId)
        // The Node joins only once the manager's CSR approver approves its kubelet.
        .kubelet_waits_for_client_csr(true)
        .drain_retry(Duration::from_secs(2))
        .build()
        .spawn();
    Ok((server, addr, simulator))
}

/// An API for a kind named by apiVersion and kind, with kube's usual plural.
fn dynamic_api(
    client: &kube::Client,
    api_version: &str,
    kind: &str,
    namespace: &str,
) -> Option<kube::Api<DynamicObject>> {
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    let ar = kube::api::ApiResource::from_gvk(&kube::api::GroupVersionKind::gvk(group, version, kind));
    Some(if namespace.is_empty() {
        kube::Api::all_with(client.clone(), &ar)
    } else {
        kube::Api::namespaced_with(client.clone(), namespace, &ar)
    })
}

/// Write `contents` to `path` atomically, so a script waiting for the file never reads half of it.
pub(crate) fn write_atomically(path: &Path, contents: &str) -> anyhow::Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, contents).with_context(|| format!("cannot write {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("cannot write {}", path.display()))
}

/// The `sandbox` subcommand: start, announce, run until SIGINT/SIGTERM.
///
/// # Errors
/// When start-up fails.
pub async fn run(args: SandboxArgs) -> anyhow::Result<()> {
    if args.demo {
        return crate::cmd::sandbox::demo::run(args).await;
    }
    let shutdown = app::shutdown_on_signals();
    let sandbox = Sandbox::start(&args).await?;
    write_atomically(&args.kubeconfig_out, &sandbox.kubeconfig())?;
    let kubeconfig = args.kubeconfig_out.display();
    println!(
        "caplv sandbox is ready: API server on {addr}\n\
         \n  export KUBECONFIG={kubeconfig}\n  \
         kubectl apply -f examples/seed/\n  \
         kubectl get cluster,libvirtcluster,libvirthost,libvirtmachine,machine,ignitionconfig,scheduledmachine\n\
         \nlibvirt: {libvirt}. Stop with Ctrl+C.",
        addr = sandbox.api_url(),
        libvirt = match args.libvirt {
            LibvirtMode::Test => "private test:/// drivers; no network connection to any host a manifest names",
            LibvirtMode::Real => "hosts are dialled as their manifests say",
        },
    );
    shutdown.cancelled().await;
    let _ = std::fs::remove_file(&args.kubeconfig_out);
    sandbox.stop().await
}

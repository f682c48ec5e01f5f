//! The sandbox: an in-memory API server with our CRDs and Cluster API core's, the CAPI
//! simulator and every enabled controller, in one process, for trying the product and for
//! system tests. It never dials an address a manifest names unless `--libvirt real` says so.

use std::{net::SocketAddr, path::Path, sync::Arc, time::Duration};

use anyhow::Context as _;
use capi_sim::{CapiVersions, KubeletMode, Simulator};
use tokio_util::sync::CancellationToken;

use crate::{
    api,
    app::{self, ManagerConfig, Shared},
    cli::{LibvirtMode, SandboxArgs},
    endpoint::{AlwaysReachable, EndpointProbe, TcpProbe},
    health::Readiness,
};

/// How long start-up may take before the sandbox gives up.
const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// A running sandbox.
pub struct Sandbox {
    /// The API server.
    pub server: memkube::Server,
    /// Where kubectl reaches it.
    pub addr: SocketAddr,
    readiness: Readiness,
    shutdown: CancellationToken,
    manager: tokio::task::JoinHandle<anyhow::Result<()>>,
    simulator: capi_sim::SimulatorHandle,
    /// What the manager shares (its libvirt connections, metrics).
    pub shared: Shared,
    /// The settings the controllers run with.
    pub settings: crate::controllers::Settings,
    /// Node files of the simulated libvirt hosts (`--libvirt test`); removed on drop.
    _hosts: Option<tempfile::TempDir>,
}

impl Sandbox {
    /// Start everything and wait until the controllers' caches have synced.
    ///
    /// # Errors
    /// When the listen address cannot be bound, a CRD is refused, or start-up times out.
    pub async fn start(args: &SandboxArgs) -> anyhow::Result<Self> {
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
        let simulator = Simulator::builder(client.clone())
            .versions(versions)
            .kubelet(KubeletMode::WithProviderId)
            // The Node joins only once the manager's CSR approver approves its kubelet.
            .kubelet_waits_for_client_csr(true)
            .drain_retry(Duration::from_secs(2))
            .build()
            .spawn();

        let probe: Arc<dyn EndpointProbe> = match args.libvirt {
            LibvirtMode::Test => Arc::new(AlwaysReachable),
            LibvirtMode::Real => Arc::new(TcpProbe {
                timeout: args.run.endpoint_probe_timeout(),
            }),
        };
        let mut config = ManagerConfig::from_args(&args.run, "default");
        create_workload_service_account(&client, &config.settings).await?;
        config.probe = probe;
        config.leader = None;
        let hosts = match args.libvirt {
            LibvirtMode::Test => Some(tempfile::tempdir().context("cannot create a directory for simulated hosts")?),
            LibvirtMode::Real => None,
        };
        config.settings.simulated_hosts = hosts.as_ref().map(|d| d.path().to_path_buf());
        let shared = Shared::new()?;
        let readiness = shared.readiness.clone();
        let shutdown = CancellationToken::new();
        let settings = config.settings.clone();
        let manager = tokio::spawn(app::run(client, config, shared.clone(), shutdown.clone()));
        let sandbox = Self {
            server,
            addr,
            readiness,
            shutdown,
            manager,
            simulator,
            shared,
            settings,
            _hosts: hosts,
        };
        sandbox.wait_ready().await?;
        Ok(sandbox)
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

    /// Stop the controllers (letting in-flight reconciles finish), the simulator and the server.
    ///
    /// # Errors
    /// When the manager or simulator failed while running.
    pub async fn stop(self) -> anyhow::Result<()> {
        self.shutdown.cancel();
        let manager = self.manager.await.context("manager task failed")?;
        let simulator = self.simulator.stop().await.context("CAPI simulator failed");
        self.server.shutdown();
        manager.and(simulator)
    }
}

/// The ServiceAccount the chart creates for Cluster API core's kubeconfig, so SelfManagedControlPlanes
/// can mint its token here too.
async fn create_workload_service_account(
    client: &kube::Client,
    settings: &crate::controllers::Settings,
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
        return crate::demo::run(args).await;
    }
    let shutdown = app::shutdown_on_signals();
    let sandbox = Sandbox::start(&args).await?;
    write_atomically(&args.kubeconfig_out, &memkube::kubeconfig_yaml(sandbox.addr))?;
    let kubeconfig = args.kubeconfig_out.display();
    println!(
        "caplv sandbox is ready: API server on http://{addr}\n\
         \n  export KUBECONFIG={kubeconfig}\n  \
         kubectl apply -f examples/seed/\n  \
         kubectl get cluster,libvirtcluster,libvirthost,libvirtmachine,machine,ignitionconfig,scheduledmachine\n\
         \nlibvirt: {libvirt}. Stop with Ctrl+C.",
        addr = sandbox.addr,
        libvirt = match args.libvirt {
            LibvirtMode::Test => "private test:/// drivers; no network connection to any host a manifest names",
            LibvirtMode::Real => "hosts are dialled as their manifests say",
        },
    );
    shutdown.cancelled().await;
    let _ = std::fs::remove_file(&args.kubeconfig_out);
    sandbox.stop().await
}

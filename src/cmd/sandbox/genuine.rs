//! The sandbox on a genuine control plane: kube-apiserver, kube-controller-manager and Cluster
//! API core are already running (`scripts/sandbox.sh --real` starts them with
//! `scripts/control-plane.sh` and installs the chart); the sandbox connects with three
//! identities and emulates only the kubelet.
//!
//! - the administrator applies the seed and narrates;
//! - the manager runs as the chart's ServiceAccount, so the real RBAC authorizer judges it;
//! - the emulated kubelet files its first CSR with a bootstrap identity, and then registers its
//!   Node with the certificate kube-controller-manager signs once the manager approved it.

use std::path::Path;

use anyhow::Context as _;
use capi_sim::kubelet_agent::{AgentHandle, ApiAccess, KubeletAgent};
use kube::config::{KubeConfigOptions, Kubeconfig};

use crate::cli::SandboxArgs;

/// The clients and the emulated kubelet of a genuine sandbox.
pub(super) struct Genuine {
    /// The administrator.
    pub admin: kube::Client,
    /// The manager's identity.
    pub manager: kube::Client,
    /// The administrator's kubeconfig, for kubectl.
    pub admin_kubeconfig: String,
    /// Where the API server is.
    pub api: ApiAccess,
    /// The CA bundle the manager trusts the API server with (for the kubeconfigs it writes).
    pub manager_ca: Option<String>,
    kubelet: AgentHandle,
}

/// The kubeconfig a flag names, read into a client configuration; errors name the flag.
async fn load(path: Option<&Path>, flag: &str) -> anyhow::Result<(kube::Config, String)> {
    let path = path.with_context(|| format!("--control-plane real needs {flag}"))?;
    let text = std::fs::read_to_string(path).with_context(|| format!("{flag}: cannot read {}", path.display()))?;
    let kubeconfig =
        Kubeconfig::from_yaml(&text).with_context(|| format!("{flag}: {} is no kubeconfig", path.display()))?;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .with_context(|| format!("{flag}: {} is unusable", path.display()))?;
    Ok((config, text))
}

fn client(config: kube::Config, flag: &str) -> anyhow::Result<kube::Client> {
    kube::Client::try_from(config).with_context(|| format!("{flag}: cannot build a client"))
}

impl Genuine {
    /// Connect, check the API server answers, and start the emulated kubelet.
    ///
    /// # Errors
    /// When a kubeconfig is missing or unusable, or the API server does not answer.
    pub async fn start(args: &SandboxArgs) -> anyhow::Result<Self> {
        let (admin_config, admin_kubeconfig) = load(args.admin_kubeconfig.as_deref(), "--admin-kubeconfig").await?;
        let (manager_config, _) = load(args.manager_kubeconfig.as_deref(), "--manager-kubeconfig").await?;
        let (bootstrap_config, _) = load(args.bootstrap_kubeconfig.as_deref(), "--bootstrap-kubeconfig").await?;
        let api = ApiAccess::of(&admin_config);
        let manager_ca = manager_config.root_cert.as_deref().map(crate::app::pem_bundle);
        let admin = client(admin_config, "--admin-kubeconfig")?;
        admin
            .apiserver_version()
            .await
            .with_context(|| format!("the API server at {} does not answer", api.url))?;
        let kubelet = KubeletAgent {
            observer: admin.clone(),
            bootstrap: client(bootstrap_config, "--bootstrap-kubeconfig")?,
            api: api.clone(),
            infra: kube::api::ApiResource::erase::<crate::api::LibvirtMachine>(&()),
            kubelet_version: admin
                .apiserver_version()
                .await
                .map(|v| v.git_version)
                .unwrap_or_default(),
            with_provider_id: true,
        }
        .spawn();
        Ok(Self {
            admin,
            manager: client(manager_config, "--manager-kubeconfig")?,
            admin_kubeconfig,
            api,
            manager_ca,
            kubelet,
        })
    }

    /// Stop the emulated kubelet.
    pub async fn stop(self) {
        self.kubelet.stop().await;
    }
}

//! The composition root: one client, one metrics registry, one HTTP server, optional leader
//! election, and the enabled controllers, all on one runtime and stopped by one token.

use std::{net::SocketAddr, sync::Arc, time::Duration};

use anyhow::Context as _;
use kube::Client;
use tokio_util::sync::CancellationToken;

use crate::{
    cli::RunArgs,
    clock::{Clock, SystemClock},
    controllers::{self, Family},
    endpoint::{EndpointProbe, TcpProbe},
    metrics::Metrics,
    reconcile::{Context, Settings},
};

pub mod client;
pub mod health;
pub mod http;
pub mod leader;
pub mod memory;

use health::Readiness;
use leader::LeaderConfig;

/// How often to look for Cluster API core while it is not installed.
const CAPI_DISCOVERY_INTERVAL: Duration = Duration::from_secs(10);

/// Everything the manager needs besides the client.
pub struct ManagerConfig {
    /// Families to run.
    pub families: Vec<Family>,
    /// Where `/metrics`, `/healthz` and `/readyz` listen.
    pub metrics_addr: SocketAddr,
    /// Controller settings.
    pub settings: Settings,
    /// Leader election, when enabled.
    pub leader: Option<LeaderConfig>,
    /// How control plane endpoints are checked.
    pub probe: Arc<dyn EndpointProbe>,
    /// The clock schedules are evaluated against.
    pub clock: Arc<dyn Clock>,
}

impl ManagerConfig {
    /// Build the configuration from `run`'s flags; `default_namespace` is the client's namespace.
    #[must_use]
    pub fn from_args(args: &RunArgs, default_namespace: &str) -> Self {
        // Destructured in full, so that a new flag cannot be left unwired.
        let RunArgs {
            controllers,
            metrics_addr,
            watch_namespace,
            leader_elect,
            leader_election_name,
            leader_election_namespace,
            leader_election_identity,
            lease_duration_seconds,
            endpoint_probe_interval_seconds,
            endpoint_probe_timeout_seconds,
            max_concurrent_creations,
            domain_check_interval_seconds,
            max_concurrent_host_connects,
            csr_approval_window_minutes,
            workload_service_account,
            workload_service_account_namespace,
            workload_api_server,
            workload_token_lifetime_minutes,
            // Used before the client exists: main's `app::connect`.
            api_timeout_seconds: _,
        } = args;
        let families = if controllers.is_empty() {
            Family::compiled()
        } else {
            dedup(controllers)
        };
        let leader = leader_elect.then(|| LeaderConfig {
            name: leader_election_name.clone(),
            namespace: leader_election_namespace
                .clone()
                .unwrap_or_else(|| default_namespace.to_owned()),
            identity: leader_election_identity.clone().unwrap_or_else(default_identity),
            duration_seconds: *lease_duration_seconds,
        });
        Self {
            families,
            metrics_addr: *metrics_addr,
            settings: Settings {
                watch_namespace: watch_namespace.clone(),
                endpoint_probe_interval: Duration::from_secs(*endpoint_probe_interval_seconds),
                error_requeue: Duration::from_secs(10),
                max_concurrent_creations: usize::try_from(*max_concurrent_creations).unwrap_or(usize::MAX),
                domain_check_interval: Duration::from_secs(*domain_check_interval_seconds),
                max_concurrent_host_connects: usize::try_from(*max_concurrent_host_connects).unwrap_or(usize::MAX),
                csr_approval_window: Duration::from_secs(csr_approval_window_minutes * 60),
                workload_service_account: workload_service_account.clone(),
                workload_service_account_namespace: workload_service_account_namespace.clone(),
                workload_api_server: workload_api_server.clone(),
                workload_token_lifetime: Duration::from_secs(workload_token_lifetime_minutes * 60),
                api_server_ca: None,
                first_wait_grace: crate::reconcile::FIRST_WAIT_GRACE,
            },
            leader,
            probe: Arc::new(TcpProbe {
                timeout: Duration::from_secs(*endpoint_probe_timeout_seconds),
            }),
            clock: Arc::new(SystemClock),
        }
    }
}

fn dedup(families: &[Family]) -> Vec<Family> {
    let mut out = families.to_vec();
    out.sort();
    out.dedup();
    out
}

fn default_identity() -> String {
    let host = std::env::var("POD_NAME")
        .or_else(|_| std::env::var("HOSTNAME"))
        .unwrap_or_else(|_| "caplv-manager".to_owned());
    format!("{host}-{}", uuid::Uuid::new_v4().simple())
}

/// State the manager shares with whoever started it: tests and the sandbox read readiness and
/// metrics directly instead of over HTTP.
#[derive(Clone, Debug)]
pub struct Shared {
    /// The one metrics registry.
    pub metrics: Arc<Metrics>,
    /// Readiness of the controllers.
    pub readiness: Readiness,
    /// The one libvirt connection per host (tests and the sandbox inspect hosts through it).
    #[cfg(feature = "caplv")]
    pub hosts: Arc<crate::reconcile::host_connections::HostConnections>,
}

impl Shared {
    /// Fresh metrics and readiness.
    ///
    /// # Errors
    /// When metrics cannot be registered.
    pub fn new() -> anyhow::Result<Self> {
        Ok(Self {
            metrics: Arc::new(Metrics::new().context("cannot register metrics")?),
            readiness: Readiness::default(),
            #[cfg(feature = "caplv")]
            hosts: Arc::default(),
        })
    }
}

/// A client for the cluster, with what the manager knows about trusting its API server.
pub struct Connection {
    /// The one Kubernetes client.
    pub client: Client,
    /// The CA certificates (PEM) the client trusts for the API server, from the kubeconfig's
    /// `certificate-authority(-data)` or, in a pod, the service account's `ca.crt`.
    pub api_server_ca: Option<String>,
}

/// Connect to the cluster from the kubeconfig or the in-cluster config, and check that the API
/// server answers within `timeout`, so a wrong or missing cluster fails fast with a clear message.
///
/// # Errors
/// When no configuration is found or the API server does not answer.
pub async fn connect(timeout: Duration) -> anyhow::Result<Connection> {
    let config = kube::Config::infer()
        .await
        .context("no Kubernetes configuration found: set KUBECONFIG, use ~/.kube/config, or run in a pod")?;
    let url = config.cluster_url.clone();
    let api_server_ca = config.root_cert.as_deref().map(pem_bundle);
    let client = client::build(config).context("invalid Kubernetes client configuration")?;
    match tokio::time::timeout(timeout, client.apiserver_version()).await {
        Ok(Ok(version)) => {
            tracing::info!(%url, version = version.git_version, "connected to the Kubernetes API server");
            Ok(Connection { client, api_server_ca })
        }
        Ok(Err(err)) => Err(anyhow::anyhow!(
            "cannot reach the Kubernetes API server at {url}: {err}"
        )),
        Err(_) => Err(anyhow::anyhow!(
            "the Kubernetes API server at {url} did not answer within {timeout:?}"
        )),
    }
}

/// DER certificates as one PEM bundle, the form kubeconfigs carry (base64 in 64-column lines).
pub fn pem_bundle(certificates: &[Vec<u8>]) -> String {
    use base64::Engine as _;
    let mut out = String::new();
    for der in certificates {
        let body = base64::engine::general_purpose::STANDARD.encode(der);
        out.push_str("-----BEGIN CERTIFICATE-----\n");
        for line in body.as_bytes().chunks(64) {
            out.push_str(&String::from_utf8_lossy(line));
            out.push('\n');
        }
        out.push_str("-----END CERTIFICATE-----\n");
    }
    out
}

/// Run the manager with `client` until `shutdown` is cancelled; in-flight reconciles finish first.
///
/// # Errors
/// When the HTTP address cannot be bound, metrics cannot be registered, or leader election fails.
pub async fn run(
    client: Client,
    config: ManagerConfig,
    shared: Shared,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let Shared {
        metrics,
        readiness,
        #[cfg(feature = "caplv")]
        hosts,
    } = shared;
    #[cfg(feature = "caplv")]
    hosts.set_max_concurrent_opens(config.settings.max_concurrent_host_connects);
    let listener = http::bind(config.metrics_addr)
        .await
        .with_context(|| format!("cannot listen on {}", config.metrics_addr))?;
    tracing::info!(addr = %listener.local_addr().unwrap_or(config.metrics_addr), "serving /metrics, /healthz and /readyz");
    let server = tokio::spawn(http::serve(
        listener,
        http::router(metrics.clone(), readiness.clone()),
        shutdown.clone().cancelled_owned(),
    ));
    memory::spawn_trimmer(shutdown.clone());

    let families: Vec<&str> = config.families.iter().map(|f| f.as_str()).collect();
    tracing::info!(?families, "controller families enabled");
    let Some(capi) = crate::reconcile::capi::wait_for(&client, CAPI_DISCOVERY_INTERVAL, &shutdown).await else {
        return finish(server).await;
    };

    let ctx = Arc::new(Context::new(
        client.clone(),
        metrics.clone(),
        config.settings,
        config.probe,
        capi,
        config.clock,
        #[cfg(feature = "caplv")]
        hosts,
    ));
    #[cfg(feature = "caplv")]
    crate::controllers::libvirt_inventory::install(&ctx);
    match &config.leader {
        None => {
            metrics.leader.set(1);
            controllers::run_families(ctx, &config.families, readiness, shutdown.clone()).await;
        }
        Some(leader_config) => {
            readiness.stand_by();
            leader::run_while_leader(client, leader_config, &metrics, &shutdown, |stop| {
                let ctx = ctx.clone();
                let readiness = readiness.clone();
                let families = config.families.clone();
                async move {
                    controllers::run_families(ctx, &families, readiness.clone(), stop).await;
                    // A standby replica is healthy and ready to take over.
                    readiness.stand_by();
                }
            })
            .await?;
        }
    }
    shutdown.cancel();
    finish(server).await
}

async fn finish(server: tokio::task::JoinHandle<std::io::Result<()>>) -> anyhow::Result<()> {
    server
        .await
        .context("HTTP server task failed")?
        .context("HTTP server failed")
}

/// A token cancelled by the first SIGINT or SIGTERM.
#[must_use]
pub fn shutdown_on_signals() -> CancellationToken {
    let token = CancellationToken::new();
    let trigger = token.clone();
    tokio::spawn(async move {
        wait_for_signal().await;
        tracing::info!("shutdown requested; finishing in-flight work");
        trigger.cancel();
    });
    token
}

async fn wait_for_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
        }
        Err(err) => {
            tracing::warn!(error = %err, "cannot listen for SIGTERM; only SIGINT stops the manager");
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser as _;

    use super::*;

    #[test]
    fn settings_default_to_the_command_lines_defaults() {
        let cli = crate::cli::Cli::try_parse_from(["caplv-manager"]).unwrap();
        assert_eq!(
            ManagerConfig::from_args(&cli.run, "default").settings,
            Settings::default()
        );
    }

    #[test]
    fn der_certificates_become_one_pem_bundle() {
        let der = vec![vec![0xab; 100], vec![1, 2, 3]];
        let pem = pem_bundle(&der);
        assert_eq!(pem.matches("-----BEGIN CERTIFICATE-----\n").count(), 2);
        let first = pem.lines().nth(1).unwrap();
        assert_eq!(first.len(), 64, "64-column lines");
        assert!(pem.ends_with("AQID\n-----END CERTIFICATE-----\n"), "{pem}");
        assert_eq!(pem_bundle(&[]), "");
    }
}

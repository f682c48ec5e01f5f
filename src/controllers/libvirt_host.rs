//! LibvirtHost controller.
//!
//! `connect (cached) → capabilities → pure plan → status`. There is no finalizer: a LibvirtHost
//! creates nothing outside Kubernetes.
//!
//! - **Connections.** `test:///…` and `qemu:///…` URIs are opened directly; `qemu+ssh://` reads the
//!   Secret `spec.secretRef` (key `ssh-privatekey`, namespace defaulting to the host's), opens one
//!   SSH session whose host key is judged by the spec's pin (or explicit opt-out), tunnels the
//!   remote libvirt socket to a private local socket and opens libvirt on that. One connection
//!   per host is kept in the controller's cache, keyed by (namespace, name), and rebuilt when the
//!   URI, the host key settings or the Secret's resourceVersion change, or when the tunnel or the
//!   libvirt connection is dead. Every blocking libvirt call runs in `spawn_blocking`.
//! - **Capacity.** `total` is what the host reports; `available` is total minus
//!   `spec.reservedResources`, clamped at zero. Subtracting what this manager's machines use comes
//!   with the LibvirtMachine controller. After a failed check the last known capacity, version
//!   and KVM flag are kept (the `Reachable`/`Ready` conditions and `ready` say they are stale).
//! - **Conditions.** `Reachable` (True `Connected`, or False with the transport's reason:
//!   `HostKeyMismatch`, `HostKeyNotPinned`, `AuthenticationFailed`, `ConnectionFailed`,
//!   `InvalidPrivateKey`, `InvalidHostKeyFingerprint`, `TunnelFailed`, `SecretNotFound`,
//!   `HypervisorUnavailable`, …) and `Ready` mirroring it. Messages never contain key material.
//!   `observedHostKeyFingerprint` is the key the SSH server presented, also on host key refusals
//!   so that it can be verified and pinned.
//! - **No hot loop.** Status is written only when it changes. `lastChecked` alone moves at most
//!   once per half health-check interval; since a healthy host is rechecked once per interval,
//!   that is in practice one status write per interval (≥ 30 s by schema), and none in between.
//! - **Requeue.** After `healthCheckIntervalSeconds`; a failure retries after
//!   `min(interval, 30 s)`. Secrets are watched (metadata only) and mapped to the hosts that
//!   reference them, so a new or rotated key is picked up at once.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::Duration,
};

use k8s_openapi::{
    api::core::v1::{ObjectReference, Secret},
    apimachinery::pkg::apis::meta::v1::Time,
    jiff::Timestamp,
};
use kube::{
    Resource, ResourceExt,
    api::{Api, PartialObjectMeta},
    runtime::{
        controller::{Action, Controller},
        reflector::{ObjectRef, Store},
        watcher,
    },
};
use tokio_util::sync::CancellationToken;

use super::{Context, apply_status, publish_event};
use crate::{
    api::{
        condition::{self, DesiredCondition, Status},
        libvirt_host::{HostCapacity, LibvirtHost, LibvirtHostSpec, LibvirtHostStatus, ReservedResources},
    },
    health::Readiness,
    libvirt::{
        hypervisor::{HostInfo, Hypervisor, HypervisorError},
        ssh::{ClientKey, HostKeyPolicy, LibvirtUri, SshError, SshOptions, SshSession, Tunnel, remote_socket_path},
        virt_backend::VirtHypervisor,
    },
};

/// Controller name in metrics and logs.
pub const NAME: &str = "libvirthost";
const FIELD_MANAGER: &str = "caplv-manager/libvirthost";
/// The Secret key holding the SSH private key.
pub const SECRET_KEY: &str = "ssh-privatekey";
/// The `Reachable` condition type.
pub const REACHABLE: &str = "Reachable";
/// Reason of a True `Reachable`/`Ready`.
pub const CONNECTED: &str = "Connected";
/// Upper bound on the retry delay after a failed check.
pub const FAILURE_RETRY: Duration = Duration::from_secs(30);

/// Failures of one reconcile (Kubernetes API trouble; host trouble is an [`Observation`]).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Reading the SSH key Secret failed.
    #[error("cannot read Secret {namespace}/{name}: {source}")]
    GetSecret {
        /// Secret namespace.
        namespace: String,
        /// Secret name.
        name: String,
        /// API error.
        #[source]
        source: kube::Error,
    },
    /// Writing status failed.
    #[error("cannot write status: {0}")]
    PatchStatus(#[source] kube::Error),
}

impl Error {
    /// Bounded reason for metrics and logs.
    #[must_use]
    pub const fn reason(&self) -> &'static str {
        match self {
            Self::GetSecret { .. } => "GetSecret",
            Self::PatchStatus(_) => "PatchStatus",
        }
    }
}

/// Why a host could not be checked; safe to show (no key material).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    /// Condition reason.
    pub reason: &'static str,
    /// Condition message.
    pub message: String,
    /// The SSH host key fingerprint the server presented, when one was seen.
    pub observed_fingerprint: Option<String>,
}

impl Failure {
    fn new(reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            reason,
            message: message.into(),
            observed_fingerprint: None,
        }
    }
}

impl From<SshError> for Failure {
    fn from(e: SshError) -> Self {
        Self {
            reason: e.reason().as_str(),
            observed_fingerprint: e.observed_fingerprint().map(str::to_owned),
            message: e.to_string(),
        }
    }
}

impl From<HypervisorError> for Failure {
    fn from(e: HypervisorError) -> Self {
        Self::new(e.reason(), e.to_string())
    }
}

/// What a check of the host found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Observation {
    /// libvirt answered.
    Probed {
        /// What the host offers.
        info: HostInfo,
        /// The SSH host key fingerprint, for SSH hosts.
        fingerprint: Option<String>,
    },
    /// The host could not be reached or used.
    Failed(Failure),
}

/// The decision of one reconcile.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    /// The status to write (written only when it differs from the current one).
    pub status: LibvirtHostStatus,
    /// When to check again.
    pub requeue: Duration,
}

/// Capacity from what the host reports, minus the reservation (clamped at zero).
#[must_use]
pub fn capacity(info: &HostInfo, reserved: &ReservedResources) -> HostCapacity {
    let total_vcpus = i32::try_from(info.cpus).unwrap_or(i32::MAX);
    let total_memory_mb = i64::try_from(info.memory_mib).unwrap_or(i64::MAX);
    HostCapacity {
        total_vcpus,
        total_memory_mb,
        available_vcpus: total_vcpus.saturating_sub(reserved.vcpus).max(0),
        available_memory_mb: total_memory_mb.saturating_sub(i64::from(reserved.memory_mb)).max(0),
    }
}

/// The health-check interval of a spec (the schema keeps it ≥ 30 s; at least 1 s here).
#[must_use]
pub fn interval(spec: &LibvirtHostSpec) -> Duration {
    Duration::from_secs(u64::try_from(spec.health_check_interval_seconds).unwrap_or(0).max(1))
}

/// Decide the status and the next check from an observation. Pure.
#[must_use]
pub fn plan(
    current: &LibvirtHostStatus,
    spec: &LibvirtHostSpec,
    generation: Option<i64>,
    observation: &Observation,
    now: &Time,
) -> Plan {
    let interval = interval(spec);
    let mut status = current.clone();
    let (condition_status, reason, message, requeue) = match observation {
        Observation::Probed { info, fingerprint } => {
            status.ready = true;
            status.capacity = Some(capacity(info, &spec.reserved_resources));
            status.libvirt_version = Some(info.libvirt_version.clone());
            status.kvm_available = Some(info.kvm_available);
            if fingerprint.is_some() {
                status.observed_host_key_fingerprint.clone_from(fingerprint);
            }
            let message = format!(
                "connected to libvirt {} ({} driver, {} vCPUs, {} MiB)",
                info.libvirt_version, info.driver, info.cpus, info.memory_mib
            );
            (Status::True, CONNECTED, message, interval)
        }
        Observation::Failed(failure) => {
            status.ready = false;
            if failure.observed_fingerprint.is_some() {
                status
                    .observed_host_key_fingerprint
                    .clone_from(&failure.observed_fingerprint);
            }
            (
                Status::False,
                failure.reason,
                failure.message.clone(),
                interval.min(FAILURE_RETRY),
            )
        }
    };
    let desired = [
        DesiredCondition::new(REACHABLE, condition_status, reason, message.clone()),
        DesiredCondition::new(condition::READY, condition_status, reason, message),
    ];
    status.conditions = condition::merge_all(&current.conditions, &desired, now, generation);
    status.observed_generation = generation;
    let stale = current.last_checked.as_ref().is_none_or(|last| {
        let age_ms = now.0.as_millisecond().saturating_sub(last.0.as_millisecond());
        u128::try_from(age_ms).unwrap_or(0) >= interval.as_millis() / 2
    });
    if status != *current || stale {
        status.last_checked = Some(now.clone());
    }
    Plan { status, requeue }
}

/// What a cached connection was built from; any change rebuilds it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct ConnKey {
    uri: String,
    host_key_fingerprint: Option<String>,
    insecure: bool,
    secret_version: Option<String>,
}

/// One open connection to a host. Fields drop in order: libvirt first, then the tunnel.
struct Connection {
    key: ConnKey,
    hv: Arc<VirtHypervisor>,
    tunnel: Option<Tunnel>,
    fingerprint: Option<String>,
}

impl Connection {
    fn is_closed(&self) -> bool {
        self.tunnel.as_ref().is_some_and(Tunnel::is_closed)
    }
}

/// Controller state: the shared context, the host store and the connection cache.
struct State {
    ctx: Arc<Context>,
    store: Store<LibvirtHost>,
    connections: Mutex<HashMap<(String, String), Arc<Connection>>>,
}

impl State {
    fn cached(&self, id: &(String, String)) -> Option<Arc<Connection>> {
        self.connections.lock().ok()?.get(id).cloned()
    }

    fn insert(&self, id: (String, String), conn: Arc<Connection>) -> Option<Arc<Connection>> {
        self.connections.lock().ok()?.insert(id, conn)
    }

    fn remove(&self, id: &(String, String)) -> Option<Arc<Connection>> {
        self.connections.lock().ok()?.remove(id)
    }

    /// Drop connections of hosts that no longer exist.
    fn prune(&self) -> Vec<Arc<Connection>> {
        let live: Vec<(String, String)> = self
            .store
            .state()
            .iter()
            .map(|h| (h.namespace().unwrap_or_default(), h.name_any()))
            .collect();
        let Ok(mut map) = self.connections.lock() else {
            return Vec::new();
        };
        let gone: Vec<(String, String)> = map.keys().filter(|k| !live.contains(k)).cloned().collect();
        gone.iter().filter_map(|k| map.remove(k)).collect()
    }
}

/// Close connections off the reactor (closing a remote libvirt connection is an RPC).
fn close(conns: Vec<Arc<Connection>>) {
    if !conns.is_empty() {
        drop(tokio::task::spawn_blocking(move || drop(conns)));
    }
}

/// The SSH key from the referenced Secret, with the Secret's resourceVersion.
enum SecretKey {
    Found { bytes: Vec<u8>, version: Option<String> },
    Missing(Failure),
}

async fn read_secret(client: &kube::Client, host: &LibvirtHost) -> Result<SecretKey, Error> {
    let host_ns = host.namespace().unwrap_or_default();
    let Some(reference) = &host.spec.secret_ref else {
        return Ok(SecretKey::Missing(Failure::new(
            "SecretNotFound",
            "spec.secretRef is required for qemu+ssh URIs",
        )));
    };
    let namespace = reference.namespace.clone().unwrap_or(host_ns);
    let api: Api<Secret> = Api::namespaced(client.clone(), &namespace);
    let secret = api.get_opt(&reference.name).await.map_err(|source| Error::GetSecret {
        namespace: namespace.clone(),
        name: reference.name.clone(),
        source,
    })?;
    let Some(secret) = secret else {
        return Ok(SecretKey::Missing(Failure::new(
            "SecretNotFound",
            format!("Secret {namespace}/{} does not exist", reference.name),
        )));
    };
    let version = secret.resource_version();
    match secret.data.as_ref().and_then(|d| d.get(SECRET_KEY)) {
        Some(bytes) => Ok(SecretKey::Found {
            bytes: bytes.0.clone(),
            version,
        }),
        None => Ok(SecretKey::Missing(Failure::new(
            "InvalidPrivateKey",
            format!("Secret {namespace}/{} has no {SECRET_KEY:?} key", reference.name),
        ))),
    }
}

async fn open_blocking(uri: String) -> Result<VirtHypervisor, Failure> {
    match tokio::task::spawn_blocking(move || VirtHypervisor::connect(&uri)).await {
        Ok(result) => result.map_err(Failure::from),
        Err(e) => Err(Failure::new(
            "ConnectionFailed",
            format!("libvirt connect task failed: {e}"),
        )),
    }
}

/// Open a new connection for `host`.
async fn open(
    spec: &LibvirtHostSpec,
    uri: &LibvirtUri,
    key: ConnKey,
    secret: Option<&[u8]>,
) -> Result<Connection, Failure> {
    match uri {
        LibvirtUri::Ssh(target) => {
            let policy = HostKeyPolicy::from_spec(
                spec.host_key_fingerprint.as_deref(),
                spec.insecure_skip_host_key_verification,
            )
            .map_err(|e| Failure::from(SshError::from(e)))?;
            let client_key = ClientKey::from_secret_bytes(secret.unwrap_or_default())?;
            let options = SshOptions::new(target.clone(), policy, client_key);
            let session = SshSession::connect(&options).await?;
            let fingerprint = session.host_fingerprint().to_owned();
            let remote = match remote_socket_path(target.mode, None) {
                Ok(r) => r,
                Err(e) => {
                    session.disconnect().await;
                    return Err(Failure {
                        observed_fingerprint: Some(fingerprint),
                        ..Failure::from(e)
                    });
                }
            };
            let tunnel = match session.open_tunnel(&remote, None).await {
                Ok(t) => t,
                Err(e) => {
                    session.disconnect().await;
                    return Err(Failure {
                        observed_fingerprint: Some(fingerprint),
                        ..Failure::from(e)
                    });
                }
            };
            match open_blocking(tunnel.libvirt_uri()).await {
                Ok(hv) => Ok(Connection {
                    key,
                    hv: Arc::new(hv),
                    tunnel: Some(tunnel),
                    fingerprint: Some(fingerprint),
                }),
                Err(failure) => {
                    drop(tunnel);
                    session.disconnect().await;
                    Err(Failure {
                        observed_fingerprint: Some(fingerprint),
                        ..failure
                    })
                }
            }
        }
        LibvirtUri::LocalQemu(_) | LibvirtUri::Test(_) => {
            let local = uri.local_uri().unwrap_or_else(|| spec.uri.clone());
            let hv = open_blocking(local).await?;
            Ok(Connection {
                key,
                hv: Arc::new(hv),
                tunnel: None,
                fingerprint: None,
            })
        }
    }
}

/// Connect (or reuse the cached connection) and read the host's capabilities.
async fn observe(host: &LibvirtHost, state: &State) -> Result<Observation, Error> {
    let id = (host.namespace().unwrap_or_default(), host.name_any());
    // In the sandbox's test mode the host is a private test driver, whatever the URI names.
    let spec_uri = match &state.ctx.settings.simulated_hosts {
        Some(dir) => match crate::libvirt::simulated::host_uri(dir, &id.0, &id.1) {
            Ok(uri) => uri,
            Err(e) => {
                return Ok(Observation::Failed(Failure::new(
                    "HypervisorUnavailable",
                    format!("cannot prepare the simulated host: {e}"),
                )));
            }
        },
        None => host.spec.uri.clone(),
    };
    let uri = match LibvirtUri::parse(&spec_uri) {
        Ok(u) => u,
        Err(e) => {
            close(state.remove(&id).into_iter().collect());
            return Ok(Observation::Failed(Failure::new("InvalidURI", e.to_string())));
        }
    };
    let mut secret = None;
    let mut secret_version = None;
    if uri.is_ssh() {
        match read_secret(&state.ctx.client, host).await? {
            SecretKey::Found { bytes, version } => {
                secret = Some(bytes);
                secret_version = version;
            }
            SecretKey::Missing(failure) => {
                close(state.remove(&id).into_iter().collect());
                return Ok(Observation::Failed(failure));
            }
        }
    }
    let key = ConnKey {
        uri: spec_uri.clone(),
        host_key_fingerprint: host.spec.host_key_fingerprint.clone(),
        insecure: host.spec.insecure_skip_host_key_verification,
        secret_version,
    };
    let conn = match state.cached(&id).filter(|c| c.key == key && !c.is_closed()) {
        Some(c) => c,
        None => {
            close(state.remove(&id).into_iter().collect());
            match open(&host.spec, &uri, key, secret.as_deref()).await {
                Ok(c) => {
                    let c = Arc::new(c);
                    close(state.insert(id.clone(), c.clone()).into_iter().collect());
                    c
                }
                Err(failure) => return Ok(Observation::Failed(failure)),
            }
        }
    };
    let hv = conn.hv.clone();
    let probed = tokio::task::spawn_blocking(move || {
        if hv.is_alive() {
            hv.capabilities()
        } else {
            Err(HypervisorError::ConnectionFailed {
                uri: hv.uri().to_owned(),
                message: "connection closed".to_owned(),
            })
        }
    })
    .await;
    match probed {
        Ok(Ok(info)) => Ok(Observation::Probed {
            info,
            fingerprint: conn.fingerprint.clone(),
        }),
        Ok(Err(e)) => {
            if e.is_transient() {
                // Rebuild on the next check.
                close(state.remove(&id).into_iter().collect());
            }
            Ok(Observation::Failed(Failure {
                observed_fingerprint: conn.fingerprint.clone(),
                ..Failure::from(e)
            }))
        }
        Err(e) => {
            close(state.remove(&id).into_iter().collect());
            Ok(Observation::Failed(Failure::new(
                "ConnectionFailed",
                format!("libvirt capabilities task failed: {e}"),
            )))
        }
    }
}

async fn reconcile(host: Arc<LibvirtHost>, state: Arc<State>) -> Result<Action, Error> {
    let timer = state.ctx.metrics.reconcile_started(NAME);
    let result = apply(&host, &state).await;
    timer.finish(result.as_ref().err().map(Error::reason));
    result
}

async fn apply(host: &LibvirtHost, state: &State) -> Result<Action, Error> {
    close(state.prune());
    let observation = observe(host, state).await?;
    let current = host.status.clone().unwrap_or_default();
    let now = Time(Timestamp::now());
    let plan = plan(&current, &host.spec, host.metadata.generation, &observation, &now);
    if plan.status != current {
        let namespace = host.namespace().unwrap_or_default();
        let api: Api<LibvirtHost> = Api::namespaced(state.ctx.client.clone(), &namespace);
        apply_status(&api, &host.name_any(), FIELD_MANAGER, &plan.status)
            .await
            .map_err(Error::PatchStatus)?;
        let reference: ObjectReference = host.object_ref(&());
        for (type_, reason, note) in super::condition_events(&current.conditions, &plan.status.conditions) {
            publish_event(&state.ctx.recorder, &reference, type_, &reason, "Reconcile", note).await;
        }
    }
    Ok(Action::requeue(plan.requeue))
}

fn error_policy(_host: Arc<LibvirtHost>, err: &Error, state: Arc<State>) -> Action {
    tracing::warn!(error = %err, reason = err.reason(), "reconcile failed");
    Action::requeue(state.ctx.settings.error_requeue)
}

/// The hosts whose `secretRef` names this Secret.
fn hosts_for_secret(store: &Store<LibvirtHost>, namespace: &str, name: &str) -> Vec<ObjectRef<LibvirtHost>> {
    store
        .state()
        .iter()
        .filter(|h| {
            h.spec.secret_ref.as_ref().is_some_and(|r| {
                let host_ns = h.namespace().unwrap_or_default();
                r.name == name && r.namespace.as_deref().unwrap_or(&host_ns) == namespace
            })
        })
        .map(|h| ObjectRef::from_obj(h.as_ref()))
        .collect()
}

/// Run the controller until `shutdown` is cancelled.
pub async fn run(ctx: Arc<Context>, readiness: Readiness, shutdown: CancellationToken) {
    let secrets: Api<PartialObjectMeta<Secret>> = match &ctx.settings.watch_namespace {
        Some(ns) => Api::namespaced(ctx.client.clone(), ns),
        None => Api::all(ctx.client.clone()),
    };
    let controller = Controller::new(ctx.watched_api::<LibvirtHost>(), watcher::Config::default());
    let store = controller.store();
    let by_secret = store.clone();
    let controller = controller
        .watches(secrets, watcher::Config::default(), move |secret| {
            hosts_for_secret(
                &by_secret,
                secret.namespace().as_deref().unwrap_or_default(),
                &secret.name_any(),
            )
        })
        .graceful_shutdown_on(shutdown.clone().cancelled_owned());
    let synced = {
        let store = store.clone();
        async move { super::wait_synced(&store).await }
    };
    let state = Arc::new(State {
        ctx: ctx.clone(),
        store,
        connections: Mutex::default(),
    });
    super::drive(
        controller,
        super::Readying {
            name: NAME,
            synced,
            readiness,
            metrics: ctx.metrics.clone(),
        },
        reconcile,
        error_policy,
        state.clone(),
    )
    .await;
    let all: Vec<Arc<Connection>> = state
        .connections
        .lock()
        .map(|mut m| m.drain().map(|(_, c)| c).collect())
        .unwrap_or_default();
    close(all);
}

#[cfg(test)]
mod tests;

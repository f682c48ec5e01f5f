//! One libvirt connection per LibvirtHost, shared by the LibvirtHost controller (health checks)
//! and the LibvirtMachine controller (provisioning) of the same manager.
//!
//! - `test:///…` and `qemu:///…` URIs are opened directly; `qemu+ssh://` reads the Secret
//!   `spec.secretRef` (key `ssh-privatekey`, namespace defaulting to the host's), opens one SSH
//!   session whose host key is judged by the spec's pin (or explicit opt-out) before
//!   authenticating, tunnels the remote libvirt socket to a private local socket and opens
//!   libvirt on that. The key stays in memory.
//! - The key Secret is read only when the shared Secret metadata cache shows it exists and has
//!   a version the open connection was not built with (a missing one is reported unread).
//! - A connection is rebuilt when the URI, the host key settings or the Secret's resourceVersion
//!   change, or when the tunnel or libvirt says it is dead. Opening is serialised per host (two
//!   reconciles never open two connections to one host) and bounded across hosts by a semaphore,
//!   so a thousand hosts coming up at once do not start a thousand SSH handshakes.
//! - A host that cannot be connected to is backed off ([`backoff`]): its failure is answered
//!   again without dialling for a while, however many reconcilers ask.
//! - A private `test:///<file>` driver keeps its state in its connection, so sharing the
//!   connection is also what lets both controllers see the same simulated host.
//! - Closing a remote libvirt connection is an RPC: connections are dropped on a blocking thread.

use std::{
    collections::HashMap,
    sync::{
        Arc, Mutex,
        atomic::{AtomicUsize, Ordering},
    },
};

use k8s_openapi::api::core::v1::Secret;
use kube::{Api, ResourceExt};
use prometheus::IntCounterVec;
use tokio::sync::{Mutex as AsyncMutex, Semaphore};

use crate::{
    api::libvirt_host::{HostReason, LibvirtHost, LibvirtHostSpec},
    libvirt::{
        hypervisor::Hypervisor,
        ssh::{ClientKey, HostKeyPolicy, LibvirtUri, SshError, SshOptions, SshSession, Tunnel, remote_socket_path},
        virt_backend::VirtHypervisor,
    },
    metrics::Metrics,
};

/// The Secret key holding the SSH private key.
pub const SECRET_KEY: &str = "ssh-privatekey";

/// A host, by namespace and name.
pub type HostId = (String, String);

/// The id of `host`.
#[must_use]
pub fn host_id(host: &LibvirtHost) -> HostId {
    (host.namespace().unwrap_or_default(), host.name_any())
}

mod backoff;
mod outcome;

pub use outcome::{Failure, HostCall, Reach, SecretReadError, Transient, hypervisor_reason, ssh_reason};

/// What a cached connection was built from; any change rebuilds it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct ConnKey {
    uri: String,
    host_key_fingerprint: Option<String>,
    insecure: bool,
    secret_version: Option<String>,
}

/// One open connection to a host. Fields drop in order: libvirt first, then the tunnel.
pub struct Connection {
    key: ConnKey,
    hv: Arc<VirtHypervisor>,
    tunnel: Option<Tunnel>,
    fingerprint: Option<String>,
}

impl Connection {
    /// The hypervisor behind this connection (blocking calls: use `spawn_blocking`).
    #[must_use]
    pub fn hypervisor(&self) -> Arc<dyn Hypervisor> {
        self.hv.clone()
    }

    /// The SSH host key fingerprint the server presented, for SSH hosts.
    #[must_use]
    pub fn fingerprint(&self) -> Option<&str> {
        self.fingerprint.as_deref()
    }

    /// libvirt RPC messages sent over SSH on this connection, for SSH hosts.
    #[must_use]
    pub fn rpc_messages(&self) -> Option<u64> {
        self.tunnel.as_ref().map(Tunnel::rpc_messages)
    }

    /// Those messages by program and procedure number, for SSH hosts.
    #[must_use]
    pub fn rpc_procedures(&self) -> Option<std::collections::BTreeMap<crate::libvirt::ssh::rpc_count::Procedure, u64>> {
        self.tunnel.as_ref().map(Tunnel::rpc_procedures)
    }

    /// Whether the tunnel or the libvirt connection has died (checked without an RPC).
    fn is_closed(&self) -> bool {
        self.tunnel.as_ref().is_some_and(Tunnel::is_closed) || !self.hv.is_alive()
    }
}

/// Where a host's libvirt is reached. The product opens the URI the spec names ([`SpecUri`]);
/// the sandbox injects private test drivers, so that no address in a manifest is dialled.
pub trait HostLocator: Send + Sync {
    /// The libvirt URI to open for `host`, or why there is none.
    ///
    /// # Errors
    /// A failure reported on the host, as any connection failure is.
    fn uri(&self, host: &LibvirtHost) -> Result<String, Failure>;
}

/// Every host is reached at `spec.uri`.
#[derive(Clone, Copy, Debug, Default)]
pub struct SpecUri;

impl HostLocator for SpecUri {
    fn uri(&self, host: &LibvirtHost) -> Result<String, Failure> {
        Ok(host.spec.uri.clone())
    }
}

/// A host's open connection, or the failure of its last open.
#[derive(Default)]
struct SlotState {
    open: Option<Arc<Connection>>,
    failing: Option<backoff::Backoff>,
}

/// A slot per host; its async lock serialises opening.
type Slot = Arc<AsyncMutex<SlotState>>;

/// Connections opened at the same time unless configured otherwise.
pub const DEFAULT_MAX_CONCURRENT_OPENS: usize = 16;

/// The connection cache shared by the CAPLV controllers (and, read-only, by tests and the
/// sandbox, which look at the same simulated hosts through it).
pub struct HostConnections {
    locator: Arc<dyn HostLocator>,
    slots: Mutex<HashMap<HostId, Slot>>,
    opening: Semaphore,
    limit: AtomicUsize,
    /// The shared Secret metadata cache, once the CAPLV family has started: it tells when a
    /// key Secret is absent, or unchanged since the open connection read it, without a GET.
    secret_index: std::sync::OnceLock<SecretIndex>,
    /// Where calls and connects are counted, once the family has started.
    counted_in: std::sync::OnceLock<Arc<Metrics>>,
}

/// Secret metadata: names and `resourceVersion`s, never contents.
pub type SecretIndex = kube::runtime::reflector::Store<kube::api::PartialObjectMeta<Secret>>;

impl std::fmt::Debug for HostConnections {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let hosts = self.slots.lock().map(|s| s.len()).unwrap_or(0);
        f.debug_struct("HostConnections")
            .field("hosts", &hosts)
            .finish_non_exhaustive()
    }
}

impl Default for HostConnections {
    fn default() -> Self {
        Self::new(DEFAULT_MAX_CONCURRENT_OPENS)
    }
}

impl HostConnections {
    /// A cache that opens at most `max_concurrent_opens` connections at a time.
    #[must_use]
    pub fn new(max_concurrent_opens: usize) -> Self {
        let limit = max_concurrent_opens.max(1);
        Self {
            locator: Arc::new(SpecUri),
            slots: Mutex::default(),
            opening: Semaphore::new(limit),
            limit: AtomicUsize::new(limit),
            secret_index: std::sync::OnceLock::new(),
            counted_in: std::sync::OnceLock::new(),
        }
    }

    /// Count calls and connects in `metrics` (set once, when the family starts).
    pub fn count_in(&self, metrics: Arc<Metrics>) {
        let _ = self.counted_in.set(metrics);
    }

    fn count(&self, metric: impl Fn(&Metrics) -> &IntCounterVec, result: &str) {
        if let Some(m) = self.counted_in.get() {
            metric(m).with_label_values(&[result]).inc();
        }
    }

    /// Consult `index` before reading a key Secret (set once, when the family starts).
    pub fn use_secret_index(&self, index: SecretIndex) {
        let _ = self.secret_index.set(index);
    }

    /// What the Secret index says of `host`'s key Secret: `None` when it cannot tell (no index,
    /// or no Secret reference), else the Secret's version, `None` inside when there is no
    /// such Secret.
    async fn indexed_secret_version(&self, host: &LibvirtHost) -> Option<Option<String>> {
        let index = self.secret_index.get()?;
        let (namespace, name) = secret_ref(host).ok()?;
        crate::reconcile::wait_synced(index).await;
        let found = index.get(&kube::runtime::reflector::ObjectRef::new(&name).within(&namespace));
        Some(found.map(|meta| meta.resource_version().unwrap_or_default()))
    }

    /// The same cache, reaching hosts where `locator` says instead of at their spec's URI.
    #[must_use]
    pub fn with_locator(mut self, locator: Arc<dyn HostLocator>) -> Self {
        self.locator = locator;
        self
    }

    /// Change how many connections may be opened at a time (set once at start-up).
    pub fn set_max_concurrent_opens(&self, n: usize) {
        let n = n.max(1);
        let old = self.limit.swap(n, Ordering::SeqCst);
        if n > old {
            self.opening.add_permits(n - old);
        } else {
            self.opening.forget_permits(old - n);
        }
    }

    fn slot(&self, id: &HostId) -> Option<Slot> {
        let mut slots = self.slots.lock().ok()?;
        Some(slots.entry(id.clone()).or_default().clone())
    }

    /// The open connection to `host`, opening (or rebuilding) it when needed.
    ///
    /// # Errors
    /// A Kubernetes API failure reading the key Secret (retry); why the host cannot be used is
    /// [`Reach::Unusable`].
    pub async fn get(&self, client: &kube::Client, host: &LibvirtHost) -> Result<Reach, SecretReadError> {
        let id = host_id(host);
        let spec_uri = match self.locator.uri(host) {
            Ok(uri) => uri,
            Err(failure) => return Ok(Reach::Unusable(failure)),
        };
        let Some(slot) = self.slot(&id) else {
            return Ok(Reach::Unusable(Failure::new(
                HostReason::ConnectionFailed,
                "connection cache is poisoned",
            )));
        };
        let uri = match LibvirtUri::parse(&spec_uri) {
            Ok(u) => u,
            Err(e) => {
                close(slot.lock().await.open.take());
                return Ok(Reach::Unusable(Failure::new(HostReason::InvalidUri, e.to_string())));
            }
        };
        let mut secret = None;
        let mut secret_version = None;
        if uri.is_ssh() {
            match self.indexed_secret_version(host).await {
                Some(None) => {
                    close(slot.lock().await.open.take());
                    return Ok(Reach::Unusable(
                        secret_ref(host).map_or_else(|f| f, |(ns, name)| missing(&ns, &name)),
                    ));
                }
                // Unchanged since the open connection read it: nothing to read.
                Some(Some(version)) => {
                    let guard = slot.lock().await;
                    if let Some(conn) = guard.open.as_ref().filter(|c| {
                        !c.is_closed()
                            && c.key.uri == spec_uri
                            && c.key.host_key_fingerprint == host.spec.host_key_fingerprint
                            && c.key.insecure == host.spec.insecure_skip_host_key_verification
                            && c.key.secret_version.as_deref() == Some(version.as_str())
                    }) {
                        return Ok(Reach::Open(conn.clone()));
                    }
                }
                None => {}
            }
            match read_secret(client, host).await? {
                Ok((bytes, version)) => {
                    secret = Some(bytes);
                    secret_version = version;
                }
                Err(failure) => {
                    close(slot.lock().await.open.take());
                    return Ok(Reach::Unusable(failure));
                }
            }
        }
        let key = ConnKey {
            uri: spec_uri,
            host_key_fingerprint: host.spec.host_key_fingerprint.clone(),
            insecure: host.spec.insecure_skip_host_key_verification,
            secret_version,
        };
        let mut guard = slot.lock().await;
        if let Some(conn) = guard.open.as_ref().filter(|c| c.key == key && !c.is_closed()) {
            return Ok(Reach::Open(conn.clone()));
        }
        close(guard.open.take());
        let now = tokio::time::Instant::now();
        if let Some(failure) = guard.failing.as_ref().and_then(|b| b.holds(&key, now)) {
            return Ok(Reach::Unusable(failure.clone()));
        }
        let Ok(_permit) = self.opening.acquire().await else {
            return Ok(Reach::Unusable(Failure::new(
                HostReason::ConnectionFailed,
                "connection cache is closed",
            )));
        };
        match open(&host.spec, &uri, key.clone(), secret.as_deref()).await {
            Ok(conn) => {
                self.count(|m| &m.host_connects, "opened");
                let conn = Arc::new(conn);
                *guard = SlotState {
                    open: Some(conn.clone()),
                    failing: None,
                };
                Ok(Reach::Open(conn))
            }
            Err(failure) => {
                self.count(|m| &m.host_connects, "failed");
                let now = tokio::time::Instant::now();
                guard.failing = Some(backoff::Backoff::after(
                    guard.failing.as_ref(),
                    key,
                    failure.clone(),
                    now,
                ));
                Ok(Reach::Unusable(failure))
            }
        }
    }

    /// Connect to `host` and run `work` on its hypervisor on a blocking thread (libvirt calls
    /// block, an RPC each). A lost connection, or a task that died, drops the connection so
    /// that the next call rebuilds it.
    ///
    /// # Errors
    /// A Kubernetes API failure reading the host's key Secret.
    pub async fn call<T, E>(
        &self,
        client: &kube::Client,
        host: &LibvirtHost,
        work: impl FnOnce(&dyn Hypervisor) -> Result<T, E> + Send + 'static,
    ) -> Result<HostCall<T, E>, SecretReadError>
    where
        T: Send + 'static,
        E: Transient + Send + 'static,
    {
        let conn = match self.get(client, host).await? {
            Reach::Open(conn) => conn,
            Reach::Unusable(failure) => {
                self.count(|m| &m.host_calls, "unreachable");
                return Ok(HostCall::Unreachable(failure));
            }
        };
        let hv = conn.hypervisor();
        let fingerprint = conn.fingerprint().map(str::to_owned);
        match tokio::task::spawn_blocking(move || work(hv.as_ref())).await {
            Ok(result) => {
                self.count(|m| &m.host_calls, if result.is_ok() { "ok" } else { "error" });
                if result.as_ref().err().is_some_and(Transient::lost_connection) || conn.is_closed() {
                    self.forget(&host_id(host)).await;
                }
                Ok(HostCall::Ran { result, fingerprint })
            }
            Err(e) => {
                self.count(|m| &m.host_calls, "unreachable");
                self.forget(&host_id(host)).await;
                Ok(HostCall::Unreachable(Failure {
                    observed_fingerprint: fingerprint,
                    ..Failure::new(HostReason::ConnectionFailed, format!("libvirt task failed: {e}"))
                }))
            }
        }
    }

    /// Drop `host`'s connection (after a transport error), so the next `get` rebuilds it.
    pub async fn forget(&self, id: &HostId) {
        if let Some(slot) = self.slot(id) {
            close(slot.lock().await.open.take());
        }
    }

    /// Drop the connections of hosts not in `live`.
    pub fn prune(&self, live: &[HostId]) {
        let gone: Vec<Slot> = match self.slots.lock() {
            Ok(mut slots) => {
                let ids: Vec<HostId> = slots.keys().filter(|k| !live.contains(k)).cloned().collect();
                ids.iter().filter_map(|k| slots.remove(k)).collect()
            }
            Err(_) => Vec::new(),
        };
        for slot in gone {
            if let Ok(mut guard) = slot.try_lock() {
                close(guard.open.take());
            }
        }
    }

    /// Drop every connection (at shutdown).
    pub fn close_all(&self) {
        let all: Vec<Slot> = self
            .slots
            .lock()
            .map(|mut m| m.drain().map(|(_, s)| s).collect())
            .unwrap_or_default();
        for slot in all {
            if let Ok(mut guard) = slot.try_lock() {
                close(guard.open.take());
            }
        }
    }
}

/// Close a connection off the reactor (closing a remote libvirt connection is an RPC).
fn close(conn: Option<Arc<Connection>>) {
    if let Some(conn) = conn
        && let Ok(handle) = tokio::runtime::Handle::try_current()
    {
        drop(handle.spawn_blocking(move || drop(conn)));
    }
}

/// The SSH key bytes and the Secret's resourceVersion, or why there are none.
async fn read_secret(
    client: &kube::Client,
    host: &LibvirtHost,
) -> Result<Result<(Vec<u8>, Option<String>), Failure>, SecretReadError> {
    let (namespace, name) = match secret_ref(host) {
        Ok(found) => found,
        Err(failure) => return Ok(Err(failure)),
    };
    let api: Api<Secret> = Api::namespaced(client.clone(), &namespace);
    let secret = api.get_opt(&name).await.map_err(|source| SecretReadError {
        namespace: namespace.clone(),
        name: name.clone(),
        source,
    })?;
    let Some(secret) = secret else {
        return Ok(Err(missing(&namespace, &name)));
    };
    let version = secret.resource_version();
    match secret.data.as_ref().and_then(|d| d.get(SECRET_KEY)) {
        Some(bytes) => Ok(Ok((bytes.0.clone(), version))),
        None => Ok(Err(Failure::new(
            HostReason::InvalidPrivateKey,
            format!("Secret {namespace}/{name} has no {SECRET_KEY:?} key"),
        ))),
    }
}

/// The namespace and name of `host`'s key Secret (the namespace defaults to the host's).
fn secret_ref(host: &LibvirtHost) -> Result<(String, String), Failure> {
    let Some(reference) = &host.spec.secret_ref else {
        return Err(Failure::new(
            HostReason::SecretNotFound,
            "spec.secretRef is required for qemu+ssh URIs",
        ));
    };
    let namespace = reference
        .namespace
        .clone()
        .unwrap_or_else(|| host.namespace().unwrap_or_default());
    Ok((namespace, reference.name.clone()))
}

fn missing(namespace: &str, name: &str) -> Failure {
    Failure::new(
        HostReason::SecretNotFound,
        format!("Secret {namespace}/{name} does not exist"),
    )
}

async fn open_blocking(uri: String) -> Result<VirtHypervisor, Failure> {
    match tokio::task::spawn_blocking(move || VirtHypervisor::connect(&uri)).await {
        Ok(result) => result.map_err(Failure::from),
        Err(e) => Err(Failure::new(
            HostReason::ConnectionFailed,
            format!("libvirt connect task failed: {e}"),
        )),
    }
}

/// Attach the fingerprint seen on the wire to a failure after the handshake.
fn seen(fingerprint: &str, failure: Failure) -> Failure {
    Failure {
        observed_fingerprint: Some(fingerprint.to_owned()),
        ..failure
    }
}

/// Open a new connection.
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
            let tunnel = match remote_socket_path(target.mode, None) {
                Ok(remote) => session.open_tunnel(&remote, None).await,
                Err(e) => Err(e),
            };
            let tunnel = match tunnel {
                Ok(t) => t,
                Err(e) => {
                    session.disconnect().await;
                    return Err(seen(&fingerprint, Failure::from(e)));
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
                    Err(seen(&fingerprint, failure))
                }
            }
        }
        LibvirtUri::LocalQemu(_) | LibvirtUri::Test(_) => {
            let local = uri.local_uri().unwrap_or_else(|| key.uri.clone());
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

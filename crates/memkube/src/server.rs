//! The server handle: construction, in-process client, TCP serving, and the pub test hooks.

use crate::hooks::{Fault, Hooks};
use crate::ops::{State, WriteOpts};
use crate::registry::{Registry, ResourceInfo};
use crate::status::{ApiError, ApiResult};
use crate::store::Store;
use crate::{meta, routes};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::sync::watch;

/// Tunables.
#[derive(Debug, Clone)]
pub struct Config {
    /// Period of BOOKMARK events on watches that allow them.
    pub bookmark_interval: Duration,
    /// Events kept for watch resumption before older resourceVersions get 410.
    pub event_log_capacity: usize,
    /// Events of its own kind buffered per watcher before it is dropped with 410.
    pub watch_buffer: usize,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            bookmark_interval: Duration::from_secs(1),
            event_log_capacity: 10_000,
            watch_buffer: 4096,
        }
    }
}

/// State shared by the router, watches and the handle.
#[derive(Debug)]
pub struct Shared {
    state: Mutex<State>,
    hooks: Mutex<Hooks>,
    cut: watch::Sender<u64>,
    shutdown: watch::Sender<bool>,
    /// Tunables.
    pub config: Config,
}

impl Shared {
    /// Lock the store and registry (a poisoned lock is still usable: state stays consistent
    /// because writes are applied at the end of each operation).
    pub fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Lock the hooks.
    pub fn hooks(&self) -> MutexGuard<'_, Hooks> {
        self.hooks.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Receiver notified when tests cut all watches.
    pub fn cut_rx(&self) -> watch::Receiver<u64> {
        self.cut.subscribe()
    }
}

/// An in-memory Kubernetes API server. Cheap to clone; all clones share state.
#[derive(Debug, Clone)]
pub struct Server {
    shared: Arc<Shared>,
}

impl Default for Server {
    fn default() -> Self {
        Self::new()
    }
}

fn system_ns(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
}

impl Server {
    /// A server with `default`, `kube-system` and `kube-public` namespaces.
    pub fn new() -> Self {
        Self::with_config(Config::default())
    }

    /// A server with custom tunables.
    pub fn with_config(config: Config) -> Self {
        let mut state = State {
            reg: Registry::builtin(),
            store: Store::new(config.event_log_capacity, config.watch_buffer),
        };
        if let Some(info) = state.reg.get("", "v1", "namespaces") {
            for n in ["default", "kube-system", "kube-public", "kube-node-lease"] {
                let _ = state.create(&info, "", system_ns(n), &WriteOpts::default());
            }
        }
        let (cut, _) = watch::channel(0);
        let (shutdown, _) = watch::channel(false);
        Server {
            shared: Arc::new(Shared {
                state: Mutex::new(state),
                hooks: Mutex::new(Hooks::default()),
                cut,
                shutdown,
                config,
            }),
        }
    }

    /// The axum router (a tower Service) serving the API.
    pub fn router(&self) -> axum::Router {
        routes::router(self.shared.clone())
    }

    /// A kube client talking to this server in-process (default namespace `default`).
    pub fn client(&self) -> kube::Client {
        kube::Client::new(self.router(), "default")
    }

    /// A client like [`Server::client`] whose requests carry `Impersonate-User: user`, so that
    /// [`Server::requests_by`] can tell them apart from other components' (no authorization is
    /// enforced).
    pub fn client_as(&self, user: &str) -> kube::Client {
        let value = http::HeaderValue::from_str(user).unwrap_or(http::HeaderValue::from_static("invalid"));
        let service = tower::ServiceBuilder::new()
            .map_request(move |mut req: http::Request<kube::client::Body>| {
                req.headers_mut().insert("impersonate-user", value.clone());
                req
            })
            .service(self.router());
        kube::Client::new(service, "default")
    }

    /// Serve over plain HTTP on `addr` (port 0 picks one); returns the bound address.
    pub async fn serve(&self, addr: SocketAddr) -> anyhow::Result<SocketAddr> {
        let listener = tokio::net::TcpListener::bind(addr).await?;
        let local = listener.local_addr()?;
        // As Go's net/http (so kube-apiserver) does: without TCP_NODELAY, a response written in
        // two parts waits for the client's delayed ACK (about 40 ms on Linux) per request.
        let listener = axum::serve::ListenerExt::tap_io(listener, |stream: &mut tokio::net::TcpStream| {
            let _ = stream.set_nodelay(true);
        });
        let mut stop = self.shared.shutdown.subscribe();
        let router = self.router();
        tokio::spawn(async move {
            let _ = axum::serve(listener, router)
                .with_graceful_shutdown(async move {
                    let _ = stop.wait_for(|s| *s).await;
                })
                .await;
        });
        Ok(local)
    }

    /// Stop TCP listeners and end all watches.
    pub fn shutdown(&self) {
        self.shared.shutdown.send_replace(true);
        self.cut_watches();
    }

    /// Register CRDs synchronously (create, or update when they exist).
    pub fn install_crds<T: serde::Serialize>(&self, crds: &[T]) -> ApiResult<()> {
        for c in crds {
            let v = serde_json::to_value(c).map_err(|e| ApiError::bad_request(e.to_string()))?;
            self.put_object(v)?;
        }
        Ok(())
    }

    // ----- test hooks -----

    /// Fail matching requests (see [`Fault`]).
    pub fn inject_fault(&self, f: Fault) {
        self.shared.hooks().add_fault(f);
    }

    /// How many injected faults are not used up yet.
    pub fn pending_faults(&self) -> usize {
        self.shared.hooks().pending_faults()
    }

    /// Remove all pending faults.
    pub fn clear_faults(&self) {
        self.shared.hooks().clear_faults();
    }

    /// Delay every request by `d` (None to stop).
    pub fn set_latency(&self, d: Option<Duration>) {
        self.shared.hooks().latency = d;
    }

    /// End every live watch stream (clients see the stream close and re-watch).
    pub fn cut_watches(&self) {
        self.shared.cut.send_modify(|v| *v += 1);
    }

    /// Drop the event log so that resuming a watch from an older resourceVersion yields 410.
    pub fn compact(&self) {
        self.shared.lock().store.compact();
    }

    /// Number of requests for (verb, `plural` or `plural.group`, subresource or "").
    pub fn request_count(&self, verb: &str, resource: &str, subresource: &str) -> u64 {
        self.shared.hooks().count(verb, resource, subresource)
    }

    /// All request counts keyed by (verb, resource, subresource).
    pub fn request_counts(&self) -> BTreeMap<(String, String, String), u64> {
        self.shared.hooks().counts()
    }

    /// Like [`Server::request_counts`], for the requests of clients from
    /// [`Server::client_as`]`(user)` only; `""` selects the clients that impersonate no one (a
    /// process under test, when every other client names itself).
    pub fn request_counts_of(&self, user: &str) -> BTreeMap<(String, String, String), u64> {
        self.shared.hooks().counts_of(user)
    }

    /// The distinct (verb, `plural[.group]`, subresource, object name) requests made by clients
    /// from [`Server::client_as`]`(user)` (and anyone sending that `Impersonate-User`); the name
    /// lets RBAC checks honour `resourceNames`.
    pub fn requests_by(&self, user: &str) -> std::collections::BTreeSet<(String, String, String, String)> {
        self.shared.hooks().requests_by(user)
    }

    /// Forget request counts.
    pub fn reset_counts(&self) {
        self.shared.hooks().reset_counts();
    }

    /// Current global resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.shared.lock().store.rv()
    }

    fn info(&self, api_version: &str, kind: &str) -> ApiResult<Arc<ResourceInfo>> {
        self.shared.lock().reg.by_kind(api_version, kind).ok_or_else(|| {
            ApiError::new(
                404,
                "NotFound",
                format!("no matches for kind \"{kind}\" in version \"{api_version}\""),
            )
        })
    }

    /// Read one object straight from the store.
    pub fn get_object(&self, api_version: &str, kind: &str, namespace: &str, name: &str) -> Option<Value> {
        let info = self.info(api_version, kind).ok()?;
        let ns = if info.namespaced { namespace } else { "" };
        let o = self.shared.lock().store.get(&info.store_key(), ns, name).cloned()?;
        Some(crate::ops::present(&info, o))
    }

    /// List objects straight from the store (all namespaces when `namespace` is None).
    pub fn list_objects(&self, api_version: &str, kind: &str, namespace: Option<&str>) -> Vec<Value> {
        let Ok(info) = self.info(api_version, kind) else {
            return vec![];
        };
        let st = self.shared.lock();
        st.store
            .list(&info.store_key(), namespace.filter(|_| info.namespaced))
            .into_iter()
            .map(|o| crate::ops::present(&info, o))
            .collect()
    }

    /// Create or unconditionally replace an object, status included (acts like an external
    /// controller writing both the resource and its status); emits watch events.
    pub fn put_object(&self, obj: Value) -> ApiResult<Value> {
        let av = obj.get("apiVersion").and_then(Value::as_str).unwrap_or("").to_string();
        let kind = obj.get("kind").and_then(Value::as_str).unwrap_or("").to_string();
        let info = self.info(&av, &kind)?;
        let ns = match meta::namespace(&obj) {
            "" if info.namespaced => "default".to_string(),
            n => n.to_string(),
        };
        let name = meta::name(&obj).to_string();
        let opts = WriteOpts {
            manager: "memkube-test".into(),
            force: true,
            ..Default::default()
        };
        let mut st = self.shared.lock();
        let key_ns = if info.namespaced { ns.as_str() } else { "" };
        let exists = st.store.get(&info.store_key(), key_ns, &name).is_some();
        let mut body = obj.clone();
        meta::meta_mut(&mut body).remove("resourceVersion");
        let mut out = if exists {
            st.update(&info, &ns, &name, body.clone(), None, &opts)?
        } else {
            st.create(&info, &ns, body.clone(), &opts)?
        };
        if info.has_status() && obj.get("status").is_some() && out.get("status") != obj.get("status") {
            let name = meta::name(&out).to_string();
            out = st.update(&info, &ns, &name, body, Some("status"), &opts)?;
        }
        Ok(out)
    }

    /// Delete an object as a DELETE request would (finalizers and GC honoured).
    pub fn delete_object(&self, api_version: &str, kind: &str, namespace: &str, name: &str) -> ApiResult<Value> {
        let info = self.info(api_version, kind)?;
        self.shared
            .lock()
            .delete(&info, namespace, name, &crate::gc::DeleteOpts::default())
    }

    /// Poll `pred` until it holds or `timeout` passes; re-checks on every store change.
    pub async fn wait_for<F: FnMut(&Server) -> bool>(&self, timeout: Duration, mut pred: F) -> bool {
        let deadline = tokio::time::Instant::now() + timeout;
        let mut rx = self.shared.lock().store.subscribe();
        loop {
            if pred(self) {
                return true;
            }
            let wait = tokio::time::timeout_at(deadline, async {
                tokio::select! {
                    _ = rx.recv() => {}
                    _ = tokio::time::sleep(Duration::from_millis(50)) => {}
                }
            });
            if wait.await.is_err() {
                return pred(self);
            }
        }
    }
}

/// A kubeconfig for `addr` (plain http, no credentials, context `memkube`).
pub fn kubeconfig_yaml(addr: SocketAddr) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: memkube\n  cluster:\n    server: http://{addr}\nusers:\n- name: memkube\n  user: {{}}\ncontexts:\n- name: memkube\n  context:\n    cluster: memkube\n    user: memkube\n    namespace: default\ncurrent-context: memkube\npreferences: {{}}\n"
    )
}

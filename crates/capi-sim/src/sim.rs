//! The runner: wires the Cluster and Machine controllers, the provider-kind watches and the
//! emulated kubelet onto the current tokio runtime.
//!
//! Everything is event-driven: kube-runtime Controllers for Machines and Clusters, extra
//! triggers from Node, Cluster, CSR and provider-object watches, and requeues only when a
//! deadline or a drain retry is due.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::channel::mpsc;
use futures::stream::{self, BoxStream};
use futures::{FutureExt, StreamExt};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};
use kube::runtime::controller::{Action, Config as ControllerConfig, applier};
use kube::runtime::reflector::store::Writer;
use kube::runtime::reflector::{ObjectRef, Store, reflector};
use kube::runtime::{WatchStreamExt, watcher};

use crate::KubeletMode;
use crate::crds::CapiVersions;
use crate::dynamic::{OnChange, Resolver, WatchRegistry};
use crate::error::{Error, Result};
use crate::ref_index::RefIndex;
use crate::view::{MachineView, ObjRef, str_at};

/// Tunables of the simulated core; see [`SimulatorBuilder`].
#[derive(Clone, Debug)]
pub(crate) struct Config {
    pub versions: CapiVersions,
    pub drain_retry: Duration,
    pub kubelet: KubeletMode,
    pub sync_all_labels: bool,
    pub control_plane_initialized: bool,
    pub node_bootstrapper: String,
    pub kubelet_waits_for_client_csr: bool,
    pub nodes_need_cluster_infra: bool,
}

/// Shared state of all loops.
pub(crate) struct Ctx {
    pub client: kube::Client,
    pub cfg: Config,
    pub resolver: Arc<Resolver>,
    pub watches: WatchRegistry,
    pub machine_ar: ApiResource,
    pub cluster_ar: ApiResource,
    /// The Cluster controller's cache.
    cluster_cache: Store<DynamicObject>,
    failures: Mutex<HashMap<String, u32>>,
}

impl Ctx {
    pub fn machines(&self, ns: &str) -> Api<DynamicObject> {
        Api::namespaced_with(self.client.clone(), ns, &self.machine_ar)
    }

    pub fn clusters(&self, ns: &str) -> Api<DynamicObject> {
        Api::namespaced_with(self.client.clone(), ns, &self.cluster_ar)
    }

    /// Cluster `ns/name`, from the Cluster cache as core reads it through its informer; read
    /// from the server only when the cache has not seen it (yet).
    pub async fn cluster(&self, ns: &str, name: &str) -> Result<Option<DynamicObject>> {
        let key = ObjectRef::new_with(name, self.cluster_ar.clone()).within(ns);
        if let Some(cached) = self.cluster_cache.get(&key) {
            return Ok(Some((*cached).clone()));
        }
        match self.clusters(ns).get(name).await {
            Ok(c) => Ok(Some(c)),
            Err(e) if crate::error::is_not_found(&e) => Ok(None),
            Err(e) => Err(Error::kube(format!("reading Cluster {name}"), e)),
        }
    }

    /// Provider object `ns/name` of `kind`, from its watch's cache; read from the server only
    /// when the cache has not seen it (yet), so a just-created object never looks missing.
    pub async fn provider(
        &self,
        kind: &crate::dynamic::ResolvedKind,
        ns: &str,
        name: &str,
    ) -> Result<Option<DynamicObject>> {
        if let Some(cached) = self.watches.cached(&kind.ar, ns, name) {
            return Ok(Some(cached));
        }
        self.resolver.get(kind, ns, name).await
    }

    /// Resolves a provider ref and makes sure its kind is watched.
    pub async fn resolve(&self, r: &ObjRef) -> Result<crate::dynamic::ResolvedKind> {
        let kind = self.resolver.resolve(r).await?;
        self.watches.ensure(&kind.ar);
        Ok(kind)
    }

    fn backoff(&self, key: &str) -> Duration {
        let n = self
            .failures
            .lock()
            .map(|mut f| {
                let n = f.entry(key.to_string()).or_insert(0);
                *n = n.saturating_add(1);
                *n
            })
            .unwrap_or(1);
        let ms = 200u64.saturating_mul(1u64 << n.min(8));
        Duration::from_millis(ms.min(30_000))
    }

    fn succeeded(&self, key: &str) {
        if let Ok(mut f) = self.failures.lock() {
            f.remove(key);
        }
    }
}

fn capi_ar(versions: CapiVersions, kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(crate::CAPI_GROUP, versions.spoken(), kind),
        plural,
    )
}

/// Builds a [`Simulator`].
pub struct SimulatorBuilder {
    client: kube::Client,
    cfg: Config,
}

impl SimulatorBuilder {
    /// Which CAPI API versions are installed (and which one the simulator speaks).
    pub fn versions(mut self, v: CapiVersions) -> Self {
        self.cfg.versions = v;
        self
    }

    /// How often refused evictions are retried (CAPI: 20 s).
    pub fn drain_retry(mut self, d: Duration) -> Self {
        self.cfg.drain_retry = d;
        self
    }

    /// Whether and how to emulate kubelets.
    pub fn kubelet(mut self, mode: KubeletMode) -> Self {
        self.cfg.kubelet = mode;
        self
    }

    /// Sync every Machine label to its Node, as OpenShift's core does
    /// (`--additional-sync-machine-labels=.*`), not just the node-role ones.
    pub fn sync_all_labels(mut self, all: bool) -> Self {
        self.cfg.sync_all_labels = all;
        self
    }

    /// Report the control plane as initialized (default true: the sandbox models an existing,
    /// externally managed control plane).
    pub fn control_plane_initialized(mut self, yes: bool) -> Self {
        self.cfg.control_plane_initialized = yes;
        self
    }

    /// Username the emulated kubelet files client CSRs as.
    pub fn node_bootstrapper(mut self, user: impl Into<String>) -> Self {
        self.cfg.node_bootstrapper = user.into();
        self
    }

    /// Register Nodes only after the client CSR is approved, as a real kubelet does
    /// (default false: register at once, so tests need no CSR approver).
    pub fn kubelet_waits_for_client_csr(mut self, yes: bool) -> Self {
        self.cfg.kubelet_waits_for_client_csr = yes;
        self
    }

    /// Link Nodes (nodeRef, drain, Node deletion) only once the Cluster's infrastructure is
    /// ready, as core's ClusterCache does (default true).
    pub fn nodes_need_cluster_infra(mut self, yes: bool) -> Self {
        self.cfg.nodes_need_cluster_infra = yes;
        self
    }

    /// Finishes the configuration; nothing runs until [`Simulator::run`] or [`Simulator::spawn`].
    pub fn build(self) -> Simulator {
        Simulator {
            client: self.client,
            cfg: self.cfg,
        }
    }
}

/// A configured simulator; [`Simulator::run`] or [`Simulator::spawn`] starts it.
pub struct Simulator {
    client: kube::Client,
    cfg: Config,
}

/// A running simulator started by [`Simulator::spawn`]; dropping it stops the loops.
pub struct SimulatorHandle {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<Result<()>>,
}

impl SimulatorHandle {
    /// Stops the loops gracefully and waits for them.
    pub async fn stop(mut self) -> Result<()> {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        match (&mut self.task).await {
            Ok(r) => r,
            Err(e) => Err(Error::Timeout(format!("simulator task ended abnormally: {e}"))),
        }
    }
}

impl Drop for SimulatorHandle {
    fn drop(&mut self) {
        self.task.abort();
    }
}

type Trigger = mpsc::UnboundedSender<ObjectRef<DynamicObject>>;

/// Paths of the provider refs in a Machine's and a Cluster's spec.
const MACHINE_REFS: &[&[&str]] = &[&["infrastructureRef"], &["bootstrap", "configRef"]];
const CLUSTER_REFS: &[&[&str]] = &[&["infrastructureRef"]];

/// Objects in `store` whose refs at `paths` point at `group`/`kind` (a scan: CRD changes are
/// rare; provider objects' changes use a [`RefIndex`]).
fn referrers_of_kind(
    store: &Store<DynamicObject>,
    ar: &ApiResource,
    group: &str,
    kind: &str,
    paths: &[&[&str]],
) -> Vec<ObjectRef<DynamicObject>> {
    store
        .state()
        .iter()
        .filter(|m| {
            paths.iter().any(|p| {
                m.data
                    .get("spec")
                    .and_then(|s| crate::view::at(s, p))
                    .and_then(ObjRef::parse)
                    .is_some_and(|r| r.group == group && r.kind == kind)
            })
        })
        .map(|m| ObjectRef::from_obj_with(m.as_ref(), ar.clone()))
        .collect()
}

/// A CRD appeared or changed: objects referring to its kind may now resolve, so retry them
/// at once instead of waiting for their error backoff.
fn referrers_of_crd(
    store: &Store<DynamicObject>,
    ar: &ApiResource,
    crd: &CustomResourceDefinition,
    paths: &[&[&str]],
) -> Vec<ObjectRef<DynamicObject>> {
    referrers_of_kind(store, ar, &crd.spec.group, &crd.spec.names.kind, paths)
}

impl Simulator {
    /// Starts building a simulator that talks through `client`.
    pub fn builder(client: kube::Client) -> SimulatorBuilder {
        SimulatorBuilder {
            client,
            cfg: Config {
                versions: CapiVersions::V1beta1,
                drain_retry: Duration::from_secs(20),
                kubelet: KubeletMode::Off,
                sync_all_labels: false,
                control_plane_initialized: true,
                node_bootstrapper: "system:serviceaccount:openshift-machine-config-operator:node-bootstrapper".into(),
                kubelet_waits_for_client_csr: false,
                nodes_need_cluster_infra: true,
            },
        }
    }

    /// Runs on a background task; stop it with [`SimulatorHandle::stop`] or by dropping it.
    pub fn spawn(self) -> SimulatorHandle {
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(self.run(async move {
            let _ = rx.await;
        }));
        SimulatorHandle { stop: Some(tx), task }
    }

    /// Runs all loops until `shutdown` completes.
    pub async fn run(self, shutdown: impl Future<Output = ()> + Send + 'static) -> Result<()> {
        let shutdown = shutdown.boxed().shared();
        let cfg = self.cfg;
        let client = self.client;
        let machine_ar = capi_ar(cfg.versions, "Machine", "machines");
        let cluster_ar = capi_ar(cfg.versions, "Cluster", "clusters");

        let machine_writer = Writer::new(machine_ar.clone());
        let machines = machine_writer.as_reader();
        let cluster_writer = Writer::new(cluster_ar.clone());
        let clusters = cluster_writer.as_reader();
        let (machine_tx, machine_rx) = mpsc::unbounded();
        let (cluster_tx, cluster_rx) = mpsc::unbounded();

        let machine_refs = Arc::new(RefIndex::new(machine_ar.clone(), MACHINE_REFS));
        let cluster_refs = Arc::new(RefIndex::new(cluster_ar.clone(), CLUSTER_REFS));
        let on_change = provider_trigger(
            machine_refs.clone(),
            cluster_refs.clone(),
            machine_tx.clone(),
            cluster_tx,
        );
        let resolver = Arc::new(Resolver::new(client.clone(), cfg.versions));
        let ctx = Arc::new(Ctx {
            resolver: resolver.clone(),
            watches: WatchRegistry::new(client.clone(), on_change),
            client: client.clone(),
            cfg: cfg.clone(),
            machine_ar: machine_ar.clone(),
            cluster_ar: cluster_ar.clone(),
            cluster_cache: clusters.clone(),
            failures: Mutex::new(HashMap::new()),
        });

        // Machines are reconciled on their own changes, their Node's, their Cluster's,
        // their provider objects' (via the WatchRegistry) and their kubelet's CSRs.
        let machine_queue = stream::select_all(vec![
            own_changes(&client, &machine_ar, machine_writer, machine_refs),
            related(
                watch_touched(Api::<DynamicObject>::all_with(client.clone(), &cluster_ar)),
                {
                    let (store, ar) = (machines.clone(), machine_ar.clone());
                    move |c: DynamicObject| machines_in_cluster(&store, &ar, &c)
                },
            ),
            related(watch_touched(Api::<Node>::all(client.clone())), {
                let (store, ar) = (machines.clone(), machine_ar.clone());
                move |n: Node| machines_for_node(&store, &ar, &n)
            }),
            related(watch_touched(Api::<CustomResourceDefinition>::all(client.clone())), {
                let (store, ar, resolver) = (machines.clone(), machine_ar.clone(), resolver.clone());
                move |crd: CustomResourceDefinition| {
                    resolver.forget(&crd.spec.group, &crd.spec.names.kind);
                    referrers_of_crd(&store, &ar, &crd, MACHINE_REFS)
                }
            }),
            machine_rx.boxed(),
        ])
        .map(Ok::<_, std::convert::Infallible>);
        let machine_run = applier(
            |o, c| Box::pin(reconcile_machine(o, c)),
            machine_error,
            ctx.clone(),
            machines.clone(),
            machine_queue,
            ControllerConfig::default(),
        )
        .take_until(shutdown.clone())
        .for_each(|_| async {});

        let cluster_queue = stream::select_all(vec![
            own_changes(&client, &cluster_ar, cluster_writer, cluster_refs),
            related(watch_touched(Api::<CustomResourceDefinition>::all(client.clone())), {
                let (store, ar, resolver) = (clusters.clone(), cluster_ar.clone(), resolver.clone());
                move |crd: CustomResourceDefinition| {
                    resolver.forget(&crd.spec.group, &crd.spec.names.kind);
                    referrers_of_crd(&store, &ar, &crd, CLUSTER_REFS)
                }
            }),
            cluster_rx.boxed(),
        ])
        .map(Ok::<_, std::convert::Infallible>);
        let cluster_run = applier(
            |o, c| Box::pin(reconcile_cluster(o, c)),
            cluster_error,
            ctx.clone(),
            clusters.clone(),
            cluster_queue,
            ControllerConfig::default(),
        )
        .take_until(shutdown.clone())
        .for_each(|_| async {});

        let kubelet = crate::kubelet::csr_loop(ctx.clone(), machine_tx);
        let kubelet = async move {
            tokio::select! {
                _ = kubelet => {},
                _ = shutdown => {},
            }
        };
        tokio::join!(machine_run, cluster_run, kubelet);
        Ok(())
    }
}

type RefStream = BoxStream<'static, ObjectRef<DynamicObject>>;

/// A reflector over `ar` (filling `writer`'s store and `index`) that yields a ref per touched
/// object.
fn own_changes(
    client: &kube::Client,
    ar: &ApiResource,
    writer: Writer<DynamicObject>,
    index: Arc<RefIndex>,
) -> RefStream {
    let api: Api<DynamicObject> = Api::all_with(client.clone(), ar);
    let ar = ar.clone();
    reflector(writer, watcher(api, watcher::Config::default()).default_backoff())
        .inspect(move |event| {
            if let Ok(event) = event {
                index.observe(event);
            }
        })
        .touched_objects()
        .filter_map(move |r| {
            let out = match r {
                Ok(o) => Some(ObjectRef::from_obj_with(&o, ar.clone())),
                Err(e) => {
                    tracing::debug!(kind = %ar.kind, error = %e, "watch error; retrying");
                    None
                }
            };
            futures::future::ready(out)
        })
        .boxed()
}

/// Touched objects of a watch, errors logged and skipped (the watcher backs off and retries).
fn watch_touched<K>(api: Api<K>) -> BoxStream<'static, K>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    watcher(api, watcher::Config::default())
        .default_backoff()
        .touched_objects()
        .filter_map(|r| {
            futures::future::ready(match r {
                Ok(o) => Some(o),
                Err(e) => {
                    tracing::debug!(error = %e, "watch error; retrying");
                    None
                }
            })
        })
        .boxed()
}

fn related<K, F>(objects: BoxStream<'static, K>, mapper: F) -> RefStream
where
    K: Send + 'static,
    F: Fn(K) -> Vec<ObjectRef<DynamicObject>> + Send + 'static,
{
    objects.flat_map(move |o| stream::iter(mapper(o))).boxed()
}

fn provider_trigger(
    machines: Arc<RefIndex>,
    clusters: Arc<RefIndex>,
    machine_tx: Trigger,
    cluster_tx: Trigger,
) -> OnChange {
    Arc::new(move |group: &str, kind: &str, obj: &DynamicObject| {
        for m in machines.referrers(group, kind, obj) {
            let _ = machine_tx.unbounded_send(m);
        }
        for c in clusters.referrers(group, kind, obj) {
            let _ = cluster_tx.unbounded_send(c);
        }
    })
}

fn machines_for_node(store: &Store<DynamicObject>, ar: &ApiResource, node: &Node) -> Vec<ObjectRef<DynamicObject>> {
    let pid = node.spec.as_ref().and_then(|s| s.provider_id.clone());
    let name = node.metadata.name.clone().unwrap_or_default();
    store
        .state()
        .iter()
        .filter(|m| {
            let v = MachineView::new(m);
            (pid.is_some() && v.provider_id == pid) || v.node_ref_name.as_deref() == Some(&name)
        })
        .map(|m| ObjectRef::from_obj_with(m.as_ref(), ar.clone()))
        .collect()
}

fn machines_in_cluster(
    store: &Store<DynamicObject>,
    ar: &ApiResource,
    cluster: &DynamicObject,
) -> Vec<ObjectRef<DynamicObject>> {
    let name = cluster.metadata.name.clone().unwrap_or_default();
    let ns = cluster.metadata.namespace.clone();
    store
        .state()
        .iter()
        .filter(|m| m.metadata.namespace == ns)
        .filter(|m| m.data.get("spec").and_then(|s| str_at(s, &["clusterName"])).as_deref() == Some(name.as_str()))
        .map(|m| ObjectRef::from_obj_with(m.as_ref(), ar.clone()))
        .collect()
}

fn key(obj: &DynamicObject) -> String {
    format!(
        "{}/{}/{}",
        obj.types.as_ref().map(|t| t.kind.as_str()).unwrap_or(""),
        obj.metadata.namespace.as_deref().unwrap_or(""),
        obj.metadata.name.as_deref().unwrap_or("")
    )
}

async fn reconcile_machine(obj: Arc<DynamicObject>, ctx: Arc<Ctx>) -> Result<Action> {
    let action = crate::machine::reconcile(&obj, &ctx).await?;
    ctx.succeeded(&key(&obj));
    Ok(action)
}

async fn reconcile_cluster(obj: Arc<DynamicObject>, ctx: Arc<Ctx>) -> Result<Action> {
    let action = crate::cluster::reconcile(&obj, &ctx).await?;
    ctx.succeeded(&key(&obj));
    Ok(action)
}

fn machine_error(obj: Arc<DynamicObject>, err: &Error, ctx: Arc<Ctx>) -> Action {
    let wait = ctx.backoff(&key(&obj));
    log_failure("Machine", &obj, err, wait);
    Action::requeue(wait)
}

fn cluster_error(obj: Arc<DynamicObject>, err: &Error, ctx: Arc<Ctx>) -> Action {
    let wait = ctx.backoff(&key(&obj));
    log_failure("Cluster", &obj, err, wait);
    Action::requeue(wait)
}

fn log_failure(kind: &str, obj: &DynamicObject, err: &Error, wait: Duration) {
    let name = format!(
        "{}/{}",
        obj.metadata.namespace.as_deref().unwrap_or(""),
        obj.metadata.name.as_deref().unwrap_or("")
    );
    match err {
        Error::KindNotServed { .. } | Error::NoContractVersion { .. } => tracing::warn!(
            %kind, %name, error = %err, retry_in = ?wait,
            "referenced kind not usable yet; retrying"
        ),
        _ => tracing::warn!(%kind, %name, error = %err, retry_in = ?wait, "reconcile failed"),
    }
}

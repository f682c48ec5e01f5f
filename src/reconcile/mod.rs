//! Controller machinery every kind's controller shares: the [`Context`] a reconcile gets, the
//! [`drive`] loop that times, logs and retries reconciles, readiness, and the helpers in the
//! submodules (status and Events, owners, pause, finalizers, watches, host calls).
//!
//! Nothing here knows a kind's policy; `crate::controllers` holds one module per kind.

pub mod annotations;
pub mod capi;
pub mod error;
pub mod events;
pub mod finalizer;
#[cfg(feature = "caplv")]
pub mod host_connections;
#[cfg(feature = "caplv")]
pub mod host_pool;
pub mod kinds;
pub mod own_writes;
pub mod owner;
#[cfg(feature = "caplv")]
pub mod placement;
pub mod shared_cache;
mod status;
pub mod triggers;

use std::{future::Future, sync::Arc, time::Duration};

use futures::StreamExt;
use kube::runtime::WatchStreamExt as _;
use kube::{
    Client, Resource, ResourceExt,
    api::{Api, DynamicObject},
    runtime::{
        controller::{Action as ControllerAction, Controller},
        events::Reporter,
        reflector::Store,
    },
};
use serde::de::DeserializeOwned;
use tracing::Instrument;

use self::shared_cache::SharedCache;
use crate::{api::capi::CapiVersion, app::health::Readiness, clock::Clock, endpoint::EndpointProbe, metrics::Metrics};

pub use error::ApiError;
pub use events::EventRecorder;
pub use status::{apply_secret, apply_status, condition_events, publish_event, write_status};

/// The ServiceAccount the chart creates for Cluster API core's access to the workload cluster.
pub const DEFAULT_WORKLOAD_SERVICE_ACCOUNT: &str = "caplv-workload-access";

/// Run-time settings the controllers share.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    /// Only watch this namespace, when set.
    pub watch_namespace: Option<String>,
    /// How often a LibvirtCluster's endpoint is probed.
    pub endpoint_probe_interval: Duration,
    /// Delay before retrying a reconcile that failed on a transient error.
    pub error_requeue: Duration,
    /// How many ScheduledMachines may create their objects at the same time.
    pub max_concurrent_creations: usize,
    /// How often a provisioned machine's domain is checked.
    pub domain_check_interval: Duration,
    /// Hosts being connected to at the same time, at most.
    pub max_concurrent_host_connects: usize,
    /// How long after provisioning a machine's kubelet bootstrap CSR is approved.
    pub csr_approval_window: Duration,
    /// The ServiceAccount whose tokens the kubeconfig Secrets of SelfManagedControlPlanes carry.
    pub workload_service_account: String,
    /// Its namespace; `None` means the client's default namespace (in a pod, the manager's own).
    pub workload_service_account_namespace: Option<String>,
    /// The server those kubeconfigs name when a SelfManagedControlPlane has no `spec.server`;
    /// `None` means each Cluster's endpoint.
    pub workload_api_server: Option<String>,
    /// Lifetime asked for those tokens; a new one is minted when a third of it remains.
    pub workload_token_lifetime: Duration,
    /// The CA bundle (PEM) the manager trusts for its API server, written into those
    /// kubeconfigs. `None` when its client configuration names none (system roots apply).
    pub api_server_ca: Option<String>,
    /// How long a new LibvirtMachine's expected first waits (for its owner, its bootstrap data,
    /// its host) go unreported: in a burst they end on their own, and each report is a write.
    pub first_wait_grace: Duration,
}

impl Default for Settings {
    /// The command line's defaults (a test in `app` keeps the two equal).
    fn default() -> Self {
        Self {
            watch_namespace: None,
            endpoint_probe_interval: Duration::from_secs(60),
            error_requeue: Duration::from_secs(10),
            max_concurrent_creations: 100,
            domain_check_interval: Duration::from_secs(60),
            max_concurrent_host_connects: 16,
            csr_approval_window: Duration::from_secs(120 * 60),
            workload_service_account: DEFAULT_WORKLOAD_SERVICE_ACCOUNT.to_owned(),
            workload_service_account_namespace: None,
            workload_api_server: None,
            workload_token_lifetime: Duration::from_secs(24 * 60 * 60),
            api_server_ca: None,
            first_wait_grace: FIRST_WAIT_GRACE,
        }
    }
}

/// The default [`Settings::first_wait_grace`]. Longer buys nothing on a genuine control plane:
/// in a 1000-window opening there Cluster API core takes minutes to link every machine, and
/// each wait it leaves is worth reporting.
pub const FIRST_WAIT_GRACE: Duration = Duration::from_secs(10);

/// Everything a reconcile needs; one per manager, shared by every controller.
pub struct Context {
    /// The one Kubernetes client.
    pub client: Client,
    /// The one metrics registry.
    pub metrics: Arc<Metrics>,
    /// Publishes Kubernetes Events.
    pub recorder: EventRecorder,
    /// Shared settings.
    pub settings: Settings,
    /// Checks control plane endpoints.
    pub probe: Arc<dyn EndpointProbe>,
    /// The Cluster API core version served by the cluster.
    pub capi: CapiVersion,
    /// The clock schedules are evaluated against.
    pub clock: Arc<dyn Clock>,
    /// API resources of kinds named in specs, resolved once through discovery.
    pub kinds: kinds::KindCache,
    /// CAPI core's Clusters and Machines, watched once for every controller.
    pub caches: SharedCaches,
    /// One libvirt connection per host, shared by the CAPLV controllers.
    #[cfg(feature = "caplv")]
    pub hosts: Arc<host_connections::HostConnections>,
}

impl Context {
    /// Build a context; events are reported as `caplv-manager`.
    pub fn new(
        client: Client,
        metrics: Arc<Metrics>,
        settings: Settings,
        probe: Arc<dyn EndpointProbe>,
        capi: CapiVersion,
        clock: Arc<dyn Clock>,
        #[cfg(feature = "caplv")] hosts: Arc<host_connections::HostConnections>,
    ) -> Self {
        let reporter = Reporter {
            controller: "caplv-manager".to_owned(),
            instance: std::env::var("POD_NAME").ok(),
        };
        let recorder = EventRecorder::new(client.clone(), reporter);
        let kinds = kinds::KindCache::new(client.clone());
        let caches = SharedCaches::new(&client, &settings, capi);
        Self {
            client,
            metrics,
            recorder,
            settings,
            probe,
            capi,
            clock,
            kinds,
            caches,
            #[cfg(feature = "caplv")]
            hosts,
        }
    }

    /// The injected clock's now, as a Kubernetes timestamp (conditions, status times).
    #[must_use]
    pub fn timestamp(&self) -> k8s_openapi::apimachinery::pkg::apis::meta::v1::Time {
        let millis = self.clock.now().timestamp_millis();
        k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            k8s_openapi::jiff::Timestamp::from_millisecond(millis).unwrap_or_default(),
        )
    }

    /// Now on the API server's timeline: for stamps compared with ones the server sets (a CSR's
    /// `creationTimestamp` against `status.provisionedAt`). The schedule clock may be shifted
    /// (tests move it to an edge), so those never come from it.
    #[must_use]
    pub fn wall_time(&self) -> k8s_openapi::apimachinery::pkg::apis::meta::v1::Time {
        k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(k8s_openapi::jiff::Timestamp::now())
    }

    /// An `Api` for a kind resolved at run time (CAPI core's Cluster and Machine), scoped to the
    /// watch namespace, or to all namespaces.
    #[must_use]
    pub fn watched_dynamic(&self, resource: &kube::core::ApiResource) -> Api<DynamicObject> {
        scoped_dynamic(&self.client, self.settings.watch_namespace.as_deref(), resource)
    }

    /// An `Api` for `K` scoped to the watch namespace, or to all namespaces.
    pub fn watched_api<K>(&self) -> Api<K>
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
    {
        match &self.settings.watch_namespace {
            Some(ns) => Api::namespaced(self.client.clone(), ns),
            None => Api::all(self.client.clone()),
        }
    }

    /// A controller of `K` in the watched namespaces whose store holds trimmed objects (as the
    /// shared caches do): a controller's own kind is usually what it caches most of, and
    /// server-side apply makes `managedFields` a large part of each object. Objects of a relist
    /// trigger reconciles once the store holds them ([`triggers`]).
    pub fn controller<K>(&self) -> Controller<K>
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
            + Clone
            + DeserializeOwned
            + std::fmt::Debug
            + Send
            + Sync
            + 'static,
    {
        let writer = kube::runtime::reflector::store::Writer::default();
        let store = writer.as_reader();
        let changes = triggers::applied_after_list(kube::runtime::reflector(
            writer,
            kube::runtime::watcher(self.watched_api::<K>(), kube::runtime::watcher::Config::default())
                .default_backoff()
                .modify(shared_cache::trim),
        ));
        Controller::for_stream(changes, store)
    }

    /// A controller of a kind whose store is one of the [`SharedCaches`]: several controllers
    /// of one kind then hold each object once.
    pub fn shared_controller<K>(cache: &SharedCache<K>) -> Controller<K>
    where
        K: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
    {
        Controller::for_shared_stream(cache.subscribe(), cache.store())
    }
}

/// An `Api` for `resource` in `namespace`, or in all namespaces.
fn scoped_dynamic(client: &Client, namespace: Option<&str>, resource: &kube::core::ApiResource) -> Api<DynamicObject> {
    match namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, resource),
        None => Api::all_with(client.clone(), resource),
    }
}

/// The caches several controllers share (see [`shared_cache`]).
pub struct SharedCaches {
    /// Every Cluster in the watched namespaces, at the contract the cluster serves (without
    /// status, which no controller reads).
    pub clusters: SharedCache<DynamicObject>,
    /// Every Machine in the watched namespaces, at the contract the cluster serves (of its
    /// status only what `MachineView` reads).
    pub machines: SharedCache<DynamicObject>,
    /// Every LibvirtHost in the watched namespaces (watched only where LibvirtHosts are served).
    pub libvirt_hosts: SharedCache<crate::api::LibvirtHost>,
    /// Every LibvirtMachine in the watched namespaces: the machine controller's own store, also
    /// read by the host controller (allocations, reclaim) and the Node linker.
    pub libvirt_machines: SharedCache<crate::api::LibvirtMachine>,
    /// The metadata of every Secret in the watched namespaces (metadata-only requests): what
    /// Secrets exist, whom they belong to and their `resourceVersion`, never their contents.
    pub secrets: SharedCache<kube::api::PartialObjectMeta<k8s_openapi::api::core::v1::Secret>>,
    /// Every Node, of its status only the conditions: read by 5-Spot (cordon, taints, drain),
    /// the Node linker and the CSR approver, and followed by all three.
    pub nodes: SharedCache<k8s_openapi::api::core::v1::Node>,
    /// Every SelfManagedControlPlane in the watched namespaces, read by the LibvirtCluster
    /// controller at each endpoint probe to make sure a linked one still exists.
    pub control_planes: SharedCache<crate::api::SelfManagedControlPlane>,
}

impl SharedCaches {
    fn new(client: &Client, settings: &Settings, capi: CapiVersion) -> Self {
        let cache = |resource: kube::core::ApiResource, project: fn(&mut DynamicObject)| {
            SharedCache::projected(
                scoped_dynamic(client, settings.watch_namespace.as_deref(), &resource),
                resource,
                project,
            )
        };
        fn scoped<K>(client: &Client, namespace: Option<&str>) -> Api<K>
        where
            K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
        {
            namespace.map_or_else(|| Api::all(client.clone()), |ns| Api::namespaced(client.clone(), ns))
        }
        let namespace = settings.watch_namespace.as_deref();
        Self {
            clusters: cache(capi.cluster(), crate::api::capi_cache::project_cluster),
            machines: cache(capi.machine(), crate::api::capi_cache::project_machine),
            libvirt_hosts: SharedCache::new(scoped(client, namespace), ()),
            libvirt_machines: SharedCache::new(scoped(client, namespace), ()),
            secrets: SharedCache::new(scoped(client, namespace), ()),
            nodes: SharedCache::projected(Api::all(client.clone()), (), shared_cache::project_node),
            control_planes: SharedCache::new(scoped(client, namespace), ()),
        }
    }
}

/// The cached objects `keep` selects, as the references a watch mapper returns.
pub fn refs_where<K>(store: &Store<K>, keep: impl Fn(&K) -> bool) -> Vec<kube::runtime::reflector::ObjectRef<K>>
where
    K: Resource<DynamicType = ()> + Clone + 'static,
{
    store
        .state()
        .iter()
        .filter(|obj| keep(obj))
        .map(|obj| kube::runtime::reflector::ObjectRef::from_obj(obj.as_ref()))
        .collect()
}

/// Whether `obj` lives in `namespace`.
pub fn in_namespace(obj: &impl Resource, namespace: &str) -> bool {
    obj.meta().namespace.as_deref() == Some(namespace)
}

/// Wait until `store` has its first full list; false if its writer went away first.
///
/// `Store::wait_until_ready` wakes only the most recent of several concurrent waiters (the
/// controller itself waits too), so this waits in short rounds, each of which re-registers.
pub async fn wait_synced<K>(store: &Store<K>) -> bool
where
    K: Resource + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    loop {
        match tokio::time::timeout(Duration::from_millis(100), store.wait_until_ready()).await {
            Ok(Ok(())) => return true,
            Ok(Err(_)) => return false,
            Err(_) => {}
        }
    }
}

/// How a controller reports readiness: `name` turns ready once `synced` resolves true (usually
/// [`wait_synced`] on its store, joined with any other cache it reads).
pub struct Readying<S> {
    /// Controller name in readiness and metrics.
    pub name: &'static str,
    /// Resolves true once the caches are full.
    pub synced: S,
    /// Where readiness is recorded.
    pub readiness: Readiness,
    /// Where the ready gauge and the reconcile metrics live.
    pub metrics: Arc<Metrics>,
    /// Delay before retrying a reconcile that failed.
    pub error_requeue: Duration,
}

impl<S> Readying<S> {
    /// A controller's readiness with the manager's metrics and error requeue.
    pub fn new(name: &'static str, synced: S, readiness: Readiness, ctx: &Context) -> Self {
        Self {
            name,
            synced,
            readiness,
            metrics: ctx.metrics.clone(),
            error_requeue: ctx.settings.error_requeue,
        }
    }
}

/// What [`drive`] needs to know about a controller's reconcile errors.
pub trait ReconcileError: std::error::Error + Send + 'static {
    /// A bounded reason for metrics and logs.
    fn reason(&self) -> &'static str;

    /// Whether a write lost an optimistic-concurrency race: retried at once, quietly.
    fn is_conflict(&self) -> bool {
        false
    }
}

/// Drive `controller` until it shuts down: it turns ready as `readying` says, every reconcile
/// runs in a span naming kind, namespace and name and is counted and timed, a failed one is
/// logged and retried after `error_requeue` (a write conflict at once), and the ready gauge
/// drops at the end.
pub async fn drive<K, Ctx, Fut, E>(
    controller: Controller<K>,
    readying: Readying<impl Future<Output = bool> + Send + 'static>,
    mut reconcile: impl FnMut(Arc<K>, Arc<Ctx>) -> Fut,
    ctx: Arc<Ctx>,
) where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
    Fut: Future<Output = Result<ControllerAction, E>> + Send + 'static,
    E: ReconcileError,
{
    let Readying {
        name,
        synced,
        readiness,
        metrics,
        error_requeue,
    } = readying;
    let ready_metrics = metrics.clone();
    tokio::spawn(async move {
        if synced.await {
            mark_synced(name, &readiness, &ready_metrics);
        }
    });
    let kind = K::kind(&()).into_owned();
    let timed = metrics.clone();
    controller
        .run(
            move |obj, ctx| {
                let span =
                    tracing::info_span!("reconcile", kind = %kind, namespace = obj.namespace(), name = obj.name_any());
                let metrics = timed.clone();
                let work = reconcile(obj, ctx);
                async move {
                    let timer = metrics.reconcile_started(name);
                    let result = work.await;
                    timer.finish(result.as_ref().err().map(ReconcileError::reason));
                    result
                }
                .instrument(span)
            },
            move |_obj, err: &E, _ctx| {
                if err.is_conflict() {
                    tracing::debug!(error = %err, "write conflict; retrying");
                    return ControllerAction::requeue(CONFLICT_RETRY);
                }
                tracing::warn!(error = %err, reason = err.reason(), "reconcile failed");
                ControllerAction::requeue(error_requeue)
            },
            ctx,
        )
        .for_each(|_| futures::future::ready(()))
        .await;
    metrics.controller_ready.with_label_values(&[name]).set(0);
}

/// [`drive`] a controller whose readiness is its own cache's first full list.
pub async fn drive_cached<K, Ctx, Fut, E>(
    controller: Controller<K>,
    name: &'static str,
    readiness: Readiness,
    reconcile: impl FnMut(Arc<K>, Arc<Ctx>) -> Fut,
    state: Arc<Ctx>,
    ctx: &Context,
) where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
    Fut: Future<Output = Result<ControllerAction, E>> + Send + 'static,
    E: ReconcileError,
{
    let store = controller.store();
    let synced = async move { wait_synced(&store).await };
    drive(
        controller,
        Readying::new(name, synced, readiness, ctx),
        reconcile,
        state,
    )
    .await;
}

/// Retry delay after a write conflict: the newer object is already on its way.
const CONFLICT_RETRY: Duration = Duration::from_millis(100);

/// Record that `controller`'s caches have synced.
pub fn mark_synced(controller: &'static str, readiness: &Readiness, metrics: &Metrics) {
    readiness.mark_ready(controller);
    metrics.controller_ready.with_label_values(&[controller]).set(1);
}

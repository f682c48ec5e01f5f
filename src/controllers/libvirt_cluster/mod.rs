//! LibvirtCluster controller.
//!
//! `owner Cluster? → paused? → control plane linked → probe the control plane endpoint →
//! status`. A Cluster without `spec.controlPlaneRef` gets a SelfManagedControlPlane and the
//! reference to it ([`super::control_plane_link`]); one that has a reference is left as it is.
//! There is no
//! finalizer: a LibvirtCluster creates nothing outside Kubernetes, so deleting it needs no
//! cleanup. `status.ready` and `status.initialization.provisioned` latch to true on the first
//! successful probe, as the CAPI contract wants a one-time provisioning signal; the `Ready`
//! condition keeps tracking whether the endpoint answers now.

pub mod control_plane_link;

use std::{sync::Arc, time::Duration};

use k8s_openapi::{
    api::core::v1::ObjectReference,
    apimachinery::pkg::apis::meta::v1::{OwnerReference, Time},
    jiff::Timestamp,
};
use kube::{
    Resource, ResourceExt,
    api::{Api, DynamicObject},
    runtime::{
        controller::{Action, Controller},
        events::EventType,
        reflector::ObjectRef,
        watcher,
    },
};
use tokio_util::sync::CancellationToken;

use crate::reconcile::{Context, apply_status, publish_event};
use crate::{
    api::{
        PAUSED_ANNOTATION,
        capi::{ClusterView, DecodeError, GROUP as CAPI_GROUP},
        common::InfrastructureInitialization,
        condition::{self, DesiredCondition, Status},
        libvirt_cluster::{LibvirtCluster, LibvirtClusterStatus, Reason},
    },
    app::health::Readiness,
};

/// Controller name in metrics and logs.
pub const NAME: &str = "libvirtcluster";
const FIELD_MANAGER: &str = "caplv-manager/libvirtcluster";

/// Failures of one reconcile.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Reading the owner Cluster failed.
    #[error("cannot read owner Cluster {name:?}: {source}")]
    GetCluster {
        /// Cluster name.
        name: String,
        /// API error.
        #[source]
        source: kube::Error,
    },
    /// The owner Cluster has an unexpected shape.
    #[error(transparent)]
    DecodeCluster(#[from] DecodeError),
    /// Giving the Cluster its control plane failed.
    #[error(transparent)]
    LinkControlPlane(#[from] control_plane_link::Error),
    /// Writing status failed.
    #[error("cannot write status: {0}")]
    PatchStatus(#[source] kube::Error),
}

impl Error {
    /// Bounded reason for metrics and logs.
    #[must_use]
    pub const fn reason(&self) -> &'static str {
        match self {
            Self::GetCluster { .. } => "GetCluster",
            Self::DecodeCluster(_) => "DecodeCluster",
            Self::LinkControlPlane(e) => e.reason(),
            Self::PatchStatus(_) => "PatchStatus",
        }
    }
}

impl crate::reconcile::ReconcileError for Error {
    fn reason(&self) -> &'static str {
        Error::reason(self)
    }

    fn is_conflict(&self) -> bool {
        matches!(self, Self::LinkControlPlane(e) if e.is_conflict())
    }
}

/// What a reconcile found, before deciding anything.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Observation {
    /// CAPI core has not made a Cluster the owner yet.
    NoOwner,
    /// The owner reference names a Cluster that does not exist.
    OwnerMissing {
        /// Name from the owner reference.
        cluster: String,
    },
    /// The Cluster or the object is paused.
    Paused,
    /// No endpoint is configured.
    NoEndpoint,
    /// The endpoint was probed.
    Probed {
        /// `host:port`.
        endpoint: String,
        /// `Err` carries the probe failure, already free of secrets.
        result: Result<(), String>,
    },
}

/// The decision of one reconcile.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    /// The status to write (written only when it differs from the current one).
    pub status: LibvirtClusterStatus,
    /// When to look again; `None` waits for a watch event.
    pub requeue: Option<Duration>,
}

/// Decide the status and the next check from an observation. Pure.
#[must_use]
pub fn plan(
    current: &LibvirtClusterStatus,
    generation: Option<i64>,
    observation: &Observation,
    now: &Time,
    interval: Duration,
) -> Plan {
    let not_paused = DesiredCondition::new(condition::PAUSED, Status::False, Reason::NotPaused.as_str(), "");
    let (desired, provisioned_now, requeue) = match observation {
        Observation::NoOwner => (
            vec![
                not_paused,
                DesiredCondition::new(
                    condition::READY,
                    Status::False,
                    Reason::WaitingForOwnerCluster.as_str(),
                    "waiting for Cluster API to set a Cluster as owner",
                ),
            ],
            false,
            None,
        ),
        Observation::OwnerMissing { cluster } => (
            vec![
                not_paused,
                DesiredCondition::new(
                    condition::READY,
                    Status::False,
                    Reason::OwnerClusterNotFound.as_str(),
                    format!("owner Cluster {cluster:?} does not exist"),
                ),
            ],
            false,
            None,
        ),
        Observation::Paused => (
            vec![DesiredCondition::new(
                condition::PAUSED,
                Status::True,
                Reason::Paused.as_str(),
                "reconciliation is paused by the Cluster or the cluster.x-k8s.io/paused annotation",
            )],
            false,
            None,
        ),
        Observation::NoEndpoint => (
            vec![
                not_paused,
                DesiredCondition::new(
                    condition::READY,
                    Status::True,
                    Reason::NoControlPlaneEndpoint.as_str(),
                    "no controlPlaneEndpoint to check",
                ),
            ],
            true,
            None,
        ),
        Observation::Probed { endpoint, result } => {
            let ready = match result {
                Ok(()) => DesiredCondition::new(
                    condition::READY,
                    Status::True,
                    Reason::ControlPlaneReachable.as_str(),
                    format!("{endpoint} accepts connections"),
                ),
                Err(err) => DesiredCondition::new(
                    condition::READY,
                    Status::False,
                    Reason::ControlPlaneUnreachable.as_str(),
                    err.clone(),
                ),
            };
            (vec![not_paused, ready], result.is_ok(), Some(interval))
        }
    };
    let already = current.ready
        || current
            .initialization
            .as_ref()
            .and_then(|i| i.provisioned)
            .unwrap_or(false);
    let provisioned = already || provisioned_now;
    let status = LibvirtClusterStatus {
        ready: provisioned,
        initialization: Some(InfrastructureInitialization {
            provisioned: Some(provisioned),
        }),
        conditions: condition::merge_all(&current.conditions, &desired, now, generation),
        observed_generation: generation,
    };
    Plan { status, requeue }
}

/// The owner reference to a CAPI Cluster, if CAPI has set one.
fn owner_cluster(obj: &LibvirtCluster) -> Option<&OwnerReference> {
    obj.owner_references()
        .iter()
        .find(|r| r.kind == "Cluster" && r.api_version.split_once('/').is_some_and(|(g, _)| g == CAPI_GROUP))
}

/// The owner Cluster when it exists and is not paused, else what stopped the reconcile there.
async fn owner(obj: &LibvirtCluster, ctx: &Context) -> Result<Result<DynamicObject, Observation>, Error> {
    let Some(owner) = owner_cluster(obj) else {
        return Ok(Err(Observation::NoOwner));
    };
    let namespace = obj.namespace().unwrap_or_default();
    let clusters: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), &namespace, &ctx.capi.cluster());
    let found = match clusters.get_opt(&owner.name).await {
        Ok(Some(c)) => c,
        Ok(None) => {
            return Ok(Err(Observation::OwnerMissing {
                cluster: owner.name.clone(),
            }));
        }
        Err(source) => {
            return Err(Error::GetCluster {
                name: owner.name.clone(),
                source,
            });
        }
    };
    let cluster = ClusterView::decode(&found, ctx.capi)?;
    if cluster.paused || obj.annotations().contains_key(PAUSED_ANNOTATION) {
        return Ok(Err(Observation::Paused));
    }
    Ok(Ok(found))
}

/// Probe the endpoint of a LibvirtCluster whose owner Cluster is known and not paused.
async fn observe(obj: &LibvirtCluster, ctx: &Context) -> Observation {
    let Some(endpoint) = &obj.spec.control_plane_endpoint else {
        return Observation::NoEndpoint;
    };
    let port = u16::try_from(endpoint.port).unwrap_or(0);
    let result = ctx.probe.probe(&endpoint.host, port).await.map_err(|e| e.to_string());
    ctx.metrics
        .endpoint_probes
        .with_label_values(&[if result.is_ok() { "reachable" } else { "unreachable" }])
        .inc();
    Observation::Probed {
        endpoint: format!("{}:{}", endpoint.host, endpoint.port),
        result,
    }
}

/// An Event for each change of the `Ready` or `Paused` condition status.
fn transitions(old: &LibvirtClusterStatus, new: &LibvirtClusterStatus) -> Vec<(EventType, String, String)> {
    crate::reconcile::condition_events(&old.conditions, &new.conditions)
}

async fn reconcile(obj: Arc<LibvirtCluster>, ctx: Arc<Context>) -> Result<Action, Error> {
    apply(&obj, &ctx).await
}

async fn apply(obj: &LibvirtCluster, ctx: &Context) -> Result<Action, Error> {
    let observation = match owner(obj, ctx).await? {
        Ok(cluster) => {
            control_plane_link::ensure(ctx, &cluster).await?;
            observe(obj, ctx).await
        }
        Err(stopped) => stopped,
    };
    let current = obj.status.clone().unwrap_or_default();
    let now = Time(Timestamp::now());
    let plan = plan(
        &current,
        obj.metadata.generation,
        &observation,
        &now,
        ctx.settings.endpoint_probe_interval,
    );
    if plan.status != current {
        let namespace = obj.namespace().unwrap_or_default();
        let api: Api<LibvirtCluster> = Api::namespaced(ctx.client.clone(), &namespace);
        apply_status(&api, &obj.name_any(), FIELD_MANAGER, &plan.status)
            .await
            .map_err(Error::PatchStatus)?;
        let reference: ObjectReference = obj.object_ref(&());
        for (type_, reason, note) in transitions(&current, &plan.status) {
            publish_event(&ctx.recorder, &reference, type_, &reason, "Reconcile", note).await;
        }
    }
    Ok(plan.requeue.map_or_else(Action::await_change, Action::requeue))
}

/// Run the controller until `shutdown` is cancelled.
pub async fn run(ctx: Arc<Context>, readiness: Readiness, shutdown: CancellationToken) {
    let clusters: Api<DynamicObject> = match &ctx.settings.watch_namespace {
        Some(ns) => Api::namespaced_with(ctx.client.clone(), ns, &ctx.capi.cluster()),
        None => Api::all_with(ctx.client.clone(), &ctx.capi.cluster()),
    };
    let capi = ctx.capi;
    let controller = Controller::new(ctx.watched_api::<LibvirtCluster>(), watcher::Config::default())
        .watches_with(
            clusters,
            ctx.capi.cluster(),
            watcher::Config::default(),
            move |cluster| {
                let namespace = cluster.namespace();
                ClusterView::decode(&cluster, capi)
                    .ok()
                    .and_then(|c| c.infrastructure_ref)
                    .filter(|r| r.group == LibvirtCluster::group(&()) && r.kind == LibvirtCluster::kind(&()))
                    .map(|r| ObjectRef::<LibvirtCluster>::new(&r.name).within(namespace.as_deref().unwrap_or_default()))
            },
        )
        .graceful_shutdown_on(shutdown.clone().cancelled_owned());
    let store = controller.store();
    let synced = async move { crate::reconcile::wait_synced(&store).await };
    crate::reconcile::drive(
        controller,
        crate::reconcile::Readying::new(NAME, synced, readiness, &ctx),
        reconcile,
        ctx,
    )
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn time(s: &str) -> Time {
        Time(s.parse().unwrap())
    }

    const INTERVAL: Duration = Duration::from_secs(60);

    #[test]
    fn reachable_endpoint_provisions_and_requeues_at_the_interval() {
        let obs = Observation::Probed {
            endpoint: "api:6443".into(),
            result: Ok(()),
        };
        let p = plan(
            &LibvirtClusterStatus::default(),
            Some(3),
            &obs,
            &time("2026-01-01T00:00:00Z"),
            INTERVAL,
        );
        assert!(p.status.ready);
        assert_eq!(p.status.initialization.unwrap().provisioned, Some(true));
        assert!(condition::is_true(&p.status.conditions, condition::READY));
        assert_eq!(p.status.observed_generation, Some(3));
        assert_eq!(p.requeue, Some(INTERVAL));
    }

    #[test]
    fn unreachable_endpoint_reports_why_but_keeps_provisioned_latched() {
        let up = plan(
            &LibvirtClusterStatus::default(),
            None,
            &Observation::Probed {
                endpoint: "api:6443".into(),
                result: Ok(()),
            },
            &time("2026-01-01T00:00:00Z"),
            INTERVAL,
        );
        let down = plan(
            &up.status,
            None,
            &Observation::Probed {
                endpoint: "api:6443".into(),
                result: Err("cannot connect to api:6443: refused".into()),
            },
            &time("2026-01-01T00:01:00Z"),
            INTERVAL,
        );
        assert!(down.status.ready, "provisioning is a one-time signal");
        let ready = condition::find(&down.status.conditions, condition::READY).unwrap();
        assert_eq!(
            (ready.status.as_str(), ready.reason.as_str()),
            ("False", "ControlPlaneUnreachable")
        );
        assert!(ready.message.contains("refused"));
        assert_eq!(ready.last_transition_time, time("2026-01-01T00:01:00Z"));
        let events = transitions(&up.status, &down.status);
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].0, EventType::Warning);
    }

    #[test]
    fn unreachable_first_time_is_not_provisioned() {
        let p = plan(
            &LibvirtClusterStatus::default(),
            None,
            &Observation::Probed {
                endpoint: "api:6443".into(),
                result: Err("timeout".into()),
            },
            &time("2026-01-01T00:00:00Z"),
            INTERVAL,
        );
        assert!(!p.status.ready);
        assert_eq!(p.status.initialization.unwrap().provisioned, Some(false));
    }

    #[test]
    fn waiting_for_owner_waits_for_a_watch_event() {
        let p = plan(
            &LibvirtClusterStatus::default(),
            None,
            &Observation::NoOwner,
            &time("2026-01-01T00:00:00Z"),
            INTERVAL,
        );
        assert_eq!(p.requeue, None);
        let ready = condition::find(&p.status.conditions, condition::READY).unwrap();
        assert_eq!(ready.reason, "WaitingForOwnerCluster");
        let p = plan(
            &p.status,
            None,
            &Observation::OwnerMissing { cluster: "spot".into() },
            &time("2026-01-01T00:00:00Z"),
            INTERVAL,
        );
        assert_eq!(
            condition::find(&p.status.conditions, condition::READY).unwrap().reason,
            "OwnerClusterNotFound"
        );
    }

    #[test]
    fn paused_sets_only_the_paused_condition_and_stops_probing() {
        let up = plan(
            &LibvirtClusterStatus::default(),
            None,
            &Observation::Probed {
                endpoint: "api:6443".into(),
                result: Ok(()),
            },
            &time("2026-01-01T00:00:00Z"),
            INTERVAL,
        );
        let paused = plan(
            &up.status,
            None,
            &Observation::Paused,
            &time("2026-01-01T00:00:30Z"),
            INTERVAL,
        );
        assert_eq!(paused.requeue, None);
        assert!(condition::is_true(&paused.status.conditions, condition::PAUSED));
        assert!(
            condition::is_true(&paused.status.conditions, condition::READY),
            "Ready is left as it was"
        );
        let events = transitions(&up.status, &paused.status);
        assert_eq!(
            events,
            [(
                EventType::Normal,
                "Paused".to_owned(),
                paused.status.conditions[0].message.clone()
            )]
        );
    }

    #[test]
    fn unchanged_observation_yields_an_identical_status() {
        let obs = Observation::Probed {
            endpoint: "api:6443".into(),
            result: Ok(()),
        };
        let first = plan(
            &LibvirtClusterStatus::default(),
            Some(1),
            &obs,
            &time("2026-01-01T00:00:00Z"),
            INTERVAL,
        );
        let second = plan(&first.status, Some(1), &obs, &time("2026-01-01T00:05:00Z"), INTERVAL);
        assert_eq!(
            first.status, second.status,
            "no write, so no watch event, so no hot loop"
        );
        assert!(transitions(&first.status, &second.status).is_empty());
    }
}

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
pub mod failure_domains;

use std::{sync::Arc, time::Duration};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::{
    Resource, ResourceExt,
    api::DynamicObject,
    runtime::{controller::Action, reflector::ObjectRef},
};
use tokio_util::sync::CancellationToken;

use crate::{
    api::{
        capi::ClusterView,
        common::InfrastructureInitialization,
        condition::{self, DesiredCondition, Status},
        libvirt_cluster::{ClusterCondition, LibvirtCluster, LibvirtClusterStatus, Reason},
    },
    app::health::Readiness,
    reconcile::{ApiError, Context, drive_cached, in_namespace, owner, refs_where, write_status},
};

/// Controller name in metrics and logs.
pub const NAME: &str = "libvirtcluster";
const FIELD_MANAGER: &str = "caplv-manager/libvirtcluster";

/// Failures of one reconcile: reading the owner Cluster, linking its control plane, writing
/// the status.
pub type Error = ApiError;

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
    let (ready, provisioned_now, requeue) = match observation {
        Observation::NoOwner => {
            let message = "waiting for Cluster API to set a Cluster as owner".to_owned();
            (
                Some((Status::False, Reason::WaitingForOwnerCluster, message)),
                false,
                None,
            )
        }
        Observation::OwnerMissing { cluster } => {
            let message = format!("owner Cluster {cluster:?} does not exist");
            (
                Some((Status::False, Reason::OwnerClusterNotFound, message)),
                false,
                None,
            )
        }
        Observation::Paused => (None, false, None),
        Observation::NoEndpoint => {
            let message = "no controlPlaneEndpoint to check".to_owned();
            (
                Some((Status::True, Reason::NoControlPlaneEndpoint, message)),
                true,
                None,
            )
        }
        Observation::Probed {
            endpoint,
            result: Ok(()),
        } => {
            let message = format!("{endpoint} accepts connections");
            (
                Some((Status::True, Reason::ControlPlaneReachable, message)),
                true,
                Some(interval),
            )
        }
        Observation::Probed { result: Err(err), .. } => {
            let ready = (Status::False, Reason::ControlPlaneUnreachable, err.clone());
            (Some(ready), false, Some(interval))
        }
    };
    let desired = match ready {
        None => vec![DesiredCondition::new(
            ClusterCondition::Paused,
            Status::True,
            Reason::Paused,
            owner::PAUSED_MESSAGE,
        )],
        Some((status, reason, message)) => vec![
            DesiredCondition::new(ClusterCondition::Paused, Status::False, Reason::NotPaused, ""),
            DesiredCondition::new(ClusterCondition::Ready, status, reason, message),
        ],
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
        failure_domains: current.failure_domains.clone(),
        conditions: condition::merge_all(&current.conditions, &desired, now, generation),
        observed_generation: generation,
    };
    Plan { status, requeue }
}

/// The owner Cluster when it exists and is not paused, else what stopped the reconcile there.
async fn owner(obj: &LibvirtCluster, ctx: &Context) -> Result<Result<DynamicObject, Observation>, Error> {
    let Some(owner) = owner::capi_owner(&obj.metadata, "Cluster") else {
        return Ok(Err(Observation::NoOwner));
    };
    let namespace = obj.namespace().unwrap_or_default();
    let Some(found) = ctx.caches.clusters.get(&namespace, &owner.name).await else {
        return Ok(Err(Observation::OwnerMissing {
            cluster: owner.name.clone(),
        }));
    };
    let cluster = ClusterView::decode(&found, ctx.capi).map_err(ApiError::from)?;
    if owner::is_paused(cluster.paused, &obj.metadata) {
        return Ok(Err(Observation::Paused));
    }
    Ok(Ok(Arc::unwrap_or_clone(found)))
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

async fn reconcile(obj: Arc<LibvirtCluster>, ctx: Arc<Context>) -> Result<Action, Error> {
    let observation = match owner(&obj, &ctx).await? {
        Ok(cluster) => {
            control_plane_link::ensure(&ctx, &cluster).await?;
            observe(&obj, &ctx).await
        }
        Err(stopped) => stopped,
    };
    let current = obj.status.clone().unwrap_or_default();
    let interval = ctx.settings.endpoint_probe_interval;
    let mut plan = plan(
        &current,
        obj.metadata.generation,
        &observation,
        &ctx.timestamp(),
        interval,
    );
    if observation != Observation::Paused {
        // From the shared cache, whose changes wake this controller: no list at each probe.
        let namespace = obj.namespace().unwrap_or_default();
        let hosts = ctx.caches.libvirt_hosts.synced_store().await.state();
        let in_it = hosts.iter().filter(|h| in_namespace(h.as_ref(), &namespace));
        plan.status.failure_domains = failure_domains::publish(in_it.map(AsRef::as_ref), ctx.capi);
    }
    write_status(&ctx, obj.as_ref(), FIELD_MANAGER, &current, &plan.status, Vec::new()).await?;
    Ok(plan.requeue.map_or_else(Action::await_change, Action::requeue))
}

/// Run the controller until `shutdown` is cancelled.
pub async fn run(ctx: Arc<Context>, readiness: Readiness, shutdown: CancellationToken) {
    let capi = ctx.capi;
    let controller = ctx.controller::<LibvirtCluster>();
    let clusters = controller.store();
    let controller = controller
        .watches_shared_stream_with(
            ctx.caches.clusters.subscribe(),
            move |cluster| {
                let namespace = cluster.namespace();
                ClusterView::decode(&cluster, capi)
                    .ok()
                    .and_then(|c| c.infrastructure_ref)
                    .filter(|r| r.group == LibvirtCluster::group(&()) && r.kind == LibvirtCluster::kind(&()))
                    .map(|r| ObjectRef::<LibvirtCluster>::new(&r.name).within(namespace.as_deref().unwrap_or_default()))
            },
            capi.cluster(),
        )
        // A host's failure domain is published by the clusters of its namespace.
        .watches_shared_stream(ctx.caches.libvirt_hosts.subscribe(), move |host| {
            let namespace = host.namespace().unwrap_or_default();
            refs_where(&clusters, |c| in_namespace(c, &namespace))
        })
        .graceful_shutdown_on(shutdown.clone().cancelled_owned());
    drive_cached(controller, NAME, readiness, reconcile, ctx.clone(), &ctx).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn time(s: &str) -> Time {
        Time(s.parse().unwrap())
    }

    const INTERVAL: Duration = Duration::from_secs(60);

    /// A fresh object whose endpoint just answered.
    fn reachable() -> Plan {
        plan(
            &LibvirtClusterStatus::default(),
            None,
            &probed(Ok(())),
            &time("2026-01-01T00:00:00Z"),
            INTERVAL,
        )
    }

    fn probed(result: Result<(), String>) -> Observation {
        Observation::Probed {
            endpoint: "api:6443".into(),
            result,
        }
    }

    #[test]
    fn reachable_endpoint_provisions_and_requeues_at_the_interval() {
        let obs = probed(Ok(()));
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
        let up = reachable();
        let down = plan(
            &up.status,
            None,
            &probed(Err("cannot connect to api:6443: refused".into())),
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
        let events = crate::reconcile::condition_events(&up.status.conditions, &down.status.conditions);
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].0, kube::runtime::events::EventType::Warning);
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
        let up = reachable();
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
        let events = crate::reconcile::condition_events(&up.status.conditions, &paused.status.conditions);
        assert_eq!(
            events,
            [(
                kube::runtime::events::EventType::Normal,
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
        assert!(crate::reconcile::condition_events(&first.status.conditions, &second.status.conditions).is_empty());
    }
}

//! SelfManagedControlPlane controller: the control plane of a cluster that manages itself.
//!
//! # Flow
//! `paused? → Cluster → server → kubeconfig Secret → status`, split into the reads, a pure
//! decision ([`plan`]) and the writes:
//! 1. Paused (the `cluster.x-k8s.io/paused` annotation, or the Cluster's `spec.paused`): only
//!    the `Paused` condition is written.
//! 2. The Cluster is the one the `cluster.x-k8s.io/cluster-name` label names (the LibvirtCluster
//!    controller sets it when it creates this object; Cluster API core sets it and a controller
//!    ownerRef from the Cluster, both tolerated), else the Cluster owner.
//! 3. The server: `spec.server`, else the manager's `--workload-api-server`, else `https://<host>:<port>` of the Cluster's
//!    `controlPlaneEndpoint`, else of its LibvirtCluster's. None known: `Ready=False`,
//!    `NoControlPlaneEndpoint`, and a change of either object is waited for.
//! 4. The Secret `<cluster>-kubeconfig` (contract: type `cluster.x-k8s.io/secret`, label, key
//!    `value`), with a controller ownerRef to this object so it goes with it. A Secret of that
//!    name without our ownerRef is a user's: never touched (`UserProvidedKubeconfig`). Ours is
//!    rewritten with a freshly minted token (TokenRequest for the workload ServiceAccount, 24 h by
//!    default) when it is missing, its content differs from what we would write (edited, a new
//!    server or CA; a digest annotation covers the token too), or a third of the token's
//!    lifetime remains; the reconcile is requeued for exactly that moment on the injected clock.
//! 5. Status, written only when it changed: the contract's constant `externalManagedControlPlane`,
//!    `initialized`, `ready`, `initialization.controlPlaneInitialized`, the kubeconfig's server,
//!    ServiceAccount and token times, `Ready` and `Paused`.
//!
//! # Choices
//! - **The token never leaves the Secret.** It is not logged, not in Events, conditions, status
//!   or errors; [`plan::Lease`] and the kubeconfig types print without it.
//! - **Watches:** Secrets carrying the cluster-name label (metadata only; Cluster API reads only
//!   labelled kubeconfig Secrets), Clusters (only changes of pause or endpoint) and
//!   LibvirtClusters, each mapped to the control planes of their cluster.
//! - **No finalizer:** deleting this object garbage-collects the Secret through its ownerRef.

pub mod kubeconfig;
pub mod plan;

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, PoisonError},
};

use chrono::{DateTime, Utc};
use k8s_openapi::{
    api::{
        authentication::v1::{TokenRequest, TokenRequestSpec},
        core::v1::{Secret, ServiceAccount},
    },
    apimachinery::pkg::apis::meta::v1::Time,
};
use kube::{
    Resource, ResourceExt,
    api::{Api, PostParams},
    runtime::{
        controller::Action,
        events::EventType,
        reflector::{ObjectRef, Store},
        watcher,
    },
};
use tokio_util::sync::CancellationToken;

use self::{
    kubeconfig::Access,
    plan::{Decision, Existing, Lease, Outcome},
};
use crate::{
    api::{
        CLUSTER_NAME_LABEL, LibvirtCluster,
        capi::ClusterView,
        self_managed_control_plane::{Reason, SelfManagedControlPlane},
    },
    app::health::Readiness,
    reconcile::{
        ApiError, Context, apply_secret, condition_events, drive_cached, error::get_opt, in_namespace, owner,
        refs_where, write_status,
    },
};

/// Controller name in metrics, logs and readiness.
pub const NAME: &str = "selfmanagedcontrolplane";
/// Field manager of the kubeconfig Secret and the status.
pub const FIELD_MANAGER: &str = "caplv-manager/selfmanagedcontrolplane";

/// Transient failures of one reconcile (retried after `error_requeue`). Missing inputs are not
/// errors: they are reported in the `Ready` condition.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A read, a write or a Cluster API object's shape.
    #[error(transparent)]
    Api(#[from] ApiError),
    /// The TokenRequest failed (for another reason than a missing ServiceAccount).
    #[error("cannot mint a token for ServiceAccount {service_account}: {source}")]
    MintToken {
        /// `namespace/name`.
        service_account: String,
        /// API error.
        #[source]
        source: kube::Error,
    },
    /// The TokenRequest answer carried no token or an unreadable expiry.
    #[error("the TokenRequest for ServiceAccount {service_account} returned no usable token")]
    EmptyToken {
        /// `namespace/name`.
        service_account: String,
    },
}

impl crate::reconcile::ReconcileError for Error {
    fn reason(&self) -> &'static str {
        match self {
            Self::Api(e) => e.reason(),
            Self::MintToken { .. } => "MintTokenFailed",
            Self::EmptyToken { .. } => "EmptyToken",
        }
    }

    fn is_conflict(&self) -> bool {
        matches!(self, Self::Api(e) if e.is_conflict())
    }
}

/// The name of the Cluster `obj` is the control plane of.
fn cluster_name(obj: &SelfManagedControlPlane) -> Option<String> {
    obj.labels()
        .get(CLUSTER_NAME_LABEL)
        .filter(|c| !c.is_empty())
        .cloned()
        .or_else(|| owner::capi_owner(&obj.metadata, "Cluster").map(|r| r.name.clone()))
}

/// The workload ServiceAccount, `(namespace, name)`.
fn service_account(ctx: &Context) -> (String, String) {
    let namespace = ctx
        .settings
        .workload_service_account_namespace
        .clone()
        .unwrap_or_else(|| ctx.client.default_namespace().to_owned());
    (namespace, ctx.settings.workload_service_account.clone())
}

/// What the reads found, up to the decision about the Secret.
enum Observation {
    /// Nothing more to do than report `outcome`.
    Done(Outcome),
    /// The Secret to maintain for `cluster`, and what exists under its name.
    Secret {
        cluster: String,
        access: Access,
        existing: Existing,
    },
}

async fn observe(obj: &SelfManagedControlPlane, ctx: &Context) -> Result<Observation, Error> {
    if owner::annotated_paused(&obj.metadata) {
        return Ok(Observation::Done(Outcome::Paused));
    }
    let Some(cluster) = cluster_name(obj) else {
        return Ok(Observation::Done(Outcome::NoCluster));
    };
    let namespace = obj.namespace().unwrap_or_default();
    let Some(found) = ctx.caches.clusters.get(&namespace, &cluster).await else {
        return Ok(Observation::Done(Outcome::ClusterNotFound { cluster }));
    };
    let view = ClusterView::decode(&found, ctx.capi).map_err(ApiError::from)?;
    if view.paused {
        return Ok(Observation::Done(Outcome::Paused));
    }
    let infra_endpoint = match (&view.control_plane_endpoint, &view.infrastructure_ref) {
        (None, Some(r)) if r.group == LibvirtCluster::group(&()) && r.kind == LibvirtCluster::kind(&()) => {
            let api: Api<LibvirtCluster> = Api::namespaced(ctx.client.clone(), &namespace);
            get_opt(&api, &r.name, "LibvirtCluster")
                .await?
                .and_then(|l| l.spec.control_plane_endpoint)
        }
        _ => None,
    };
    let Some(server) = kubeconfig::server(
        obj.spec
            .server
            .as_deref()
            .or(ctx.settings.workload_api_server.as_deref()),
        view.control_plane_endpoint.as_ref(),
        infra_endpoint.as_ref(),
    ) else {
        return Ok(Observation::Done(Outcome::NoEndpoint { cluster }));
    };
    let (sa_namespace, sa_name) = service_account(ctx);
    let access = Access {
        cluster: cluster.clone(),
        server,
        ca_pem: ctx.settings.api_server_ca.clone(),
        user: format!("{sa_namespace}/{sa_name}"),
    };
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), &namespace);
    let name = plan::secret_name(&cluster);
    let secret = get_opt(&secrets, &name, "Secret").await?;
    let existing = Existing::classify(
        secret.as_ref(),
        obj.uid().as_deref().unwrap_or_default(),
        &cluster,
        &access,
    );
    Ok(Observation::Secret {
        cluster,
        access,
        existing,
    })
}

/// Whole seconds, as annotations and status keep them, so what is written reads back equal.
fn whole_seconds(t: DateTime<Utc>) -> DateTime<Utc> {
    DateTime::from_timestamp(t.timestamp(), 0).unwrap_or(t)
}

/// Mint a token for the workload ServiceAccount; `None` when it does not exist.
async fn mint(ctx: &Context) -> Result<Option<Lease>, Error> {
    let (namespace, name) = service_account(ctx);
    let service_account = format!("{namespace}/{name}");
    let api: Api<ServiceAccount> = Api::namespaced(ctx.client.clone(), &namespace);
    let request = TokenRequest {
        spec: Some(TokenRequestSpec {
            expiration_seconds: i64::try_from(ctx.settings.workload_token_lifetime.as_secs()).ok(),
            ..TokenRequestSpec::default()
        }),
        ..TokenRequest::default()
    };
    let issued_at = whole_seconds(ctx.clock.now());
    let answer = match api.create_token_request(&name, &PostParams::default(), &request).await {
        Ok(answer) => answer,
        Err(kube::Error::Api(status)) if status.code == 404 => return Ok(None),
        Err(source) => {
            return Err(Error::MintToken {
                service_account,
                source,
            });
        }
    };
    let status = answer.status.unwrap_or_default();
    let token = status.token.filter(|t| !t.is_empty());
    let expires_at = status
        .expiration_timestamp
        .and_then(|t| DateTime::from_timestamp(t.0.as_second(), 0));
    let (Some(token), Some(expires_at)) = (token, expires_at) else {
        return Err(Error::EmptyToken { service_account });
    };
    Ok(Some(Lease {
        token,
        issued_at,
        expires_at,
    }))
}

/// Act on the decision about the Secret: the outcome, and whether a token was minted.
async fn maintain(
    obj: &SelfManagedControlPlane,
    ctx: &Context,
    cluster: String,
    access: Access,
    existing: Existing,
) -> Result<(Outcome, bool), Error> {
    let secret = plan::secret_name(&cluster);
    let (lease, write, minted) = match plan::decide(existing, ctx.clock.now()) {
        Decision::LeaveForeign => return Ok((Outcome::Foreign { secret }, false)),
        Decision::Keep { lease, rewrite } => (lease, rewrite, false),
        Decision::Mint => match mint(ctx).await? {
            Some(lease) => (lease, true, true),
            None => {
                let (namespace, name) = service_account(ctx);
                let service_account = format!("{namespace}/{name}");
                return Ok((Outcome::ServiceAccountNotFound { service_account }, false));
            }
        },
    };
    if write {
        let body = plan::secret(obj, &cluster, &access, &lease);
        apply_secret(ctx, &obj.namespace().unwrap_or_default(), &secret, FIELD_MANAGER, &body).await?;
        tracing::info!(secret = %secret, minted, "kubeconfig Secret written");
    }
    Ok((Outcome::Maintained { secret, access, lease }, minted))
}

async fn reconcile(obj: Arc<SelfManagedControlPlane>, ctx: Arc<Context>) -> Result<Action, Error> {
    if obj.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let (outcome, minted) = match observe(&obj, &ctx).await? {
        Observation::Done(outcome) => (outcome, false),
        Observation::Secret {
            cluster,
            access,
            existing,
        } => maintain(&obj, &ctx, cluster, access, existing).await?,
    };
    let now = ctx.clock.now();
    let current = obj.status.clone().unwrap_or_default();
    let status = plan::status(&current, obj.metadata.generation, &outcome, &Time(to_timestamp(now)));
    let mut events = Vec::new();
    // A renewal is worth an Event of its own only when no condition change announces it; the
    // first token is no renewal.
    let quiet = status == current || condition_events(&current.conditions, &status.conditions).is_empty();
    let renewal = crate::api::condition::find(&current.conditions, crate::api::condition::READY).is_some();
    if minted
        && quiet
        && renewal
        && let Outcome::Maintained { secret, access, lease } = &outcome
    {
        events.push((
            EventType::Normal,
            "KubeconfigRenewed".to_owned(),
            format!(
                "Secret {secret:?}: new token for ServiceAccount {}, valid until {}",
                access.user,
                lease.expires_at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
            ),
        ));
    }
    write_status(&ctx, obj.as_ref(), FIELD_MANAGER, &current, &status, events).await?;
    if matches!(outcome, Outcome::ServiceAccountNotFound { .. }) {
        tracing::warn!(
            reason = Reason::WorkloadServiceAccountNotFound.as_str(),
            "cannot mint a token yet"
        );
    }
    Ok(plan::requeue(&outcome, now).map_or_else(Action::await_change, Action::requeue))
}

fn to_timestamp(t: DateTime<Utc>) -> k8s_openapi::jiff::Timestamp {
    k8s_openapi::jiff::Timestamp::from_second(t.timestamp()).unwrap_or_default()
}

/// What a Cluster contributes to its control plane's kubeconfig: pause and endpoint.
type ClusterInputs = (bool, Option<(String, i32)>);

/// The control planes in `namespace` that belong to `cluster`.
fn for_cluster(
    store: &Store<SelfManagedControlPlane>,
    namespace: &str,
    cluster: &str,
) -> Vec<ObjectRef<SelfManagedControlPlane>> {
    refs_where(store, |c| {
        in_namespace(c, namespace) && cluster_name(c).as_deref() == Some(cluster)
    })
}

/// The Cluster a LibvirtCluster belongs to: CAPI's label, else its Cluster owner.
fn cluster_of_infra(infra: &LibvirtCluster) -> Option<String> {
    infra
        .labels()
        .get(CLUSTER_NAME_LABEL)
        .cloned()
        .or_else(|| owner::capi_owner(&infra.metadata, "Cluster").map(|r| r.name.clone()))
}

/// Run the controller until `shutdown` is cancelled.
pub async fn run(ctx: Arc<Context>, readiness: Readiness, shutdown: CancellationToken) {
    let controller = ctx.controller::<SelfManagedControlPlane>();
    let store = controller.store();
    let by_secret = store.clone();
    let by_cluster = store.clone();
    let by_infra = store.clone();
    let capi = ctx.capi;
    // Last seen (paused, endpoint) per Cluster: only a change of them concerns us.
    let seen: Mutex<HashMap<(String, String), ClusterInputs>> = Mutex::default();
    let controller = controller
        .watches_shared_stream(ctx.caches.secrets.subscribe(), move |secret| {
            if !secret.labels().contains_key(CLUSTER_NAME_LABEL) {
                return Vec::new();
            }
            let namespace = secret.namespace().unwrap_or_default();
            secret
                .name_any()
                .strip_suffix("-kubeconfig")
                .map(|cluster| for_cluster(&by_secret, &namespace, cluster))
                .unwrap_or_default()
        })
        .watches_shared_stream_with(
            ctx.caches.clusters.subscribe(),
            move |cluster| {
                let namespace = cluster.namespace().unwrap_or_default();
                let name = cluster.name_any();
                let relevant = ClusterView::decode(&cluster, capi)
                    .map(|c| (c.paused, c.control_plane_endpoint.map(|e| (e.host, e.port))))
                    .unwrap_or_default();
                let previous = seen
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .insert((namespace.clone(), name.clone()), relevant.clone());
                if previous == Some(relevant) {
                    return Vec::new();
                }
                for_cluster(&by_cluster, &namespace, &name)
            },
            capi.cluster(),
        )
        .watches(
            ctx.watched_api::<LibvirtCluster>(),
            watcher::Config::default(),
            move |infra| {
                let namespace = infra.namespace().unwrap_or_default();
                cluster_of_infra(&infra)
                    .map(|cluster| for_cluster(&by_infra, &namespace, &cluster))
                    .unwrap_or_default()
            },
        )
        .graceful_shutdown_on(shutdown.clone().cancelled_owned());
    drive_cached(controller, NAME, readiness, reconcile, ctx.clone(), &ctx).await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::self_managed_control_plane::SelfManagedControlPlaneSpec;

    fn control_plane(labels: &[(&str, &str)], owners: &[(&str, &str, bool)]) -> SelfManagedControlPlane {
        let mut obj = SelfManagedControlPlane::new("cp", SelfManagedControlPlaneSpec::default());
        obj.metadata.namespace = Some("default".into());
        obj.metadata.labels = Some(labels.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect());
        obj.metadata.owner_references = Some(
            owners
                .iter()
                .map(
                    |(api_version, name, controller)| k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
                        api_version: (*api_version).into(),
                        kind: "Cluster".into(),
                        name: (*name).into(),
                        uid: "u".into(),
                        controller: Some(*controller),
                        block_owner_deletion: None,
                    },
                )
                .collect(),
        );
        obj
    }

    #[test]
    fn the_cluster_comes_from_the_label_then_the_cluster_owner() {
        let labelled = control_plane(
            &[(CLUSTER_NAME_LABEL, "spot")],
            &[("cluster.x-k8s.io/v1beta1", "other", true)],
        );
        assert_eq!(cluster_name(&labelled).as_deref(), Some("spot"));
        let owned = control_plane(
            &[],
            &[
                ("example.com/v1", "not-capi", true),
                ("cluster.x-k8s.io/v1beta2", "spot", true),
            ],
        );
        assert_eq!(cluster_name(&owned).as_deref(), Some("spot"));
        assert_eq!(cluster_name(&control_plane(&[(CLUSTER_NAME_LABEL, "")], &[])), None);
    }

    #[test]
    fn errors_never_carry_more_than_names() {
        let err = Error::EmptyToken {
            service_account: "caplv-system/caplv-workload-access".into(),
        };
        assert_eq!(crate::reconcile::ReconcileError::reason(&err), "EmptyToken");
        assert!(err.to_string().contains("caplv-system/caplv-workload-access"));
    }
}

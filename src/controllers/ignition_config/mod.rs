//! IgnitionConfig controller: the Cluster API bootstrap provider that turns a Secret holding
//! Ignition (or a Butane subset) into the bootstrap data Secret a Machine boots from.
//!
//! # Flow
//! `deleting? → paused? → owner Machine → source Secret → validate or translate → data Secret →
//! status`, split into the reads (`observe`), a pure decision ([`plan::plan`]) and the writes:
//! 1. A config being deleted is left alone: the data Secret carries a controller ownerRef to it,
//!    so garbage collection removes the Secret; no finalizer is needed.
//! 2. Paused (the `cluster.x-k8s.io/paused` annotation, or the Cluster's `spec.paused`): only the
//!    `Paused` condition is written.
//! 3. Owner Machine: CAPI core adds a controller ownerRef from the Machine and the cluster-name
//!    label. We do not wait for it: a standalone IgnitionConfig (no Machine, such as the one
//!    5-Spot or a user creates ahead of the Machine) produces its data too, so the Machine finds
//!    it ready. The cluster name for the data Secret's label comes from the owner Machine's
//!    `spec.clusterName` when there is one, else from the config's own cluster-name label; when
//!    CAPI adopts the config later, that metadata change reconciles again and relabels the Secret.
//! 4. The source Secret (same namespace, `spec.secretRef.key`, default `value`): if its `format`
//!    key says `butane` it is translated with [`crate::ignition::butane::translate`], else it is
//!    validated with [`crate::ignition::validate`] (Ignition 3.0–3.6; 2.x refused with how to
//!    fetch 3.x). Valid Ignition is passed on byte for byte, so the data equals the source.
//! 5. The data Secret (per the contract): named after the IgnitionConfig, `type:
//!    cluster.x-k8s.io/secret`, `value` + `format: ignition`, the cluster-name label when known,
//!    a controller ownerRef to the IgnitionConfig. It is server-side applied (forced, as
//!    [`FIELD_MANAGER`]) only when it lacks something we set, so hand edits and deletions are
//!    undone, and an unchanged source writes nothing. A Secret of that name that does not belong
//!    to this IgnitionConfig is never touched: `Ready=False`, reason `DataSecretConflict`.
//! 6. Status, written only when it changed: `ready`, `dataSecretName`,
//!    `initialization.dataSecretCreated`, the `Ready` and `Paused` conditions,
//!    `observedGeneration`. An Event is published on each change of a condition's status or
//!    reason (Warning when `Ready` turns False), and a Normal `DataSecretUpdated` Event when the
//!    data Secret was rewritten while `Ready` stayed True.
//!
//! # Choices
//! - **A bad source leaves an existing data Secret as it was.** Missing Secret or key, invalid
//!   JSON, spec 2.x, an unsupported version, oversize data or a Butane error set `Ready=False`
//!   with the library's reason and message and write no data. The Machine may already be booting
//!   from the last good data, and deleting or blanking it would break that boot for nothing.
//! - **`ready` latches.** The contract's `dataSecretCreated` is a one-time signal (CAPI core
//!   copies `dataSecretName` once and never reads the config again), so `ready`,
//!   `initialization.dataSecretCreated` and `dataSecretName` stay set while the `Ready`
//!   condition reports the current problem.
//! - **No hot loop, no polling.** A bad source waits for a change of the Secret or the
//!   IgnitionConfig; nothing is requeued on a timer except after transient API errors.
//! - **Secrets are watched metadata-only, once.** One metadata watch on Secrets maps each Secret
//!   to the IgnitionConfigs in its namespace that read it (`spec.secretRef.name`) or that it
//!   would be the data Secret of (same name), using the controller's own cache of
//!   IgnitionConfigs. This covers what `owns` would (the data Secret is named after its owner)
//!   and also a conflicting Secret going away, with one watch and without holding Secret
//!   contents in the watch.
//! - **Clusters are watched for pause changes only**, mapped to the configs labelled with the
//!   Cluster's name.
//! - **Content never leaves the Secret.** Conditions, Events, logs and errors carry names, keys,
//!   sizes, positions and versions (the library's errors are built that way); Secrets are never
//!   Debug-printed.

pub mod plan;

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, PoisonError},
};

use k8s_openapi::{
    api::core::v1::{ObjectReference, Secret},
    apimachinery::pkg::apis::meta::v1::{OwnerReference, Time},
    jiff::Timestamp,
};
use kube::{
    Resource, ResourceExt,
    api::{Api, DynamicObject, PartialObjectMeta, Patch, PatchParams},
    runtime::{
        controller::{Action, Controller},
        events::EventType,
        reflector::{ObjectRef, Store},
        watcher,
    },
};
use tokio_util::sync::CancellationToken;

use self::plan::{Existing, Observation, Plan};
use crate::reconcile::{Context, apply_status, publish_event, wait_synced};
use crate::{
    api::{
        CLUSTER_NAME_LABEL, PAUSED_ANNOTATION,
        capi::{ClusterView, DecodeError, GROUP as CAPI_GROUP, MachineView},
        condition,
        ignition_config::{IgnitionConfig, IgnitionConfigStatus},
    },
    app::health::Readiness,
};

/// Controller name in metrics, logs and readiness.
pub const NAME: &str = "ignitionconfig";
/// Field manager of the data Secret and the status.
pub const FIELD_MANAGER: &str = "caplv-manager/ignitionconfig";

/// Transient failures of one reconcile (retried after `error_requeue`). Problems with the
/// user's input are not errors: they are reported in the `Ready` condition.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Reading an object failed.
    #[error("cannot read {what}: {source}")]
    Read {
        /// What was read, e.g. `Secret "worker-ignition"`.
        what: String,
        /// API error.
        #[source]
        source: kube::Error,
    },
    /// A CAPI object has an unexpected shape.
    #[error(transparent)]
    Decode(#[from] DecodeError),
    /// Writing the data Secret failed.
    #[error("cannot write data Secret {name:?}: {source}")]
    WriteSecret {
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
            Self::Read { .. } => "ReadFailed",
            Self::Decode(_) => "DecodeFailed",
            Self::WriteSecret { .. } => "WriteSecretFailed",
            Self::PatchStatus(_) => "PatchStatus",
        }
    }
}

impl crate::reconcile::ReconcileError for Error {
    fn reason(&self) -> &'static str {
        Error::reason(self)
    }
}

/// The controller ownerRef from a CAPI Machine, if core has set one.
fn owner_machine(config: &IgnitionConfig) -> Option<&OwnerReference> {
    config
        .owner_references()
        .iter()
        .filter(|r| r.kind == "Machine" && r.api_version.split_once('/').is_some_and(|(g, _)| g == CAPI_GROUP))
        .max_by_key(|r| r.controller == Some(true))
}

async fn get_opt<K>(api: &Api<K>, name: &str, what: &str) -> Result<Option<K>, Error>
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    api.get_opt(name).await.map_err(|source| Error::Read {
        what: format!("{what} {name:?}"),
        source,
    })
}

/// The cluster the config belongs to: the owner Machine's, else the config's own label.
async fn cluster_name(config: &IgnitionConfig, ctx: &Context, namespace: &str) -> Result<Option<String>, Error> {
    if let Some(owner) = owner_machine(config) {
        let machines: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), namespace, &ctx.capi.machine());
        if let Some(machine) = get_opt(&machines, &owner.name, "Machine").await? {
            let view = MachineView::decode(&machine, ctx.capi)?;
            if !view.cluster_name.is_empty() {
                return Ok(Some(view.cluster_name));
            }
        }
    }
    Ok(config
        .labels()
        .get(CLUSTER_NAME_LABEL)
        .filter(|c| !c.is_empty())
        .cloned())
}

async fn observe(config: &IgnitionConfig, ctx: &Context) -> Result<Observation, Error> {
    let namespace = config.namespace().unwrap_or_default();
    let cluster_name = cluster_name(config, ctx, &namespace).await?;
    let mut paused = config.annotations().contains_key(PAUSED_ANNOTATION);
    if !paused && let Some(cluster) = &cluster_name {
        let clusters: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), &namespace, &ctx.capi.cluster());
        if let Some(found) = get_opt(&clusters, cluster, "Cluster").await? {
            paused = ClusterView::decode(&found, ctx.capi)?.paused;
        }
    }
    if paused {
        return Ok(Observation::Paused);
    }
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), &namespace);
    let secret_ref = &config.spec.secret_ref;
    let source_secret = get_opt(&secrets, &secret_ref.name, "Secret").await?;
    let source = plan::payload(&secret_ref.name, &secret_ref.key, source_secret.as_ref());
    drop(source_secret);
    let existing = if source.is_ok() {
        let found = get_opt(&secrets, &config.name_any(), "Secret").await?;
        Existing::classify(found, config.uid().as_deref().unwrap_or_default())
    } else {
        // Nothing will be written, so the data Secret need not be read.
        Existing::Absent
    };
    Ok(Observation::Active {
        source,
        existing,
        cluster_name,
    })
}

/// An Event for each change of the `Ready` or `Paused` condition's status or reason.
fn transitions(old: &IgnitionConfigStatus, new: &IgnitionConfigStatus) -> Vec<(EventType, String, String)> {
    crate::reconcile::condition_events(&old.conditions, &new.conditions)
}

async fn reconcile(config: Arc<IgnitionConfig>, ctx: Arc<Context>) -> Result<Action, Error> {
    apply(&config, &ctx).await
}

async fn apply(config: &IgnitionConfig, ctx: &Context) -> Result<Action, Error> {
    if config.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let observation = observe(config, ctx).await?;
    let current = config.status.clone().unwrap_or_default();
    let now = Time(Timestamp::now());
    let Plan { write, status } = plan::plan(config, &observation, &now);
    drop(observation);
    let namespace = config.namespace().unwrap_or_default();
    let name = config.name_any();
    let wrote = write.is_some();
    if let Some(secret) = write {
        let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), &namespace);
        secrets
            .patch(
                &name,
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(&secret),
            )
            .await
            .map_err(|source| Error::WriteSecret {
                name: name.clone(),
                source,
            })?;
        tracing::info!(secret = %name, "data Secret written");
    }
    let mut events = Vec::new();
    if status != current {
        let api: Api<IgnitionConfig> = Api::namespaced(ctx.client.clone(), &namespace);
        apply_status(&api, &name, FIELD_MANAGER, &status)
            .await
            .map_err(Error::PatchStatus)?;
        events = transitions(&current, &status);
    }
    if wrote
        && !events
            .iter()
            .any(|(_, reason, _)| reason == plan::reason::DATA_SECRET_CREATED)
    {
        let message = condition::find(&status.conditions, condition::READY)
            .map(|c| c.message.clone())
            .unwrap_or_default();
        events.push((EventType::Normal, "DataSecretUpdated".to_owned(), message));
    }
    let reference: ObjectReference = config.object_ref(&());
    for (type_, reason, note) in events {
        publish_event(&ctx.recorder, &reference, type_, &reason, "Reconcile", note).await;
    }
    Ok(Action::await_change())
}

/// The IgnitionConfigs a Secret concerns: those reading it, and the one it is (or would be)
/// the data Secret of.
fn configs_for_secret(store: &Store<IgnitionConfig>, namespace: &str, name: &str) -> Vec<ObjectRef<IgnitionConfig>> {
    store
        .state()
        .iter()
        .filter(|c| c.namespace().as_deref() == Some(namespace))
        .filter(|c| c.spec.secret_ref.name == name || c.name_any() == name)
        .map(|c| ObjectRef::from_obj(c.as_ref()))
        .collect()
}

/// The IgnitionConfigs labelled with a Cluster's name.
fn configs_for_cluster(
    store: &Store<IgnitionConfig>,
    namespace: &str,
    cluster: &str,
) -> Vec<ObjectRef<IgnitionConfig>> {
    store
        .state()
        .iter()
        .filter(|c| c.namespace().as_deref() == Some(namespace))
        .filter(|c| c.labels().get(CLUSTER_NAME_LABEL).map(String::as_str) == Some(cluster))
        .map(|c| ObjectRef::from_obj(c.as_ref()))
        .collect()
}

/// Run the controller until `shutdown` is cancelled.
pub async fn run(ctx: Arc<Context>, readiness: Readiness, shutdown: CancellationToken) {
    let (secrets, clusters): (Api<PartialObjectMeta<Secret>>, Api<DynamicObject>) = match &ctx.settings.watch_namespace
    {
        Some(ns) => (
            Api::namespaced(ctx.client.clone(), ns),
            Api::namespaced_with(ctx.client.clone(), ns, &ctx.capi.cluster()),
        ),
        None => (
            Api::all(ctx.client.clone()),
            Api::all_with(ctx.client.clone(), &ctx.capi.cluster()),
        ),
    };
    let controller = Controller::new(ctx.watched_api::<IgnitionConfig>(), watcher::Config::default());
    let store = controller.store();
    let by_secret = store.clone();
    let by_cluster = store.clone();
    let capi = ctx.capi;
    // Last seen `spec.paused` per Cluster: only a change of it concerns us.
    let pause_seen: Mutex<HashMap<(String, String), bool>> = Mutex::default();
    let controller = controller
        .watches(secrets, watcher::Config::default(), move |secret| {
            configs_for_secret(
                &by_secret,
                secret.namespace().as_deref().unwrap_or_default(),
                &secret.name_any(),
            )
        })
        .watches_with(
            clusters,
            ctx.capi.cluster(),
            watcher::Config::default(),
            move |cluster| {
                let namespace = cluster.namespace().unwrap_or_default();
                let name = cluster.name_any();
                let paused = ClusterView::decode(&cluster, capi).is_ok_and(|c| c.paused);
                let key = (namespace.clone(), name.clone());
                let previous = pause_seen
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .insert(key, paused);
                if previous == Some(paused) {
                    return Vec::new();
                }
                configs_for_cluster(&by_cluster, &namespace, &name)
            },
        )
        .graceful_shutdown_on(shutdown.clone().cancelled_owned());
    let synced = async move { wait_synced(&store).await };
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
    use crate::api::ignition_config::{IgnitionConfigSpec, IgnitionSecretReference};

    fn config(name: &str, source: &str) -> IgnitionConfig {
        let mut c = IgnitionConfig::new(
            name,
            IgnitionConfigSpec {
                secret_ref: IgnitionSecretReference {
                    name: source.into(),
                    key: "value".into(),
                },
            },
        );
        c.metadata.namespace = Some("default".into());
        c
    }

    #[test]
    fn the_machine_owner_is_found_by_group_and_kind() {
        let mut c = config("w1", "src");
        let reference = |api_version: &str, kind: &str, controller| OwnerReference {
            api_version: api_version.into(),
            kind: kind.into(),
            name: format!("{kind}-{api_version}"),
            uid: "u".into(),
            controller,
            block_owner_deletion: None,
        };
        c.metadata.owner_references = Some(vec![
            reference("example.com/v1", "Machine", Some(true)),
            reference("cluster.x-k8s.io/v1beta1", "Machine", None),
            reference("cluster.x-k8s.io/v1beta2", "Machine", Some(true)),
        ]);
        assert_eq!(owner_machine(&c).unwrap().name, "Machine-cluster.x-k8s.io/v1beta2");
        c.metadata.owner_references = None;
        assert!(owner_machine(&c).is_none());
    }

    #[test]
    fn events_on_reason_changes_only() {
        let now = Time("2026-01-01T00:00:00Z".parse().unwrap());
        let bad = |reason: &'static str| IgnitionConfigStatus {
            conditions: condition::merge(
                &[],
                &condition::DesiredCondition::new(condition::READY, condition::Status::False, reason, "m"),
                &now,
                None,
            ),
            ..IgnitionConfigStatus::default()
        };
        let first = transitions(&IgnitionConfigStatus::default(), &bad("InvalidJSON"));
        assert_eq!(first.len(), 1);
        assert_eq!(first[0].0, EventType::Warning);
        assert!(transitions(&bad("InvalidJSON"), &bad("InvalidJSON")).is_empty());
        assert_eq!(transitions(&bad("InvalidJSON"), &bad("TooLarge"))[0].1, "TooLarge");
    }
}

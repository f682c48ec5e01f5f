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

use k8s_openapi::api::core::v1::Secret;
use kube::{
    ResourceExt,
    api::{Api, PartialObjectMeta},
    runtime::{
        controller::{Action, Controller},
        events::EventType,
        reflector::{ObjectRef, Store},
        watcher,
    },
};
use tokio_util::sync::CancellationToken;

use self::plan::{Existing, Observation, Plan};
use crate::{
    api::{
        CLUSTER_NAME_LABEL,
        capi::{ClusterView, MachineView},
        condition,
        ignition_config::{ConfigCondition, ConfigReason, IgnitionConfig, IgnitionConfigStatus},
    },
    app::health::Readiness,
    reconcile::{
        ApiError, Context, apply_secret, condition_events, drive_cached, error::get_opt, in_namespace, owner,
        refs_where, write_status,
    },
};

/// Controller name in metrics, logs and readiness.
pub const NAME: &str = "ignitionconfig";
/// Field manager of the data Secret and the status.
pub const FIELD_MANAGER: &str = "caplv-manager/ignitionconfig";

/// Transient failures of one reconcile (retried after `error_requeue`). Problems with the
/// user's input are not errors: they are reported in the `Ready` condition.
pub type Error = ApiError;

/// The cluster the config belongs to: the owner Machine's, else the config's own label.
async fn cluster_name(config: &IgnitionConfig, ctx: &Context, namespace: &str) -> Result<Option<String>, Error> {
    if let Some(owner) = owner::capi_owner(&config.metadata, "Machine")
        && let Some(machine) = ctx.caches.machines.get(namespace, &owner.name).await
    {
        let view = MachineView::decode(&machine, ctx.capi)?;
        if !view.cluster_name.is_empty() {
            return Ok(Some(view.cluster_name));
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
    let mut paused = owner::annotated_paused(&config.metadata);
    if !paused
        && let Some(cluster) = &cluster_name
        && let Some(found) = ctx.caches.clusters.get(&namespace, cluster).await
    {
        paused = ClusterView::decode(&found, ctx.capi)?.paused;
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

async fn reconcile(config: Arc<IgnitionConfig>, ctx: Arc<Context>) -> Result<Action, Error> {
    if config.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let observation = observe(&config, &ctx).await?;
    let current = config.status.clone().unwrap_or_default();
    let Plan { write, status } = plan::plan(&config, &observation, &ctx.timestamp());
    drop(observation);
    let name = config.name_any();
    let mut events = Vec::new();
    if let Some(secret) = write {
        apply_secret(
            &ctx,
            &config.namespace().unwrap_or_default(),
            &name,
            FIELD_MANAGER,
            &secret,
        )
        .await?;
        tracing::info!(secret = %name, "data Secret written");
        if !announces_creation(&current, &status) {
            let message = condition::find(&status.conditions, ConfigCondition::Ready.as_str())
                .map(|c| c.message.clone())
                .unwrap_or_default();
            events.push((EventType::Normal, "DataSecretUpdated".to_owned(), message));
        }
    }
    write_status(&ctx, config.as_ref(), FIELD_MANAGER, &current, &status, events).await?;
    Ok(Action::await_change())
}

/// Whether this pass's condition Events already say the data Secret was created (then a
/// rewrite needs no `DataSecretUpdated` of its own).
fn announces_creation(before: &IgnitionConfigStatus, after: &IgnitionConfigStatus) -> bool {
    after != before
        && condition_events(&before.conditions, &after.conditions)
            .iter()
            .any(|(_, reason, _)| ConfigReason::parse(reason) == Some(ConfigReason::DataSecretCreated))
}

/// The IgnitionConfigs a Secret concerns: those reading it, and the one it is (or would be)
/// the data Secret of.
fn configs_for_secret(store: &Store<IgnitionConfig>, namespace: &str, name: &str) -> Vec<ObjectRef<IgnitionConfig>> {
    refs_where(store, |c| {
        in_namespace(c, namespace) && (c.spec.secret_ref.name == name || c.name_any() == name)
    })
}

/// The IgnitionConfigs labelled with a Cluster's name.
fn configs_for_cluster(
    store: &Store<IgnitionConfig>,
    namespace: &str,
    cluster: &str,
) -> Vec<ObjectRef<IgnitionConfig>> {
    refs_where(store, |c| {
        in_namespace(c, namespace) && c.labels().get(CLUSTER_NAME_LABEL).map(String::as_str) == Some(cluster)
    })
}

/// Run the controller until `shutdown` is cancelled.
pub async fn run(ctx: Arc<Context>, readiness: Readiness, shutdown: CancellationToken) {
    let controller = Controller::new(ctx.watched_api::<IgnitionConfig>(), watcher::Config::default());
    let store = controller.store();
    let by_secret = store.clone();
    let by_cluster = store.clone();
    let capi = ctx.capi;
    // Last seen `spec.paused` per Cluster: only a change of it concerns us.
    let pause_seen: Mutex<HashMap<(String, String), bool>> = Mutex::default();
    let controller = controller
        .watches(
            ctx.watched_api::<PartialObjectMeta<Secret>>(),
            watcher::Config::default(),
            move |secret| {
                configs_for_secret(
                    &by_secret,
                    secret.namespace().as_deref().unwrap_or_default(),
                    &secret.name_any(),
                )
            },
        )
        .watches_shared_stream_with(
            ctx.caches.clusters.subscribe(),
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
            capi.cluster(),
        )
        .graceful_shutdown_on(shutdown.clone().cancelled_owned());
    drive_cached(controller, NAME, readiness, reconcile, ctx.clone(), &ctx).await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{api::ignition_config::Reason, ignition};

    #[test]
    fn events_on_reason_changes_only() {
        let now = k8s_openapi::apimachinery::pkg::apis::meta::v1::Time("2026-01-01T00:00:00Z".parse().unwrap());
        let with = |reason: Reason, status| IgnitionConfigStatus {
            conditions: condition::merge(
                &[],
                &condition::DesiredCondition::new(ConfigCondition::Ready, status, reason, "m"),
                &now,
                None,
            ),
            ..IgnitionConfigStatus::default()
        };
        let bad = |r: ignition::Reason| with(r.into(), condition::Status::False);
        let first = condition_events(&[], &bad(ignition::Reason::InvalidJson).conditions);
        assert_eq!(first.len(), 1);
        assert_eq!(first[0].0, EventType::Warning);
        assert!(!announces_creation(
            &bad(ignition::Reason::InvalidJson),
            &bad(ignition::Reason::TooLarge)
        ));
        let created = with(ConfigReason::DataSecretCreated.into(), condition::Status::True);
        assert!(announces_creation(&bad(ignition::Reason::InvalidJson), &created));
        assert!(!announces_creation(&created, &created), "no change, nothing announced");
    }
}

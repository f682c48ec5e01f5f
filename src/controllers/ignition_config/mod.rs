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
//!    undone, and an unchanged source writes nothing. One the synced Secret cache has never seen
//!    is created without a read first; a 409 then means the cache was behind, and it is read.
//!    A Secret of that name that does not belong
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
//! - **Secrets are watched metadata-only, once, and read only when they changed.** The
//!   manager's shared metadata cache of Secrets maps each Secret to the IgnitionConfigs in its
//!   namespace that read it (`spec.secretRef.name`) or that it would be the data Secret of
//!   (same name), using the controller's own cache of IgnitionConfigs. This covers what `owns`
//!   would (the data Secret is named after its owner) and also a conflicting Secret going away.
//!   Its `resourceVersion`s tell when [`secret_memory`] may answer instead of a GET.
//! - **Clusters are watched for pause changes only**, mapped to the configs labelled with the
//!   Cluster's name.
//! - **Content never leaves the Secret.** Conditions, Events, logs and errors carry names, keys,
//!   sizes, positions and versions (the library's errors are built that way); Secrets are never
//!   Debug-printed.

pub mod plan;
mod secret_memory;

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, PoisonError},
};

use k8s_openapi::api::core::v1::Secret;
use kube::{
    ResourceExt,
    api::{Api, PostParams},
    runtime::{
        controller::Action,
        events::EventType,
        reflector::{ObjectRef, Store},
    },
};
use tokio_util::sync::CancellationToken;

use self::{
    plan::{Existing, Observation, Payload, Plan, Problem},
    secret_memory::SecretMemory,
};
use crate::{
    api::{
        CLUSTER_NAME_LABEL,
        capi::{ClusterView, MachineView},
        condition,
        ignition_config::{ConfigCondition, IgnitionConfig, IgnitionConfigStatus},
    },
    app::health::Readiness,
    reconcile::{
        ApiError, Context, apply_secret, drive_cached, error::get_opt, in_namespace, own_writes::OwnWrites, owner,
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

/// Controller state shared by reconciles.
struct State {
    ctx: Arc<Context>,
    secrets: SecretMemory,
    /// Our status writes the watch has not brought back yet.
    own: OwnWrites<IgnitionConfig>,
}

/// Secret `namespace/name`'s current `resourceVersion`, from the shared metadata cache.
async fn current_version(ctx: &Context, namespace: &str, name: &str) -> Option<String> {
    ctx.caches
        .secrets
        .get(namespace, name)
        .await
        .and_then(|s| s.resource_version())
}

/// The source's payload: remembered while the Secret is unchanged, else read (by one
/// reconcile at a time) and validated.
async fn source_payload(
    state: &State,
    secrets: &Api<Secret>,
    namespace: &str,
    name: &str,
    key: &str,
) -> Result<Result<Payload, Problem>, Error> {
    let remembered = || async {
        let version = current_version(&state.ctx, namespace, name).await?;
        state.secrets.source(namespace, name, key, &version)
    };
    if let Some(known) = remembered().await {
        return Ok((*known).clone());
    }
    let lock = state.secrets.read_lock(namespace, name);
    let _reading = lock.lock().await;
    // Whoever held the lock before may have read it for us.
    if let Some(known) = remembered().await {
        return Ok((*known).clone());
    }
    let found = get_opt(secrets, name, "Secret").await?;
    let payload = plan::payload(name, key, found.as_ref());
    if let Some(version) = found.as_ref().and_then(ResourceExt::resource_version) {
        state
            .secrets
            .remember_source(namespace, name, key, version, Arc::new(payload.clone()));
    }
    Ok(payload)
}

/// Whether a reconcile may take the Secret cache's word that the data Secret is absent.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Absence {
    /// Yes: the Secret is then created, and a 409 says the cache was behind.
    Trusted,
    /// No, a create just found it: read it.
    Read,
}

/// The data Secret: known unchanged while it is at the version last read or written, unseen
/// while the synced cache has no such Secret (so a new config reads nothing), else read.
async fn existing_data(
    state: &State,
    secrets: &Api<Secret>,
    config: &IgnitionConfig,
    namespace: &str,
    absence: Absence,
) -> Result<Existing, Error> {
    let name = config.name_any();
    match current_version(&state.ctx, namespace, &name).await {
        Some(version) => {
            if let Some(held) = state.secrets.data(namespace, &name, &version) {
                return Ok(Existing::Unchanged(held));
            }
        }
        // Our own write the watch has not brought back yet, or nothing at all.
        None if absence == Absence::Trusted => {
            return Ok(state
                .secrets
                .last_data(namespace, &name)
                .map_or(Existing::Unseen, Existing::Unchanged));
        }
        None => {}
    }
    let found = get_opt(secrets, &name, "Secret").await?;
    Ok(Existing::classify(found, config.uid().as_deref().unwrap_or_default()))
}

async fn observe(config: &IgnitionConfig, state: &State, absence: Absence) -> Result<Observation, Error> {
    let ctx = &state.ctx;
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
    let source = source_payload(state, &secrets, &namespace, &secret_ref.name, &secret_ref.key).await?;
    let existing = if source.is_ok() {
        existing_data(state, &secrets, config, &namespace, absence).await?
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

async fn reconcile(config: Arc<IgnitionConfig>, state: Arc<State>) -> Result<Action, Error> {
    if config.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let config = state.own.fresh(config);
    let observation = observe(&config, &state, Absence::Trusted).await?;
    match converge(&config, &state, observation).await {
        Err(e) if e.already_exists() => {
            let observation = observe(&config, &state, Absence::Read).await?;
            converge(&config, &state, observation).await
        }
        done => done,
    }
}

/// Write the data Secret and the status `observation` calls for.
async fn converge(config: &IgnitionConfig, state: &State, observation: Observation) -> Result<Action, Error> {
    let ctx = &state.ctx;
    let current = config.status.clone().unwrap_or_default();
    let Plan {
        write,
        fingerprint,
        status,
    } = plan::plan(config, &observation, &ctx.timestamp());
    let (found_version, unseen) = match &observation {
        Observation::Active {
            existing: Existing::Ours(found),
            ..
        } => (found.resource_version(), false),
        Observation::Active {
            existing: Existing::Unseen,
            ..
        } => (None, true),
        Observation::Paused | Observation::Active { .. } => (None, false),
    };
    drop(observation);
    let name = config.name_any();
    let namespace = config.namespace().unwrap_or_default();
    let mut events = Vec::new();
    if let Some(secret) = write {
        let written = if unseen {
            Api::<Secret>::namespaced(ctx.client.clone(), &namespace)
                .create(
                    &PostParams {
                        field_manager: Some(FIELD_MANAGER.to_owned()),
                        ..PostParams::default()
                    },
                    &secret,
                )
                .await
                .map_err(ApiError::write(format!("Secret {name:?}")))?
        } else {
            apply_secret(ctx, &namespace, &name, FIELD_MANAGER, &secret).await?
        };
        if let (Some(version), Some(print)) = (written.resource_version(), fingerprint) {
            state.secrets.remember_data(&namespace, &name, version, print);
        }
        tracing::info!(secret = %name, "data Secret written");
        if rewrites_ready_data(&current, &status) {
            let message = condition::find(&status.conditions, ConfigCondition::Ready.as_str())
                .map(|c| c.message.clone())
                .unwrap_or_default();
            events.push((EventType::Normal, "DataSecretUpdated".to_owned(), message));
        }
    } else if let (Some(version), Some(print)) = (found_version, fingerprint) {
        state.secrets.remember_data(&namespace, &name, version, print);
    }
    if let Some(written) = write_status(ctx, config, FIELD_MANAGER, &current, &status, events).await? {
        state.own.wrote(config, written);
    }
    Ok(Action::await_change())
}

/// Whether a data Secret write changes data the config was already `Ready` with (then it is
/// announced as `DataSecretUpdated`; a first write, or one that ends a problem, is announced by
/// the `Ready` condition, if at all).
fn rewrites_ready_data(before: &IgnitionConfigStatus, after: &IgnitionConfigStatus) -> bool {
    let ready = |s: &IgnitionConfigStatus| {
        condition::find(&s.conditions, ConfigCondition::Ready.as_str())
            .is_some_and(|c| c.status == condition::Status::True.as_str())
    };
    ready(before) && ready(after)
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
    let controller = ctx.controller::<IgnitionConfig>();
    let store = controller.store();
    let by_secret = store.clone();
    let by_cluster = store.clone();
    let capi = ctx.capi;
    let state = Arc::new(State {
        ctx: ctx.clone(),
        secrets: SecretMemory::default(),
        own: OwnWrites::default(),
    });
    let memory = state.clone();
    let secrets_cache = ctx.caches.secrets.store();
    // Last seen `spec.paused` per Cluster: only a change of it concerns us.
    let pause_seen: Mutex<HashMap<(String, String), bool>> = Mutex::default();
    let controller = controller
        .watches_shared_stream(ctx.caches.secrets.subscribe(), move |secret| {
            let namespace = secret.namespace().unwrap_or_default();
            let name = secret.name_any();
            if secrets_cache.get(&ObjectRef::from_obj(secret.as_ref())).is_none() {
                // The cache has it before we hear of it, so it is gone.
                memory.secrets.forget(&namespace, &name);
            }
            configs_for_secret(&by_secret, &namespace, &name)
        })
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
    drive_cached(controller, NAME, readiness, reconcile, state, &ctx).await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        api::ignition_config::{ConfigReason, Reason},
        ignition,
        reconcile::condition_events,
    };

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
        let created = with(ConfigReason::DataSecretCreated.into(), condition::Status::True);
        assert!(
            condition_events(&[], &created.conditions).is_empty(),
            "created ready is no news"
        );
        let fixed = condition_events(&bad(ignition::Reason::InvalidJson).conditions, &created.conditions);
        assert_eq!(fixed[0].1, "DataSecretCreated", "the end of a problem is");
        assert!(
            !rewrites_ready_data(&IgnitionConfigStatus::default(), &created),
            "a first write"
        );
        assert!(!rewrites_ready_data(&bad(ignition::Reason::InvalidJson), &created));
        assert!(rewrites_ready_data(&created, &created), "new data while ready");
    }
}

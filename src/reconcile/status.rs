//! Writing status, Events and the Secrets controllers own, the same way in every controller.

use k8s_openapi::api::core::v1::ObjectReference;

use crate::api::condition::{self, Condition, HasConditions, Status};
use kube::{
    Resource, ResourceExt,
    api::{Api, Patch, PatchParams},
    runtime::events::{Event, EventType},
};
use serde::{Serialize, de::DeserializeOwned};

/// Server-side apply `status` on the `/status` subresource as `field_manager`.
///
/// The whole status is sent each time, so fields this manager no longer sets are removed.
/// Returns the object as written.
///
/// # Errors
/// The API error, e.g. when the object is gone.
pub async fn apply_status<K, S>(api: &Api<K>, name: &str, field_manager: &str, status: &S) -> kube::Result<K>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug,
    S: Serialize,
{
    let patch = serde_json::json!({
        "apiVersion": K::api_version(&()),
        "kind": K::kind(&()),
        "status": status,
    });
    api.patch_status(name, &PatchParams::apply(field_manager).force(), &Patch::Apply(patch))
        .await
}

/// Write `after` on the `/status` of `obj` when it differs from `before`, then publish `events`
/// plus one Event per change of `Ready` or `Paused`. The order is the point: an Event never
/// announces a status that was not written. Returns the object as written, if it was.
///
/// # Errors
/// The status write failed (nothing is published then).
pub async fn write_status<K, S>(
    ctx: &super::Context,
    obj: &K,
    field_manager: &str,
    before: &S,
    after: &S,
    mut events: Vec<(EventType, String, String)>,
) -> Result<Option<K>, super::ApiError>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug,
    S: Serialize + PartialEq + HasConditions,
{
    let mut written = None;
    if after != before {
        let api: Api<K> = Api::namespaced(ctx.client.clone(), &obj.namespace().unwrap_or_default());
        written = Some(
            apply_status(&api, &obj.name_any(), field_manager, after)
                .await
                .map_err(super::ApiError::write("status"))?,
        );
        events.extend(condition_events(before.conditions(), after.conditions()));
    }
    let reference = obj.object_ref(&());
    for (type_, reason, note) in events {
        publish_event(&ctx.recorder, &reference, type_, &reason, "Reconcile", note).await;
    }
    Ok(written)
}

/// Server-side apply `secret` (named `name`, in `namespace`) as `field_manager`, taking the
/// fields it names from any other manager: the controller owns these Secrets' contents.
/// Returns the Secret as written.
///
/// # Errors
/// The write failed.
pub async fn apply_secret(
    ctx: &super::Context,
    namespace: &str,
    name: &str,
    field_manager: &str,
    secret: &(impl Serialize + std::fmt::Debug),
) -> Result<k8s_openapi::api::core::v1::Secret, super::ApiError> {
    let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(ctx.client.clone(), namespace);
    secrets
        .patch(name, &PatchParams::apply(field_manager).force(), &Patch::Apply(secret))
        .await
        .map_err(super::ApiError::write(format!("Secret {name:?}")))
}

/// Publish an Event about `object`. A failure is logged, never fatal: Events are advisory.
pub async fn publish_event(
    recorder: &super::EventRecorder,
    object: &ObjectReference,
    type_: EventType,
    reason: &str,
    action: &str,
    note: String,
) {
    let event = Event {
        type_,
        reason: reason.to_owned(),
        note: Some(note),
        action: action.to_owned(),
        secondary: None,
    };
    if let Err(err) = recorder.publish(&event, object).await {
        tracing::warn!(error = %err, reason, "could not publish event");
    }
}

/// One Event per change of the `Ready` or `Paused` condition's status or reason that is news:
/// Warning when `Ready` is not True, Normal otherwise. Returns (type, reason, message).
///
/// Not news, so no Event (the condition still says it):
/// - a wait (`WaitingFor…`): the object is on its expected way, and its outcome will be
///   announced;
/// - an object's first `Ready=True` or `Paused=False`: what a new object is when nothing is
///   wrong. In a burst of new objects one such Event each would be most of the Events written.
#[must_use]
pub fn condition_events(old: &[Condition], new: &[Condition]) -> Vec<(EventType, String, String)> {
    [condition::READY, condition::PAUSED]
        .into_iter()
        .filter_map(|type_| {
            let after = condition::find(new, type_)?;
            let before = condition::find(old, type_);
            if before.is_some_and(|b| b.status == after.status && b.reason == after.reason) {
                return None;
            }
            let fine = match type_ {
                condition::READY => Status::True,
                _ => Status::False,
            };
            if after.reason.starts_with(WAIT_PREFIX) || (before.is_none() && after.status == fine.as_str()) {
                return None;
            }
            let warning = type_ == condition::READY && after.status != Status::True.as_str();
            let type_ = if warning { EventType::Warning } else { EventType::Normal };
            Some((type_, after.reason.clone(), after.message.clone()))
        })
        .collect()
}

/// How every reason for an expected wait begins.
const WAIT_PREFIX: &str = "WaitingFor";

#[cfg(test)]
mod tests {
    use super::*;

    fn conditions(list: serde_json::Value) -> Vec<Condition> {
        serde_json::from_value(list).unwrap()
    }

    fn cond(type_: &str, status: &str, reason: &str) -> serde_json::Value {
        serde_json::json!({"type": type_, "status": status, "reason": reason, "message": "",
            "lastTransitionTime": "2026-01-01T00:00:00Z"})
    }

    #[test]
    fn waits_and_a_new_objects_good_state_are_no_events_but_problems_and_recoveries_are() {
        let ready = |reason| conditions(serde_json::json!([cond("Ready", "True", reason)]));
        let not_ready = |reason| conditions(serde_json::json!([cond("Ready", "False", reason)]));
        assert!(
            condition_events(&[], &ready("DomainRunning")).is_empty(),
            "created ready"
        );
        assert!(condition_events(&[], &not_ready("WaitingForMachineOwner")).is_empty());
        assert!(
            condition_events(
                &not_ready("WaitingForMachineOwner"),
                &not_ready("WaitingForBootstrapData")
            )
            .is_empty(),
            "one wait after another"
        );
        let problem = condition_events(&[], &not_ready("HostNotFound"));
        assert_eq!(
            (problem[0].0, problem[0].1.as_str()),
            (EventType::Warning, "HostNotFound")
        );
        assert!(
            condition_events(&not_ready("HostNotFound"), &not_ready("WaitingForHost")).is_empty(),
            "a wait again: the outcome is announced"
        );
        let up = condition_events(&not_ready("WaitingForHost"), &ready("DomainRunning"));
        assert_eq!((up[0].0, up[0].1.as_str()), (EventType::Normal, "DomainRunning"));
        let down = condition_events(&ready("DomainRunning"), &not_ready("DomainMissing"));
        assert_eq!(down[0].0, EventType::Warning);
    }

    #[test]
    fn a_new_object_not_paused_is_no_event_but_a_pause_and_its_end_are() {
        let fresh = conditions(serde_json::json!([
            cond("Ready", "False", "HostNotFound"),
            cond("Paused", "False", "NotPaused")
        ]));
        let events = condition_events(&[], &fresh);
        assert_eq!(events.len(), 1, "{events:?}");
        assert_eq!(
            (events[0].0, events[0].1.as_str()),
            (EventType::Warning, "HostNotFound")
        );

        let paused = conditions(serde_json::json!([
            cond("Ready", "False", "HostNotFound"),
            cond("Paused", "True", "Paused")
        ]));
        assert_eq!(condition_events(&fresh, &paused)[0].1, "Paused");
        assert_eq!(condition_events(&paused, &fresh)[0].1, "NotPaused");
        let created_paused = condition_events(&[], &paused);
        assert!(
            created_paused.iter().any(|e| e.1 == "Paused"),
            "created paused is news: {created_paused:?}"
        );
    }
}

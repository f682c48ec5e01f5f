//! Writing status and Events the same way in every controller.

use k8s_openapi::api::core::v1::ObjectReference;

use crate::api::condition::{self, Condition, Status};
use kube::{
    Resource,
    api::{Api, Patch, PatchParams},
    runtime::events::{Event, EventType, Recorder},
};
use serde::{Serialize, de::DeserializeOwned};

/// Server-side apply `status` on the `/status` subresource as `field_manager`.
///
/// The whole status is sent each time, so fields this manager no longer sets are removed.
///
/// # Errors
/// The API error, e.g. when the object is gone.
pub async fn apply_status<K, S>(api: &Api<K>, name: &str, field_manager: &str, status: &S) -> kube::Result<()>
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
        .await?;
    Ok(())
}

/// Publish an Event about `object`. A failure is logged, never fatal: Events are advisory.
pub async fn publish_event(
    recorder: &Recorder,
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

/// One Event per change of the `Ready` or `Paused` condition's status or reason: Warning when
/// `Ready` is not True, Normal otherwise. Returns (type, reason, message).
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
            let warning = type_ == condition::READY && after.status != Status::True.as_str();
            let type_ = if warning { EventType::Warning } else { EventType::Normal };
            Some((type_, after.reason.clone(), after.message.clone()))
        })
        .collect()
}

//! Condition lists in the two shapes CAPI uses: v1beta1 `clusterv1.Condition` (with a
//! severity on False) and v1beta2 `metav1.Condition` (reason required, observedGeneration).
//! Merging keeps `lastTransitionTime` when the status does not change, so tests can rely on it
//! and repeated reconciles do not churn the object.

use serde_json::{Value, json};

use crate::crds::CapiVersions;

/// One condition the simulator wants on an object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Cond {
    pub type_: &'static str,
    /// "True", "False" or "Unknown".
    pub status: &'static str,
    pub reason: String,
    pub message: String,
}

impl Cond {
    pub fn new(type_: &'static str, ok: bool, reason: &str, message: impl Into<String>) -> Self {
        Cond {
            type_,
            status: if ok { "True" } else { "False" },
            reason: reason.to_string(),
            message: message.into(),
        }
    }
}

/// Returns `existing` (a JSON array or null) with each of `wanted` set by type.
pub(crate) fn merge(
    existing: Option<&Value>,
    wanted: &[Cond],
    versions: CapiVersions,
    generation: Option<i64>,
    now: &str,
) -> Value {
    let mut list: Vec<Value> = existing.and_then(Value::as_array).cloned().unwrap_or_default();
    for c in wanted {
        let old = list
            .iter()
            .position(|v| v.get("type").and_then(Value::as_str) == Some(c.type_));
        let ltt = old
            .and_then(|i| list.get(i))
            .filter(|v| v.get("status").and_then(Value::as_str) == Some(c.status))
            .and_then(|v| v.get("lastTransitionTime").cloned())
            .unwrap_or_else(|| Value::String(now.to_string()));
        let mut entry = json!({
            "type": c.type_,
            "status": c.status,
            "reason": c.reason,
            "message": c.message,
            "lastTransitionTime": ltt,
        });
        if versions.is_v1beta2() {
            if let Some(g) = generation {
                entry["observedGeneration"] = json!(g);
            }
        } else if c.status == "False" {
            entry["severity"] = json!(if c.reason.ends_with("Failed") { "Error" } else { "Info" });
        }
        match old {
            Some(i) => list[i] = entry,
            None => list.push(entry),
        }
    }
    Value::Array(list)
}

/// Reads the status of condition `type_` from a list.
#[cfg(test)]
pub(crate) fn status_of<'a>(list: Option<&'a Value>, type_: &str) -> Option<&'a str> {
    list?
        .as_array()?
        .iter()
        .find(|v| v.get("type").and_then(Value::as_str) == Some(type_))?
        .get("status")?
        .as_str()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_transition_time_when_status_unchanged() {
        let first = merge(
            None,
            &[Cond::new("Ready", false, "Waiting", "x")],
            CapiVersions::V1beta1,
            None,
            "t1",
        );
        assert_eq!(first[0]["severity"], "Info");
        let second = merge(
            Some(&first),
            &[Cond::new("Ready", false, "StillWaiting", "y")],
            CapiVersions::V1beta1,
            None,
            "t2",
        );
        assert_eq!(second[0]["lastTransitionTime"], "t1");
        assert_eq!(second[0]["reason"], "StillWaiting");
        let third = merge(
            Some(&second),
            &[Cond::new("Ready", true, "Done", "")],
            CapiVersions::V1beta2,
            Some(3),
            "t3",
        );
        assert_eq!(third[0]["lastTransitionTime"], "t3");
        assert_eq!(third[0]["observedGeneration"], 3);
        assert_eq!(status_of(Some(&third), "Ready"), Some("True"));
        assert_eq!(status_of(Some(&third), "Other"), None);
    }
}

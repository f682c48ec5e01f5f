//! Core `v1` Events and `events.k8s.io/v1` Events are one resource with two API views, as on
//! a real apiserver: objects are stored once, in the core shape (the storage version), and
//! converted field by field for the `events.k8s.io` view, in both directions.

use crate::registry::ResourceInfo;
use serde_json::{Map, Value, json};

/// Store key shared by both views.
pub const STORE_KEY: &str = "/events";

/// Fields renamed between the views: (`events.k8s.io/v1` name, core `v1` name).
const RENAMED: [(&str, &str); 7] = [
    ("regarding", "involvedObject"),
    ("note", "message"),
    ("reportingController", "reportingComponent"),
    ("deprecatedSource", "source"),
    ("deprecatedFirstTimestamp", "firstTimestamp"),
    ("deprecatedLastTimestamp", "lastTimestamp"),
    ("deprecatedCount", "count"),
];

/// Fields with the same name and meaning in both views.
const SHARED: [&str; 7] = ["metadata", "eventTime", "series", "action", "reason", "type", "related"];

/// Whether `info` is either view of Events.
pub fn is_event(info: &ResourceInfo) -> bool {
    info.plural == "events" && (info.group.is_empty() || info.group == "events.k8s.io")
}

/// Whether `info` is the `events.k8s.io` view (the one that needs conversion).
pub fn is_new_api(info: &ResourceInfo) -> bool {
    info.plural == "events" && info.group == "events.k8s.io"
}

fn nonempty<'a>(m: &'a Map<String, Value>, k: &str) -> Option<&'a str> {
    m.get(k).and_then(Value::as_str).filter(|s| !s.is_empty())
}

fn source_nonempty(m: &Map<String, Value>, k: &str) -> bool {
    m.get(k)
        .and_then(Value::as_object)
        .is_some_and(|s| s.values().any(|v| v.as_str().is_some_and(|s| !s.is_empty())))
}

/// An `events.k8s.io/v1` body in the core (storage) shape; fields unknown to
/// `events.k8s.io/v1` are dropped, as decoding into the typed object would.
pub fn to_core(obj: Value) -> Value {
    let Value::Object(src) = obj else {
        return obj;
    };
    let mut out = Map::new();
    for k in SHARED.iter().chain(["reportingInstance"].iter()) {
        if let Some(v) = src.get(*k) {
            out.insert((*k).to_string(), v.clone());
        }
    }
    for (new, core) in RENAMED {
        if let Some(v) = src.get(new) {
            out.insert(core.to_string(), v.clone());
        }
    }
    out.insert("apiVersion".into(), json!("v1"));
    out.insert("kind".into(), json!("Event"));
    Value::Object(out)
}

/// A stored (core-shaped) event as `events.k8s.io/v1` shows it.
fn from_core(obj: Value) -> Value {
    let Value::Object(src) = obj else {
        return obj;
    };
    let mut out = Map::new();
    for k in SHARED {
        if let Some(v) = src.get(k) {
            out.insert(k.to_string(), v.clone());
        }
    }
    for (new, core) in RENAMED {
        if let Some(v) = src.get(core) {
            out.insert(new.to_string(), v.clone());
        }
    }
    // Legacy writers only fill `source`; show it as the reporting fields too.
    let src_field = |k: &str| {
        src.get("source")
            .and_then(|s| s.get(k))
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(String::from)
    };
    for (core, legacy, new) in [
        ("reportingComponent", "component", "reportingController"),
        ("reportingInstance", "host", "reportingInstance"),
    ] {
        if let Some(v) = nonempty(&src, core).map(String::from).or_else(|| src_field(legacy)) {
            out.insert(new.into(), json!(v));
        }
    }
    Value::Object(out)
}

/// Core view of a stored event: writers of `events.k8s.io/v1` leave `source` empty, so it
/// shows the reporting controller and instance (what `kubectl describe` prints as From).
fn core_view(mut obj: Value) -> Value {
    if let Value::Object(m) = &mut obj
        && !source_nonempty(m, "source")
        && let Some(c) = nonempty(m, "reportingComponent").map(String::from)
    {
        let mut s = json!({"component": c});
        if let Some(h) = nonempty(m, "reportingInstance") {
            s["host"] = json!(h);
        }
        m.insert("source".into(), s);
    }
    obj
}

/// Convert a stored event to the view `info` serves (apiVersion/kind are set by the caller).
pub fn present(info: &ResourceInfo, obj: Value) -> Value {
    if is_new_api(info) {
        from_core(obj)
    } else {
        core_view(obj)
    }
}

/// Convert a body in the view `info` serves to the stored shape.
pub fn to_storage(info: &ResourceInfo, obj: Value) -> Value {
    if is_new_api(info) { to_core(obj) } else { obj }
}

fn age(o: &Value, p: &str) -> Option<String> {
    o.pointer(p)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(crate::table::age_of)
}

fn text(o: &Value, p: &str) -> String {
    o.pointer(p).and_then(Value::as_str).unwrap_or("").to_string()
}

fn col(name: &str, typ: &str, desc: &str, priority: i64) -> Value {
    json!({"name": name, "type": typ, "format": if name == "Name" { "name" } else { "" }, "description": desc, "priority": priority})
}

/// The apiserver's Table columns for Events (`kubectl get events`; wide adds the rest).
pub fn table_columns() -> Vec<Value> {
    vec![
        col(
            "Last Seen",
            "string",
            "Time since the most recent occurrence of the event",
            0,
        ),
        col(
            "Type",
            "string",
            "Type of this event (Normal, Warning), new types could be added in the future.",
            0,
        ),
        col("Reason", "string", "Reason why the action was taken.", 0),
        col("Object", "string", "The object this Event is about.", 0),
        col(
            "Subobject",
            "string",
            "Path of the field of the object this Event is about.",
            1,
        ),
        col("Source", "string", "The component reporting this event.", 1),
        col(
            "Message",
            "string",
            "A human-readable description of the status of this operation.",
            0,
        ),
        col("First Seen", "string", "Time when this Event was first observed.", 1),
        col("Count", "integer", "The number of times this event has occurred.", 1),
        col("Name", "string", "Name must be unique within a namespace.", 1),
    ]
}

/// One Table row's cells for a core-shaped event, matching [`table_columns`].
pub fn table_cells(o: &Value) -> Vec<Value> {
    let first = age(o, "/firstTimestamp")
        .or_else(|| age(o, "/eventTime"))
        .unwrap_or_else(|| "<unknown>".into());
    let mut last = age(o, "/lastTimestamp").unwrap_or_else(|| first.clone());
    let mut count = o.get("count").and_then(Value::as_i64).unwrap_or(0);
    if let Some(s) = o.get("series").filter(|s| s.is_object()) {
        last = age(s, "/lastObservedTime").unwrap_or_else(|| "<unknown>".into());
        count = s.get("count").and_then(Value::as_i64).unwrap_or(0);
    } else if count == 0 {
        count = 1;
    }
    let kind = text(o, "/involvedObject/kind").to_lowercase();
    let name = text(o, "/involvedObject/name");
    let target = if name.is_empty() {
        kind
    } else {
        format!("{kind}/{name}")
    };
    let component = Some(text(o, "/source/component"))
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| text(o, "/reportingComponent"));
    let host = Some(text(o, "/source/host"))
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| text(o, "/reportingInstance"));
    let source = match (component.is_empty(), host.is_empty()) {
        (true, _) => String::new(),
        (false, true) => component,
        (false, false) => format!("{component}, {host}"),
    };
    vec![
        json!(last),
        json!(text(o, "/type")),
        json!(text(o, "/reason")),
        json!(target),
        json!(text(o, "/involvedObject/fieldPath")),
        json!(source),
        json!(text(o, "/message").trim()),
        json!(first),
        json!(count),
        json!(crate::meta::name(o)),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn views_round_trip() {
        let new = json!({
            "metadata": {"name": "e", "namespace": "default"},
            "eventTime": "2026-01-01T00:00:00.000001Z",
            "series": {"count": 2, "lastObservedTime": "2026-01-01T00:01:00.000001Z"},
            "reportingController": "ctrl", "reportingInstance": "ctrl-1",
            "action": "Reconcile", "reason": "Done", "type": "Normal",
            "regarding": {"kind": "Widget", "name": "w", "uid": "u"},
            "related": {"kind": "Pod", "name": "p"},
            "note": "hello",
            "deprecatedCount": 3,
            "deprecatedFirstTimestamp": "2026-01-01T00:00:00Z",
            "deprecatedLastTimestamp": "2026-01-01T00:02:00Z",
        });
        let core = to_core(new.clone());
        assert_eq!(core["message"], "hello");
        assert_eq!(core["involvedObject"]["uid"], "u");
        assert_eq!(core["reportingComponent"], "ctrl");
        assert_eq!(core["reportingInstance"], "ctrl-1");
        assert_eq!(core["count"], 3);
        assert_eq!(core["firstTimestamp"], "2026-01-01T00:00:00Z");
        assert_eq!(core["related"]["name"], "p");
        assert_eq!(core["series"]["count"], 2);
        let shown = core_view(core.clone());
        assert_eq!(shown["source"], json!({"component": "ctrl", "host": "ctrl-1"}));
        let mut back = from_core(core);
        back.as_object_mut().unwrap().remove("apiVersion");
        assert_eq!(back, new);

        let legacy =
            json!({"metadata": {"name": "l"}, "message": "m", "source": {"component": "kubelet", "host": "n1"}});
        let v = from_core(legacy);
        assert_eq!(v["note"], "m");
        assert_eq!(v["reportingController"], "kubelet");
        assert_eq!(v["reportingInstance"], "n1");
        assert_eq!(v["deprecatedSource"]["component"], "kubelet");
    }

    #[test]
    fn table_cells_follow_the_apiserver_printer() {
        let o = json!({"metadata": {"name": "e"}, "type": "Warning", "reason": "R", "message": " m ",
            "involvedObject": {"kind": "Widget", "name": "w"}, "reportingComponent": "c"});
        let cells = table_cells(&o);
        assert_eq!(cells[0], "<unknown>");
        assert_eq!(cells[3], "widget/w");
        assert_eq!(cells[5], "c");
        assert_eq!(cells[6], "m");
        assert_eq!(cells[8], 1);
        assert_eq!(cells.len(), table_columns().len());
    }
}

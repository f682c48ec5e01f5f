//! How stored objects are derived from request bodies: type checks, status separation,
//! server-owned metadata, comparisons for no-op and generation decisions.

use crate::meta::meta_mut;
use crate::registry::ResourceInfo;
use crate::status::{ApiError, ApiResult};
use serde_json::{Value, json};

pub(crate) fn is_dns_subdomain(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
        && s.starts_with(|c: char| c.is_ascii_alphanumeric())
        && s.ends_with(|c: char| c.is_ascii_alphanumeric())
}

/// A stored object as the version the client asked for serves it: converted (Events have two
/// views of one stored resource) and with that version's `apiVersion`/`kind`.
pub fn present(info: &ResourceInfo, obj: Value) -> Value {
    if crate::events::is_event(info) {
        return label(info, crate::events::present(info, obj));
    }
    label(info, obj)
}

/// Set `apiVersion`/`kind` to the version the client asked for (no conversion).
pub fn label(info: &ResourceInfo, mut obj: Value) -> Value {
    if let Value::Object(m) = &mut obj {
        m.insert("apiVersion".into(), json!(info.api_version()));
        m.insert("kind".into(), json!(info.kind));
    }
    obj
}

/// The object without metadata (and without status when `drop_status`), for comparisons.
pub(crate) fn content(v: &Value, drop_status: bool) -> Value {
    let mut c = v.clone();
    if let Value::Object(m) = &mut c {
        m.remove("metadata");
        m.remove("apiVersion");
        m.remove("kind");
        if drop_status {
            m.remove("status");
        }
    }
    c
}

pub(crate) fn strip_volatile(v: &Value) -> Value {
    let mut c = v.clone();
    let m = meta_mut(&mut c);
    m.remove("resourceVersion");
    m.remove("managedFields");
    c
}

/// 409 for server-side apply conflicts, worded like the apiserver.
pub(crate) fn apply_conflict(c: &[(String, String)]) -> ApiError {
    let list: Vec<String> = c.iter().map(|(m, p)| format!("conflict with {m}: {p}")).collect();
    let n = c.len();
    let mut e = ApiError::new(
        409,
        "Conflict",
        format!(
            "Apply failed with {n} conflict{}: {}",
            if n == 1 { "" } else { "s" },
            list.join(", ")
        ),
    );
    let causes: Vec<Value> = c
        .iter()
        .map(|(m, p)| json!({"reason": "FieldManagerConflict", "message": format!("conflict with {m}"), "field": p}))
        .collect();
    // The apiserver's apply conflicts carry only the causes, no name or kind.
    e.details = Some(json!({"causes": causes}));
    e
}

/// 400 when the body's apiVersion/kind do not match the URL.
pub fn check_type(info: &ResourceInfo, obj: &Value) -> ApiResult<()> {
    let av = obj.get("apiVersion").and_then(Value::as_str).unwrap_or("");
    let kind = obj.get("kind").and_then(Value::as_str).unwrap_or("");
    if !av.is_empty() && av != info.api_version() {
        return Err(ApiError::bad_request(format!(
            "the API version in the data ({av}) does not match the expected API version ({})",
            info.api_version()
        )));
    }
    if !kind.is_empty() && kind != info.kind {
        return Err(ApiError::bad_request(format!(
            "the kind in the data ({kind}) does not match the expected kind ({})",
            info.kind
        )));
    }
    Ok(())
}

/// Build the object to store from the old one and the client's version of it.
pub(crate) fn merge_for_update(info: &ResourceInfo, old: &Value, body: Value, sub: Option<&str>) -> Value {
    let mut new = match sub {
        Some("status") => {
            let mut n = old.clone();
            match body.get("status") {
                Some(s) => n["status"] = s.clone(),
                None => {
                    if let Value::Object(m) = &mut n {
                        m.remove("status");
                    }
                }
            }
            n
        }
        Some("approval") => {
            let mut n = old.clone();
            let conds = body.pointer("/status/conditions").cloned().unwrap_or(json!([]));
            if !n.get("status").is_some_and(Value::is_object) {
                n["status"] = json!({});
            }
            n["status"]["conditions"] = conds;
            n
        }
        _ => {
            let mut n = body;
            if info.has_status() {
                match old.get("status") {
                    Some(s) => n["status"] = s.clone(),
                    None => {
                        if let Value::Object(m) = &mut n {
                            m.remove("status");
                        }
                    }
                }
            }
            n
        }
    };
    if !new.is_object() {
        new = json!({});
    }
    let om = old
        .get("metadata")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    let m = meta_mut(&mut new);
    for k in [
        "name",
        "namespace",
        "uid",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "generation",
        "resourceVersion",
        "managedFields",
    ] {
        match om.get(k) {
            Some(v) => m.insert(k.into(), v.clone()),
            None => m.remove(k),
        };
    }
    label(info, new)
}

/// Paths (`spec.a`, `spec.list[0].b`) present in `before` but dropped in `after` (pruning);
/// nulls are ignored because dropping them is not an unknown field.
pub(crate) fn removed_fields(before: &Value, after: &Value, path: &str, out: &mut Vec<String>) {
    match (before, after) {
        (Value::Object(b), Value::Object(a)) => {
            for (k, bv) in b {
                let p = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                match a.get(k) {
                    None if !bv.is_null() => out.push(p),
                    None => {}
                    Some(av) => removed_fields(bv, av, &p, out),
                }
            }
        }
        (Value::Array(b), Value::Array(a)) => {
            for (i, (bv, av)) in b.iter().zip(a).enumerate() {
                removed_fields(bv, av, &format!("{path}[{i}]"), out);
            }
        }
        _ => {}
    }
}

//! The `/scale` subresource (`autoscaling/v1 Scale`) of Deployments, ReplicaSets,
//! StatefulSets and CRDs declaring `subresources.scale`: reads and writes the parent's
//! replica count, as `kubectl scale` and autoscalers use it.

use crate::meta;
use crate::registry::ResourceInfo;
use crate::status::{ApiError, ApiResult};
use serde_json::{Map, Value, json};

/// Where a kind keeps its replica counts and selector (simple `.a.b` paths).
#[derive(Debug, Clone, PartialEq)]
pub struct ScalePaths {
    /// `specReplicasPath`.
    pub spec_replicas: String,
    /// `statusReplicasPath`.
    pub status_replicas: String,
    /// `labelSelectorPath` (a selector string, or a `LabelSelector` object for built-ins).
    pub selector: Option<String>,
}

impl ScalePaths {
    /// The apps/v1 workloads' paths.
    pub fn apps() -> Self {
        ScalePaths {
            spec_replicas: ".spec.replicas".into(),
            status_replicas: ".status.replicas".into(),
            selector: Some(".spec.selector".into()),
        }
    }

    /// From a CRD version's `subresources.scale`.
    pub fn from_crd(s: &Value) -> Option<Self> {
        let p = |k: &str| s.get(k).and_then(Value::as_str).map(String::from);
        Some(ScalePaths {
            spec_replicas: p("specReplicasPath")?,
            status_replicas: p("statusReplicasPath")?,
            selector: p("labelSelectorPath"),
        })
    }
}

fn segs(path: &str) -> impl Iterator<Item = &str> {
    path.split('.').filter(|s| !s.is_empty())
}

fn get<'a>(obj: &'a Value, path: &str) -> Option<&'a Value> {
    segs(path).try_fold(obj, |cur, s| cur.get(s))
}

fn set(obj: &mut Value, path: &str, v: Value) {
    let parts: Vec<&str> = segs(path).collect();
    let mut cur = obj;
    for (i, s) in parts.iter().enumerate() {
        if !cur.is_object() {
            *cur = Value::Object(Map::new());
        }
        let Value::Object(m) = cur else { return };
        if i + 1 == parts.len() {
            m.insert((*s).to_string(), v);
            return;
        }
        cur = m.entry((*s).to_string()).or_insert_with(|| json!({}));
    }
}

/// A `metav1.LabelSelector` as the selector string Scale reports.
fn selector_string(sel: &Value) -> String {
    let mut parts = vec![];
    if let Some(m) = sel.get("matchLabels").and_then(Value::as_object) {
        for (k, v) in m {
            parts.push(format!("{k}={}", v.as_str().unwrap_or("")));
        }
    }
    for e in sel
        .get("matchExpressions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let key = e["key"].as_str().unwrap_or("");
        let vals: Vec<&str> = e["values"]
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        parts.push(match e["operator"].as_str().unwrap_or("") {
            "In" => format!("{key} in ({})", vals.join(",")),
            "NotIn" => format!("{key} notin ({})", vals.join(",")),
            "Exists" => key.to_string(),
            _ => format!("!{key}"),
        });
    }
    parts.join(",")
}

/// The Scale view of a (presented) object.
pub fn scale_of(info: &ResourceInfo, obj: &Value) -> Value {
    let Some(p) = &info.scale else {
        return json!({});
    };
    let replicas = get(obj, &p.spec_replicas).and_then(Value::as_i64).unwrap_or(0);
    let current = get(obj, &p.status_replicas).and_then(Value::as_i64).unwrap_or(0);
    let mut status = json!({"replicas": current});
    if let Some(sel) = p.selector.as_deref().and_then(|s| get(obj, s)) {
        status["selector"] = json!(match sel {
            Value::String(s) => s.clone(),
            other => selector_string(other),
        });
    }
    let mut md = Map::new();
    for k in ["name", "namespace", "uid", "resourceVersion", "creationTimestamp"] {
        if let Some(v) = obj.pointer(&format!("/metadata/{k}")) {
            md.insert(k.into(), v.clone());
        }
    }
    json!({"kind": "Scale", "apiVersion": "autoscaling/v1", "metadata": md,
        "spec": {"replicas": replicas}, "status": status})
}

/// The object with the replica count a Scale asks for; the Scale's resourceVersion (if any)
/// becomes the precondition of the write.
pub fn apply_scale(info: &ResourceInfo, obj: &Value, scale: &Value) -> ApiResult<Value> {
    let Some(p) = &info.scale else {
        return Err(ApiError::no_resource());
    };
    let name = meta::name(obj);
    let replicas = match scale.pointer("/spec/replicas") {
        None | Some(Value::Null) => 0,
        Some(v) => v.as_i64().ok_or_else(|| {
            ApiError::bad_request(format!(
                "Scale in version \"v1\" cannot be handled as a Scale: spec.replicas: {v} is not an integer"
            ))
        })?,
    };
    if replicas < 0 {
        return Err(ApiError::invalid(
            "Scale",
            "autoscaling",
            name,
            &[(
                "spec.replicas".into(),
                "FieldValueInvalid".into(),
                format!("spec.replicas: Invalid value: {replicas}: must be greater than or equal to 0"),
            )],
        ));
    }
    let mut out = obj.clone();
    set(&mut out, &p.spec_replicas, json!(replicas));
    let rv = meta::resource_version(scale);
    if !rv.is_empty() {
        meta::meta_mut(&mut out).insert("resourceVersion".into(), json!(rv));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selectors_and_paths() {
        let sel = json!({"matchLabels": {"a": "b"}, "matchExpressions": [{"key": "t", "operator": "In", "values": ["x", "y"]}]});
        assert_eq!(selector_string(&sel), "a=b,t in (x,y)");
        let mut o = json!({});
        set(&mut o, ".spec.replicas", json!(3));
        assert_eq!(get(&o, ".spec.replicas"), Some(&json!(3)));
    }
}

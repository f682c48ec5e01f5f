//! Patch application: JSON merge, JSON patch, strategic merge (for the built-in list fields
//! with merge keys that controllers touch) and a simplified server-side apply.

use serde_json::{Map, Value};

/// Merge key of a strategic-merge list field, by field name; `Some("")` means a set of scalars.
fn merge_key(field: &str) -> Option<&'static str> {
    match field {
        "ownerReferences" => Some("uid"),
        "containers" | "initContainers" | "volumes" | "env" | "volumeMounts" => Some("name"),
        "taints" => Some("key"),
        "conditions" => Some("type"),
        "finalizers" => Some(""),
        _ => None,
    }
}

/// RFC 7386 merge patch.
pub fn merge(target: &mut Value, patch: &Value) {
    json_patch::merge(target, patch);
}

/// Why a JSON patch failed: the document itself (400) or applying it (422).
#[derive(Debug)]
pub enum JsonPatchError {
    /// Not a valid RFC 6902 document.
    Decode(String),
    /// An operation failed (missing path, failed test).
    Apply(String),
}

/// RFC 6902 JSON patch. Like the apiserver's implementation, `test` of a missing path against
/// `null` succeeds (kube-runtime's finalizer helper relies on it).
pub fn json_patch(target: &mut Value, patch: &Value) -> Result<(), JsonPatchError> {
    let ops = patch
        .as_array()
        .ok_or_else(|| JsonPatchError::Decode("a JSON patch must be an array of operations".into()))?;
    let _: json_patch::Patch =
        serde_json::from_value(patch.clone()).map_err(|e| JsonPatchError::Decode(e.to_string()))?;
    for op in ops {
        let path = op.get("path").and_then(Value::as_str).unwrap_or("");
        if op.get("op").and_then(Value::as_str) == Some("test")
            && op.get("value").is_some_and(Value::is_null)
            && target.pointer(path).is_none()
        {
            continue;
        }
        let p: json_patch::Patch = serde_json::from_value(Value::Array(vec![op.clone()]))
            .map_err(|e| JsonPatchError::Decode(e.to_string()))?;
        json_patch::patch(target, &p).map_err(|e| JsonPatchError::Apply(e.to_string()))?;
    }
    Ok(())
}

/// Strategic merge patch, honouring `$patch: delete|replace` and `$deleteFromPrimitiveList`.
pub fn strategic(target: &mut Value, patch: &Value) {
    let Some(pm) = patch.as_object() else {
        *target = patch.clone();
        return;
    };
    if pm.get("$patch").and_then(Value::as_str) == Some("replace") {
        let mut p = pm.clone();
        p.remove("$patch");
        *target = Value::Object(p);
        return;
    }
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let Value::Object(tm) = target else { return };
    for (k, pv) in pm {
        if let Some(field) = k.strip_prefix("$deleteFromPrimitiveList/") {
            if let (Some(Value::Array(list)), Some(del)) = (tm.get_mut(field), pv.as_array()) {
                list.retain(|x| !del.contains(x));
            }
            continue;
        }
        if k.starts_with('$') {
            continue;
        }
        if pv.is_null() {
            tm.remove(k);
            continue;
        }
        match (merge_key(k), pv, tm.get_mut(k)) {
            (Some(""), Value::Array(items), Some(Value::Array(cur))) => {
                for it in items {
                    if !cur.contains(it) {
                        cur.push(it.clone());
                    }
                }
            }
            (Some(key), Value::Array(items), Some(Value::Array(cur))) if !key.is_empty() => {
                merge_keyed_list(cur, items, key);
            }
            (_, Value::Object(_), Some(tv @ Value::Object(_))) => strategic(tv, pv),
            _ => {
                let mut v = pv.clone();
                strip_directives(&mut v);
                tm.insert(k.clone(), v);
            }
        }
    }
}

fn strip_directives(v: &mut Value) {
    match v {
        Value::Object(m) => {
            m.retain(|k, _| !k.starts_with('$'));
            m.values_mut().for_each(strip_directives);
        }
        Value::Array(a) => {
            a.retain(|x| x.get("$patch").and_then(Value::as_str) != Some("delete"));
            a.iter_mut().for_each(strip_directives);
        }
        _ => {}
    }
}

fn merge_keyed_list(cur: &mut Vec<Value>, items: &[Value], key: &str) {
    for it in items {
        let kv = it.get(key).cloned();
        let pos = kv
            .as_ref()
            .and_then(|kv| cur.iter().position(|c| c.get(key) == Some(kv)));
        let delete = it.get("$patch").and_then(Value::as_str) == Some("delete");
        match (pos, delete) {
            (Some(i), true) => {
                cur.remove(i);
            }
            (None, true) => {}
            (Some(i), false) => strategic(&mut cur[i], it),
            (None, false) => {
                let mut v = it.clone();
                strip_directives(&mut v);
                cur.push(v);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn strategic_lists() {
        let mut o = json!({"metadata": {"finalizers": ["a"], "ownerReferences": [{"uid": "1", "name": "x"}]},
            "status": {"conditions": [{"type": "Ready", "status": "False"}]}});
        strategic(
            &mut o,
            &json!({"metadata": {"finalizers": ["b"], "ownerReferences": [{"uid": "2", "name": "y"}]},
                "status": {"conditions": [{"type": "Ready", "status": "True"}, {"type": "Other", "status": "True"}]}}),
        );
        assert_eq!(o["metadata"]["finalizers"], json!(["a", "b"]));
        assert_eq!(o["metadata"]["ownerReferences"].as_array().unwrap().len(), 2);
        assert_eq!(o["status"]["conditions"][0]["status"], "True");
        assert_eq!(o["status"]["conditions"].as_array().unwrap().len(), 2);
        strategic(
            &mut o,
            &json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["a"]}}),
        );
        assert_eq!(o["metadata"]["finalizers"], json!(["b"]));
    }
}

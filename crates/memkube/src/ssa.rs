//! Server-side apply: field sets (`fieldsV1`), merging an applied configuration, removing fields
//! a manager stopped applying, field ownership across managers and apply conflicts (409).

use crate::meta::{self, meta_mut};
use serde_json::{Map, Value, json};
use std::collections::BTreeSet;

/// One leaf of a field set: `f:<name>`, `k:<json key>` or `.` elements.
pub type FieldPath = Vec<String>;

/// The key field of a list for server-side apply (`type` for conditions, `name` otherwise),
/// or None for atomic lists. A list whose items share a key value is no list-map (the API
/// server keeps map keys unique), so it is atomic: e.g. `addresses`, with several
/// `InternalIP` entries, is replaced whole as on a real server, never merged item by item.
fn ssa_list_key(items: &[Value]) -> Option<&'static str> {
    if items.is_empty() || !items.iter().all(Value::is_object) {
        return None;
    }
    ["type", "name", "uid", "key"].into_iter().find(|k| {
        let keys: Option<Vec<&str>> = items.iter().map(|i| i.get(*k).and_then(Value::as_str)).collect();
        keys.is_some_and(|keys| keys.iter().collect::<BTreeSet<_>>().len() == keys.len())
    })
}

fn item_key(key: &str, item: &Value) -> String {
    let mut m = Map::new();
    m.insert(key.into(), item.get(key).cloned().unwrap_or(Value::Null));
    format!("k:{}", Value::Object(m))
}

/// `metadata.finalizers` is a set (`+listType=set`): its items are owned one by one, as
/// `v:"<value>"` elements.
fn is_set(key: &str, items: &[Value]) -> bool {
    key == "finalizers" && items.iter().all(Value::is_string)
}

fn set_item(item: &Value) -> String {
    format!("v:{item}")
}

/// The `fieldsV1` set of an applied configuration (apiVersion/kind and identity metadata skipped).
pub fn fieldset(applied: &Value) -> Value {
    fn walk(v: &Value, root: bool, key: &str) -> Value {
        let mut out = Map::new();
        match v {
            Value::Object(m) => {
                for (k, cv) in m {
                    if root && matches!(k.as_str(), "apiVersion" | "kind") {
                        continue;
                    }
                    if root && k == "metadata" {
                        let mut mm = Map::new();
                        if let Some(md) = cv.as_object() {
                            for (mk, mv) in md {
                                if matches!(mk.as_str(), "labels" | "annotations" | "finalizers" | "ownerReferences") {
                                    mm.insert(format!("f:{mk}"), walk(mv, false, mk));
                                }
                            }
                        }
                        if !mm.is_empty() {
                            out.insert("f:metadata".into(), Value::Object(mm));
                        }
                        continue;
                    }
                    out.insert(format!("f:{k}"), walk(cv, false, k));
                }
            }
            Value::Array(items) if is_set(key, items) => {
                for it in items {
                    out.insert(set_item(it), Value::Object(Map::new()));
                }
            }
            Value::Array(items) => {
                if let Some(key) = ssa_list_key(items) {
                    for it in items {
                        let mut sub = walk(it, false, "");
                        if let Value::Object(s) = &mut sub {
                            s.insert(".".into(), Value::Object(Map::new()));
                        }
                        out.insert(item_key(key, it), sub);
                    }
                }
            }
            _ => {}
        }
        Value::Object(out)
    }
    walk(applied, true, "")
}

/// Merge an applied configuration into the live object (maps recursively, keyed lists by key,
/// everything else replaced).
pub fn apply_merge(live: &mut Value, applied: &Value) {
    match (live, applied) {
        (Value::Object(lm), Value::Object(am)) => {
            for (k, av) in am {
                match lm.get_mut(k) {
                    Some(Value::Array(la)) if av.as_array().is_some_and(|aa| is_set(k, aa) && is_set(k, la)) => {
                        for it in av.as_array().into_iter().flatten() {
                            if !la.contains(it) {
                                la.push(it.clone());
                            }
                        }
                    }
                    Some(lv) => apply_merge(lv, av),
                    None => {
                        lm.insert(k.clone(), av.clone());
                    }
                }
            }
        }
        // An empty applied list leaves a keyed live list to `remove_dropped`, which takes out
        // only the items this manager owned.
        (Value::Array(la), Value::Array(aa)) if aa.is_empty() && ssa_list_key(la).is_some() => {}
        (Value::Array(la), Value::Array(aa)) => match ssa_list_key(aa) {
            Some(key) if ssa_list_key(la) == Some(key) => {
                for it in aa {
                    match la.iter().position(|c| c.get(key) == it.get(key)) {
                        Some(i) => apply_merge(&mut la[i], it),
                        None => la.push(it.clone()),
                    }
                }
            }
            _ => *la = aa.clone(),
        },
        (l, a) => *l = a.clone(),
    }
}

/// Remove from `obj` the fields in `prev` (this manager's last applied set) that are absent from
/// `new` and not owned by any of `others`.
pub fn remove_dropped(obj: &mut Value, prev: &Value, new: &Value, others: &[Value]) {
    let Some(pm) = prev.as_object() else { return };
    for (pk, psub) in pm {
        if pk == "." {
            continue;
        }
        let nsub = new.get(pk);
        let osubs: Vec<Value> = others.iter().filter_map(|o| o.get(pk).cloned()).collect();
        if let Some(field) = pk.strip_prefix("f:") {
            let Value::Object(om) = obj else { continue };
            match nsub {
                None if osubs.is_empty() => {
                    om.remove(field);
                }
                None => {
                    if let Some(child) = om.get_mut(field) {
                        remove_dropped(child, psub, &Value::Object(Map::new()), &osubs);
                    }
                }
                Some(ns) => {
                    if let Some(child) = om.get_mut(field) {
                        remove_dropped(child, psub, ns, &osubs);
                    }
                }
            }
        } else if let Some(vjson) = pk.strip_prefix("v:") {
            let (Value::Array(items), None, true) = (&mut *obj, nsub, osubs.is_empty()) else {
                continue;
            };
            if let Ok(item) = serde_json::from_str::<Value>(vjson) {
                items.retain(|it| *it != item);
            }
        } else if let Some(kjson) = pk.strip_prefix("k:") {
            let Value::Array(items) = obj else { continue };
            let Ok(Value::Object(kv)) = serde_json::from_str::<Value>(kjson) else {
                continue;
            };
            let matches = |it: &Value| kv.iter().all(|(k, v)| it.get(k) == Some(v));
            match nsub {
                None if osubs.is_empty() => items.retain(|it| !matches(it)),
                None => {
                    if let Some(it) = items.iter_mut().find(|it| matches(it)) {
                        remove_dropped(it, psub, &Value::Object(Map::new()), &osubs);
                    }
                }
                Some(ns) => {
                    if let Some(it) = items.iter_mut().find(|it| matches(it)) {
                        remove_dropped(it, psub, ns, &osubs);
                    }
                }
            }
        }
    }
}

/// Leaf paths of a `fieldsV1` tree.
pub fn leaves(set: &Value) -> BTreeSet<FieldPath> {
    fn walk(v: &Value, cur: &mut FieldPath, out: &mut BTreeSet<FieldPath>) {
        match v.as_object() {
            Some(m) if !m.is_empty() => {
                for (k, sub) in m {
                    cur.push(k.clone());
                    walk(sub, cur, out);
                    cur.pop();
                }
            }
            _ => {
                if !cur.is_empty() {
                    out.insert(cur.clone());
                }
            }
        }
    }
    let mut out = BTreeSet::new();
    walk(set, &mut vec![], &mut out);
    out
}

/// Rebuild a `fieldsV1` tree from leaf paths.
pub fn tree(paths: &BTreeSet<FieldPath>) -> Value {
    let mut root = Value::Object(Map::new());
    for p in paths {
        let mut cur = &mut root;
        for el in p {
            let Value::Object(m) = cur else { break };
            cur = m.entry(el.clone()).or_insert_with(|| Value::Object(Map::new()));
        }
    }
    root
}

/// The value a field path points at (`.` is the node itself).
pub fn value_at<'a>(obj: &'a Value, path: &[String]) -> Option<&'a Value> {
    let mut cur = obj;
    for el in path {
        if el == "." {
            continue;
        }
        if let Some(f) = el.strip_prefix("f:") {
            cur = cur.get(f)?;
        } else if let Some(k) = el.strip_prefix("k:") {
            let kv: Map<String, Value> = serde_json::from_str(k).ok()?;
            cur = cur
                .as_array()?
                .iter()
                .find(|it| kv.iter().all(|(k, v)| it.get(k) == Some(v)))?;
        } else if let Some(v) = el.strip_prefix("v:") {
            let item: Value = serde_json::from_str(v).ok()?;
            cur = cur.as_array()?.iter().find(|it| **it == item)?;
        } else {
            return None;
        }
    }
    Some(cur)
}

/// `.spec.x[type="Ready"].status`, as apply conflict messages print paths.
pub fn render(path: &[String]) -> String {
    let mut s = String::new();
    for el in path {
        if let Some(f) = el.strip_prefix("f:") {
            s.push('.');
            s.push_str(f);
        } else if let Some(k) = el.strip_prefix("k:") {
            let kv: Map<String, Value> = serde_json::from_str(k).unwrap_or_default();
            let inner: Vec<String> = kv.iter().map(|(k, v)| format!("{k}={v}")).collect();
            s.push_str(&format!("[{}]", inner.join(",")));
        }
    }
    s
}

fn entries(obj: Option<&Value>) -> Vec<Value> {
    obj.and_then(|o| o.pointer("/metadata/managedFields"))
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

/// A manager as the apiserver names it in conflicts: `"name"`, `with subresource "status"`
/// when it wrote a subresource, and `using <apiVersion>` for Update operations.
fn print_manager(e: &Value) -> String {
    let mut s = format!("\"{}\"", e["manager"].as_str().unwrap_or(""));
    if let Some(sub) = e.get("subresource").and_then(Value::as_str) {
        s.push_str(&format!(" with subresource \"{sub}\""));
    }
    if e["operation"] == "Update" {
        // The apiserver's manager identifiers carry no time, so it never prints `at <time>`.
        s.push_str(&format!(" using {}", e["apiVersion"].as_str().unwrap_or("")));
    }
    s
}

/// Fields that `applied` would change and that other managers own:
/// (`"manager" using apiVersion`, path).
pub fn conflicts(live: &Value, applied: &Value, manager: &str) -> Vec<(String, String)> {
    let mut out = vec![];
    let others: Vec<(String, BTreeSet<FieldPath>)> = entries(Some(live))
        .iter()
        .filter(|e| e["manager"] != manager)
        .map(|e| (print_manager(e), leaves(&e["fieldsV1"])))
        .collect();
    for p in leaves(&fieldset(applied)) {
        if p.last().is_some_and(|l| l == ".") {
            continue;
        }
        let (lv, av) = (value_at(live, &p), value_at(applied, &p));
        if lv.is_none() || lv == av {
            continue;
        }
        for (m, set) in &others {
            if set.contains(&p) {
                out.push((m.clone(), render(&p)));
            }
        }
    }
    out
}

/// Update `new.metadata.managedFields` for a write by `manager` with `op` (`Apply` or `Update`):
/// an apply owns exactly its applied set; an update takes the fields it changed; fields another
/// manager changed or that no longer exist leave every other set.
pub fn record(
    old: Option<&Value>,
    new: &mut Value,
    api_version: &str,
    manager: &str,
    op: &str,
    sub: Option<&str>,
    applied: &Value,
) {
    if manager.is_empty() {
        return;
    }
    let mut changed: BTreeSet<FieldPath> = leaves(&fieldset(new))
        .into_iter()
        .filter(|p| old.is_none_or(|o| value_at(o, p) != value_at(new, p)))
        .collect();
    if op != "Apply" {
        // An update that creates a map (or a set) also owns the map itself: `.`.
        let created: Vec<FieldPath> = changed
            .iter()
            .flat_map(|p| (1..p.len()).map(|i| p[..i].to_vec()))
            .filter(|prefix| {
                prefix.last().is_some_and(|l| l.starts_with("f:"))
                    && prefix.as_slice() != ["f:metadata"]
                    && value_at(new, prefix).is_some_and(|v| v.is_object() || v.is_array())
                    && old.is_none_or(|o| value_at(o, prefix).is_none())
            })
            .map(|mut prefix| {
                prefix.push(".".into());
                prefix
            })
            .collect();
        changed.extend(created);
    }
    let content_unchanged = old.is_some_and(|o| content_of(o) == content_of(new));
    let mine = |e: &Value| {
        e["manager"] == manager && e["operation"] == op && e.get("subresource").and_then(Value::as_str) == sub
    };
    let mut list: Vec<(Value, BTreeSet<FieldPath>)> = entries(old)
        .into_iter()
        .filter(|e| !mine(e))
        .map(|e| {
            let set = leaves(&e["fieldsV1"]);
            (e, set)
        })
        .collect();
    let prev_mine: BTreeSet<FieldPath> = entries(old)
        .iter()
        .find(|e| mine(e))
        .map(|e| leaves(&e["fieldsV1"]))
        .unwrap_or_default();
    let my_set: BTreeSet<FieldPath> = if op == "Apply" {
        leaves(applied)
    } else {
        prev_mine.union(&changed).cloned().collect()
    };
    for (_, set) in &mut list {
        set.retain(|p| !changed.contains(p));
    }
    let mut mine_entry = json!({
        "manager": manager, "operation": op, "apiVersion": api_version, "fieldsType": "FieldsV1",
    });
    // The apiserver stamps the time only when the write changed the object; an apply that
    // only takes (shared) ownership keeps the manager's previous time, or none.
    let previous_time = entries(old)
        .iter()
        .find(|e| mine(e))
        .and_then(|e| e.get("time").cloned());
    match (content_unchanged, previous_time) {
        (false, _) => mine_entry["time"] = json!(meta::now()),
        (true, Some(t)) => mine_entry["time"] = t,
        (true, None) => {}
    }
    if let Some(s) = sub {
        mine_entry["subresource"] = json!(s);
    }
    list.push((mine_entry, my_set));
    let mut out: Vec<Value> = list
        .into_iter()
        .filter_map(|(mut e, mut set)| {
            set.retain(|p| value_at(new, p).is_some());
            if set.is_empty() {
                return None;
            }
            e["fieldsV1"] = tree(&set);
            Some(e)
        })
        .collect();
    // In the apiserver's order: operation, time (to the second), manager, subresource.
    out.sort_by_cached_key(|e| {
        let s = |k: &str| e.get(k).and_then(Value::as_str).unwrap_or("").to_string();
        let second = s("time").get(..19).unwrap_or("").to_string();
        (s("operation"), second, s("manager"), s("subresource"), s("apiVersion"))
    });
    let m = meta_mut(new);
    if out.is_empty() {
        m.remove("managedFields");
    } else {
        m.insert("managedFields".into(), Value::Array(out));
    }
}

/// The object without the metadata a write always touches.
fn content_of(v: &Value) -> Value {
    let mut c = v.clone();
    let m = meta_mut(&mut c);
    m.remove("resourceVersion");
    m.remove("managedFields");
    c
}

/// managedFields entries without their timestamps (ownership comparison for no-op detection).
pub fn without_time(v: &Value) -> Value {
    let mut mf = v.pointer("/metadata/managedFields").cloned().unwrap_or(json!([]));
    if let Value::Array(entries) = &mut mf {
        for e in entries {
            if let Value::Object(m) = e {
                m.remove("time");
            }
        }
    }
    mf
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ssa_removes_dropped_fields() {
        let a1 = json!({"spec": {"a": 1, "b": 2}, "status": {"conditions": [{"type": "A", "status": "True"}, {"type": "B", "status": "True"}]}});
        let a2 = json!({"spec": {"a": 3}, "status": {"conditions": [{"type": "A", "status": "False"}]}});
        let mut live = json!({"spec": {"c": 9}});
        apply_merge(&mut live, &a1);
        let f1 = fieldset(&a1);
        apply_merge(&mut live, &a2);
        remove_dropped(&mut live, &f1, &fieldset(&a2), &[]);
        assert_eq!(live["spec"], json!({"a": 3, "c": 9}));
        assert_eq!(live["status"]["conditions"], json!([{"type": "A", "status": "False"}]));
    }

    #[test]
    fn a_list_with_repeated_keys_is_atomic() {
        let addresses = |a: &str, b: &str| {
            json!({"status": {"addresses": [
                {"type": "InternalIP", "address": a}, {"type": "InternalIP", "address": b},
                {"type": "Hostname", "address": "n"}
            ]}})
        };
        let mut live = addresses("192.0.2.1", "10.0.0.5");
        apply_merge(&mut live, &addresses("192.0.2.9", "10.0.0.5"));
        assert_eq!(live, addresses("192.0.2.9", "10.0.0.5"));
        assert_eq!(fieldset(&live)["f:status"]["f:addresses"], json!({}));
        // Unique keys still merge by key, as conditions do.
        let mut live = json!({"c": [{"type": "A", "s": 1}, {"type": "B", "s": 1}]});
        apply_merge(&mut live, &json!({"c": [{"type": "B", "s": 2}]}));
        assert_eq!(live, json!({"c": [{"type": "A", "s": 1}, {"type": "B", "s": 2}]}));
    }

    #[test]
    fn ownership_and_conflicts() {
        let mut live = json!({"spec": {"holder": "a", "x": 1}});
        let applied_a = json!({"spec": {"holder": "a"}});
        record(None, &mut live, "v1", "mgr-a", "Apply", None, &fieldset(&applied_a));
        let c = conflicts(&live, &json!({"spec": {"holder": "b"}}), "mgr-b");
        assert_eq!(c, vec![("\"mgr-a\"".to_string(), ".spec.holder".to_string())]);
        assert!(conflicts(&live, &json!({"spec": {"holder": "a"}}), "mgr-b").is_empty());
        // an update by another manager takes ownership of what it changed
        let old = live.clone();
        live["spec"]["holder"] = json!("c");
        record(Some(&old), &mut live, "v1", "mgr-c", "Update", None, &json!({}));
        assert!(
            conflicts(&live, &json!({"spec": {"holder": "d"}}), "mgr-a")
                .iter()
                .all(|(m, _)| m.starts_with("\"mgr-c\""))
        );
        assert_eq!(
            render(&["f:status".into(), "k:{\"type\":\"Ready\"}".into(), "f:status".into()]),
            ".status[type=\"Ready\"].status"
        );
    }
}

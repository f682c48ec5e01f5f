//! Legacy (non-aggregated) discovery documents; client-go falls back to these.

use crate::registry::Registry;
use serde_json::{Value, json};

/// `/version`.
pub fn version() -> Value {
    json!({
        "major": "1", "minor": "32", "gitVersion": "v1.32.0-memkube", "gitCommit": "memkube",
        "gitTreeState": "clean", "buildDate": "2026-01-01T00:00:00Z", "goVersion": "go1.23",
        "compiler": "gc", "platform": "linux/amd64"
    })
}

/// `/api`.
pub fn api() -> Value {
    json!({"kind": "APIVersions", "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1"}]})
}

fn group_doc(name: &str, versions: &[String]) -> Value {
    let vs: Vec<Value> = versions
        .iter()
        .map(|v| json!({"groupVersion": format!("{name}/{v}"), "version": v}))
        .collect();
    json!({"name": name, "versions": vs, "preferredVersion": vs.first().cloned().unwrap_or(json!({}))})
}

/// `/apis`.
pub fn apis(reg: &Registry) -> Value {
    let groups: Vec<Value> = reg
        .groups()
        .iter()
        .filter(|(g, _)| !g.is_empty())
        .map(|(g, vs)| group_doc(g, vs))
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

/// `/apis/{group}`, or None when unknown.
pub fn group(reg: &Registry, name: &str) -> Option<Value> {
    let groups = reg.groups();
    let vs = groups.get(name).filter(|_| !name.is_empty())?;
    let mut d = group_doc(name, vs);
    d["kind"] = json!("APIGroup");
    d["apiVersion"] = json!("v1");
    Some(d)
}

/// `/api/v1` or `/apis/{group}/{version}`, or None when unknown.
pub fn resources(reg: &Registry, group: &str, version: &str) -> Option<Value> {
    let infos = reg.resources(group, version);
    if infos.is_empty() {
        return None;
    }
    let verbs = json!([
        "create",
        "delete",
        "deletecollection",
        "get",
        "list",
        "patch",
        "update",
        "watch"
    ]);
    let mut out = vec![];
    for i in infos {
        let mut r = json!({
            "name": i.plural, "singularName": i.singular, "namespaced": i.namespaced,
            "kind": i.kind, "verbs": verbs,
        });
        if !i.short_names.is_empty() {
            r["shortNames"] = json!(i.short_names);
        }
        if !i.categories.is_empty() {
            r["categories"] = json!(i.categories);
        }
        out.push(r);
        for s in &i.subresources {
            let sub = match s.as_str() {
                "scale" => {
                    json!({"name": format!("{}/scale", i.plural), "singularName": "", "namespaced": i.namespaced,
                    "group": "autoscaling", "version": "v1", "kind": "Scale", "verbs": ["get", "patch", "update"]})
                }
                "token" => {
                    json!({"name": format!("{}/token", i.plural), "singularName": "", "namespaced": i.namespaced,
                    "group": "authentication.k8s.io", "version": "v1", "kind": "TokenRequest", "verbs": ["create"]})
                }
                "eviction" => {
                    json!({"name": format!("{}/eviction", i.plural), "singularName": "", "namespaced": i.namespaced,
                    "group": "policy", "version": "v1", "kind": "Eviction", "verbs": ["create"]})
                }
                _ => json!({"name": format!("{}/{s}", i.plural), "singularName": "", "namespaced": i.namespaced,
                    "kind": i.kind, "verbs": ["get", "patch", "update"]}),
            };
            out.push(sub);
        }
    }
    let gv = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    Some(json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": out}))
}

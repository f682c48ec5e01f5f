//! `meta.k8s.io/v1 Table` output for `kubectl get`: CRD printer columns (simple JSONPath),
//! default Name/Age, and a few natural columns for built-ins.

use crate::registry::ResourceInfo;
use serde_json::{Value, json};

/// kubectl's HumanDuration formatting of an age; a timestamp more than a second in the
/// future is `<invalid>`, as the apiserver prints it.
pub fn human_age(secs: i64) -> String {
    if secs < -1 {
        return "<invalid>".into();
    }
    let s = secs.max(0);
    let m = s / 60;
    let h = s / 3600;
    let d = h / 24;
    if s < 120 {
        format!("{s}s")
    } else if m < 10 {
        if s % 60 == 0 {
            format!("{m}m")
        } else {
            format!("{m}m{}s", s % 60)
        }
    } else if m < 180 {
        format!("{m}m")
    } else if h < 8 {
        if m % 60 == 0 {
            format!("{h}h")
        } else {
            format!("{h}h{}m", m % 60)
        }
    } else if h < 48 {
        format!("{h}h")
    } else if h < 24 * 8 {
        if h % 24 == 0 {
            format!("{d}d")
        } else {
            format!("{d}d{}h", h % 24)
        }
    } else if d < 365 * 2 {
        format!("{d}d")
    } else {
        format!("{}y", d / 365)
    }
}

/// Age of an RFC 3339 timestamp as a Table cell.
pub(crate) fn age_of(ts: &str) -> String {
    match chrono::DateTime::parse_from_rfc3339(ts) {
        Ok(t) => human_age((chrono::Utc::now() - t.with_timezone(&chrono::Utc)).num_seconds()),
        Err(_) => "<unknown>".into(),
    }
}

/// One step of a parsed JSONPath.
#[derive(Debug, Clone, PartialEq)]
enum Step {
    Field(String),
    All,
    Index(i64),
    Filter(String, String),
}

/// Read a dotted field name up to an unescaped `.` or `[`; `\.` is a literal dot.
fn field_name(r: &str) -> (String, &str) {
    let mut name = String::new();
    let mut chars = r.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '\\' => {
                if let Some((_, n)) = chars.next() {
                    name.push(n);
                }
            }
            '.' | '[' => return (name, &r[i..]),
            _ => name.push(c),
        }
    }
    (name, "")
}

/// Parse `.a.b`, `.a\.b`, `.a['b\.c']`, `.a[0]`, `.a[-1]`, `.a[*]`, `.a[?(@.k=="v")]`.
fn parse_jsonpath(path: &str) -> Option<Vec<Step>> {
    let p = path.trim().trim_start_matches('{').trim_end_matches('}');
    let mut rest = p.strip_prefix('$').unwrap_or(p);
    let mut steps = vec![];
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix('.') {
            let (name, r) = field_name(r);
            steps.push(if name == "*" { Step::All } else { Step::Field(name) });
            rest = r;
        } else if let Some(r) = rest.strip_prefix("[?(") {
            let end = r.find(")]")?;
            let (lhs, rhs) = r[..end].split_once("==")?;
            let key = lhs.trim().strip_prefix("@.")?;
            let want = rhs.trim().trim_matches(|c| c == '"' || c == '\'');
            steps.push(Step::Filter(key.to_string(), want.to_string()));
            rest = &r[end + 2..];
        } else if let Some(r) = rest.strip_prefix("['").or_else(|| rest.strip_prefix("[\"")) {
            // A quoted key is itself a dotted path (kubectl's `{$.<key>}`), so dots inside
            // must be escaped: `['cluster\.x-k8s\.io/cluster-name']`.
            let quote = if rest.starts_with("['") { "']" } else { "\"]" };
            let end = r.find(quote)?;
            steps.extend(parse_jsonpath(&format!(".{}", &r[..end]))?);
            rest = &r[end + 2..];
        } else if let Some(r) = rest.strip_prefix('[') {
            let end = r.find(']')?;
            let idx = r[..end].trim();
            steps.push(if idx == "*" {
                Step::All
            } else {
                Step::Index(idx.parse().ok()?)
            });
            rest = &r[end + 1..];
        } else {
            return None;
        }
    }
    Some(steps)
}

/// Evaluate a simple JSONPath (see [`parse_jsonpath`]); first match wins.
pub fn jsonpath(obj: &Value, path: &str) -> Option<Value> {
    let steps = parse_jsonpath(path)?;
    let mut cur: Vec<&Value> = vec![obj];
    for step in &steps {
        cur = match step {
            Step::Field(f) => cur.iter().filter_map(|v| v.get(f.as_str())).collect(),
            Step::All => cur
                .iter()
                .flat_map(|v| match v {
                    Value::Array(a) => a.iter().collect::<Vec<_>>(),
                    Value::Object(m) => m.values().collect(),
                    _ => vec![],
                })
                .collect(),
            Step::Index(i) => cur
                .iter()
                .filter_map(|v| {
                    let a = v.as_array()?;
                    let i = if *i < 0 { a.len() as i64 + i } else { *i };
                    a.get(usize::try_from(i).ok()?)
                })
                .collect(),
            Step::Filter(key, want) => cur
                .iter()
                .filter_map(|v| v.as_array())
                .flatten()
                .filter(|it| {
                    jsonpath(it, &format!(".{key}")).is_some_and(|v| match v {
                        Value::String(s) => s == *want,
                        other => serde_json::from_str::<Value>(want).is_ok_and(|w| w == other),
                    })
                })
                .collect(),
        };
    }
    cur.into_iter().next().cloned()
}

fn col(name: &str, typ: &str, format: &str, desc: &str) -> Value {
    json!({"name": name, "type": typ, "format": format, "description": desc, "priority": 0})
}

type CellFn = Box<dyn Fn(&Value) -> Value>;

fn text(o: &Value, p: &str) -> String {
    match o.pointer(p) {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Null) | None => String::new(),
        Some(v) => v.to_string(),
    }
}

fn or_none(s: String, none: &str) -> Value {
    json!(if s.is_empty() { none.to_string() } else { s })
}

fn count(o: &Value, p: &str) -> usize {
    match o.pointer(p) {
        Some(Value::Object(m)) => m.len(),
        Some(Value::Array(a)) => a.len(),
        _ => 0,
    }
}

fn int(o: &Value, p: &str) -> i64 {
    o.pointer(p).and_then(Value::as_i64).unwrap_or(0)
}

fn age_cell() -> (Value, CellFn) {
    (
        col(
            "Age",
            "string",
            "",
            "CreationTimestamp is a timestamp representing the server time when this object was created.",
        ),
        Box::new(|o: &Value| json!(age_of(crate::meta::meta_str(o, "creationTimestamp")))),
    )
}

fn c(name: &str, f: impl Fn(&Value) -> Value + 'static) -> (Value, CellFn) {
    (col(name, "string", "", name), Box::new(f))
}

fn node_status(o: &Value) -> Value {
    let ready = jsonpath(o, ".status.conditions[?(@.type==\"Ready\")].status");
    let mut s = match ready.as_ref().and_then(Value::as_str) {
        Some("True") => "Ready".to_string(),
        Some("False") => "NotReady".to_string(),
        _ => "Unknown".to_string(),
    };
    if o.pointer("/spec/unschedulable") == Some(&json!(true)) {
        s.push_str(",SchedulingDisabled");
    }
    json!(s)
}

fn node_roles(o: &Value) -> Value {
    let roles: Vec<String> = crate::meta::labels(o)
        .keys()
        .filter_map(|k| k.strip_prefix("node-role.kubernetes.io/").map(String::from))
        .collect();
    or_none(roles.join(","), "<none>")
}

fn csr_condition(o: &Value) -> Value {
    let conds: Vec<String> = o
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(|c| c["type"].as_str().map(String::from)).collect())
        .unwrap_or_default();
    let mut parts = conds;
    if o.pointer("/status/certificate").is_some() {
        parts.push("Issued".into());
    }
    or_none(parts.join(","), "Pending")
}

/// Columns after Name for built-in kinds, in kubectl's order (Age included).
fn builtin_columns(info: &ResourceInfo) -> Vec<(Value, CellFn)> {
    match (info.group.as_str(), info.plural.as_str()) {
        ("", "nodes") => vec![
            c("Status", node_status),
            c("Roles", node_roles),
            age_cell(),
            c("Version", |o| json!(text(o, "/status/nodeInfo/kubeletVersion"))),
        ],
        ("", "pods") => vec![
            c("Ready", |o| {
                let ready = o
                    .pointer("/status/containerStatuses")
                    .and_then(Value::as_array)
                    .map_or(0, |a| a.iter().filter(|c| c["ready"] == true).count());
                json!(format!("{ready}/{}", count(o, "/spec/containers")))
            }),
            c("Status", |o| json!(text(o, "/status/phase"))),
            c("Restarts", |o| {
                let n: i64 = o
                    .pointer("/status/containerStatuses")
                    .and_then(Value::as_array)
                    .map_or(0, |a| a.iter().filter_map(|c| c["restartCount"].as_i64()).sum());
                json!(n)
            }),
            age_cell(),
        ],
        ("", "secrets") => vec![
            c("Type", |o| json!(text(o, "/type"))),
            c("Data", |o| json!(count(o, "/data"))),
            age_cell(),
        ],
        ("", "configmaps") => vec![
            c("Data", |o| json!(count(o, "/data") + count(o, "/binaryData"))),
            age_cell(),
        ],
        ("", "namespaces") => vec![c("Status", |o| json!(text(o, "/status/phase"))), age_cell()],
        ("", "serviceaccounts") => vec![c("Secrets", |o| json!(count(o, "/secrets"))), age_cell()],
        ("", "services") => vec![
            c("Type", |o| or_none(text(o, "/spec/type"), "ClusterIP")),
            c("Cluster-IP", |o| or_none(text(o, "/spec/clusterIP"), "<none>")),
            c("External-IP", |_| json!("<none>")),
            c("Port(s)", |o| {
                let ports: Vec<String> = o
                    .pointer("/spec/ports")
                    .and_then(Value::as_array)
                    .map(|a| {
                        a.iter()
                            .map(|p| format!("{}/{}", p["port"], p["protocol"].as_str().unwrap_or("TCP")))
                            .collect()
                    })
                    .unwrap_or_default();
                or_none(ports.join(","), "<none>")
            }),
            age_cell(),
        ],
        ("apps", "deployments") => vec![
            c("Ready", |o| {
                let ready = o.pointer("/status/readyReplicas").and_then(Value::as_i64).unwrap_or(0);
                let want = o.pointer("/spec/replicas").and_then(Value::as_i64).unwrap_or(1);
                json!(format!("{ready}/{want}"))
            }),
            c("Up-to-date", |o| {
                json!(
                    o.pointer("/status/updatedReplicas")
                        .and_then(Value::as_i64)
                        .unwrap_or(0)
                )
            }),
            c("Available", |o| {
                json!(
                    o.pointer("/status/availableReplicas")
                        .and_then(Value::as_i64)
                        .unwrap_or(0)
                )
            }),
            age_cell(),
        ],
        ("apps", "daemonsets") => vec![
            c("Desired", |o| json!(int(o, "/status/desiredNumberScheduled"))),
            c("Current", |o| json!(int(o, "/status/currentNumberScheduled"))),
            c("Ready", |o| json!(int(o, "/status/numberReady"))),
            c("Up-to-date", |o| json!(int(o, "/status/updatedNumberScheduled"))),
            c("Available", |o| json!(int(o, "/status/numberAvailable"))),
            c("Node Selector", |o| {
                let sel: Vec<String> = o
                    .pointer("/spec/template/spec/nodeSelector")
                    .and_then(Value::as_object)
                    .map(|m| {
                        m.iter()
                            .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("")))
                            .collect()
                    })
                    .unwrap_or_default();
                or_none(sel.join(","), "<none>")
            }),
            age_cell(),
        ],
        ("apps", "replicasets") => vec![
            c("Desired", |o| {
                json!(o.pointer("/spec/replicas").and_then(Value::as_i64).unwrap_or(1))
            }),
            c("Current", |o| json!(int(o, "/status/replicas"))),
            c("Ready", |o| json!(int(o, "/status/readyReplicas"))),
            age_cell(),
        ],
        ("apps", "statefulsets") => vec![
            c("Ready", |o| {
                let want = o.pointer("/spec/replicas").and_then(Value::as_i64).unwrap_or(1);
                json!(format!("{}/{want}", int(o, "/status/readyReplicas")))
            }),
            age_cell(),
        ],
        ("coordination.k8s.io", "leases") => {
            vec![c("Holder", |o| json!(text(o, "/spec/holderIdentity"))), age_cell()]
        }
        ("certificates.k8s.io", "certificatesigningrequests") => vec![
            age_cell(),
            c("SignerName", |o| json!(text(o, "/spec/signerName"))),
            c("Requestor", |o| json!(text(o, "/spec/username"))),
            c("RequestedDuration", |o| {
                or_none(text(o, "/spec/expirationSeconds"), "<none>")
            }),
            c("Condition", csr_condition),
        ],
        ("policy", "poddisruptionbudgets") => vec![
            c("Min Available", |o| or_none(text(o, "/spec/minAvailable"), "N/A")),
            c("Max Unavailable", |o| or_none(text(o, "/spec/maxUnavailable"), "N/A")),
            c("Allowed Disruptions", |o| {
                json!(
                    o.pointer("/status/disruptionsAllowed")
                        .and_then(Value::as_i64)
                        .unwrap_or(0)
                )
            }),
            age_cell(),
        ],
        ("apiextensions.k8s.io", "customresourcedefinitions") => {
            vec![c("Created At", |o| {
                json!(crate::meta::meta_str(o, "creationTimestamp"))
            })]
        }
        _ => vec![age_cell()],
    }
}

/// `meta.k8s.io/v1 PartialObjectMetadata` of an object (for `as=PartialObjectMetadata` requests).
pub fn partial(o: &Value) -> Value {
    json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": o.get("metadata").cloned().unwrap_or(json!({}))})
}

/// Attach the row's object as `includeObject` asks.
fn row(mut row: Value, o: &Value, include_object: &str) -> Value {
    match include_object {
        "None" => {}
        "Object" => row["object"] = o.clone(),
        _ => row["object"] = partial(o),
    }
    row
}

/// Build the Table for `objs` (already presented in the request's version).
pub fn table(info: &ResourceInfo, objs: &[Value], rv: &str, include_object: &str) -> Value {
    if crate::events::is_event(info) {
        // The apiserver's event printer has no leading Name column (Name is a wide column).
        let rows: Vec<Value> = objs
            .iter()
            .map(|o| {
                let cells = if crate::events::is_new_api(info) {
                    crate::events::table_cells(&crate::events::to_core(o.clone()))
                } else {
                    crate::events::table_cells(o)
                };
                row(json!({"cells": cells}), o, include_object)
            })
            .collect();
        return json!({"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": {"resourceVersion": rv}, "columnDefinitions": crate::events::table_columns(), "rows": rows});
    }
    let mut cols = vec![col("Name", "string", "name", "Name must be unique within a namespace.")];
    let mut cells: Vec<CellFn> = vec![Box::new(|o: &Value| json!(crate::meta::name(o)))];
    if info.crd && !info.printer_columns.is_empty() {
        // Like the apiextensions server: Name plus the declared columns (no implicit Age).
        for pc in &info.printer_columns {
            let typ = pc["type"].as_str().unwrap_or("string").to_string();
            let path = pc["jsonPath"].as_str().unwrap_or("").to_string();
            let mut c = col(
                pc["name"].as_str().unwrap_or(""),
                &typ,
                pc["format"].as_str().unwrap_or(""),
                pc["description"].as_str().unwrap_or(""),
            );
            c["priority"] = pc.get("priority").cloned().unwrap_or(json!(0));
            cols.push(c);
            cells.push(Box::new(move |o: &Value| match jsonpath(o, &path) {
                Some(Value::String(s)) if typ == "date" => json!(age_of(&s)),
                Some(v @ (Value::Object(_) | Value::Array(_))) => json!(v.to_string()),
                Some(Value::Null) | None => Value::Null,
                Some(v) => v,
            }));
        }
    } else {
        let extra = if info.crd {
            vec![age_cell()]
        } else {
            builtin_columns(info)
        };
        for (c, f) in extra {
            cols.push(c);
            cells.push(f);
        }
    }
    let rows: Vec<Value> = objs
        .iter()
        .map(|o| {
            row(
                json!({"cells": cells.iter().map(|f| f(o)).collect::<Vec<_>>()}),
                o,
                include_object,
            )
        })
        .collect();
    json!({"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": {"resourceVersion": rv}, "columnDefinitions": cols, "rows": rows})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_and_ages() {
        let o = json!({"spec": {"a": [{"b": 1}]}, "status": {"conditions": [{"type": "X", "status": "False"}, {"type": "Ready", "status": "True"}]}});
        assert_eq!(jsonpath(&o, ".spec.a[0].b"), Some(json!(1)));
        assert_eq!(
            jsonpath(&o, ".status.conditions[?(@.type==\"Ready\")].status"),
            Some(json!("True"))
        );
        assert_eq!(jsonpath(&o, ".spec.missing"), None);
        assert_eq!(human_age(5), "5s");
        assert_eq!(human_age(180), "3m");
        assert_eq!(human_age(7200), "120m");
        assert_eq!(human_age(4 * 86400), "4d");
        assert_eq!(human_age(9 * 86400), "9d");
        assert_eq!(human_age(-1), "0s");
        assert_eq!(human_age(-2), "<invalid>");
        assert_eq!(age_of("2999-01-01T00:00:00Z"), "<invalid>");
        assert_eq!(age_of("bogus"), "<unknown>");
    }

    #[test]
    fn quoted_and_escaped_keys() {
        let o = json!({"metadata": {"labels": {"cluster.x-k8s.io/cluster-name": "c1", "foo": "bar"}},
            "a": {"b": {"c": 1}}, "list": [1, 2, 3], "conds": [{"n": 2, "v": "x"}]});
        assert_eq!(
            jsonpath(&o, r".metadata.labels['cluster\.x-k8s\.io/cluster-name']"),
            Some(json!("c1"))
        );
        assert_eq!(
            jsonpath(&o, r".metadata.labels.cluster\.x-k8s\.io/cluster-name"),
            Some(json!("c1"))
        );
        assert_eq!(jsonpath(&o, ".metadata.labels.foo"), Some(json!("bar")));
        assert_eq!(jsonpath(&o, "{.metadata.labels['foo']}"), Some(json!("bar")));
        // an unescaped dot inside quotes is a path separator, as in kubectl
        assert_eq!(jsonpath(&o, ".a['b.c']"), Some(json!(1)));
        assert_eq!(jsonpath(&o, ".list[-1]"), Some(json!(3)));
        assert_eq!(jsonpath(&o, ".list[*]"), Some(json!(1)));
        assert_eq!(jsonpath(&o, ".conds[?(@.n==2)].v"), Some(json!("x")));
        assert_eq!(jsonpath(&o, ".metadata.labels['missing']"), None);
        assert_eq!(jsonpath(&o, ".list[x]"), None);
    }
}

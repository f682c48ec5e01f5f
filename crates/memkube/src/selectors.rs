//! Label and field selectors, parsed once per request and matched against JSON objects.

use crate::meta;
use serde_json::Value;

#[derive(Debug, Clone, PartialEq)]
enum Op {
    Eq(String),
    NotEq(String),
    In(Vec<String>),
    NotIn(Vec<String>),
    Exists,
    NotExists,
}

/// A parsed label selector (all requirements must hold).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LabelSelector(Vec<(String, Op)>);

fn valid_token(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 316
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | '/'))
}

fn valid_value(s: &str) -> bool {
    s.is_empty() || valid_token(s)
}

/// Split on commas outside parentheses.
fn split_top(s: &str) -> Vec<String> {
    let mut out = vec![];
    let mut depth = 0i32;
    let mut cur = String::new();
    for c in s.chars() {
        match c {
            '(' => {
                depth += 1;
                cur.push(c)
            }
            ')' => {
                depth -= 1;
                cur.push(c)
            }
            ',' if depth == 0 => out.push(std::mem::take(&mut cur)),
            _ => cur.push(c),
        }
    }
    out.push(cur);
    out
}

fn parse_set(s: &str) -> Result<Vec<String>, String> {
    let inner = s
        .trim()
        .strip_prefix('(')
        .and_then(|x| x.strip_suffix(')'))
        .ok_or_else(|| format!("unable to parse requirement: found '{s}' expected: '('"))?;
    let vals: Vec<String> = inner.split(',').map(|v| v.trim().to_string()).collect();
    if vals.iter().any(|v| !valid_value(v)) {
        return Err(format!("invalid value in set {s}"));
    }
    Ok(vals)
}

impl LabelSelector {
    /// Parse `a=b,c!=d,e in (x,y),f notin (z),g,!h`.
    pub fn parse(s: &str) -> Result<Self, String> {
        let mut reqs = vec![];
        if s.trim().is_empty() {
            return Ok(LabelSelector(reqs));
        }
        for part in split_top(s) {
            let p = part.trim();
            let err = || format!("unable to parse requirement: found '{p}'");
            if let Some(k) = p.strip_prefix('!') {
                let k = k.trim();
                if !valid_token(k) {
                    return Err(err());
                }
                reqs.push((k.to_string(), Op::NotExists));
            } else if let Some((k, v)) = p.split_once("!=") {
                let (k, v) = (k.trim(), v.trim());
                if !valid_token(k) || !valid_value(v) {
                    return Err(err());
                }
                reqs.push((k.to_string(), Op::NotEq(v.to_string())));
            } else if let Some((k, v)) = p.split_once("==").or_else(|| p.split_once('=')) {
                let (k, v) = (k.trim(), v.trim());
                if !valid_token(k) || !valid_value(v) {
                    return Err(err());
                }
                reqs.push((k.to_string(), Op::Eq(v.to_string())));
            } else if let Some((k, rest)) = p.split_once(" notin ") {
                let k = k.trim();
                if !valid_token(k) {
                    return Err(err());
                }
                reqs.push((k.to_string(), Op::NotIn(parse_set(rest)?)));
            } else if let Some((k, rest)) = p.split_once(" in ") {
                let k = k.trim();
                if !valid_token(k) {
                    return Err(err());
                }
                reqs.push((k.to_string(), Op::In(parse_set(rest)?)));
            } else if valid_token(p) {
                reqs.push((p.to_string(), Op::Exists));
            } else {
                return Err(err());
            }
        }
        Ok(LabelSelector(reqs))
    }

    /// Build from a `metav1.LabelSelector` JSON (matchLabels + matchExpressions), as PDBs use.
    pub fn from_json(sel: &Value) -> Self {
        let mut reqs = vec![];
        if let Some(m) = sel.get("matchLabels").and_then(Value::as_object) {
            for (k, v) in m {
                reqs.push((k.clone(), Op::Eq(v.as_str().unwrap_or("").to_string())));
            }
        }
        if let Some(exprs) = sel.get("matchExpressions").and_then(Value::as_array) {
            for e in exprs {
                let key = e.get("key").and_then(Value::as_str).unwrap_or("").to_string();
                let vals: Vec<String> = e
                    .get("values")
                    .and_then(Value::as_array)
                    .map(|a| a.iter().filter_map(|x| x.as_str().map(String::from)).collect())
                    .unwrap_or_default();
                let op = match e.get("operator").and_then(Value::as_str).unwrap_or("") {
                    "In" => Op::In(vals),
                    "NotIn" => Op::NotIn(vals),
                    "Exists" => Op::Exists,
                    _ => Op::NotExists,
                };
                reqs.push((key, op));
            }
        }
        LabelSelector(reqs)
    }

    /// Whether the object's labels satisfy every requirement.
    pub fn matches(&self, obj: &Value) -> bool {
        if self.0.is_empty() {
            return true;
        }
        let labels = meta::labels(obj);
        self.0.iter().all(|(k, op)| {
            let v = labels.get(k).and_then(Value::as_str);
            match op {
                Op::Eq(x) => v == Some(x.as_str()),
                Op::NotEq(x) => v != Some(x.as_str()),
                Op::In(xs) => v.is_some_and(|v| xs.iter().any(|x| x == v)),
                Op::NotIn(xs) => v.is_none_or(|v| !xs.iter().any(|x| x == v)),
                Op::Exists => v.is_some(),
                Op::NotExists => v.is_none(),
            }
        })
    }

    /// True when there are no requirements.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// A parsed field selector: `path=value`, `path==value`, `path!=value`, comma-separated.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FieldSelector(Vec<(String, bool, String)>);

/// The string value at a dotted path, "" when absent (as the apiserver compares).
pub fn field_value(obj: &Value, path: &str) -> String {
    let mut cur = obj;
    for seg in path.split('.') {
        match cur.get(seg) {
            Some(v) => cur = v,
            None => return String::new(),
        }
    }
    match cur {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

impl FieldSelector {
    /// Parse a field selector.
    pub fn parse(s: &str) -> Result<Self, String> {
        let mut reqs = vec![];
        if s.trim().is_empty() {
            return Ok(FieldSelector(reqs));
        }
        for part in s.split(',') {
            let p = part.trim();
            let (k, eq, v) = if let Some((k, v)) = p.split_once("!=") {
                (k, false, v)
            } else if let Some((k, v)) = p.split_once("==") {
                (k, true, v)
            } else if let Some((k, v)) = p.split_once('=') {
                (k, true, v)
            } else {
                return Err(format!("invalid selector: '{s}'; can't understand '{p}'"));
            };
            let k = k.trim();
            if k.is_empty()
                || !k
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
            {
                return Err(format!("invalid selector: '{s}'; can't understand '{p}'"));
            }
            reqs.push((k.to_string(), eq, v.trim().to_string()));
        }
        Ok(FieldSelector(reqs))
    }

    /// Whether the object satisfies every requirement.
    pub fn matches(&self, obj: &Value) -> bool {
        self.0.iter().all(|(k, eq, v)| (field_value(obj, k) == *v) == *eq)
    }

    /// True when there are no requirements.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Reject fields the apiserver cannot select on for this kind, with its wording: kinds
    /// with their own field-label conversion say `field label not supported`, the rest list
    /// the two metadata fields every kind supports. Events, whose two views select on many
    /// fields, are not checked.
    pub fn check_supported(&self, info: &crate::registry::ResourceInfo) -> Result<(), String> {
        const META: [&str; 2] = ["metadata.name", "metadata.namespace"];
        let own: Option<&[&str]> = match (info.group.as_str(), info.plural.as_str()) {
            (_, "events") if crate::events::is_event(info) => return Ok(()),
            ("", "pods") => Some(&[
                "spec.nodeName",
                "spec.restartPolicy",
                "spec.schedulerName",
                "spec.serviceAccountName",
                "spec.hostNetwork",
                "status.phase",
                "status.podIP",
                "status.podIPs",
                "status.nominatedNodeName",
            ]),
            ("", "secrets") => Some(&["type"]),
            ("", "namespaces") => Some(&["status.phase"]),
            ("", "nodes") => Some(&["spec.unschedulable"]),
            ("", "services") => Some(&["spec.clusterIP", "spec.type"]),
            ("certificates.k8s.io", _) => Some(&["spec.signerName"]),
            ("apps", "replicasets") => Some(&["status.replicas"]),
            _ if info.crd => Some(&[]),
            _ => None,
        };
        for (k, _, _) in &self.0 {
            if META.contains(&k.as_str()) || own.is_some_and(|o| o.contains(&k.as_str())) {
                continue;
            }
            return Err(match own {
                Some(_) => format!("field label not supported: {k}"),
                None => {
                    format!("\"{k}\" is not a known field selector: only \"metadata.name\", \"metadata.namespace\"")
                }
            });
        }
        Ok(())
    }
}

/// Both selectors of a list or watch request.
#[derive(Debug, Clone, Default)]
pub struct Selectors {
    /// Label selector.
    pub labels: LabelSelector,
    /// Field selector.
    pub fields: FieldSelector,
}

impl Selectors {
    /// Whether an object matches both.
    pub fn matches(&self, obj: &Value) -> bool {
        self.labels.matches(obj) && self.fields.matches(obj)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn label_ops() {
        let o = json!({"metadata": {"labels": {"app": "x", "tier": "web"}}});
        for (s, want) in [
            ("app=x", true),
            ("app==x", true),
            ("app!=x", false),
            ("app in (x,y)", true),
            ("app notin (x,y)", false),
            ("tier", true),
            ("!tier", false),
            ("!missing", true),
            ("app=x,tier in (db)", false),
        ] {
            assert_eq!(LabelSelector::parse(s).unwrap().matches(&o), want, "{s}");
        }
        assert!(LabelSelector::parse("a in x").is_err());
        assert!(LabelSelector::parse("=x").is_err());
    }

    #[test]
    fn field_ops() {
        let o = json!({"metadata": {"name": "a"}, "spec": {"nodeName": "n1", "replicas": 3}});
        assert!(FieldSelector::parse("metadata.name=a").unwrap().matches(&o));
        assert!(FieldSelector::parse("spec.nodeName!=n2").unwrap().matches(&o));
        assert!(FieldSelector::parse("spec.replicas=3").unwrap().matches(&o));
        assert!(FieldSelector::parse("status.phase=").unwrap().matches(&o));
        assert!(FieldSelector::parse("nonsense").is_err());
    }
}

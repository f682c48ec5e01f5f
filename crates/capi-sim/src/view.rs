//! Minimal, version-tolerant views of the CAPI objects the simulator reads.
//!
//! The product has its own typed API; the simulator deliberately reads raw JSON so that one
//! code path serves v1beta1 and v1beta2 (and the unconverted mix that "both served" produces).

use std::time::Duration;

use kube::api::DynamicObject;
use serde_json::Value;

use crate::crds::CapiVersions;

/// A reference to a provider object, normalised from either
/// v1beta1 `{apiVersion, kind, name, namespace}` or v1beta2 `{apiGroup, kind, name}`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct ObjRef {
    pub group: String,
    /// Only v1beta1 refs carry a version.
    pub version: Option<String>,
    pub kind: String,
    pub name: String,
    /// Only v1beta1 refs may carry a namespace; it must equal the referrer's.
    pub namespace: Option<String>,
}

impl ObjRef {
    /// Parses a ref; `None` if it is absent or lacks kind/name.
    pub fn parse(v: &Value) -> Option<Self> {
        let kind = v.get("kind")?.as_str()?.to_string();
        let name = v.get("name")?.as_str()?.to_string();
        if kind.is_empty() || name.is_empty() {
            return None;
        }
        let (group, version) = match v.get("apiVersion").and_then(Value::as_str) {
            Some(av) => match av.split_once('/') {
                Some((g, ver)) => (g.to_string(), Some(ver.to_string())),
                None => (String::new(), Some(av.to_string())),
            },
            None => (str_at(v, &["apiGroup"]).unwrap_or_default(), None),
        };
        let namespace = str_at(v, &["namespace"]).filter(|s| !s.is_empty());
        Some(ObjRef {
            group,
            version,
            kind,
            name,
            namespace,
        })
    }
}

/// Reads a string at a JSON path.
pub(crate) fn str_at(v: &Value, path: &[&str]) -> Option<String> {
    at(v, path)?.as_str().map(str::to_string)
}

/// Reads a bool at a JSON path (absent = false).
pub(crate) fn bool_at(v: &Value, path: &[&str]) -> bool {
    at(v, path).and_then(Value::as_bool).unwrap_or(false)
}

/// Navigates a JSON path.
pub(crate) fn at<'a>(v: &'a Value, path: &[&str]) -> Option<&'a Value> {
    path.iter().try_fold(v, |cur, key| cur.get(key))
}

/// Parses a Go `time.Duration` string such as `5m`, `1h30m`, `10s`, `250ms` or `0s`.
pub(crate) fn parse_go_duration(s: &str) -> Option<Duration> {
    let s = s.trim();
    if s == "0" {
        return Some(Duration::ZERO);
    }
    let mut total = 0f64;
    let mut rest = s;
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        if num_len == 0 {
            return None;
        }
        let value: f64 = rest[..num_len].parse().ok()?;
        rest = &rest[num_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let scale = match &rest[..unit_len] {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return None,
        };
        total += value * scale;
        rest = &rest[unit_len..];
    }
    Some(Duration::from_secs_f64(total))
}

/// What the Machine controller needs from a Machine, in either API version.
#[derive(Clone, Debug)]
pub(crate) struct MachineView {
    pub name: String,
    pub namespace: String,
    pub deleting: bool,
    pub cluster_name: String,
    pub config_ref: Option<ObjRef>,
    pub data_secret_name: Option<String>,
    pub infra_ref: Option<ObjRef>,
    pub provider_id: Option<String>,
    pub drain_timeout: Option<Duration>,
    pub node_ref_name: Option<String>,
    pub status: Value,
    pub spec: Value,
}

impl MachineView {
    pub fn new(obj: &DynamicObject) -> Self {
        let spec = obj.data.get("spec").cloned().unwrap_or(Value::Null);
        let status = obj.data.get("status").cloned().unwrap_or(Value::Null);
        let v1b2_drain = at(&spec, &["deletion", "nodeDrainTimeoutSeconds"])
            .and_then(Value::as_u64)
            .map(Duration::from_secs);
        let v1b1_drain = str_at(&spec, &["nodeDrainTimeout"]).and_then(|s| parse_go_duration(&s));
        MachineView {
            name: obj.metadata.name.clone().unwrap_or_default(),
            namespace: obj.metadata.namespace.clone().unwrap_or_default(),
            deleting: obj.metadata.deletion_timestamp.is_some(),
            cluster_name: str_at(&spec, &["clusterName"]).unwrap_or_default(),
            config_ref: at(&spec, &["bootstrap", "configRef"]).and_then(ObjRef::parse),
            data_secret_name: str_at(&spec, &["bootstrap", "dataSecretName"]).filter(|s| !s.is_empty()),
            infra_ref: at(&spec, &["infrastructureRef"]).and_then(ObjRef::parse),
            provider_id: str_at(&spec, &["providerID"]).filter(|s| !s.is_empty()),
            drain_timeout: v1b2_drain.or(v1b1_drain),
            node_ref_name: str_at(&status, &["nodeRef", "name"]).filter(|s| !s.is_empty()),
            status,
            spec,
        }
    }
}

/// The Machine/Cluster `status` readiness fields for the spoken API version.
pub(crate) fn status_bool(status: &Value, versions: CapiVersions, v1b1: &str, v1b2: &str) -> bool {
    if versions.is_v1beta2() {
        bool_at(status, &["initialization", v1b2])
    } else {
        bool_at(status, &[v1b1])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn parses_both_ref_shapes() {
        let v1 = ObjRef::parse(&json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1",
            "kind": "LibvirtMachine", "name": "m", "namespace": "ns"
        }))
        .unwrap();
        assert_eq!(v1.group, "infrastructure.cluster.x-k8s.io");
        assert_eq!(v1.version.as_deref(), Some("v1alpha1"));
        assert_eq!(v1.namespace.as_deref(), Some("ns"));
        let v2 = ObjRef::parse(&json!({
            "apiGroup": "bootstrap.cluster.x-k8s.io", "kind": "IgnitionConfig", "name": "c"
        }))
        .unwrap();
        assert_eq!(v2.group, "bootstrap.cluster.x-k8s.io");
        assert_eq!(v2.version, None);
        assert_eq!(v2.name, "c");
        assert!(ObjRef::parse(&json!({"kind": "X"})).is_none());
    }

    #[test]
    fn go_durations() {
        assert_eq!(parse_go_duration("5m"), Some(Duration::from_secs(300)));
        assert_eq!(parse_go_duration("1h30m"), Some(Duration::from_secs(5400)));
        assert_eq!(parse_go_duration("250ms"), Some(Duration::from_millis(250)));
        assert_eq!(parse_go_duration("0s"), Some(Duration::ZERO));
        assert_eq!(parse_go_duration("1.5s"), Some(Duration::from_millis(1500)));
        assert_eq!(parse_go_duration("abc"), None);
        assert_eq!(parse_go_duration("5"), None);
        assert_eq!(parse_go_duration(""), None);
    }

    #[test]
    fn machine_view_reads_v1beta2_timeouts() {
        let obj: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
            "metadata": {"name": "m", "namespace": "ns"},
            "spec": {"clusterName": "c",
                     "bootstrap": {"dataSecretName": "s"},
                     "infrastructureRef": {"apiGroup": "g", "kind": "K", "name": "m"},
                     "deletion": {"nodeDrainTimeoutSeconds": 7}}
        }))
        .unwrap();
        let m = MachineView::new(&obj);
        assert_eq!(m.drain_timeout, Some(Duration::from_secs(7)));
        assert_eq!(m.data_secret_name.as_deref(), Some("s"));
        assert!(m.config_ref.is_none());
        assert_eq!(m.infra_ref.unwrap().kind, "K");
    }
}

//! The test CRDs: `Gadget` (structural schema with required fields, an enum, a pattern,
//! bounds, a list-map, a default, CEL rules including a transition rule, and a status
//! subresource) and `Plain` (no subresources, where every non-metadata change bumps
//! generation).

use serde_json::{Value, json};

pub const GROUP: &str = "diff.caplv.test";

fn spec_schema() -> Value {
    json!({
        "type": "object",
        "required": ["size", "mode"],
        "x-kubernetes-validations": [
            {"rule": "!has(self.low) || !has(self.high) || self.low <= self.high", "message": "low must not exceed high"}
        ],
        "properties": {
            "size": {"type": "integer", "minimum": 1, "maximum": 10},
            "mode": {"type": "string", "enum": ["fast", "slow"]},
            "code": {"type": "string", "pattern": "^[a-z]{3}$"},
            "priority": {"type": "integer", "default": 5},
            "zone": {"type": "string", "x-kubernetes-validations": [{"rule": "self == oldSelf", "message": "zone is immutable"}]},
            "low": {"type": "integer"},
            "high": {"type": "integer"},
            "tags": {"type": "array", "maxItems": 2, "items": {"type": "string", "maxLength": 5}},
            "ports": {
                "type": "array",
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["name"],
                "items": {
                    "type": "object",
                    "required": ["name"],
                    "properties": {"name": {"type": "string"}, "port": {"type": "integer"}}
                }
            }
        }
    })
}

fn crd(kind: &str, plural: &str, status_subresource: bool) -> Value {
    let mut version = json!({
        "name": "v1",
        "served": true,
        "storage": true,
        "schema": {"openAPIV3Schema": {
            "type": "object",
            "properties": {
                "spec": spec_schema(),
                "status": {"type": "object", "properties": {
                    "phase": {"type": "string"},
                    "observedGeneration": {"type": "integer"}
                }}
            }
        }}
    });
    if status_subresource {
        version["subresources"] = json!({"status": {}});
    }
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.{GROUP}")},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {"kind": kind, "plural": plural, "singular": kind.to_lowercase(), "listKind": format!("{kind}List")},
            "versions": [version]
        }
    })
}

/// Both test CRDs.
pub fn all() -> Vec<Value> {
    vec![crd("Gadget", "gadgets", true), crd("Plain", "plains", false)]
}

/// A valid Gadget body.
pub fn gadget(name: &str, spec: Value) -> Value {
    json!({"apiVersion": format!("{GROUP}/v1"), "kind": "Gadget", "metadata": {"name": name}, "spec": spec})
}

/// A valid Plain body.
pub fn plain(name: &str, spec: Value) -> Value {
    json!({"apiVersion": format!("{GROUP}/v1"), "kind": "Plain", "metadata": {"name": name}, "spec": spec})
}

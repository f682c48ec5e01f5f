//! Pruning, as apiextensions' `structuralpruning` does it: drop object
//! fields the schema does not specify, unless the node preserves unknown
//! fields or describes a map (`additionalProperties`).

use super::defaults::is_root_meta;
use super::node::{Additional, Node};
use serde_json::Value;

/// Prune `v` in place against `node`. `root` keeps apiVersion/kind/metadata.
pub(crate) fn apply(v: &mut Value, node: &Node, root: bool) {
    match v {
        Value::Object(obj) => {
            let keep_meta = root || node.embedded;
            obj.retain(|k, _| {
                (keep_meta && is_root_meta(k))
                    || node.properties.contains_key(k)
                    || node.preserve_unknown
                    || matches!(node.additional, Some(Additional::Schema(_) | Additional::Any(true)))
            });
            for (k, child) in obj.iter_mut() {
                if keep_meta && is_root_meta(k) && !node.properties.contains_key(k) {
                    continue;
                }
                if root && is_root_meta(k) {
                    continue;
                }
                if let Some(n) = node.properties.get(k) {
                    apply(child, n, false);
                } else if let Some(Additional::Schema(n)) = &node.additional {
                    apply(child, n, false);
                }
                // `additionalProperties: true` / preserved unknown fields:
                // kept as they are, like the apiserver.
            }
        }
        Value::Array(items) => {
            if let Some(item_node) = node.items.as_deref() {
                for item in items.iter_mut() {
                    apply(item, item_node, false);
                }
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::super::structural::Parser;
    use super::*;
    use serde_json::json;

    fn node(schema: Value) -> Node {
        let (n, errs) = Parser::parse_root(&schema, "s");
        assert!(errs.is_empty(), "{errs:?}");
        n
    }

    #[test]
    fn prunes_unknown_keeps_meta_maps_and_preserved() {
        let n = node(
            json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {
                "a": {"type": "string"},
                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true,
                         "properties": {"inner": {"type": "object", "properties": {"x": {"type": "string"}}}}},
                "tmpl": {"type": "object", "x-kubernetes-embedded-resource": true,
                         "properties": {"spec": {"type": "object", "properties": {"y": {"type": "string"}}}}},
                "items": {"type": "array", "items": {"type": "object", "properties": {"k": {"type": "string"}}}},
                "opaque": {"type": "object"},
                "closed": {"type": "object", "additionalProperties": false},
                "open": {"type": "object", "additionalProperties": true}
            }}}}),
        );
        let mut v = json!({"apiVersion": "x/v1", "kind": "K", "metadata": {"name": "n", "junk": 1},
            "status": {"x": 1},
            "spec": {"a": "1", "b": 2, "labels": {"l": "v"},
                "free": {"any": {"deep": 1}, "inner": {"x": "1", "gone": 2}},
                "tmpl": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"y": "1", "z": 2}, "other": 1},
                "items": [{"k": "1", "drop": true}],
                "opaque": {"anything": 1}, "closed": {"x": 1}, "open": {"y": {"z": 1}}}});
        apply(&mut v, &n, true);
        assert_eq!(
            v,
            json!({"apiVersion": "x/v1", "kind": "K", "metadata": {"name": "n", "junk": 1},
                "spec": {"a": "1", "labels": {"l": "v"},
                    "free": {"any": {"deep": 1}, "inner": {"x": "1"}},
                    "tmpl": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"y": "1"}},
                    "items": [{"k": "1"}],
                    "opaque": {}, "closed": {}, "open": {"y": {"z": 1}}}})
        );
    }
}

//! Defaulting, as apiextensions' `structuraldefaulting` does it: first drop
//! `null`s of non-nullable fields that have no default, then fill absent
//! (or non-nullable `null`) fields from `default`, descending into what
//! was filled so that nested defaults apply too.

use super::node::{Additional, Node};
use serde_json::Value;

/// Default `v` in place against `node`. `root` skips apiVersion/kind/metadata.
pub(crate) fn apply(v: &mut Value, node: &Node, root: bool) {
    match v {
        Value::Object(obj) => {
            // Nulls of non-nullable fields without a default are pruned;
            // with a default they are replaced below.
            obj.retain(|k, child| {
                if !child.is_null() || (root && is_root_meta(k)) {
                    return true;
                }
                match node.field(k) {
                    Some(n) => n.nullable || n.default.is_some(),
                    None => true,
                }
            });
            for (name, prop) in &node.properties {
                if root && is_root_meta(name) {
                    continue;
                }
                let Some(d) = &prop.default else { continue };
                let missing = match obj.get(name) {
                    None => true,
                    Some(Value::Null) => !prop.nullable,
                    Some(_) => false,
                };
                if missing {
                    obj.insert(name.clone(), d.clone());
                }
            }
            for (k, child) in obj.iter_mut() {
                if root && is_root_meta(k) {
                    continue;
                }
                if let Some(n) = node.properties.get(k) {
                    apply(child, n, false);
                } else if let Some(Additional::Schema(n)) = &node.additional {
                    apply(child, n, false);
                }
            }
        }
        Value::Array(items) => {
            let Some(item_node) = node.items.as_deref() else { return };
            // Null items are never removed (that would shift indexes);
            // without a default they fail validation instead.
            if !item_node.nullable
                && let Some(d) = &item_node.default
            {
                for item in items.iter_mut() {
                    if item.is_null() {
                        *item = d.clone();
                    }
                }
            }
            for item in items.iter_mut() {
                apply(item, item_node, false);
            }
        }
        _ => {}
    }
}

/// Root fields the schema never governs.
pub(crate) fn is_root_meta(k: &str) -> bool {
    matches!(k, "apiVersion" | "kind" | "metadata")
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
    fn fills_absent_and_nested_defaults() {
        let n = node(
            json!({"type": "object", "properties": {"spec": {"type": "object", "default": {}, "properties": {
                "replicas": {"type": "integer", "default": 1},
                "mode": {"type": "string", "nullable": true, "default": "a"},
                "strat": {"type": "object", "default": {"kind": "x"}, "properties": {
                    "kind": {"type": "string"}, "max": {"type": "integer", "default": 3}}},
                "list": {"type": "array", "items": {"type": "object", "properties": {"p": {"type": "integer", "default": 7}}}},
                "map": {"type": "object", "additionalProperties": {"type": "object", "properties": {"q": {"type": "string", "default": "z"}}}}
            }}}}),
        );
        let mut v = json!({"apiVersion": "v1", "kind": "K", "metadata": null,
            "spec": {"mode": null, "list": [{}, {"p": 2}], "map": {"a": {}}}});
        apply(&mut v, &n, true);
        assert_eq!(
            v,
            json!({"apiVersion": "v1", "kind": "K", "metadata": null, "spec": {
                "replicas": 1, "mode": null, "strat": {"kind": "x", "max": 3},
                "list": [{"p": 7}, {"p": 2}], "map": {"a": {"q": "z"}}}})
        );
        let mut empty = json!({});
        apply(&mut empty, &n, true);
        assert_eq!(empty["spec"]["replicas"], json!(1));
    }

    #[test]
    fn non_nullable_nulls_are_dropped_or_defaulted() {
        let n = node(json!({"type": "object", "properties": {
            "a": {"type": "string"}, "b": {"type": "string", "default": "d"},
            "c": {"type": "string", "nullable": true},
            "l": {"type": "array", "items": {"type": "string"}}}}));
        let mut v = json!({"a": null, "b": null, "c": null, "l": ["x", null]});
        apply(&mut v, &n, true);
        assert_eq!(v, json!({"b": "d", "c": null, "l": ["x", null]}));
    }
}

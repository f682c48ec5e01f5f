//! Parsing `openAPIV3Schema` into a [`Node`] tree while enforcing the
//! apiserver's structural-schema rules, so that a CRD the real apiserver
//! would refuse is refused here too (with every problem listed at once).
//!
//! One deliberate leniency: a node with no `type` is accepted if it carries
//! `anyOf`/`oneOf`, because kube-derive emits exactly that for
//! `#[serde(untagged)]` enums of scalars (`anyOf: [{format: int64}, {}]`)
//! and the project's own CRDs are generated that way.

use super::cel::{self, RuleSite};
use super::errors::{BadValue, FieldError};
use super::node::{Additional, Checks, ListType, Node, Ty};
use super::path;
use regex::Regex;
use serde_json::{Map, Value};

/// Keywords apiextensions/v1 does not support at all.
const UNSUPPORTED: [(&str, &str); 7] = [
    ("$ref", "$ref is not supported"),
    ("$schema", "$schema is not supported"),
    ("id", "id is not supported"),
    ("definitions", "definitions are not supported"),
    ("patternProperties", "patternProperties is not supported"),
    ("dependencies", "dependencies is not supported"),
    ("additionalItems", "additionalItems is not supported"),
];

/// Deepest schema accepted (the apiserver's JSON decoding caps nesting too).
const MAX_DEPTH: usize = 64;

/// Where in the schema a node is, which changes what it may contain.
#[derive(Clone, Copy)]
struct Pos {
    root: bool,
    /// Inside `allOf`/`anyOf`/`oneOf`/`not`: value validations only.
    junctor: bool,
    /// Inside a junctor of an `x-kubernetes-int-or-string` node, where
    /// `type: integer` / `type: string` branches are allowed.
    int_or_string_junctor: bool,
    /// `oldSelf` can be found for values here.
    correlatable: bool,
    depth: usize,
}

/// Parses schemas, collecting every problem.
pub(crate) struct Parser {
    pub errs: Vec<FieldError>,
}

impl Parser {
    /// Parse the root schema at `schema_path`.
    pub(crate) fn parse_root(v: &Value, schema_path: &str) -> (Node, Vec<FieldError>) {
        let mut p = Parser { errs: Vec::new() };
        let pos = Pos {
            root: true,
            junctor: false,
            int_or_string_junctor: false,
            correlatable: true,
            depth: 0,
        };
        let node = p.node(v, schema_path, pos);
        (node, p.errs)
    }

    fn node(&mut self, v: &Value, at: &str, pos: Pos) -> Node {
        if pos.depth > MAX_DEPTH {
            self.errs.push(FieldError::forbidden(
                at,
                &format!("schema nesting exceeds {MAX_DEPTH}"),
            ));
            return Node::default();
        }
        let obj = match v {
            Value::Object(o) => o,
            // `true` is JSON Schema for "anything"; only meaningful in junctors.
            Value::Bool(true) if pos.junctor => return Node::default(),
            other => {
                self.errs.push(FieldError::invalid(
                    at,
                    &BadValue::json(other),
                    "must be a schema object",
                ));
                return Node::default();
            }
        };
        let mut node = Node::default();
        self.unsupported(obj, at);
        self.flags(obj, at, pos, &mut node);
        self.type_and_shape(obj, at, pos, &mut node);
        node.checks = self.checks(obj, at, pos);
        self.children(obj, at, pos, &mut node);
        if !pos.junctor {
            // Branches are checked against this node (nested junctors too).
            self.completeness(&node.checks, at, &node, at);
        }
        self.list_type(obj, at, &mut node);
        if pos.root {
            self.root_rules(obj, at, &node);
        }
        if let Some(raw) = obj.get("x-kubernetes-validations") {
            if pos.junctor {
                self.errs.push(FieldError::forbidden(
                    &path::child(at, "x-kubernetes-validations"),
                    "must be empty to be structural",
                ));
            } else {
                let site = RuleSite {
                    schema_path: at,
                    node: &node,
                    correlatable: pos.correlatable,
                };
                node.rules = cel::compile_rules(raw, &site, &mut self.errs);
            }
        }
        if let Some(d) = obj.get("default") {
            if pos.junctor {
                self.errs.push(FieldError::forbidden(
                    &path::child(at, "default"),
                    "must be undefined to be structural",
                ));
            } else if pos.root {
                self.errs.push(FieldError::forbidden(
                    &path::child(at, "default"),
                    "must not be set at the root",
                ));
            } else {
                node.default = Some(d.clone());
            }
        }
        node.compute_subtree_rules();
        node
    }

    fn unsupported(&mut self, obj: &Map<String, Value>, at: &str) {
        for (k, msg) in UNSUPPORTED {
            if obj.contains_key(k) {
                self.errs.push(FieldError::forbidden(&path::child(at, k), msg));
            }
        }
        if obj.get("uniqueItems") == Some(&Value::Bool(true)) {
            self.errs.push(FieldError::forbidden(
                &path::child(at, "uniqueItems"),
                "uniqueItems cannot be set to true since the runtime complexity becomes quadratic",
            ));
        }
    }

    fn flags(&mut self, obj: &Map<String, Value>, at: &str, pos: Pos, node: &mut Node) {
        let flag = |k: &str| obj.get(k).and_then(Value::as_bool);
        node.nullable = flag("nullable").unwrap_or(false);
        node.int_or_string = flag("x-kubernetes-int-or-string").unwrap_or(false);
        node.embedded = flag("x-kubernetes-embedded-resource").unwrap_or(false);
        match obj.get("x-kubernetes-preserve-unknown-fields") {
            None | Some(Value::Null) => {}
            Some(Value::Bool(true)) => node.preserve_unknown = true,
            Some(other) => self.errs.push(FieldError::invalid(
                &path::child(at, "x-kubernetes-preserve-unknown-fields"),
                &BadValue::json(other),
                "must be true or undefined",
            )),
        }
        if pos.junctor {
            for (k, set, msg) in [
                ("nullable", node.nullable, "must be false to be structural"),
                (
                    "x-kubernetes-preserve-unknown-fields",
                    node.preserve_unknown,
                    "must be false to be structural",
                ),
                (
                    "x-kubernetes-embedded-resource",
                    node.embedded,
                    "must be false to be structural",
                ),
                (
                    "x-kubernetes-int-or-string",
                    node.int_or_string,
                    "must be false to be structural",
                ),
            ] {
                if set {
                    self.errs.push(FieldError::forbidden(&path::child(at, k), msg));
                }
            }
            for k in [
                "description",
                "additionalProperties",
                "x-kubernetes-list-type",
                "x-kubernetes-map-type",
            ] {
                if obj.contains_key(k) {
                    let msg = if k == "description" {
                        "must be empty to be structural"
                    } else {
                        "must be undefined to be structural"
                    };
                    self.errs.push(FieldError::forbidden(&path::child(at, k), msg));
                }
            }
        }
    }

    fn type_and_shape(&mut self, obj: &Map<String, Value>, at: &str, pos: Pos, node: &mut Node) {
        let type_path = path::child(at, "type");
        match obj.get("type") {
            None | Some(Value::Null) => {}
            Some(Value::String(s)) if s.is_empty() => {}
            Some(Value::String(s)) => match Ty::parse(s) {
                Some(t) => node.ty = Some(t),
                None => self.errs.push(FieldError::not_supported(
                    &type_path,
                    &BadValue::str(s),
                    &["array", "boolean", "integer", "number", "object", "string"].map(String::from),
                )),
            },
            Some(other) => {
                self.errs.push(FieldError::invalid(
                    &type_path,
                    &BadValue::json(other),
                    "must be a string",
                ));
            }
        }
        if pos.junctor {
            let allowed = pos.int_or_string_junctor && matches!(node.ty, Some(Ty::Integer | Ty::String));
            if node.ty.is_some() && !allowed {
                self.errs
                    .push(FieldError::forbidden(&type_path, "must be empty to be structural"));
            }
            return;
        }
        if pos.root {
            match node.ty {
                Some(Ty::Object) => {}
                None => self
                    .errs
                    .push(FieldError::required(&type_path, "must not be empty at the root")),
                Some(t) => self.errs.push(FieldError::invalid(
                    &type_path,
                    &BadValue::str(t.name()),
                    "must be object at the root",
                )),
            }
            return;
        }
        if node.int_or_string && node.ty.is_some() {
            self.errs.push(FieldError::invalid(
                &type_path,
                &BadValue::str(node.type_name()),
                "must be empty if x-kubernetes-int-or-string is true",
            ));
        }
        let lenient_union = obj.contains_key("anyOf") || obj.contains_key("oneOf");
        if node.ty.is_none() && !node.int_or_string && !node.preserve_unknown && !lenient_union {
            self.errs.push(FieldError::required(
                &type_path,
                "must not be empty for specified object fields",
            ));
        }
        if node.embedded && node.ty != Some(Ty::Object) {
            self.errs.push(FieldError::invalid(
                &type_path,
                &BadValue::str(node.type_name()),
                "must be object if x-kubernetes-embedded-resource is true",
            ));
        }
        if node.embedded && !node.preserve_unknown && !obj.contains_key("properties") {
            self.errs.push(FieldError::required(
                &path::child(at, "x-kubernetes-preserve-unknown-fields"),
                "must be true if x-kubernetes-embedded-resource is true and properties are empty",
            ));
        }
    }

    fn checks(&mut self, obj: &Map<String, Value>, at: &str, pos: Pos) -> Checks {
        let mut c = Checks::default();
        if let Some(r) = obj.get("required") {
            match r.as_array() {
                Some(items) => c.required = items.iter().filter_map(|s| s.as_str().map(String::from)).collect(),
                None => self.errs.push(FieldError::invalid(
                    &path::child(at, "required"),
                    &BadValue::json(r),
                    "must be a list of strings",
                )),
            }
        }
        if let Some(e) = obj.get("enum") {
            match e.as_array() {
                Some(items) => c.enum_values = Some(items.clone()),
                None => self.errs.push(FieldError::invalid(
                    &path::child(at, "enum"),
                    &BadValue::json(e),
                    "must be a list",
                )),
            }
        }
        if let Some(p) = obj.get("pattern") {
            let pp = path::child(at, "pattern");
            match p.as_str() {
                Some(s) => match Regex::new(s) {
                    Ok(re) => c.pattern = Some((s.to_string(), re)),
                    Err(e) => self.errs.push(FieldError::invalid(
                        &pp,
                        &BadValue::str(s),
                        &format!("must be a valid regular expression, but isn't: {e}"),
                    )),
                },
                None => self
                    .errs
                    .push(FieldError::invalid(&pp, &BadValue::json(p), "must be a string")),
            }
        }
        c.format = obj.get("format").and_then(Value::as_str).map(String::from);
        c.minimum = self.number(obj, at, "minimum");
        c.maximum = self.number(obj, at, "maximum");
        c.multiple_of = self.number(obj, at, "multipleOf");
        c.exclusive_minimum = obj.get("exclusiveMinimum").and_then(Value::as_bool).unwrap_or(false);
        c.exclusive_maximum = obj.get("exclusiveMaximum").and_then(Value::as_bool).unwrap_or(false);
        c.min_length = self.count(obj, at, "minLength");
        c.max_length = self.count(obj, at, "maxLength");
        c.min_items = self.count(obj, at, "minItems");
        c.max_items = self.count(obj, at, "maxItems");
        c.min_properties = self.count(obj, at, "minProperties");
        c.max_properties = self.count(obj, at, "maxProperties");
        let inner = Pos {
            root: false,
            junctor: true,
            int_or_string_junctor: pos.int_or_string_junctor
                || obj
                    .get("x-kubernetes-int-or-string")
                    .and_then(Value::as_bool)
                    .unwrap_or(false),
            correlatable: false,
            depth: pos.depth + 1,
        };
        for (k, dst) in [
            ("allOf", &mut c.all_of),
            ("anyOf", &mut c.any_of),
            ("oneOf", &mut c.one_of),
        ] {
            let Some(raw) = obj.get(k) else { continue };
            let kp = path::child(at, k);
            match raw.as_array() {
                Some(items) => {
                    for (i, item) in items.iter().enumerate() {
                        dst.push(self.node(item, &path::index(&kp, i), inner));
                    }
                }
                None => self.errs.push(FieldError::invalid(
                    &kp,
                    &BadValue::json(raw),
                    "must be a list of schemas",
                )),
            }
        }
        if let Some(n) = obj.get("not") {
            c.not = Some(Box::new(self.node(n, &path::child(at, "not"), inner)));
        }
        c
    }

    /// Every property or `items` named inside a junctor must also be
    /// specified outside of it (structural-schema completeness).
    fn completeness(&mut self, checks: &Checks, junctor_at: &str, outer: &Node, outer_at: &str) {
        let branches = [
            ("allOf", &checks.all_of),
            ("anyOf", &checks.any_of),
            ("oneOf", &checks.one_of),
        ];
        for (k, list) in branches {
            for (i, branch) in list.iter().enumerate() {
                let bp = path::index(&path::child(junctor_at, k), i);
                self.branch_completeness(branch, &bp, outer, outer_at);
            }
        }
        if let Some(not) = &checks.not {
            self.branch_completeness(not, &path::child(junctor_at, "not"), outer, outer_at);
        }
    }

    fn branch_completeness(&mut self, branch: &Node, branch_at: &str, outer: &Node, outer_at: &str) {
        for (k, sub) in &branch.properties {
            let inner_at = path::key(&path::child(branch_at, "properties"), k);
            let outer_child_at = path::key(&path::child(outer_at, "properties"), k);
            match outer.properties.get(k) {
                Some(o) => self.branch_completeness(sub, &inner_at, o, &outer_child_at),
                None => self.errs.push(FieldError::required(
                    &outer_child_at,
                    &format!("because it is defined in {inner_at}"),
                )),
            }
        }
        if let Some(items) = &branch.items {
            let inner_at = path::child(branch_at, "items");
            let outer_items_at = path::child(outer_at, "items");
            match &outer.items {
                Some(o) => self.branch_completeness(items, &inner_at, o, &outer_items_at),
                None => self.errs.push(FieldError::required(
                    &outer_items_at,
                    &format!("because it is defined in {inner_at}"),
                )),
            }
        }
        self.completeness(&branch.checks, branch_at, outer, outer_at);
    }

    fn number(&mut self, obj: &Map<String, Value>, at: &str, k: &str) -> Option<f64> {
        let v = obj.get(k)?;
        match v.as_f64() {
            Some(f) => Some(f),
            None if v.is_null() => None,
            None => {
                self.errs.push(FieldError::invalid(
                    &path::child(at, k),
                    &BadValue::json(v),
                    "must be a number",
                ));
                None
            }
        }
    }

    fn count(&mut self, obj: &Map<String, Value>, at: &str, k: &str) -> Option<u64> {
        let v = obj.get(k)?;
        match v
            .as_u64()
            .or_else(|| v.as_f64().filter(|f| *f >= 0.0 && f.fract() == 0.0).map(|f| f as u64))
        {
            Some(n) => Some(n),
            None if v.is_null() => None,
            None => {
                self.errs.push(FieldError::invalid(
                    &path::child(at, k),
                    &BadValue::json(v),
                    "must be a non-negative integer",
                ));
                None
            }
        }
    }

    fn children(&mut self, obj: &Map<String, Value>, at: &str, pos: Pos, node: &mut Node) {
        let child_pos = Pos {
            root: false,
            int_or_string_junctor: false,
            depth: pos.depth + 1,
            ..pos
        };
        if let Some(props) = obj.get("properties") {
            let pp = path::child(at, "properties");
            match props.as_object() {
                Some(props) => {
                    for (name, sub) in props {
                        let sub_node = self.node(sub, &path::key(&pp, name), child_pos);
                        node.properties.insert(name.clone(), sub_node);
                    }
                }
                None => self
                    .errs
                    .push(FieldError::invalid(&pp, &BadValue::json(props), "must be an object")),
            }
        }
        if let Some(ap) = obj.get("additionalProperties") {
            let app = path::child(at, "additionalProperties");
            if obj.contains_key("properties") && !pos.junctor {
                self.errs.push(FieldError::forbidden(
                    &app,
                    "additionalProperties and properties are mutual exclusive",
                ));
            }
            node.additional = match ap {
                Value::Bool(b) => Some(Additional::Any(*b)),
                other => Some(Additional::Schema(Box::new(self.node(other, &app, child_pos)))),
            };
        }
        if let Some(items) = obj.get("items") {
            let ip = path::child(at, "items");
            if items.is_array() {
                self.errs.push(FieldError::forbidden(
                    &ip,
                    "items must be a schema object and not an array",
                ));
            } else {
                let list_type = obj.get("x-kubernetes-list-type").and_then(Value::as_str);
                let item_pos = Pos {
                    correlatable: pos.correlatable && list_type == Some("map"),
                    ..child_pos
                };
                node.items = Some(Box::new(self.node(items, &ip, item_pos)));
            }
        } else if node.ty == Some(Ty::Array) && !pos.junctor {
            self.errs
                .push(FieldError::required(&path::child(at, "items"), "must be specified"));
        }
    }

    fn list_type(&mut self, obj: &Map<String, Value>, at: &str, node: &mut Node) {
        let ltp = path::child(at, "x-kubernetes-list-type");
        let keys_path = path::child(at, "x-kubernetes-list-map-keys");
        let keys: Option<Vec<String>> = obj
            .get("x-kubernetes-list-map-keys")
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(|k| k.as_str().map(String::from)).collect());
        match obj.get("x-kubernetes-list-type") {
            None | Some(Value::Null) => {
                if keys.is_some() {
                    self.errs.push(FieldError::forbidden(
                        &keys_path,
                        "must not be set if x-kubernetes-list-type is not map",
                    ));
                }
            }
            Some(lt) => {
                if node.ty != Some(Ty::Array) {
                    self.errs.push(FieldError::invalid(
                        &ltp,
                        &BadValue::json(lt),
                        "must only be used if type is array",
                    ));
                }
                match lt.as_str() {
                    Some("atomic") => node.list_type = Some(ListType::Atomic),
                    Some("set") => node.list_type = Some(ListType::Set),
                    Some("map") => match keys {
                        Some(keys) if !keys.is_empty() => {
                            if let Some(items) = &node.items
                                && let Some(bad) = keys.iter().find(|k| !items.properties.contains_key(*k))
                            {
                                self.errs.push(FieldError::invalid(
                                    &keys_path,
                                    &BadValue::str(bad),
                                    "entries must all be names of item properties",
                                ));
                            }
                            node.list_type = Some(ListType::Map(keys));
                        }
                        _ => self.errs.push(FieldError::required(
                            &keys_path,
                            "must not be empty if x-kubernetes-list-type is map",
                        )),
                    },
                    _ => self.errs.push(FieldError::not_supported(
                        &ltp,
                        &BadValue::json(lt),
                        &["atomic".into(), "set".into(), "map".into()],
                    )),
                }
            }
        }
        if let Some(mt) = obj.get("x-kubernetes-map-type")
            && !matches!(mt.as_str(), Some("granular" | "atomic"))
        {
            self.errs.push(FieldError::not_supported(
                &path::child(at, "x-kubernetes-map-type"),
                &BadValue::json(mt),
                &["granular".into(), "atomic".into()],
            ));
        }
    }

    /// The root may only constrain `metadata.name`/`metadata.generateName`.
    fn root_rules(&mut self, obj: &Map<String, Value>, at: &str, node: &Node) {
        if let Some(meta) = node.properties.get("metadata") {
            let mp = path::key(&path::child(at, "properties"), "metadata");
            let raw = obj.get("properties").and_then(|p| p.get("metadata"));
            let only_names = meta.properties.keys().all(|k| k == "name" || k == "generateName");
            let extra = raw.and_then(Value::as_object).is_some_and(|m| {
                m.keys()
                    .any(|k| !matches!(k.as_str(), "type" | "properties" | "description"))
            });
            if !only_names || extra {
                self.errs.push(FieldError::forbidden(
                    &mp,
                    "must not specify anything other than name and generateName, but metadata is implicitly specified",
                ));
            }
            if meta.ty.is_some_and(|t| t != Ty::Object) {
                self.errs.push(FieldError::invalid(
                    &path::child(&mp, "type"),
                    &BadValue::str(meta.type_name()),
                    "must be object",
                ));
            }
        }
    }
}

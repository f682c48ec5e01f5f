//! The compiled form of one schema node: the JSON schema parsed once at
//! CRD-compile time so that defaulting, pruning and validation never have
//! to re-interpret (or fail on) raw JSON.

use super::cel::Rule;
use regex::Regex;
use serde_json::Value;
use std::collections::BTreeMap;

/// The OpenAPI `type` of a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ty {
    Object,
    Array,
    String,
    Integer,
    Number,
    Boolean,
}

impl Ty {
    pub(crate) fn parse(s: &str) -> Option<Ty> {
        Some(match s {
            "object" => Ty::Object,
            "array" => Ty::Array,
            "string" => Ty::String,
            "integer" => Ty::Integer,
            "number" => Ty::Number,
            "boolean" => Ty::Boolean,
            _ => return None,
        })
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            Ty::Object => "object",
            Ty::Array => "array",
            Ty::String => "string",
            Ty::Integer => "integer",
            Ty::Number => "number",
            Ty::Boolean => "boolean",
        }
    }
}

/// `additionalProperties`: a schema for map values, or a bare bool.
#[derive(Debug, Clone)]
pub(crate) enum Additional {
    Any(bool),
    Schema(Box<Node>),
}

/// `x-kubernetes-list-type`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ListType {
    Atomic,
    Set,
    Map(Vec<String>),
}

/// Value validations: everything that checks a value without shaping it
/// (these are also all that `allOf`/`anyOf`/`oneOf`/`not` may carry).
#[derive(Debug, Clone, Default)]
pub(crate) struct Checks {
    pub required: Vec<String>,
    pub enum_values: Option<Vec<Value>>,
    pub pattern: Option<(String, Regex)>,
    pub format: Option<String>,
    pub minimum: Option<f64>,
    pub exclusive_minimum: bool,
    pub maximum: Option<f64>,
    pub exclusive_maximum: bool,
    pub multiple_of: Option<f64>,
    pub min_length: Option<u64>,
    pub max_length: Option<u64>,
    pub min_items: Option<u64>,
    pub max_items: Option<u64>,
    pub min_properties: Option<u64>,
    pub max_properties: Option<u64>,
    pub all_of: Vec<Node>,
    pub any_of: Vec<Node>,
    pub one_of: Vec<Node>,
    pub not: Option<Box<Node>>,
}

/// One schema node. Junctor branches are `Node`s too, with only `checks`
/// and `properties`/`items` (used to reach nested values) filled in.
#[derive(Debug, Clone, Default)]
pub(crate) struct Node {
    pub ty: Option<Ty>,
    pub nullable: bool,
    pub properties: BTreeMap<String, Node>,
    pub additional: Option<Additional>,
    pub items: Option<Box<Node>>,
    pub default: Option<Value>,
    pub preserve_unknown: bool,
    pub int_or_string: bool,
    pub embedded: bool,
    pub list_type: Option<ListType>,
    pub checks: Checks,
    pub rules: Vec<Rule>,
    /// This node or one below it has rules (see [`Node::has_rules`]).
    pub subtree_rules: bool,
}

impl Node {
    /// The schema for a value found under `key` of an object at this node.
    pub(crate) fn field(&self, key: &str) -> Option<&Node> {
        if let Some(n) = self.properties.get(key) {
            return Some(n);
        }
        match &self.additional {
            Some(Additional::Schema(n)) => Some(n),
            _ => None,
        }
    }

    /// Whether this node or anything below it declares CEL rules (so the
    /// validator can skip the CEL machinery entirely when none exist).
    pub(crate) fn has_rules(&self) -> bool {
        self.subtree_rules
    }

    /// Compute [`Node::subtree_rules`] once children and rules are parsed.
    pub(crate) fn compute_subtree_rules(&mut self) {
        self.subtree_rules = !self.rules.is_empty()
            || self.properties.values().any(Node::has_rules)
            || self.items.as_deref().is_some_and(Node::has_rules)
            || matches!(&self.additional, Some(Additional::Schema(n)) if n.has_rules());
    }

    /// The `type` string apiserver CEL errors print as the bad value
    /// (`Invalid value: "object": ...`); empty for int-or-string.
    pub(crate) fn type_name(&self) -> &'static str {
        self.ty.map(Ty::name).unwrap_or("")
    }
}

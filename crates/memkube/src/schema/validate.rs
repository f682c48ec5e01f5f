//! Validation of an object against its compiled schema: the OpenAPI value
//! validations (with go-openapi's messages, as kube-openapi reports them)
//! in one walk, then the CEL rules in a second walk unless a blocking
//! error was found (as the apiserver's `hasBlockingErr`), with update
//! ratcheting.
//!
//! Ratcheting (apiserver's `CRDValidationRatcheting`): on update, a value
//! that equals the stored value at the same path is not re-checked, so an
//! object stored under an older schema can still be updated elsewhere;
//! transition rules (those using `oldSelf`) still run there.

use super::cel::{self, Budget, EvalSite, Level};
use super::defaults::is_root_meta;
use super::errors::{BadValue, FieldError, FieldErrorKind, go_float, go_value};
use super::node::{Additional, Checks, ListType, Node, Ty};
use super::path;
use serde_json::{Map, Value};

/// The note the apiserver adds instead of running CEL rules when the
/// object already has a blocking error.
const CEL_SKIPPED: &str = "some validation rules were not checked because the object was invalid; correct the existing errors to complete validation";

/// Validate `v` against `node` like the apiserver: OpenAPI validation,
/// then (unless a Required/NotSupported/TypeInvalid/TooLong/TooMany error
/// blocks them) the CEL rules. Runs CEL, so call it on the big stack when
/// `node` has rules.
pub(crate) fn validate_value(v: &Value, node: &Node, old: Option<&Value>, path: &str, root: bool) -> Vec<FieldError> {
    let mut schema = Validator::new(Pass::Schema);
    schema.run(v, node, old, path, root);
    let mut errs = schema.errs;
    if node.has_rules() {
        let blocked = errs.iter().any(|e| {
            matches!(
                e.kind,
                FieldErrorKind::Required
                    | FieldErrorKind::NotSupported
                    | FieldErrorKind::TypeInvalid
                    | FieldErrorKind::TooLong
                    | FieldErrorKind::TooMany
            )
        });
        if blocked {
            errs.push(FieldError::invalid("", &BadValue::str("null"), CEL_SKIPPED));
        } else {
            let mut cel = Validator::new(Pass::Cel);
            cel.run(v, node, old, path, root);
            errs.append(&mut cel.cel_errs);
        }
    }
    errs
}

/// Which half of the validation a walk does.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pass {
    /// OpenAPI value validations.
    Schema,
    /// CEL rules only.
    Cel,
}

/// One walk over a value and its schema.
pub(crate) struct Validator {
    errs: Vec<FieldError>,
    cel_errs: Vec<FieldError>,
    budget: Budget,
    pass: Pass,
}

/// Where the walk is.
#[derive(Clone, Copy)]
struct At<'a> {
    path: &'a str,
    old: Option<&'a Value>,
    level: Level,
    /// Unchanged since `old`: schema errors are ratcheted away.
    ratchet: bool,
}

impl Validator {
    fn new(pass: Pass) -> Validator {
        Validator {
            errs: Vec::new(),
            cel_errs: Vec::new(),
            budget: Budget::new(),
            pass,
        }
    }

    fn run(&mut self, v: &Value, node: &Node, old: Option<&Value>, path: &str, root: bool) {
        let at = At {
            path,
            old,
            level: if root { Level::Root } else { Level::Inner },
            ratchet: old.is_some_and(|o| o == v),
        };
        self.walk(v, node, at);
    }

    fn walk(&mut self, v: &Value, node: &Node, at: At<'_>) {
        let cel = self.pass == Pass::Cel;
        if (cel && !node.has_rules()) || (!cel && at.ratchet) {
            return;
        }
        let mark = self.errs.len();
        let type_ok = self.type_check(v, node, at.path);
        if type_ok && !v.is_null() {
            if !cel {
                self.checks(v, &node.checks, at.path);
            } else if !node.rules.is_empty() {
                // A node's own rules before its children's, as the apiserver.
                let site = EvalSite {
                    node,
                    value: v,
                    old: at.old,
                    path: at.path,
                    level: at.level,
                    ratchet: at.ratchet,
                };
                cel::eval_rules(&site, &mut self.budget, &mut self.cel_errs);
            }
            match v {
                Value::Object(obj) => self.object(obj, node, at),
                Value::Array(items) => self.array(items, node, at),
                _ => {}
            }
        }
        if cel {
            self.errs.truncate(mark);
        }
    }

    /// `type`, `nullable` and int-or-string; false stops further checks.
    fn type_check(&mut self, v: &Value, node: &Node, path: &str) -> bool {
        let actual = json_type(v);
        if v.is_null() {
            if !node.nullable && (node.ty.is_some() || node.int_or_string) {
                let want = if node.int_or_string {
                    "integer,string"
                } else {
                    node.type_name()
                };
                self.type_error(path, want, actual);
                return false;
            }
            if let Some(values) = &node.checks.enum_values
                && !values.contains(&Value::Null)
                && node.ty.is_some()
            {
                self.errs.push(FieldError::not_supported(
                    path,
                    &BadValue::json(v),
                    &enum_strings(values),
                ));
            }
            return true;
        }
        if node.int_or_string {
            if !matches!(actual, "integer" | "string") {
                self.type_error(path, "integer,string", actual);
                return false;
            }
            return true;
        }
        let ok = match node.ty {
            None => true,
            Some(Ty::Number) => matches!(actual, "integer" | "number"),
            Some(t) => t.name() == actual,
        };
        if !ok {
            self.type_error(path, node.type_name(), actual);
        }
        ok
    }

    fn type_error(&mut self, path: &str, want: &str, actual: &str) {
        self.errs.push(FieldError::type_invalid(
            path,
            &BadValue::str(actual),
            &format!("{} must be of type {want}: {:?}", path::in_body(path), actual),
        ));
    }

    /// Value validations; also how junctor branches are checked.
    fn checks(&mut self, v: &Value, c: &Checks, path: &str) {
        if let Some(values) = &c.enum_values
            && !values.iter().any(|e| json_eq(e, v))
        {
            self.errs.push(FieldError::not_supported(
                path,
                &BadValue::json(v),
                &enum_strings(values),
            ));
        }
        match v {
            Value::String(s) => self.string(s, c, path),
            Value::Number(_) => self.number(v, c, path),
            Value::Array(items) => {
                if let Some(min) = c.min_items
                    && (items.len() as u64) < min
                {
                    self.errs.push(FieldError::invalid(
                        path,
                        &BadValue::Int(len_i64(items.len())),
                        &format!("{} should have at least {min} items", path::in_body(path)),
                    ));
                }
                if let Some(max) = c.max_items
                    && items.len() as u64 > max
                {
                    self.errs.push(FieldError::too_many(path, items.len(), max, "items"));
                }
            }
            Value::Object(obj) => {
                for r in &c.required {
                    if !obj.contains_key(r) {
                        self.errs.push(FieldError::required(&path::child(path, r), ""));
                    }
                }
                if let Some(min) = c.min_properties
                    && (obj.len() as u64) < min
                {
                    self.errs.push(FieldError::invalid(
                        path,
                        &BadValue::Int(len_i64(obj.len())),
                        &format!("{} should have at least {min} properties", path::in_body(path)),
                    ));
                }
                if let Some(max) = c.max_properties
                    && obj.len() as u64 > max
                {
                    self.errs.push(FieldError::too_many(path, obj.len(), max, "items"));
                }
            }
            _ => {}
        }
        self.junctors(v, c, path);
    }

    fn string(&mut self, s: &str, c: &Checks, path: &str) {
        let chars = s.chars().count() as u64;
        if let Some(max) = c.max_length
            && chars > max
        {
            let unit = if max == 1 { "byte" } else { "bytes" };
            self.errs.push(FieldError::without_value(
                path,
                FieldErrorKind::TooLong,
                &format!("may not be more than {max} {unit}"),
            ));
        }
        if let Some(min) = c.min_length
            && chars < min
        {
            self.errs.push(FieldError::invalid(
                path,
                &BadValue::str(s),
                &format!("{} should be at least {min} chars long", path::in_body(path)),
            ));
        }
        if let Some((src, re)) = &c.pattern
            && !re.is_match(s)
        {
            self.errs.push(FieldError::invalid(
                path,
                &BadValue::str(s),
                &format!("{} should match '{src}'", path::in_body(path)),
            ));
        }
        if let Some(f) = &c.format
            && !super::formats::string_ok(f, s)
        {
            self.errs.push(FieldError::type_invalid(
                path,
                &BadValue::str(s),
                &format!("{} must be of type {f}: {:?}", path::in_body(path), s),
            ));
        }
    }

    fn number(&mut self, v: &Value, c: &Checks, path: &str) {
        let Some(f) = v.as_f64() else { return };
        let bad = BadValue::json(v);
        let body = path::in_body(path);
        let mut bound = |ok: bool, msg: String| {
            if !ok {
                self.errs
                    .push(FieldError::invalid(path, &bad, &format!("{body} {msg}")));
            }
        };
        if let Some(min) = c.minimum {
            if c.exclusive_minimum {
                bound(f > min, format!("should be greater than {}", go_float(min)));
            } else {
                bound(
                    f >= min,
                    format!("should be greater than or equal to {}", go_float(min)),
                );
            }
        }
        if let Some(max) = c.maximum {
            if c.exclusive_maximum {
                bound(f < max, format!("should be less than {}", go_float(max)));
            } else {
                bound(f <= max, format!("should be less than or equal to {}", go_float(max)));
            }
        }
        if let Some(m) = c.multiple_of
            && m != 0.0
        {
            let q = f / m;
            bound(
                (q - q.round()).abs() < 1e-9,
                format!("should be a multiple of {}", go_float(m)),
            );
        }
        if let Some((lo, hi)) = super::formats::int_range(c.format.as_deref()) {
            bound(f >= lo, format!("should be greater than or equal to {}", go_float(lo)));
            bound(f <= hi, format!("should be less than or equal to {}", go_float(hi)));
        }
    }

    fn junctors(&mut self, v: &Value, c: &Checks, path: &str) {
        let body = path::in_body(path);
        let empty = BadValue::str("");
        let mut failed_all = false;
        for branch in &c.all_of {
            let errs = branch_errors(v, branch, path);
            failed_all |= !errs.is_empty();
            self.errs.extend(errs);
        }
        if failed_all {
            self.errs.push(FieldError::invalid(
                path,
                &empty,
                &format!("{body} must validate all the schemas (allOf)"),
            ));
        }
        if !c.any_of.is_empty() {
            let results: Vec<Vec<FieldError>> = c.any_of.iter().map(|b| branch_errors(v, b, path)).collect();
            if results.iter().all(|e| !e.is_empty()) {
                self.errs.extend(results.into_iter().flatten());
                self.errs.push(FieldError::invalid(
                    path,
                    &empty,
                    &format!("{body} must validate at least one schema (anyOf)"),
                ));
            }
        }
        if !c.one_of.is_empty() {
            let results: Vec<Vec<FieldError>> = c.one_of.iter().map(|b| branch_errors(v, b, path)).collect();
            let passing = results.iter().filter(|e| e.is_empty()).count();
            if passing != 1 {
                if passing == 0 {
                    self.errs.extend(results.into_iter().flatten());
                }
                self.errs.push(FieldError::invalid(
                    path,
                    &empty,
                    &format!("{body} must validate one and only one schema (oneOf)"),
                ));
            }
        }
        if let Some(not) = &c.not
            && branch_errors(v, not, path).is_empty()
        {
            self.errs.push(FieldError::invalid(
                path,
                &empty,
                &format!("{body} must not validate the schema (not)"),
            ));
        }
    }

    fn object(&mut self, obj: &Map<String, Value>, node: &Node, at: At<'_>) {
        if node.embedded && !obj.is_empty() && self.pass == Pass::Schema {
            for k in ["apiVersion", "kind"] {
                if !matches!(obj.get(k), Some(Value::String(s)) if !s.is_empty()) {
                    self.errs
                        .push(FieldError::required(&path::child(at.path, k), "must not be empty"));
                }
            }
        }
        for (k, child) in obj {
            let (sub, child_path) = if let Some(n) = node.properties.get(k) {
                (n, path::child(at.path, k))
            } else if (at.level == Level::Root || node.embedded) && is_root_meta(k) {
                continue;
            } else if let Some(Additional::Schema(n)) = &node.additional {
                (n.as_ref(), path::key(at.path, k))
            } else {
                if matches!(node.additional, Some(Additional::Any(false)))
                    && !node.preserve_unknown
                    && self.pass == Pass::Schema
                {
                    self.errs.push(FieldError::forbidden(
                        &path::child(at.path, k),
                        &format!("{} is a forbidden property", path::in_body(&path::child(at.path, k))),
                    ));
                }
                continue;
            };
            if at.level == Level::Root && is_root_meta(k) {
                continue;
            }
            let old = at.old.and_then(|o| o.get(k));
            let child_at = At {
                path: &child_path,
                old,
                level: Level::Inner,
                ratchet: at.ratchet || old.is_some_and(|o| o == child),
            };
            self.walk(child, sub, child_at);
        }
    }

    fn array(&mut self, items: &[Value], node: &Node, at: At<'_>) {
        match &node.list_type {
            Some(ListType::Set) if self.pass == Pass::Schema => {
                for (i, item) in items.iter().enumerate() {
                    if items[..i].iter().any(|p| json_eq(p, item)) {
                        self.errs
                            .push(FieldError::duplicate(&path::index(at.path, i), &BadValue::json(item)));
                    }
                }
            }
            Some(ListType::Map(keys)) if self.pass == Pass::Schema => {
                let mut seen: Vec<Vec<Option<&Value>>> = Vec::new();
                for (i, item) in items.iter().enumerate() {
                    let tuple: Vec<Option<&Value>> = keys.iter().map(|k| item.get(k)).collect();
                    if seen.iter().any(|s| tuple_eq(s, &tuple)) {
                        let mut shown = Map::new();
                        for (k, v) in keys.iter().zip(&tuple) {
                            if let Some(v) = v {
                                shown.insert(k.clone(), (*v).clone());
                            }
                        }
                        self.errs.push(FieldError::duplicate(
                            &path::index(at.path, i),
                            &BadValue::Raw(go_value(&Value::Object(shown))),
                        ));
                    }
                    seen.push(tuple);
                }
            }
            _ => {}
        }
        let Some(item_node) = node.items.as_deref() else { return };
        let old_items = at.old.and_then(Value::as_array);
        for (i, item) in items.iter().enumerate() {
            let old = match (&node.list_type, old_items) {
                (Some(ListType::Map(keys)), Some(olds)) => olds.iter().find(|o| {
                    let a: Vec<Option<&Value>> = keys.iter().map(|k| o.get(k)).collect();
                    let b: Vec<Option<&Value>> = keys.iter().map(|k| item.get(k)).collect();
                    tuple_eq(&a, &b)
                }),
                _ => None,
            };
            let p = path::index(at.path, i);
            let child_at = At {
                path: &p,
                old,
                level: Level::Inner,
                ratchet: at.ratchet || old.is_some_and(|o| o == item),
            };
            self.walk(item, item_node, child_at);
        }
    }
}

/// Errors of validating `v` against one junctor branch (no CEL, no old).
fn branch_errors(v: &Value, branch: &Node, path: &str) -> Vec<FieldError> {
    let mut sub = Validator::new(Pass::Schema);
    sub.run(v, branch, None, path, false);
    sub.errs
}

/// go-openapi's name for a JSON value's type.
fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) => {
            if n.is_i64() || n.is_u64() || n.as_f64().is_some_and(|f| f.fract() == 0.0) {
                "integer"
            } else {
                "number"
            }
        }
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// JSON equality where `1` equals `1.0`.
fn json_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => match (x.as_i64(), y.as_i64()) {
            (Some(i), Some(j)) => i == j,
            _ => x.as_f64() == y.as_f64(),
        },
        (Value::Array(x), Value::Array(y)) => x.len() == y.len() && x.iter().zip(y).all(|(a, b)| json_eq(a, b)),
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| json_eq(v, w)))
        }
        _ => a == b,
    }
}

fn tuple_eq(a: &[Option<&Value>], b: &[Option<&Value>]) -> bool {
    a.len() == b.len()
        && a.iter().zip(b).all(|(x, y)| match (x, y) {
            (Some(x), Some(y)) => json_eq(x, y),
            (None, None) => true,
            _ => false,
        })
}

/// Enum values as apiserver lists them: strings bare, others as JSON.
fn enum_strings(values: &[Value]) -> Vec<String> {
    values
        .iter()
        .map(|v| match v {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        })
        .collect()
}

fn len_i64(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

//! `x-kubernetes-validations`: compiling CEL rules when a CRD is accepted and
//! evaluating them against objects, on top of the `cel` crate (0.15).
//!
//! The `cel` crate has no type checker, so only syntax errors are caught at
//! compile time; type errors (a misspelt field, a wrong overload) surface as
//! evaluation errors on the first object that reaches them. Its parser and
//! interpreter recurse deeply (a dozen nested parentheses already overflow a
//! 2 MiB debug-build stack), so every compile and evaluation runs on a
//! large stack ([`on_big_stack`]) and rules are limited in length and
//! nesting before they are parsed.

use super::errors::{BadValue, FieldError, FieldErrorKind};
use super::node::{Additional, Node, Ty};
use super::path;
use cel::objects::{Key, Map, OptionalValue};
use cel::{Context, Env, Program};
use serde_json::Value;
use std::collections::HashMap;
use std::sync::{Arc, LazyLock};

/// Longest rule (or message expression) accepted, in bytes. Keeps the
/// deepest possible parse/eval recursion well inside [`BIG_STACK`].
pub(crate) const MAX_RULE_LEN: usize = 4096;
/// Deepest bracket nesting accepted in a rule.
pub(crate) const MAX_NESTING: usize = 32;
/// Estimated cost one rule evaluation may take (see [`estimate_cost`]).
const PER_CALL_LIMIT: u64 = 5_000_000;
/// Estimated cost all rule evaluations of one `validate` call may take.
pub(crate) const TOTAL_BUDGET: u64 = 50_000_000;
/// Stack for CEL work; only touched pages are committed.
const BIG_STACK: usize = 256 << 20;

/// The CEL environment: the standard library plus the strings and lists
/// extensions (the nearest the `cel` crate has to the apiserver's libraries).
static ENV: LazyLock<Arc<Env>> = LazyLock::new(|| {
    let mut env = Env::stdlib();
    // A failed extension only loses its functions; rules using them then
    // fail at evaluation with "undeclared reference".
    let _ = env.add_extension(cel::extensions::strings);
    let _ = env.add_extension(cel::extensions::lists);
    Arc::new(env)
});

/// Run `f` on a [`BIG_STACK`] stack segment of the calling thread (`stacker` maps it, and
/// unmaps it afterwards). `None` if `f` panicked: a bug in the `cel` crate must not take the
/// server down. A scoped thread per call did the same, but a spawn and join per write were
/// a tenth of a busy server's CPU.
pub(crate) fn on_big_stack<T>(f: impl FnOnce() -> T) -> Option<T> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| stacker::grow(BIG_STACK, f))).ok()
}

/// One compiled `x-kubernetes-validations` entry.
#[derive(Debug, Clone)]
pub(crate) struct Rule {
    pub rule: String,
    pub program: Arc<Program>,
    pub message: Option<String>,
    pub message_expression: Option<Arc<Program>>,
    pub reason: FieldErrorKind,
    /// `fieldPath` turned into an apimachinery path suffix (`.a.b`, `[0]`).
    pub field_path: Option<String>,
    pub optional_old_self: bool,
    /// References `oldSelf`: only run on update (see `optional_old_self`).
    pub transition: bool,
    /// Nesting depth of comprehension macros, for the cost estimate.
    pub comprehension_depth: u32,
}

impl Rule {
    /// apiserver's `ruleErrorString`: the message if set, else the rule.
    fn error_string(&self) -> &str {
        match &self.message {
            Some(m) if !m.trim().is_empty() => m.trim(),
            _ => self.rule.trim(),
        }
    }
}

/// What a pre-parse scan of a rule found.
struct Shape {
    nesting: usize,
    comprehension_depth: u32,
}

/// Scan a CEL source for bracket nesting and comprehension-macro nesting,
/// skipping string literals, without recursing.
fn scan(src: &str) -> Shape {
    const MACROS: [&str; 5] = ["all", "exists", "exists_one", "map", "filter"];
    let b = src.as_bytes();
    let mut stack: Vec<bool> = Vec::new();
    let mut shape = Shape {
        nesting: 0,
        comprehension_depth: 0,
    };
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        match c {
            b'\'' | b'"' => {
                let raw = i > 0 && (b[i - 1] == b'r' || b[i - 1] == b'R');
                let triple = b.len() >= i + 3 && b[i + 1] == c && b[i + 2] == c;
                let mut j = if triple { i + 3 } else { i + 1 };
                loop {
                    if j >= b.len() {
                        break;
                    }
                    if b[j] == b'\\' && !raw {
                        j += 2;
                        continue;
                    }
                    if b[j] == c && (!triple || (b.len() >= j + 3 && b[j + 1] == c && b[j + 2] == c)) {
                        j += if triple { 3 } else { 1 };
                        break;
                    }
                    j += 1;
                }
                i = j;
                continue;
            }
            b'(' => {
                let before = &src[..i];
                let trimmed = before.trim_end();
                let ident_start = trimmed
                    .char_indices()
                    .rev()
                    .find(|(_, ch)| !(ch.is_ascii_alphanumeric() || *ch == '_'))
                    .map(|(p, ch)| p + ch.len_utf8())
                    .unwrap_or(0);
                let ident = &trimmed[ident_start..];
                let dotted = trimmed[..ident_start].trim_end().ends_with('.');
                stack.push(dotted && MACROS.contains(&ident));
            }
            b'[' | b'{' => stack.push(false),
            b')' | b']' | b'}' => {
                stack.pop();
            }
            _ => {}
        }
        shape.nesting = shape.nesting.max(stack.len());
        let depth = stack.iter().filter(|m| **m).count();
        shape.comprehension_depth = shape.comprehension_depth.max(u32::try_from(depth).unwrap_or(u32::MAX));
        i += 1;
    }
    shape
}

/// Parse a CEL source after checking it cannot blow the stack. Must run on
/// [`on_big_stack`].
fn compile_source(src: &str) -> Result<(Program, Shape), String> {
    if src.len() > MAX_RULE_LEN {
        return Err(format!(
            "expression exceeds the maximum length of {MAX_RULE_LEN} characters"
        ));
    }
    let shape = scan(src);
    if shape.nesting > MAX_NESTING {
        return Err(format!("expression nesting exceeds the limit of {MAX_NESTING}"));
    }
    ENV.compile(src).map(|p| (p, shape)).map_err(|e| e.to_string())
}

/// Where a rule sits in the schema, for compile-time checks.
pub(crate) struct RuleSite<'a> {
    /// Schema path of the node (`spec.validation.openAPIV3Schema.properties[spec]`).
    pub schema_path: &'a str,
    /// The node the rules are declared on (everything but its rules parsed).
    pub node: &'a Node,
    /// Whether `oldSelf` can be found for this node (not under a set or
    /// atomic list).
    pub correlatable: bool,
}

/// Compile a node's `x-kubernetes-validations`, reporting every problem.
/// Must run on [`on_big_stack`].
pub(crate) fn compile_rules(raw: &Value, site: &RuleSite<'_>, errs: &mut Vec<FieldError>) -> Vec<Rule> {
    let list_path = path::child(site.schema_path, "x-kubernetes-validations");
    let Some(items) = raw.as_array() else {
        errs.push(FieldError::invalid(
            &list_path,
            &BadValue::json(raw),
            "must be a list of validation rules",
        ));
        return Vec::new();
    };
    let mut rules = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let item_path = path::index(&list_path, i);
        if let Some(rule) = compile_rule(item, &item_path, site, errs) {
            rules.push(rule);
        }
    }
    rules
}

fn compile_rule(item: &Value, item_path: &str, site: &RuleSite<'_>, errs: &mut Vec<FieldError>) -> Option<Rule> {
    let rule_path = path::child(item_path, "rule");
    let Some(obj) = item.as_object() else {
        errs.push(FieldError::invalid(
            item_path,
            &BadValue::json(item),
            "must be an object",
        ));
        return None;
    };
    let src = match obj.get("rule").and_then(Value::as_str) {
        Some(s) if !s.trim().is_empty() => s.to_string(),
        _ => {
            errs.push(FieldError::required(&rule_path, ""));
            return None;
        }
    };
    let before = errs.len();
    let message = match obj.get("message") {
        None | Some(Value::Null) => None,
        Some(Value::String(m)) => {
            let mp = path::child(item_path, "message");
            if m.trim().is_empty() {
                errs.push(FieldError::invalid(
                    &mp,
                    &BadValue::str(m),
                    "message must be non-empty if specified",
                ));
            } else if m.contains('\n') {
                errs.push(FieldError::invalid(
                    &mp,
                    &BadValue::str(m),
                    "message must not contain line breaks",
                ));
            }
            Some(m.clone())
        }
        Some(other) => {
            errs.push(FieldError::invalid(
                &path::child(item_path, "message"),
                &BadValue::json(other),
                "must be a string",
            ));
            None
        }
    };
    let message_expression = match obj.get("messageExpression") {
        None | Some(Value::Null) => None,
        Some(Value::String(m)) => {
            let mp = path::child(item_path, "messageExpression");
            match compile_source(m) {
                Ok((p, _)) => Some(Arc::new(p)),
                Err(e) => {
                    errs.push(FieldError::invalid(
                        &mp,
                        &BadValue::str(m),
                        &format!("messageExpression compilation failed: {e}"),
                    ));
                    None
                }
            }
        }
        Some(other) => {
            errs.push(FieldError::invalid(
                &path::child(item_path, "messageExpression"),
                &BadValue::json(other),
                "must be a string",
            ));
            None
        }
    };
    let reason = match obj.get("reason") {
        None | Some(Value::Null) => FieldErrorKind::Invalid,
        Some(r) => match r.as_str() {
            Some("FieldValueInvalid") => FieldErrorKind::Invalid,
            Some("FieldValueForbidden") => FieldErrorKind::Forbidden,
            Some("FieldValueRequired") => FieldErrorKind::Required,
            Some("FieldValueDuplicate") => FieldErrorKind::Duplicate,
            _ => {
                errs.push(FieldError::not_supported(
                    &path::child(item_path, "reason"),
                    &BadValue::json(r),
                    &[
                        "FieldValueRequired".into(),
                        "FieldValueForbidden".into(),
                        "FieldValueInvalid".into(),
                        "FieldValueDuplicate".into(),
                    ],
                ));
                FieldErrorKind::Invalid
            }
        },
    };
    let field_path = match obj.get("fieldPath") {
        None | Some(Value::Null) => None,
        Some(Value::String(fp)) => match resolve_field_path(fp, site.node) {
            Ok(p) => Some(p),
            Err(e) => {
                errs.push(FieldError::invalid(
                    &path::child(item_path, "fieldPath"),
                    &BadValue::str(fp),
                    &format!("fieldPath must be a valid path: {e}"),
                ));
                None
            }
        },
        Some(other) => {
            errs.push(FieldError::invalid(
                &path::child(item_path, "fieldPath"),
                &BadValue::json(other),
                "must be a string",
            ));
            None
        }
    };
    let optional_old_self = obj.get("optionalOldSelf").and_then(Value::as_bool).unwrap_or(false);
    let (program, shape) = match compile_source(&src) {
        Ok(ps) => ps,
        Err(e) => {
            errs.push(FieldError::invalid(
                &rule_path,
                &BadValue::str(&src),
                &format!("compilation failed: {e}"),
            ));
            return None;
        }
    };
    let transition = program.references().has_variable("oldSelf");
    if transition && !site.correlatable {
        errs.push(FieldError::invalid(
            &rule_path,
            &BadValue::str(&src),
            &format!(
                "oldSelf cannot be used on the uncorrelatable portion of the schema within {}",
                site.schema_path
            ),
        ));
    }
    if optional_old_self && !transition {
        errs.push(FieldError::forbidden(
            &path::child(item_path, "optionalOldSelf"),
            "may not be set if oldSelf is not used in rule",
        ));
    }
    if errs.len() != before {
        return None;
    }
    Some(Rule {
        rule: src,
        program: Arc::new(program),
        message,
        message_expression,
        reason,
        field_path,
        optional_old_self,
        transition,
        comprehension_depth: shape.comprehension_depth,
    })
}

/// Turn a rule's `fieldPath` (`.a.b`, `['a.b']`, `[0]`) into an
/// apimachinery path suffix, checking each step exists in the schema.
pub(crate) fn resolve_field_path(fp: &str, node: &Node) -> Result<String, String> {
    let mut out = String::new();
    let mut cur = node;
    let mut rest = fp.trim();
    if rest.is_empty() {
        return Err("must not be empty".into());
    }
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix('.') {
            let end = r.find(['.', '[']).unwrap_or(r.len());
            let name = &r[..end];
            if name.is_empty() {
                return Err(format!("empty field name in {fp:?}"));
            }
            cur = cur
                .field(name)
                .ok_or_else(|| format!("does not refer to a valid field: {name}"))?;
            out.push('.');
            out.push_str(name);
            rest = &r[end..];
        } else if let Some(r) = rest.strip_prefix('[') {
            let end = r.find(']').ok_or_else(|| "unclosed '['".to_string())?;
            let inner = r[..end].trim();
            if let Some(q) = inner
                .strip_prefix('\'')
                .and_then(|s| s.strip_suffix('\''))
                .or_else(|| inner.strip_prefix('"').and_then(|s| s.strip_suffix('"')))
            {
                cur = cur
                    .field(q)
                    .ok_or_else(|| format!("does not refer to a valid field: {q}"))?;
                out.push('.');
                out.push_str(q);
            } else if let Ok(i) = inner.parse::<usize>() {
                cur = cur
                    .items
                    .as_deref()
                    .ok_or_else(|| format!("cannot index a non-list with [{i}]"))?;
                out.push_str(&format!("[{i}]"));
            } else {
                return Err(format!("invalid index {inner:?}"));
            }
            rest = &r[end + 1..];
        } else {
            return Err(format!("expected '.' or '[' in {fp:?}"));
        }
    }
    Ok(out)
}

/// CEL reserved words, which apiserver escapes as `__word__` in field names.
const RESERVED: [&str; 20] = [
    "true",
    "false",
    "null",
    "in",
    "as",
    "break",
    "const",
    "continue",
    "else",
    "for",
    "function",
    "if",
    "import",
    "let",
    "loop",
    "package",
    "namespace",
    "return",
    "var",
    "void",
];

/// The apiserver's escaping of property names for CEL field access
/// (`foo-bar` → `foo__dash__bar`); `None` if the name cannot be accessed.
pub(crate) fn escape_property(name: &str) -> Option<String> {
    if RESERVED.contains(&name) {
        return Some(format!("__{name}__"));
    }
    let mut chars = name.chars();
    let first = chars.next()?;
    let ok_first = first.is_ascii_alphabetic() || matches!(first, '_' | '.' | '-' | '/');
    let ok_rest = name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-' | '/'));
    if !ok_first || !ok_rest {
        return None;
    }
    Some(
        name.replace("__", "__underscores__")
            .replace('.', "__dot__")
            .replace('-', "__dash__")
            .replace('/', "__slash__"),
    )
}

/// Where a value sits, for the parts of it CEL may see.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Level {
    /// The custom resource itself: `metadata` shows only name/generateName.
    Root,
    /// Any other value.
    Inner,
}

fn key(s: &str) -> Key {
    Key::String(Arc::new(s.to_string()))
}

fn map_value(m: HashMap<Key, cel::Value>) -> cel::Value {
    cel::Value::Map(Map { map: Arc::new(m) })
}

/// Only `name` and `generateName` of metadata are visible to rules.
fn metadata_to_cel(v: &Value) -> cel::Value {
    let mut m = HashMap::new();
    if let Some(o) = v.as_object() {
        for k in ["name", "generateName"] {
            if let Some(Value::String(s)) = o.get(k) {
                m.insert(key(k), cel::Value::String(Arc::new(s.clone())));
            }
        }
    }
    map_value(m)
}

/// Convert a JSON value to CEL, typed by its schema node where known
/// (numbers of `type: number` become doubles, `date-time` strings become
/// timestamps, declared properties are escaped).
pub(crate) fn to_cel(v: &Value, node: Option<&Node>, level: Level) -> cel::Value {
    match v {
        Value::Null => cel::Value::Null,
        Value::Bool(b) => cel::Value::Bool(*b),
        Value::Number(n) => {
            match node.and_then(|n| n.ty) {
                Some(Ty::Number) => return cel::Value::Float(n.as_f64().unwrap_or(0.0)),
                // `1.0` in an integer field is the integer 1 once decoded.
                Some(Ty::Integer) if n.as_i64().is_none() => {
                    if let Some(f) = n.as_f64().filter(|f| f.fract() == 0.0 && f.abs() < 9.2e18) {
                        return cel::Value::Int(f as i64);
                    }
                }
                _ => {}
            }
            if let Some(i) = n.as_i64() {
                cel::Value::Int(i)
            } else if let Some(u) = n.as_u64() {
                cel::Value::UInt(u)
            } else {
                cel::Value::Float(n.as_f64().unwrap_or(0.0))
            }
        }
        Value::String(s) => {
            if node.and_then(|n| n.checks.format.as_deref()) == Some("date-time")
                && let Ok(t) = chrono::DateTime::parse_from_rfc3339(s)
            {
                return cel::Value::Timestamp(t);
            }
            cel::Value::String(Arc::new(s.clone()))
        }
        Value::Array(items) => {
            let item_node = node.and_then(|n| n.items.as_deref());
            cel::Value::List(Arc::new(
                items.iter().map(|i| to_cel(i, item_node, Level::Inner)).collect(),
            ))
        }
        Value::Object(obj) => {
            let mut m = HashMap::new();
            let embedded = level == Level::Root || node.is_some_and(|n| n.embedded);
            for (k, child) in obj {
                if embedded && k == "metadata" {
                    m.insert(key(k), metadata_to_cel(child));
                    continue;
                }
                match node {
                    Some(n) if n.properties.contains_key(k) => {
                        if let Some(esc) = escape_property(k) {
                            m.insert(key(&esc), to_cel(child, n.properties.get(k), Level::Inner));
                        }
                    }
                    Some(n) => {
                        let child_node = match &n.additional {
                            Some(Additional::Schema(s)) => Some(s.as_ref()),
                            _ => None,
                        };
                        m.insert(key(k), to_cel(child, child_node, Level::Inner));
                    }
                    None => {
                        m.insert(key(k), to_cel(child, None, Level::Inner));
                    }
                }
            }
            map_value(m)
        }
    }
}

/// Size of a value: (number of JSON nodes, longest array or object).
fn measure(v: &Value) -> (u64, u64) {
    let mut nodes = 0u64;
    let mut longest = 0u64;
    let mut stack = vec![v];
    while let Some(v) = stack.pop() {
        nodes += 1;
        match v {
            Value::Array(a) => {
                longest = longest.max(a.len() as u64);
                stack.extend(a.iter());
            }
            Value::Object(o) => {
                longest = longest.max(o.len() as u64);
                stack.extend(o.values());
            }
            _ => {}
        }
    }
    (nodes, longest)
}

/// A coarse static stand-in for the apiserver's CEL cost accounting:
/// converting the value plus, per comprehension nesting level, one pass
/// over the longest collection for every character of the rule.
fn estimate_cost(rule: &Rule, size: (u64, u64)) -> u64 {
    let (nodes, longest) = size;
    let per_iter = rule.rule.len() as u64;
    let iters = longest.max(1).saturating_pow(rule.comprehension_depth);
    nodes.saturating_add(per_iter.saturating_mul(iters))
}

/// The running CEL budget of one `validate` call.
#[derive(Debug)]
pub(crate) struct Budget {
    pub remaining: u64,
    pub exhausted: bool,
}

impl Budget {
    pub(crate) fn new() -> Budget {
        Budget {
            remaining: TOTAL_BUDGET,
            exhausted: false,
        }
    }
}

/// Where and how to evaluate a node's rules.
pub(crate) struct EvalSite<'a> {
    pub node: &'a Node,
    pub value: &'a Value,
    /// The old value at the same path (update only).
    pub old: Option<&'a Value>,
    pub path: &'a str,
    pub level: Level,
    /// Unchanged since `old`: only transition rules run (ratcheting).
    pub ratchet: bool,
}

/// Evaluate the rules declared on one node. Must run on [`on_big_stack`].
pub(crate) fn eval_rules(site: &EvalSite<'_>, budget: &mut Budget, errs: &mut Vec<FieldError>) {
    if site.value.is_null() || budget.exhausted {
        return;
    }
    let mut self_val: Option<cel::Value> = None;
    let mut old_val: Option<cel::Value> = None;
    let mut size: Option<(u64, u64)> = None;
    for rule in &site.node.rules {
        if rule.transition && site.old.is_none() && !rule.optional_old_self {
            continue;
        }
        if site.ratchet && !rule.transition {
            continue;
        }
        let sz = *size.get_or_insert_with(|| {
            let (a, b) = measure(site.value);
            let (c, d) = site.old.map(measure).unwrap_or((0, 0));
            (a + c, b.max(d))
        });
        let cost = estimate_cost(rule, sz);
        if cost > PER_CALL_LIMIT {
            errs.push(FieldError::invalid(
                site.path,
                &BadValue::str(site.node.type_name()),
                &format!("call cost exceeds limit for rule: {}", rule.error_string()),
            ));
            continue;
        }
        if cost > budget.remaining {
            budget.exhausted = true;
            errs.push(FieldError::invalid(
                site.path,
                &BadValue::str(site.node.type_name()),
                "validation failed due to running out of cost budget, no further validation rules will be run",
            ));
            return;
        }
        budget.remaining -= cost;
        let selfv = self_val
            .get_or_insert_with(|| to_cel(site.value, Some(site.node), site.level))
            .clone();
        let mut ctx = Context::with_env(Arc::clone(&ENV));
        ctx.add_variable_from_value("self", selfv);
        if rule.transition {
            let old = site.old.map(|o| {
                old_val
                    .get_or_insert_with(|| to_cel(o, Some(site.node), site.level))
                    .clone()
            });
            let bound = match (old, rule.optional_old_self) {
                (Some(o), false) => o,
                (Some(o), true) => cel::Value::Opaque(Arc::new(OptionalValue::of(o))),
                (None, _) => cel::Value::Opaque(Arc::new(OptionalValue::none())),
            };
            ctx.add_variable_from_value("oldSelf", bound);
        }
        let field = match &rule.field_path {
            Some(fp) => format!("{}{}", site.path, fp),
            None => site.path.to_string(),
        };
        let field = field.strip_prefix('.').unwrap_or(&field).to_string();
        let type_name = BadValue::str(site.node.type_name());
        match rule.program.execute(&ctx) {
            Ok(cel::Value::Bool(true)) => {}
            Ok(cel::Value::Bool(false)) => {
                let msg = failure_message(rule, &ctx);
                errs.push(match rule.reason {
                    FieldErrorKind::Forbidden => FieldError::forbidden(&field, &msg),
                    FieldErrorKind::Required => FieldError::required(&field, &msg),
                    FieldErrorKind::Duplicate => FieldError::duplicate(&field, &type_name),
                    _ => FieldError::invalid(&field, &type_name, &msg),
                });
            }
            Ok(other) => errs.push(FieldError::invalid(
                site.path,
                &type_name,
                &format!(
                    "rule evaluated to {} instead of a bool: {}",
                    other.type_of(),
                    rule.error_string()
                ),
            )),
            Err(cel::ExecutionError::NoSuchOverload(e)) => errs.push(FieldError::invalid(
                site.path,
                &type_name,
                &format!(
                    "'{e}': call arguments did not match a supported operator, function or macro signature for rule: {}",
                    rule.error_string()
                ),
            )),
            Err(e) => errs.push(FieldError::invalid(
                site.path,
                &type_name,
                &format!("{} evaluating rule: {}", go_style(&e.to_string()), rule.error_string()),
            )),
        }
    }
}

/// cel-go's errors start lower-case (`no such key: x`); cel-rust's do not.
fn go_style(msg: &str) -> String {
    let mut chars = msg.chars();
    match chars.next() {
        Some(c) => c.to_lowercase().chain(chars).collect(),
        None => String::new(),
    }
}

/// `messageExpression` if it yields a usable string, else `message`, else
/// `failed rule: <rule>` — the apiserver's fallback order.
fn failure_message(rule: &Rule, ctx: &Context<'_, '_>) -> String {
    if let Some(p) = &rule.message_expression
        && let Ok(cel::Value::String(s)) = p.execute(ctx)
        && !s.trim().is_empty()
        && !s.contains('\n')
    {
        return s.to_string();
    }
    match &rule.message {
        Some(m) if !m.trim().is_empty() => m.clone(),
        _ => format!("failed rule: {}", rule.rule.trim()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn run(src: &str, v: &Value) -> Result<cel::Value, String> {
        let src = src.to_string();
        on_big_stack(|| {
            let (p, _) = compile_source(&src)?;
            let mut ctx = Context::with_env(Arc::clone(&ENV));
            ctx.add_variable_from_value("self", to_cel(v, None, Level::Inner));
            p.execute(&ctx).map_err(|e| e.to_string())
        })
        .unwrap_or_else(|| Err("thread failed".into()))
    }

    #[test]
    fn kubernetes_idioms_evaluate() {
        let v = json!({"a": 1, "s": "abc", "l": [1, 2, 3], "m": {"k1": "v"}, "n": "5"});
        for rule in [
            "has(self.a)",
            "has(self.a) != has(self.b)",
            "!has(self.x) || self.x.size() > 0",
            "self.l.all(x, x > 0)",
            "self.l.exists(x, x == 2)",
            "size(self) > 0",
            "self.s.matches('^[a-z]+$')",
            "self.s.startsWith('ab')",
            "int(self.n) == 5",
            "self.s in ['a', 'abc']",
            "self.m.all(k, k.startsWith('k'))",
            "self.s.lowerAscii() == 'abc'",
            "self.l.exists_one(x, x == 1)",
        ] {
            assert_eq!(run(rule, &v), Ok(cel::Value::Bool(true)), "{rule}");
        }
        assert!(run("self.missing == 1", &v).is_err());
    }

    #[test]
    fn deep_or_long_rules_are_rejected_not_overflowed() {
        let deep = format!("{}1{}", "(".repeat(5000), ")".repeat(5000));
        assert!(run(&deep, &json!({})).is_err());
        let long = format!("1{}", "+1".repeat(3000));
        assert!(run(&long, &json!({})).is_err());
        let ok_depth = format!("{}1{}", "(".repeat(MAX_NESTING), ")".repeat(MAX_NESTING));
        assert!(run(&format!("{ok_depth} == 1"), &json!({})).is_ok());
        // Every binary-operator chain that fits the length limit is safe.
        for op in [
            "+1", "*1", "-1", "/1", "%1", "==1", "<1", "||true", "&&true", ".a", "[0]", "?1:1", " in [1]",
        ] {
            let mut src = "1".to_string();
            while src.len() + op.len() <= MAX_RULE_LEN {
                src.push_str(op);
            }
            let _ = run(&src, &json!({"a": 1}));
        }
        let ok_len = format!("1{} > 0", " + 1".repeat((MAX_RULE_LEN - 10) / 4));
        assert_eq!(run(&ok_len, &json!({})), Ok(cel::Value::Bool(true)));
    }

    #[test]
    fn scan_skips_strings_and_counts_macros() {
        let s = scan("self.all(x, x.exists(y, y == '((((('))");
        assert_eq!(s.comprehension_depth, 2);
        assert_eq!(s.nesting, 2);
        let s = scan("self.a.all(x, true) && self.b.map(y, y).size() > 0");
        assert_eq!(s.comprehension_depth, 1);
        assert_eq!(scan(r"'\'(' + '''(((''' + r'\'").nesting, 0);
        assert_eq!(scan("é(ü.all(x, 'ö'))").comprehension_depth, 1);
        assert_eq!(scan("'unterminated (((").nesting, 0);
    }

    #[test]
    fn escapes_like_apiserver() {
        assert_eq!(escape_property("foo-bar").as_deref(), Some("foo__dash__bar"));
        assert_eq!(escape_property("a.b/c").as_deref(), Some("a__dot__b__slash__c"));
        assert_eq!(escape_property("if").as_deref(), Some("__if__"));
        assert_eq!(escape_property("a__b").as_deref(), Some("a__underscores__b"));
        assert_eq!(escape_property("plain").as_deref(), Some("plain"));
        assert_eq!(escape_property("9x"), None);
    }
}

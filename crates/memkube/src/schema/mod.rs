//! CRD schemas: compiling a version's `openAPIV3Schema`, then defaulting,
//! pruning and validating custom resources against it the way the real
//! kube-apiserver (apiextensions-apiserver) does.
//!
//! # What is faithful
//! - Structural-schema checks at compile time (missing `type`, `type` or
//!   `nullable`/`default`/`description` inside `allOf`/`anyOf`/`oneOf`/`not`
//!   except the int-or-string allowance, `properties` with
//!   `additionalProperties`, `items` missing or a list, `$ref`,
//!   `patternProperties`, `uniqueItems: true`, list-type/map-key
//!   consistency, root type object, root `metadata` limited to
//!   name/generateName, properties used in junctors but not declared
//!   outside them, bad `pattern`s), every problem reported at once
//!   with apiserver-style schema paths (`...properties[spec].type`).
//! - `default`s are checked at compile time: they must survive pruning and
//!   validate (schema and CEL) against their own schema.
//! - Defaulting: non-nullable `null`s without a default are dropped, absent
//!   or non-nullable-`null` fields get their default, nested defaults apply
//!   inside filled defaults, list items and map values.
//! - Pruning of unknown fields, honouring `x-kubernetes-preserve-unknown-fields`,
//!   `additionalProperties` and `x-kubernetes-embedded-resource`; root
//!   `apiVersion`/`kind`/`metadata` are never touched.
//! - Validation messages are go-openapi's as the apiserver relays them
//!   (`spec.x in body should be greater than or equal to 0`,
//!   `Unsupported value: "x": supported values: ...`, `Required value`,
//!   `Too many`, `Too long`, `Duplicate value` for list-type set/map).
//! - CEL `x-kubernetes-validations` with `message`, `messageExpression`,
//!   `reason`, `fieldPath`, `optionalOldSelf`; transition rules (using
//!   `oldSelf`) only on update and only where `oldSelf` correlates (objects,
//!   maps, list-type=map items); property names escaped as the apiserver
//!   does (`foo-bar` → `foo__dash__bar`); at the root (and in embedded
//!   resources) `metadata` shows only `name` and `generateName`;
//!   `date-time` strings are timestamps and `number` fields doubles.
//! - CEL rules are skipped when OpenAPI validation already found a
//!   Required/Unsupported/TypeInvalid/TooLong/TooMany error, replaced by the
//!   apiserver's `<nil>: Invalid value: "null": some validation rules were
//!   not checked because the object was invalid; ...` note.
//! - Update ratcheting: values equal to the stored ones are not re-checked
//!   (transition rules still run), as with `CRDValidationRatcheting`.
//!
//! # What is simplified
//! - CEL has no type checker here (the `cel` crate has none): compile
//!   catches syntax errors only; a misspelt field or wrong overload is
//!   reported when an object is validated (`no such key: x evaluating
//!   rule: ...`). Fields not in `properties` but preserved are visible to
//!   rules (the apiserver hides them).
//! - CEL cost is a static estimate (value size × comprehension nesting ×
//!   rule length) against a per-call and per-request budget, not the
//!   apiserver's exact cost model (nor its CRD-time cost estimate, which
//!   may refuse unbounded rules); rules longer than 4096 bytes or nested
//!   deeper than 32 brackets are refused at compile time so the recursive
//!   parser cannot overflow its thread's 256 MiB stack (one scoped thread
//!   per `compile`, and per `validate` of a schema that has rules).
//! - CEL libraries: cel-rust's standard library plus its `strings` and
//!   `lists` extensions. Supported idioms: `has()`, `all`/`exists`/
//!   `exists_one`/`map`/`filter`, `size()`, `matches()`, `startsWith`/
//!   `endsWith`/`contains`, `in`, `int()`/`string()`/`double()`,
//!   comparisons, `self == oldSelf`, `lowerAscii`/`split`/`trim`/...,
//!   optionals (`oldSelf.hasValue()`). Missing: the Kubernetes libraries
//!   (`isSorted`/`sum`/`min`/`max`/`indexOf` on lists, `url()`,
//!   `quantity()`, `ip()`/`cidr()`, regex `find`/`findAll`, `format`,
//!   authz, two-variable comprehensions); list-type set/map lists compare
//!   by order in `==`; `format: byte`/`duration` strings stay strings.
//! - Formats: `date-time`, `date`, `byte`, `uuid`, `ipv4`, `ipv6`, `cidr`
//!   and `int32` range are checked loosely; others are ignored.
//! - Regex `pattern`s use the `regex` crate (RE2-like, as Go's).
//! - A node without `type` is accepted when it has `anyOf`/`oneOf`, because
//!   kube-derive emits that for `#[serde(untagged)]` enums (the real
//!   apiserver would reject such a CRD). Root `metadata` is not validated
//!   here (name and label rules belong to the object handlers); the schema
//!   may only constrain `metadata.name`/`generateName` anyway.
//! - Junctor failures list the branch errors plus one summary error;
//!   go-openapi's exact grouping differs slightly. Errors come in object
//!   key order (schema errors first, then CEL), not go-openapi's order.
//!
//! # Field paths
//! [`FieldError::field`] is apimachinery's `Path.String()`: `spec.a.b`,
//! `spec.list[2].x`, `spec.map[key]`, and `<nil>` for the object root (as
//! in the apiserver's `causes[].field`). Compile errors are relative to the
//! schema (`properties[spec].type`, empty for the schema itself) so the
//! caller can put them under `spec.versions[i].schema.openAPIV3Schema`;
//! [`CompiledSchema::compile_at`] does that itself.

mod cel;
mod defaults;
mod errors;
mod formats;
mod node;
mod path;
mod prune;
mod structural;
mod validate;

#[cfg(test)]
mod tests;

pub use errors::{FieldError, FieldErrorKind};

use errors::BadValue;
use node::{Additional, Node};
use std::sync::Arc;

/// A CRD version's schema, compiled once and shared by all requests.
#[derive(Debug, Clone)]
pub struct CompiledSchema {
    root: Arc<Node>,
    has_rules: bool,
}

impl CompiledSchema {
    /// Compile a CRD version's `schema.openAPIV3Schema`. Errors list every
    /// problem (non-structural schema, invalid CEL rule with its path) for a
    /// 422 on the CRD. Error paths are relative to the schema
    /// (`properties[spec].type`; empty for the schema itself) for the
    /// caller to put under `spec.versions[i].schema.openAPIV3Schema`.
    pub fn compile(open_api_v3_schema: &serde_json::Value) -> Result<CompiledSchema, Vec<FieldError>> {
        CompiledSchema::compile_at(open_api_v3_schema, "")
    }

    /// [`compile`](Self::compile), with error paths already under
    /// `schema_path` (e.g. `spec.versions[0].schema.openAPIV3Schema`).
    pub fn compile_at(
        open_api_v3_schema: &serde_json::Value,
        schema_path: &str,
    ) -> Result<CompiledSchema, Vec<FieldError>> {
        let compiled = cel::on_big_stack(|| {
            let (root, mut errs) = structural::Parser::parse_root(open_api_v3_schema, schema_path);
            check_defaults(&root, schema_path, &mut errs);
            (root, errs)
        });
        match compiled {
            Some((root, errs)) if errs.is_empty() => Ok(CompiledSchema {
                has_rules: root.has_rules(),
                root: Arc::new(root),
            }),
            Some((_, errs)) => Err(errs),
            None => Err(vec![FieldError::invalid(
                schema_path,
                &BadValue::str(""),
                "schema could not be compiled",
            )]),
        }
    }

    /// Apply schema defaults, then prune unknown fields, in place. Never
    /// touches apiVersion/kind/metadata at the root.
    pub fn default_and_prune(&self, obj: &mut serde_json::Value) {
        defaults::apply(obj, &self.root, true);
        prune::apply(obj, &self.root, true);
    }

    /// Validate types, required, enums, patterns, formats, min/max, items,
    /// CEL rules; `old` is the stored object on update (for oldSelf
    /// transition rules and ratcheting).
    pub fn validate(&self, obj: &serde_json::Value, old: Option<&serde_json::Value>) -> Vec<FieldError> {
        let run = || {
            let mut errs = validate::validate_value(obj, &self.root, old, "", true);
            for e in &mut errs {
                if e.field.is_empty() {
                    e.field = errors::ROOT_FIELD.to_string();
                }
            }
            errs
        };
        if !self.has_rules {
            return run();
        }
        cel::on_big_stack(run).unwrap_or_else(|| {
            vec![FieldError::invalid(
                "",
                &BadValue::str("object"),
                "internal error: validation rules could not be evaluated",
            )]
        })
    }
}

/// Check every `default` in the tree: it must be unchanged by pruning and
/// valid against its own schema (CEL included), as the apiserver requires.
fn check_defaults(node: &Node, at: &str, errs: &mut Vec<FieldError>) {
    if let Some(d) = &node.default {
        let dp = path::child(at, "default");
        let mut filled = d.clone();
        defaults::apply(&mut filled, node, false);
        let mut pruned = filled.clone();
        prune::apply(&mut pruned, node, false);
        if pruned != filled {
            errs.push(FieldError::invalid(
                &dp,
                &BadValue::json(d),
                "must not have unknown fields",
            ));
        }
        let found = validate::validate_value(&pruned, node, None, "", false);
        errs.extend(found.into_iter().map(|e| e.prefixed(&dp)));
    }
    let props = path::child(at, "properties");
    for (k, child) in &node.properties {
        check_defaults(child, &path::key(&props, k), errs);
    }
    if let Some(items) = &node.items {
        check_defaults(items, &path::child(at, "items"), errs);
    }
    if let Some(Additional::Schema(ap)) = &node.additional {
        check_defaults(ap, &path::child(at, "additionalProperties"), errs);
    }
}

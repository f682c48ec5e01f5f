//! End-to-end tests of the public interface: compile, default/prune and
//! validate, as the CRD and object handlers call them.

use super::*;
use serde_json::{Value, json};

fn compile(schema: Value) -> CompiledSchema {
    match CompiledSchema::compile(&schema) {
        Ok(c) => c,
        Err(errs) => panic!("schema rejected: {}", strings(&errs).join("\n")),
    }
}

fn compile_errs(schema: Value) -> Vec<String> {
    match CompiledSchema::compile(&schema) {
        Ok(_) => panic!("schema accepted"),
        Err(errs) => strings(&errs),
    }
}

fn strings(errs: &[FieldError]) -> Vec<String> {
    errs.iter().map(ToString::to_string).collect()
}

fn spec_schema(props: Value) -> Value {
    json!({"type": "object", "properties": {"spec": {"type": "object", "properties": props}}})
}

fn obj(spec: Value) -> Value {
    json!({"apiVersion": "x.io/v1", "kind": "Thing", "metadata": {"name": "t"}, "spec": spec})
}

fn validate(s: &CompiledSchema, spec: Value) -> Vec<String> {
    strings(&s.validate(&obj(spec), None))
}

#[test]
fn interface_is_send_sync_debug_clone() {
    fn check<T: Send + Sync + std::fmt::Debug + Clone>() {}
    check::<CompiledSchema>();
    check::<FieldError>();
}

// ---- compile ----

#[test]
fn compile_reports_every_structural_problem_with_paths() {
    let errs = compile_errs(
        json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {
            "untyped": {"description": "no type"},
            "junctor": {"type": "string", "anyOf": [{"type": "string"}]},
            "both": {"type": "object", "properties": {"a": {"type": "string"}}, "additionalProperties": {"type": "string"}},
            "ref": {"$ref": "#/definitions/x"},
            "uniq": {"type": "array", "items": {"type": "string"}, "uniqueItems": true},
            "noitems": {"type": "array"},
            "pat": {"type": "string", "pattern": "("},
            "lm": {"type": "array", "x-kubernetes-list-type": "map", "items": {"type": "object", "properties": {"k": {"type": "string"}}}},
            "bogus": {"type": "strin"},
            "incomplete": {"type": "object", "properties": {"a": {"type": "string"}},
                "anyOf": [{"properties": {"a": {"pattern": "^x"}}}, {"properties": {"b": {"pattern": "^y"}}}]}
        }}}}),
    );
    let expect = [
        "properties[spec].properties[untyped].type: Required value: must not be empty for specified object fields",
        "properties[spec].properties[junctor].anyOf[0].type: Forbidden: must be empty to be structural",
        "properties[spec].properties[both].additionalProperties: Forbidden: additionalProperties and properties are mutual exclusive",
        "properties[spec].properties[ref].$ref: Forbidden: $ref is not supported",
        "properties[spec].properties[uniq].uniqueItems: Forbidden: uniqueItems cannot be set to true since the runtime complexity becomes quadratic",
        "properties[spec].properties[noitems].items: Required value: must be specified",
        "properties[spec].properties[lm].x-kubernetes-list-map-keys: Required value: must not be empty if x-kubernetes-list-type is map",
        "properties[spec].properties[incomplete].properties[b]: Required value: because it is defined in properties[spec].properties[incomplete].anyOf[1].properties[b]",
        "properties[spec].properties[bogus].type: Unsupported value: \"strin\": supported values: \"array\", \"boolean\", \"integer\", \"number\", \"object\", \"string\"",
    ];
    for e in expect {
        assert!(errs.iter().any(|x| x == e), "missing {e}\n got: {errs:#?}");
    }
    assert!(
        errs.iter().any(|x| x.starts_with(
            "properties[spec].properties[pat].pattern: Invalid value: \"(\": must be a valid regular expression"
        )),
        "{errs:#?}"
    );
}

#[test]
fn compile_at_prefixes_paths_and_root_must_be_object() {
    let errs = CompiledSchema::compile_at(&json!({"type": "string"}), "spec.versions[0].schema.openAPIV3Schema")
        .err()
        .unwrap_or_default();
    assert_eq!(
        strings(&errs),
        ["spec.versions[0].schema.openAPIV3Schema.type: Invalid value: \"string\": must be object at the root"]
    );
    let errs = CompiledSchema::compile(&json!("nope")).err().unwrap_or_default();
    assert_eq!(errs[0].field, "");
    assert!(errs[0].to_string().starts_with(": Invalid value"));
    let s = compile(json!({"type": "object", "x-kubernetes-validations": [{"rule": "false"}]}));
    let errs = s.validate(&json!({}), None);
    assert_eq!(errs[0].field, "<nil>");
    assert_eq!(errs[0].message, "Invalid value: \"object\": failed rule: false");
    assert_eq!(
        errs[0].to_string(),
        "<nil>: Invalid value: \"object\": failed rule: false"
    );
}

#[test]
fn compile_accepts_int_or_string_preserve_unknown_and_embedded() {
    compile(spec_schema(json!({
        "port": {"x-kubernetes-int-or-string": true, "anyOf": [{"type": "integer"}, {"type": "string"}]},
        "q": {"x-kubernetes-int-or-string": true, "nullable": true},
        "raw": {"x-kubernetes-preserve-unknown-fields": true},
        "tmpl": {"type": "object", "x-kubernetes-embedded-resource": true, "x-kubernetes-preserve-unknown-fields": true},
        "conds": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"],
                  "items": {"type": "object", "required": ["type"], "properties": {"type": {"type": "string"}}}},
        "title": {"type": "string", "title": "t", "example": "e", "description": "d"}
    })));
}

#[test]
fn compile_checks_defaults_against_their_schema() {
    let errs = compile_errs(spec_schema(json!({
        "n": {"type": "integer", "default": "one"},
        "o": {"type": "object", "properties": {"a": {"type": "string"}}, "default": {"a": "x", "zz": 1}},
        "c": {"type": "integer", "default": 0, "x-kubernetes-validations": [{"rule": "self > 0"}]}
    })));
    let expect = [
        "properties[spec].properties[n].default: Invalid value: \"string\": body must be of type integer: \"string\"",
        "properties[spec].properties[o].default: Invalid value: map[string]interface {}{\"a\":\"x\", \"zz\":1}: must not have unknown fields",
        "properties[spec].properties[c].default: Invalid value: \"integer\": failed rule: self > 0",
    ];
    for e in expect {
        assert!(errs.iter().any(|x| x == e), "missing {e}\n got: {errs:#?}");
    }
}

#[test]
fn compile_rejects_bad_cel_with_rule_path() {
    let errs = compile_errs(spec_schema(json!({
        "a": {"type": "string", "x-kubernetes-validations": [
            {"rule": "self.size() > 1"},
            {"rule": "self =="},
            {"rule": ""},
            {"rule": "true", "reason": "Bogus"},
            {"rule": "true", "messageExpression": "'a' +"},
            {"rule": "true", "fieldPath": ".nope"},
            {"rule": "true", "optionalOldSelf": true}
        ]},
        "set": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string",
            "x-kubernetes-validations": [{"rule": "self == oldSelf"}]}}
    })));
    let p = "properties[spec].properties[a].x-kubernetes-validations";
    assert!(
        errs.iter().any(|e| e.starts_with(&format!(
            "{p}[1].rule: Invalid value: \"self ==\": compilation failed: ERROR: <input>:1:8: Syntax error"
        ))),
        "{errs:#?}"
    );
    for e in [
        format!("{p}[2].rule: Required value"),
        format!("{p}[3].reason: Unsupported value: \"Bogus\": supported values: \"FieldValueRequired\", \"FieldValueForbidden\", \"FieldValueInvalid\", \"FieldValueDuplicate\""),
        format!("{p}[6].optionalOldSelf: Forbidden: may not be set if oldSelf is not used in rule"),
        "properties[spec].properties[set].items.x-kubernetes-validations[0].rule: Invalid value: \"self == oldSelf\": oldSelf cannot be used on the uncorrelatable portion of the schema within properties[spec].properties[set].items".to_string(),
    ] {
        assert!(errs.contains(&e), "missing {e}\n got: {errs:#?}");
    }
    assert!(
        errs.iter()
            .any(|e| e.starts_with(&format!("{p}[4].messageExpression: Invalid value")))
    );
    assert!(
        errs.iter()
            .any(|e| e.starts_with(&format!("{p}[5].fieldPath: Invalid value: \".nope\"")))
    );
    assert_eq!(errs.len(), 7, "{errs:#?}");
}

#[test]
fn compile_and_validate_never_panic_on_garbage() {
    let garbage = [
        json!(null),
        json!(1),
        json!([]),
        json!({"type": "object", "properties": 5}),
        json!({"type": "object", "properties": {"a": null, "b": [], "c": {"type": 1}}}),
        json!({"type": "object", "required": "x", "enum": 3, "minimum": "a", "maxLength": -1, "items": [1]}),
        json!({"type": "object", "allOf": 1, "anyOf": [1, null], "oneOf": {}, "not": 2}),
        json!({"type": "object", "x-kubernetes-validations": "x"}),
        json!({"type": "object", "x-kubernetes-validations": [1, {"rule": 2}, {"rule": "true", "message": 3}]}),
        json!({"type": "object", "x-kubernetes-list-type": 3, "x-kubernetes-list-map-keys": "k"}),
        json!({"type": "object", "properties": {"a": {"type": "array", "items": {"type": "array", "items": {"type": "integer", "default": []}}}}}),
    ];
    for g in &garbage {
        let _ = CompiledSchema::compile(g);
    }
    let mut deep = json!({"type": "string"});
    for _ in 0..200 {
        deep = json!({"type": "object", "properties": {"a": deep}});
    }
    assert!(CompiledSchema::compile(&deep).is_err());

    let s = compile(spec_schema(json!({
        "a": {"type": "integer", "minimum": 0, "x-kubernetes-validations": [{"rule": "self < 10"}]},
        "l": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["k"],
              "items": {"type": "object", "properties": {"k": {"type": "string"}}}},
        "m": {"type": "object", "additionalProperties": {"type": "string"}}
    })));
    for v in [
        json!(null),
        json!(1),
        json!("x"),
        json!([1, {}]),
        json!({"spec": 1}),
        json!({"spec": {"a": "x", "l": [1, null, {"k": 1}, {"k": 1}], "m": [1]}}),
        json!({"spec": {"a": 1e300, "l": {}, "m": {"x": {"y": 1}}}}),
    ] {
        let mut w = v.clone();
        s.default_and_prune(&mut w);
        let _ = s.validate(&w, Some(&v));
        let _ = s.validate(&v, None);
    }
}

/// Tiny deterministic generator of schema-ish and object-ish JSON.
struct Gen(u64);

impl Gen {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn pick<'a>(&mut self, from: &[&'a str]) -> &'a str {
        from[(self.next() % from.len() as u64) as usize]
    }

    fn value(&mut self, depth: u32) -> Value {
        const KEYS: [&str; 24] = [
            "type",
            "properties",
            "items",
            "additionalProperties",
            "required",
            "enum",
            "default",
            "nullable",
            "pattern",
            "format",
            "minimum",
            "maximum",
            "maxLength",
            "minItems",
            "anyOf",
            "oneOf",
            "not",
            "x-kubernetes-validations",
            "x-kubernetes-preserve-unknown-fields",
            "x-kubernetes-int-or-string",
            "x-kubernetes-list-type",
            "x-kubernetes-list-map-keys",
            "a",
            "rule",
        ];
        const STRS: [&str; 14] = [
            "object",
            "array",
            "string",
            "integer",
            "number",
            "boolean",
            "map",
            "set",
            "self.a > 1",
            "has(self.a)",
            "oldSelf == self",
            "^[a-z]+$",
            "date-time",
            "int32",
        ];
        let leaf = depth == 0 || self.next().is_multiple_of(3);
        match self.next() % if leaf { 5 } else { 7 } {
            0 => Value::Null,
            1 => Value::Bool(self.next().is_multiple_of(2)),
            2 => json!((self.next() % 7) as i64 - 3),
            3 => json!(self.pick(&STRS)),
            4 => json!(1.5),
            5 => Value::Array((0..self.next() % 4).map(|_| self.value(depth - 1)).collect()),
            _ => {
                let mut m = serde_json::Map::new();
                for _ in 0..self.next() % 5 {
                    let k = self.pick(&KEYS).to_string();
                    m.insert(k, self.value(depth - 1));
                }
                Value::Object(m)
            }
        }
    }
}

#[test]
fn random_schemas_and_objects_never_panic() {
    let mut g = Gen(0x9E37_79B9_7F4A_7C15);
    let mut compiled = 0;
    for _ in 0..3000 {
        let mut schema = g.value(4);
        if let Some(o) = schema.as_object_mut() {
            o.insert("type".into(), json!("object"));
        }
        let Ok(s) = CompiledSchema::compile(&schema) else {
            continue;
        };
        compiled += 1;
        for _ in 0..5 {
            let old = g.value(4);
            let mut obj = g.value(4);
            s.default_and_prune(&mut obj);
            let _ = s.validate(&obj, Some(&old));
            let _ = s.validate(&obj, None);
        }
    }
    eprintln!("compiled {compiled} random schemas");
    assert!(compiled > 10, "only {compiled} random schemas compiled");
}

// ---- defaulting and pruning ----

#[test]
fn default_and_prune_fill_defaults_and_drop_unknowns() {
    let s = compile(spec_schema(json!({
        "replicas": {"type": "integer", "default": 1},
        "opts": {"type": "object", "default": {}, "properties": {"level": {"type": "string", "default": "info"}}},
        "known": {"type": "string"}
    })));
    let mut v = json!({"apiVersion": "x.io/v1", "kind": "Thing", "metadata": {"name": "t", "labels": {"a": "b"}},
                       "spec": {"known": "k", "unknown": 1}, "extra": true});
    s.default_and_prune(&mut v);
    assert_eq!(
        v,
        json!({"apiVersion": "x.io/v1", "kind": "Thing", "metadata": {"name": "t", "labels": {"a": "b"}},
               "spec": {"known": "k", "replicas": 1, "opts": {"level": "info"}}})
    );
}

// ---- schema validation ----

#[test]
fn validation_messages_match_the_apiserver() {
    let s = compile(
        json!({"type": "object", "required": ["spec"], "properties": {"spec": {"type": "object",
        "required": ["uri"],
        "properties": {
            "uri": {"type": "string"},
            "firmware": {"type": "string", "enum": ["uefi", "bios"]},
            "vcpus": {"type": "integer", "minimum": 0},
            "timezone": {"type": "string", "pattern": "^[A-Za-z]+(/[A-Za-z_]+)?$"},
            "replicas": {"type": "integer"},
            "name": {"type": "string", "maxLength": 3, "minLength": 2},
            "tags": {"type": "array", "maxItems": 2, "minItems": 1, "items": {"type": "string"}},
            "at": {"type": "string", "format": "date-time"},
            "small": {"type": "integer", "format": "int32"},
            "ratio": {"type": "number", "exclusiveMaximum": true, "maximum": 1.5}
        }}}}),
    );
    let errs = validate(
        &s,
        json!({"firmware": "x", "vcpus": -1, "timezone": "x y", "replicas": "string",
        "name": "toolong", "tags": ["a", "b", "c"], "at": "yesterday", "small": 3_000_000_000i64, "ratio": 1.5}),
    );
    let expect = [
        "spec.uri: Required value",
        "spec.firmware: Unsupported value: \"x\": supported values: \"uefi\", \"bios\"",
        "spec.vcpus: Invalid value: -1: spec.vcpus in body should be greater than or equal to 0",
        "spec.timezone: Invalid value: \"x y\": spec.timezone in body should match '^[A-Za-z]+(/[A-Za-z_]+)?$'",
        "spec.replicas: Invalid value: \"string\": spec.replicas in body must be of type integer: \"string\"",
        "spec.name: Too long: may not be more than 3 bytes",
        "spec.tags: Too many: 3: must have at most 2 items",
        "spec.at: Invalid value: \"yesterday\": spec.at in body must be of type date-time: \"yesterday\"",
        "spec.small: Invalid value: 3000000000: spec.small in body should be less than or equal to 2147483647",
        "spec.ratio: Invalid value: 1.5: spec.ratio in body should be less than 1.5",
    ];
    for e in expect {
        assert!(errs.iter().any(|x| x == e), "missing {e}\n got: {errs:#?}");
    }
    assert_eq!(errs.len(), expect.len(), "{errs:#?}");
    let kinds: Vec<&str> = s
        .validate(&obj(json!({"replicas": "s"})), None)
        .iter()
        .map(FieldError::reason)
        .collect();
    assert_eq!(kinds, ["FieldValueRequired", "FieldValueTypeInvalid"]);
    assert_eq!(
        strings(&s.validate(&json!({"apiVersion": "x.io/v1", "kind": "Thing", "metadata": {}}), None)),
        ["spec: Required value"]
    );
    assert!(
        validate(
            &s,
            json!({"uri": "u", "name": "ab", "tags": ["a"], "at": "2024-01-01T00:00:00Z", "ratio": 1})
        )
        .is_empty()
    );
}

#[test]
fn paths_for_lists_and_maps_and_nullable() {
    let s = compile(spec_schema(json!({
        "list": {"type": "array", "items": {"type": "object", "properties": {"x": {"type": "integer"}}}},
        "map": {"type": "object", "additionalProperties": {"type": "integer"}},
        "opt": {"type": "string", "nullable": true},
        "req": {"type": "string"},
        "e": {"type": "string", "nullable": true, "enum": ["A", "B", null]}
    })));
    let errs = validate(
        &s,
        json!({"list": [{"x": 1}, {"x": 2}, {"x": "no"}], "map": {"key": "v"}, "opt": null, "e": null}),
    );
    assert_eq!(
        errs,
        [
            "spec.list[2].x: Invalid value: \"string\": spec.list[2].x in body must be of type integer: \"string\"",
            "spec.map[key]: Invalid value: \"string\": spec.map[key] in body must be of type integer: \"string\"",
        ]
    );
    let errs = validate(&s, json!({"req": null}));
    assert_eq!(
        errs,
        ["spec.req: Invalid value: \"null\": spec.req in body must be of type string: \"null\""]
    );
}

#[test]
fn list_types_report_duplicates() {
    let s = compile(spec_schema(json!({
        "set": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}},
        "m": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"],
              "items": {"type": "object", "properties": {"name": {"type": "string"}, "v": {"type": "integer"}}}}
    })));
    let errs = validate(
        &s,
        json!({"set": ["a", "b", "a"], "m": [{"name": "x", "v": 1}, {"name": "x", "v": 2}]}),
    );
    assert_eq!(
        errs,
        [
            "spec.m[1]: Duplicate value: map[string]interface {}{\"name\":\"x\"}",
            "spec.set[2]: Duplicate value: \"a\"",
        ]
    );
}

#[test]
fn junctors_validate_values() {
    let s = compile(spec_schema(json!({
        "src": {"type": "object", "properties": {"url": {"type": "string"}, "pvc": {"type": "string"}},
                "oneOf": [{"required": ["url"]}, {"required": ["pvc"]}]},
        "n": {"type": "integer", "not": {"enum": [13]}},
        "s": {"type": "string", "anyOf": [{"pattern": "^a"}, {"pattern": "^b"}], "allOf": [{"maxLength": 3}]}
    })));
    assert!(validate(&s, json!({"src": {"url": "u"}, "n": 1, "s": "ab"})).is_empty());
    let errs = validate(&s, json!({"src": {"url": "u", "pvc": "p"}, "n": 13, "s": "cdef"}));
    for e in [
        "spec.src: Invalid value: \"\": spec.src in body must validate one and only one schema (oneOf)",
        "spec.n: Invalid value: \"\": spec.n in body must not validate the schema (not)",
        "spec.s: Invalid value: \"\": spec.s in body must validate at least one schema (anyOf)",
        "spec.s: Invalid value: \"\": spec.s in body must validate all the schemas (allOf)",
    ] {
        assert!(errs.iter().any(|x| x == e), "missing {e}\n got: {errs:#?}");
    }
    let errs = validate(&s, json!({"src": {}}));
    assert!(errs.contains(&"spec.src.url: Required value".to_string()), "{errs:#?}");
}

#[test]
fn int_or_string_and_embedded_resources() {
    let s = compile(spec_schema(json!({
        "port": {"x-kubernetes-int-or-string": true},
        "tmpl": {"type": "object", "x-kubernetes-embedded-resource": true, "x-kubernetes-preserve-unknown-fields": true}
    })));
    assert!(
        validate(
            &s,
            json!({"port": 80, "tmpl": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}}})
        )
        .is_empty()
    );
    assert!(validate(&s, json!({"port": "http"})).is_empty());
    let errs = validate(&s, json!({"port": true, "tmpl": {"spec": {}}}));
    assert_eq!(
        errs,
        [
            "spec.port: Invalid value: \"boolean\": spec.port in body must be of type integer,string: \"boolean\"",
            "spec.tmpl.apiVersion: Required value: must not be empty",
            "spec.tmpl.kind: Required value: must not be empty",
        ]
    );
}

#[test]
fn ratcheting_lets_unchanged_invalid_values_through_on_update() {
    let s = compile(spec_schema(json!({
        "a": {"type": "integer", "maximum": 5},
        "b": {"type": "integer", "maximum": 5}
    })));
    let old = obj(json!({"a": 9, "b": 1}));
    let new = obj(json!({"a": 9, "b": 2}));
    assert!(s.validate(&new, Some(&old)).is_empty());
    let new = obj(json!({"a": 10, "b": 2}));
    assert_eq!(s.validate(&new, Some(&old)).len(), 1);
    assert_eq!(s.validate(&new, None).len(), 1);
}

// ---- CEL ----

fn cel_schema() -> CompiledSchema {
    compile(json!({"type": "object",
    "x-kubernetes-validations": [{"rule": "self.metadata.name.startsWith('t')", "message": "name must start with t"}],
    "properties": {"spec": {"type": "object",
    "x-kubernetes-validations": [
        {"rule": "has(self.a) != has(self.b)", "message": "exactly one of a or b"},
        {"rule": "!has(self.tags) || self.tags.all(t, t.matches('^[a-z]+$'))"},
        {"rule": "!has(self.a) || self.a in ['x', 'y']", "messageExpression": "'a is ' + self.a", "fieldPath": ".a"},
        {"rule": "!has(self.immutable) || self.immutable == oldSelf.immutable", "message": "immutable", "reason": "FieldValueForbidden"},
        {"rule": "!has(self.count) || int(self.count) > 0", "reason": "FieldValueRequired"}
    ],
    "properties": {
        "a": {"type": "string"}, "b": {"type": "string"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "immutable": {"type": "string"},
        "count": {"x-kubernetes-int-or-string": true},
        "dash-name": {"type": "integer", "x-kubernetes-validations": [{"rule": "self < 10"}]},
        "grow": {"type": "integer", "x-kubernetes-validations": [{"rule": "self >= oldSelf", "message": "may not shrink"}]},
        "opt": {"type": "string", "x-kubernetes-validations": [
            {"rule": "!oldSelf.hasValue() || oldSelf.value() == self", "optionalOldSelf": true, "message": "set once"}]},
        "ratio": {"type": "number", "x-kubernetes-validations": [{"rule": "self < 1.0"}]},
        "at": {"type": "string", "format": "date-time", "x-kubernetes-validations": [
            {"rule": "self > timestamp('2020-01-01T00:00:00Z')"}]},
        "items": {"type": "array", "items": {"type": "object", "properties": {"n": {"type": "integer"}},
            "x-kubernetes-validations": [{"rule": "self.n >= 0"}]}},
        "typo": {"type": "object", "properties": {"x": {"type": "string"}},
            "x-kubernetes-validations": [{"rule": "self.y == 'a'"}]}
    }}}}))
}

#[test]
fn cel_rules_pass_on_a_good_object() {
    let s = cel_schema();
    let good = obj(
        json!({"a": "x", "tags": ["ok"], "immutable": "i", "count": 3, "dash-name": 1, "grow": 5,
        "opt": "o", "ratio": 0.5, "at": "2024-01-01T00:00:00Z", "items": [{"n": 1}]}),
    );
    assert!(
        strings(&s.validate(&good, None)).is_empty(),
        "{:?}",
        strings(&s.validate(&good, None))
    );
    assert!(s.validate(&good, Some(&good)).is_empty());
}

#[test]
fn cel_failures_are_reported_like_the_apiserver() {
    let s = cel_schema();
    let mut bad = obj(
        json!({"a": "z", "b": "also", "tags": ["Bad"], "count": "0", "dash-name": 11, "ratio": 2,
        "at": "2019-01-01T00:00:00Z", "items": [{"n": 1}, {"n": -1}], "typo": {"x": "a"}}),
    );
    bad["metadata"]["name"] = json!("other");
    let errs = strings(&s.validate(&bad, None));
    let expect = [
        "<nil>: Invalid value: \"object\": name must start with t",
        "spec: Invalid value: \"object\": exactly one of a or b",
        "spec: Invalid value: \"object\": failed rule: !has(self.tags) || self.tags.all(t, t.matches('^[a-z]+$'))",
        "spec.a: Invalid value: \"object\": a is z",
        "spec: Required value: failed rule: !has(self.count) || int(self.count) > 0",
        "spec.dash-name: Invalid value: \"integer\": failed rule: self < 10",
        "spec.ratio: Invalid value: \"number\": failed rule: self < 1.0",
        "spec.at: Invalid value: \"string\": failed rule: self > timestamp('2020-01-01T00:00:00Z')",
        "spec.items[1]: Invalid value: \"object\": failed rule: self.n >= 0",
        "spec.typo: Invalid value: \"object\": no such key: y evaluating rule: self.y == 'a'",
    ];
    for e in expect {
        assert!(errs.iter().any(|x| x == e), "missing {e}\n got: {errs:#?}");
    }
    assert_eq!(errs.len(), expect.len(), "{errs:#?}");
}

#[test]
fn cel_transition_rules_only_run_on_update() {
    let s = cel_schema();
    let old = obj(json!({"a": "x", "immutable": "one", "grow": 5, "opt": "o"}));
    assert!(s.validate(&old, None).is_empty());
    let new = obj(json!({"a": "x", "immutable": "two", "grow": 4, "opt": "p"}));
    let errs = s.validate(&new, Some(&old));
    let shown = strings(&errs);
    assert!(shown.contains(&"spec: Forbidden: immutable".to_string()), "{shown:#?}");
    assert!(
        shown.contains(&"spec.grow: Invalid value: \"integer\": may not shrink".to_string()),
        "{shown:#?}"
    );
    assert!(
        shown.contains(&"spec.opt: Invalid value: \"string\": set once".to_string()),
        "{shown:#?}"
    );
    assert_eq!(errs.len(), 3, "{shown:#?}");
    assert_eq!(errs[0].reason(), "FieldValueForbidden");
    // grow absent before: the transition rule has no oldSelf and is skipped.
    let old = obj(json!({"a": "x"}));
    assert!(s.validate(&new, Some(&old)).iter().all(|e| e.field != "spec.grow"));
}

#[test]
fn cel_cost_is_bounded() {
    let s = compile(spec_schema(json!({
        "l": {"type": "array", "items": {"type": "integer"},
              "x-kubernetes-validations": [{"rule": "self.all(a, self.all(b, self.all(c, a + b + c >= 0)))"}]}
    })));
    let start = std::time::Instant::now();
    let errs = validate(&s, json!({"l": (0..2000).collect::<Vec<i64>>()}));
    assert!(start.elapsed() < std::time::Duration::from_secs(5));
    assert_eq!(
        errs,
        [
            "spec.l: Invalid value: \"array\": call cost exceeds limit for rule: self.all(a, self.all(b, self.all(c, a + b + c >= 0)))"
        ]
    );
    assert!(validate(&s, json!({"l": [1, 2, 3]})).is_empty());
}

// ---- the project's CRDs ----

/// Every CRD the project ships (generated by kube-derive, and the trimmed
/// Cluster API ones capi-sim serves) must compile.
#[test]
fn project_crds_compile() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    let mut seen = 0;
    for dir in ["manifests/crds", "crates/capi-sim/crds"] {
        let Ok(entries) = std::fs::read_dir(format!("{root}/{dir}")) else {
            continue;
        };
        for entry in entries.flatten() {
            let Ok(text) = std::fs::read_to_string(entry.path()) else {
                continue;
            };
            let Ok(doc) = serde_yaml::from_str::<Value>(&text) else {
                continue;
            };
            let versions = match doc.pointer("/spec/versions").and_then(Value::as_array) {
                Some(vs) => vs.clone(),
                None => vec![doc.clone()],
            };
            for v in versions {
                let Some(schema) = v.pointer("/schema/openAPIV3Schema") else {
                    continue;
                };
                if let Err(errs) = CompiledSchema::compile(schema) {
                    panic!("{}: {:#?}", entry.path().display(), strings(&errs));
                }
                seen += 1;
            }
        }
    }
    eprintln!("compiled {seen} project CRD schemas");
}

// ---- kube-derive generated CRDs ----

mod derived {
    use kube::{CustomResource, CustomResourceExt, KubeSchema};
    use schemars::JsonSchema;
    use serde::{Deserialize, Serialize};
    use std::collections::BTreeMap;

    #[derive(Serialize, Deserialize, Clone, Debug, JsonSchema)]
    pub enum Firmware {
        Uefi,
        Bios,
    }

    #[derive(Serialize, Deserialize, Clone, Debug, JsonSchema)]
    #[serde(rename_all = "camelCase")]
    pub enum Source {
        Url { uri: String },
        Pvc { name: String, size: Option<i64> },
    }

    #[derive(Serialize, Deserialize, Clone, Debug, JsonSchema)]
    #[serde(untagged)]
    pub enum IntOrName {
        Int(i64),
        Name(String),
    }

    #[derive(Serialize, Deserialize, Clone, Debug, JsonSchema)]
    pub struct Disk {
        pub name: String,
        #[schemars(range(min = 1, max = 1024))]
        pub size_gb: u32,
    }

    /// Untagged enum of a struct and a string: kube-derive makes it an
    /// object with `anyOf: [{required: [...]}, {}]`.
    #[derive(Serialize, Deserialize, Clone, Debug, JsonSchema)]
    #[serde(untagged)]
    pub enum Layout {
        Grid { columns: u32 },
        Named(String),
    }

    fn default_level() -> String {
        "info".into()
    }

    #[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug)]
    #[kube(
        group = "x.io",
        version = "v1",
        kind = "Machine",
        namespaced,
        validation = "self.metadata.name.size() <= 20"
    )]
    #[x_kube(validation = Rule::new("has(self.image) != has(self.source)").message("exactly one of image or source"))]
    #[serde(rename_all = "camelCase")]
    pub struct MachineSpec {
        #[schemars(range(min = 1, max = 64))]
        pub vcpus: i32,
        #[x_kube(validation = Rule::new("self == oldSelf").message("firmware is immutable"))]
        pub firmware: Option<Firmware>,
        pub image: Option<String>,
        pub source: Option<Source>,
        pub port: Option<IntOrName>,
        pub disks: Vec<Disk>,
        pub labels: BTreeMap<String, String>,
        #[serde(default = "default_level")]
        pub log_level: String,
        #[schemars(regex(pattern = r"^[a-z]+$"))]
        pub pool: Option<String>,
        pub memory: Option<k8s_openapi::apimachinery::pkg::api::resource::Quantity>,
        pub conditions: Option<Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition>>,
        pub firmwares: Option<Vec<Firmware>>,
        pub by_name: Option<std::collections::HashMap<String, Disk>>,
        pub ratio: Option<f64>,
        pub flag: Option<bool>,
        pub layout: Option<Layout>,
    }

    #[test]
    fn generated_crd_compiles_defaults_and_validates() {
        let crd = Machine::crd();
        let schema = crd.spec.versions[0]
            .schema
            .as_ref()
            .and_then(|s| s.open_api_v3_schema.as_ref())
            .map(serde_json::to_value);
        let Some(Ok(schema)) = schema else { panic!("no schema") };
        let s = super::compile(schema);

        let mut obj = serde_json::json!({"apiVersion": "x.io/v1", "kind": "Machine",
            "metadata": {"name": "m1", "namespace": "d"},
            "spec": {"vcpus": 2, "firmware": "Uefi", "image": "i", "disks": [{"name": "d", "size_gb": 10, "junk": 1}],
                     "labels": {"a": "b"}, "port": 80, "memory": "1Gi", "unknown": true,
                     "firmwares": ["Bios"], "byName": {"x": {"name": "x", "size_gb": 1}}, "ratio": 0.5,
                     "flag": null, "layout": {"columns": 2}}});
        s.default_and_prune(&mut obj);
        assert_eq!(obj["spec"]["logLevel"], "info");
        assert!(obj["spec"].get("unknown").is_none());
        assert!(obj["spec"]["disks"][0].get("junk").is_none());
        assert!(
            super::strings(&s.validate(&obj, None)).is_empty(),
            "{:?}",
            super::strings(&s.validate(&obj, None))
        );

        // Non-blocking schema errors (Invalid) and CEL rules together.
        let mut bad = obj.clone();
        bad["metadata"]["name"] = "a-very-long-machine-name-indeed".into();
        bad["spec"]["vcpus"] = 0.into();
        bad["spec"]["source"] = serde_json::json!({"url": {"uri": "http://x"}});
        bad["spec"]["pool"] = "Bad Pool".into();
        bad["spec"]["disks"][0]["size_gb"] = 0.into();
        let errs = super::strings(&s.validate(&bad, None));
        assert_eq!(
            errs,
            [
                "spec.disks[0].size_gb: Invalid value: 0: spec.disks[0].size_gb in body should be greater than or equal to 1",
                "spec.pool: Invalid value: \"Bad Pool\": spec.pool in body should match '^[a-z]+$'",
                "spec.vcpus: Invalid value: 0: spec.vcpus in body should be greater than or equal to 1",
                "<nil>: Invalid value: \"object\": failed rule: self.metadata.name.size() <= 20",
                "spec: Invalid value: \"object\": exactly one of image or source",
            ]
        );

        // A blocking error (enum) stops the CEL rules, with the apiserver's note.
        let mut blocked = bad.clone();
        blocked["spec"]["firmware"] = "Coreboot".into();
        let errs = super::strings(&s.validate(&blocked, None));
        assert!(
            errs.contains(
                &"spec.firmware: Unsupported value: \"Coreboot\": supported values: \"Uefi\", \"Bios\", \"null\""
                    .to_string()
            )
        );
        assert_eq!(
            errs.last().map(String::as_str),
            Some(
                "<nil>: Invalid value: \"null\": some validation rules were not checked because the object was invalid; correct the existing errors to complete validation"
            )
        );

        let mut changed = obj.clone();
        changed["spec"]["firmware"] = "Bios".into();
        let errs = super::strings(&s.validate(&changed, Some(&obj)));
        assert_eq!(
            errs,
            ["spec.firmware: Invalid value: \"string\": firmware is immutable"]
        );

        let mut tagged = obj.clone();
        if let Some(spec) = tagged["spec"].as_object_mut() {
            spec.remove("image");
        }
        tagged["spec"]["source"] = serde_json::json!({"pvc": {"name": "p"}});
        s.default_and_prune(&mut tagged);
        assert!(
            super::strings(&s.validate(&tagged, None)).is_empty(),
            "{:?}",
            super::strings(&s.validate(&tagged, None))
        );
    }
}

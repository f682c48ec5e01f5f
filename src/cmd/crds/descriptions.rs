//! `kubectl explain` shows a field's schema description and nothing else: every field of every
//! CRD must have one.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    JSONSchemaProps, JSONSchemaPropsOrArray, JSONSchemaPropsOrBool,
};

use crate::api;

/// The path of every field under `schema` without a (non-blank) description, e.g.
/// `spec.networks[].name`.
fn undescribed(schema: &JSONSchemaProps, path: &str, out: &mut Vec<String>) {
    for (name, field) in schema.properties.iter().flatten() {
        let field_path = if path.is_empty() {
            name.clone()
        } else {
            format!("{path}.{name}")
        };
        if field.description.as_deref().is_none_or(|d| d.trim().is_empty()) {
            out.push(field_path.clone());
        }
        undescribed(field, &field_path, out);
    }
    match &schema.items {
        Some(JSONSchemaPropsOrArray::Schema(item)) => undescribed(item, &format!("{path}[]"), out),
        Some(JSONSchemaPropsOrArray::Schemas(items)) => {
            for item in items {
                undescribed(item, &format!("{path}[]"), out);
            }
        }
        None => {}
    }
    if let Some(JSONSchemaPropsOrBool::Schema(value)) = &schema.additional_properties {
        undescribed(value, &format!("{path}{{}}"), out);
    }
    for branch in [&schema.all_of, &schema.any_of, &schema.one_of]
        .into_iter()
        .flatten()
        .flatten()
    {
        undescribed(branch, path, out);
    }
}

#[test]
fn every_field_of_every_crd_has_a_description() {
    let mut missing = Vec::new();
    let mut fields = 0;
    for crd in api::crds() {
        for version in &crd.spec.versions {
            let Some(schema) = version.schema.as_ref().and_then(|s| s.open_api_v3_schema.as_ref()) else {
                missing.push(format!("{}/{}: no schema", crd.spec.names.kind, version.name));
                continue;
            };
            let mut here = Vec::new();
            undescribed(schema, "", &mut here);
            fields += count_fields(schema);
            let prefix = format!("{}/{}: ", crd.spec.names.kind, version.name);
            missing.extend(here.into_iter().map(|path| format!("{prefix}{path}")));
        }
    }
    // The walk must have seen the schemas' fields at all, or an empty result proves nothing.
    assert!(fields > 300, "only {fields} fields walked");
    assert!(
        missing.is_empty(),
        "fields without a description:\n{}",
        missing.join("\n")
    );
}

fn count_fields(schema: &JSONSchemaProps) -> usize {
    let own = schema
        .properties
        .iter()
        .flatten()
        .map(|(_, f)| 1 + count_fields(f))
        .sum::<usize>();
    let items = match &schema.items {
        Some(JSONSchemaPropsOrArray::Schema(item)) => count_fields(item),
        Some(JSONSchemaPropsOrArray::Schemas(items)) => items.iter().map(count_fields).sum(),
        None => 0,
    };
    own + items
}

#[test]
fn a_field_without_a_description_is_named_with_its_path() {
    let schema: JSONSchemaProps = serde_json::from_value(serde_json::json!({
        "type": "object",
        "properties": {
            "spec": {"type": "object", "description": "The spec.", "properties": {
                "networks": {"type": "array", "description": "Networks.", "items": {
                    "type": "object", "properties": {"name": {"type": "string"}}}},
                "labels": {"type": "object", "description": "Labels.", "additionalProperties": {
                    "type": "object", "properties": {"value": {"type": "string", "description": " "}}}}
            }},
            "status": {"type": "object"}
        }
    }))
    .unwrap();
    let mut missing = Vec::new();
    undescribed(&schema, "", &mut missing);
    assert_eq!(missing, ["spec.labels{}.value", "spec.networks[].name", "status"]);
}

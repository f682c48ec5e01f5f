//! CustomResourceDefinition handling: validate and compile on write, register the kind,
//! set the `NamesAccepted`/`Established` conditions, unregister (and drop objects) on delete.

use crate::meta;
use crate::ops::State;
use crate::registry::{Registry, ResourceInfo};
use crate::schema::CompiledSchema;
use crate::status::{ApiError, ApiResult};
use serde_json::{Value, json};

fn s<'a>(v: &'a Value, p: &str) -> &'a str {
    v.pointer(p).and_then(Value::as_str).unwrap_or("")
}

fn strs(v: &Value, p: &str) -> Vec<String> {
    v.pointer(p)
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(|x| x.as_str().map(String::from)).collect())
        .unwrap_or_default()
}

/// Validate a CRD, compile its schemas and fill in its status; returns the kinds to register.
pub fn prepare(crd: &mut Value, _is_create: bool) -> ApiResult<Vec<ResourceInfo>> {
    let name = meta::name(crd).to_string();
    let group = s(crd, "/spec/group").to_string();
    let plural = s(crd, "/spec/names/plural").to_string();
    let kind = s(crd, "/spec/names/kind").to_string();
    let scope = s(crd, "/spec/scope").to_string();
    let mut errs: Vec<(String, String, String)> = vec![];
    let mut req = |f: &str, ok: bool| {
        if !ok {
            errs.push((f.into(), "FieldValueRequired".into(), format!("{f}: Required value")));
        }
    };
    req("spec.group", !group.is_empty());
    req("spec.names.plural", !plural.is_empty());
    req("spec.names.kind", !kind.is_empty());
    if !group.is_empty() && !plural.is_empty() && name != format!("{plural}.{group}") {
        errs.push((
            "metadata.name".into(),
            "FieldValueInvalid".into(),
            format!("metadata.name: Invalid value: \"{name}\": must be spec.names.plural+\".\"+spec.group"),
        ));
    }
    if scope != "Namespaced" && scope != "Cluster" {
        errs.push((
            "spec.scope".into(),
            "FieldValueNotSupported".into(),
            format!("spec.scope: Unsupported value: \"{scope}\": supported values: \"Cluster\", \"Namespaced\""),
        ));
    }
    let versions = crd
        .pointer("/spec/versions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if versions.is_empty() {
        errs.push((
            "spec.versions".into(),
            "FieldValueInvalid".into(),
            "spec.versions: Invalid value: null: must have exactly one version marked as storage version".into(),
        ));
    }
    let storage: Vec<&Value> = versions.iter().filter(|v| v["storage"] == true).collect();
    if !versions.is_empty() && storage.len() != 1 {
        errs.push((
            "spec.versions".into(),
            "FieldValueInvalid".into(),
            format!(
                "spec.versions: Invalid value: {}: must have exactly one version marked as storage version",
                json!(versions.iter().map(|v| v["name"].clone()).collect::<Vec<_>>())
            ),
        ));
    }
    let mut infos = vec![];
    let singular = match s(crd, "/spec/names/singular") {
        "" => kind.to_lowercase(),
        x => x.to_string(),
    };
    for (i, v) in versions.iter().enumerate() {
        let vname = s(v, "/name").to_string();
        let schema = match v.pointer("/schema/openAPIV3Schema") {
            Some(sch) => match CompiledSchema::compile_at(sch, &format!("spec.versions[{i}].schema.openAPIV3Schema")) {
                Ok(c) => Some(c),
                Err(fe) => {
                    for e in fe {
                        errs.push((e.field.clone(), e.reason().to_string(), e.to_string()));
                    }
                    None
                }
            },
            None => None,
        };
        if v["served"] == false {
            continue;
        }
        let mut subresources = vec![];
        if v.pointer("/subresources/status").is_some() {
            subresources.push("status".to_string());
        }
        let scale = v
            .pointer("/subresources/scale")
            .and_then(crate::scale::ScalePaths::from_crd);
        if scale.is_some() {
            subresources.push("scale".to_string());
        }
        infos.push(ResourceInfo {
            group: group.clone(),
            version: vname,
            plural: plural.clone(),
            singular: singular.clone(),
            kind: kind.clone(),
            namespaced: scope == "Namespaced",
            short_names: strs(crd, "/spec/names/shortNames"),
            categories: strs(crd, "/spec/names/categories"),
            subresources,
            crd: true,
            schema,
            printer_columns: v
                .get("additionalPrinterColumns")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default(),
            scale,
        });
    }
    if !errs.is_empty() {
        return Err(ApiError::invalid(
            "CustomResourceDefinition",
            "apiextensions.k8s.io",
            &name,
            &errs,
        ));
    }
    let mut names = crd
        .pointer("/spec/names")
        .filter(|n| n.is_object())
        .cloned()
        .unwrap_or(json!({}));
    names["singular"] = json!(singular);
    if names.get("listKind").is_none() {
        names["listKind"] = json!(format!("{kind}List"));
    }
    let now = meta::now();
    crd["status"] = json!({
        "acceptedNames": names,
        "conditions": [
            {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts", "message": "no conflicts found", "lastTransitionTime": now},
            {"type": "Established", "status": "True", "reason": "InitialNamesAccepted", "message": "the initial names have been accepted", "lastTransitionTime": now},
        ],
        "storedVersions": storage.iter().map(|v| v["name"].clone()).collect::<Vec<_>>(),
    });
    Ok(infos)
}

/// Register the served versions of a stored CRD (replacing earlier registrations).
pub fn register(reg: &mut Registry, crd: &Value, infos: Vec<ResourceInfo>) {
    reg.unregister(s(crd, "/spec/group"), s(crd, "/spec/names/plural"));
    for i in infos {
        reg.register(i);
    }
}

/// Unregister a deleted CRD's kind and delete all its objects.
pub fn unregister(state: &mut State, crd: &Value) {
    let group = s(crd, "/spec/group").to_string();
    let plural = s(crd, "/spec/names/plural").to_string();
    state.reg.unregister(&group, &plural);
    state.store.drop_key(&format!("{group}/{plural}"));
}

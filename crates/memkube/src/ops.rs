//! Create, update and patch: the write path shared by HTTP handlers and the test hooks.
//! Implements status separation, generation, finalizer bookkeeping, optimistic concurrency,
//! managedFields and CRD schema defaulting/validation.

use crate::meta::{self, meta_mut};
pub use crate::objects::present;
use crate::objects::{apply_conflict, check_type, content, is_dns_subdomain, label, merge_for_update, strip_volatile};
use crate::registry::{Registry, ResourceInfo};
use crate::status::{ApiError, ApiResult};
use crate::store::Store;
use crate::{crd, gc, patch, ssa};
use serde_json::{Map, Value, json};

/// Everything behind the server lock.
#[derive(Debug)]
pub struct State {
    /// Served kinds.
    pub reg: Registry,
    /// Objects and event log.
    pub store: Store,
}

/// Options common to writes.
#[derive(Debug, Clone, Default)]
pub struct WriteOpts {
    /// `dryRun=All`: validate, do not store.
    pub dry_run: bool,
    /// Field manager recorded in managedFields.
    pub manager: String,
    /// `force=true` on apply: take ownership instead of reporting conflicts.
    pub force: bool,
    /// `fieldValidation`: `Strict` rejects unknown fields, `Warn` (default) reports them in
    /// `warnings`, `Ignore` prunes silently (custom resources only).
    pub field_validation: String,
    /// Warnings for the response's `Warning` headers.
    pub warnings: std::cell::RefCell<Vec<String>>,
}

/// Patch flavours by content type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchType {
    /// application/merge-patch+json
    Merge,
    /// application/json-patch+json
    Json,
    /// application/strategic-merge-patch+json
    Strategic,
    /// application/apply-patch+yaml
    Apply,
}

/// Store key of namespaces.
pub const NS_KEY: &str = "/namespaces";

/// Store key of CustomResourceDefinitions.
pub const CRD_KEY: &str = "apiextensions.k8s.io/customresourcedefinitions";

impl State {
    /// 404 when a namespaced request names a namespace that does not exist.
    pub fn check_namespace(&self, info: &ResourceInfo, ns: &str) -> ApiResult<()> {
        if info.namespaced && self.store.get(NS_KEY, "", ns).is_none() {
            return Err(ApiError::not_found("namespaces", "", ns));
        }
        Ok(())
    }

    fn schema_check(
        &self,
        info: &ResourceInfo,
        obj: &mut Value,
        old: Option<&Value>,
        opts: &WriteOpts,
    ) -> ApiResult<()> {
        let Some(schema) = &info.schema else {
            return Ok(());
        };
        let before = obj.clone();
        schema.default_and_prune(obj);
        if opts.field_validation != "Ignore" {
            let mut unknown = vec![];
            crate::objects::removed_fields(&before, obj, "", &mut unknown);
            let msgs: Vec<String> = unknown.iter().map(|f| format!("unknown field \"{f}\"")).collect();
            if !msgs.is_empty() && opts.field_validation == "Strict" {
                return Err(ApiError::bad_request(format!(
                    "{kind} in version \"{v}\" cannot be handled as a {kind}: strict decoding error: {}",
                    msgs.join(", "),
                    kind = info.kind,
                    v = info.version
                )));
            }
            opts.warnings.borrow_mut().extend(msgs);
        }
        let errs = schema.validate(obj, old);
        if errs.is_empty() {
            return Ok(());
        }
        let causes: Vec<(String, String, String)> = errs
            .iter()
            .map(|e| (e.field.clone(), e.reason().to_string(), e.to_string()))
            .collect();
        Err(ApiError::invalid(&info.kind, &info.group, meta::name(obj), &causes))
    }

    /// POST: create a new object.
    pub fn create(&mut self, info: &ResourceInfo, ns: &str, obj: Value, opts: &WriteOpts) -> ApiResult<Value> {
        if !meta::resource_version(&obj).is_empty() {
            // An unclassified error in the apiserver: 500 without a reason.
            return Err(ApiError::internal(
                "resourceVersion should not be set on objects to be created",
            ));
        }
        self.create_with(info, ns, obj, opts, "Update", Value::Object(Map::new()))
    }

    /// Create, recording `op` (Update or Apply) with `fields` in managedFields.
    pub fn create_with(
        &mut self,
        info: &ResourceInfo,
        ns: &str,
        mut obj: Value,
        opts: &WriteOpts,
        op: &str,
        fields: Value,
    ) -> ApiResult<Value> {
        check_type(info, &obj)?;
        if !obj.is_object() {
            return Err(ApiError::bad_request("the body of the request must be an object"));
        }
        let body_ns = meta::namespace(&obj).to_string();
        if info.namespaced {
            if !body_ns.is_empty() && body_ns != ns {
                return Err(ApiError::bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request",
                ));
            }
            meta_mut(&mut obj).insert("namespace".into(), json!(ns));
            self.check_namespace(info, ns)?;
            if self.store.get(NS_KEY, "", ns).is_some_and(meta::is_deleting) {
                let name = meta::name(&obj);
                return Err(ApiError::new(
                    403,
                    "Forbidden",
                    format!(
                        "{} \"{name}\" is forbidden: unable to create new content in namespace {ns} because it is being terminated",
                        crate::status::qualified(&info.plural, &info.group)
                    ),
                ));
            }
        } else {
            meta_mut(&mut obj).remove("namespace");
        }
        if meta::name(&obj).is_empty() {
            let gen_name = meta::meta_str(&obj, "generateName").to_string();
            if gen_name.is_empty() {
                return Err(ApiError::invalid(
                    &info.kind,
                    &info.group,
                    "",
                    &[(
                        "metadata.name".into(),
                        "FieldValueRequired".into(),
                        "metadata.name: Required value: name or generateName is required".into(),
                    )],
                ));
            }
            let n = format!("{gen_name}{}", meta::random_suffix());
            meta_mut(&mut obj).insert("name".into(), json!(n));
        }
        let name = meta::name(&obj).to_string();
        if info.crd
            && self
                .store
                .get(CRD_KEY, "", &format!("{}.{}", info.plural, info.group))
                .is_some_and(meta::is_deleting)
        {
            return Err(ApiError::new(
                405,
                "MethodNotAllowed",
                "create not allowed while custom resource definition is terminating",
            ));
        }
        if info.group == "rbac.authorization.k8s.io" {
            // RBAC names are path segments (`system:controller:x` is fine).
            if name == "." || name == ".." || name.contains(['/', '%']) {
                return Err(ApiError::invalid(
                    &info.kind,
                    &info.group,
                    &name,
                    &[(
                        "metadata.name".into(),
                        "FieldValueInvalid".into(),
                        format!(
                            "metadata.name: Invalid value: \"{name}\": may not contain '/' or '%', and may not be '.' or '..'"
                        ),
                    )],
                ));
            }
        } else if !is_dns_subdomain(&name) && info.plural != "events" {
            return Err(ApiError::invalid(
                &info.kind,
                &info.group,
                &name,
                &[(
                    "metadata.name".into(),
                    "FieldValueInvalid".into(),
                    format!(
                        "metadata.name: Invalid value: \"{name}\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
                    ),
                )],
            ));
        }
        if self.store.get(&info.store_key(), ns_of(info, ns), &name).is_some() {
            return Err(ApiError::already_exists(&info.plural, &info.group, &name));
        }
        {
            let m = meta_mut(&mut obj);
            for k in [
                "resourceVersion",
                "deletionTimestamp",
                "deletionGracePeriodSeconds",
                "managedFields",
            ] {
                m.remove(k);
            }
            m.insert("uid".into(), json!(meta::new_uid()));
            m.insert("creationTimestamp".into(), json!(meta::now()));
            if info.has_generation() {
                m.insert("generation".into(), json!(1));
            }
        }
        if info.has_status() {
            match (info.group.as_str(), info.plural.as_str()) {
                ("", "nodes") => {}
                ("", "namespaces") => obj["status"] = json!({"phase": "Active"}),
                ("", "pods") => obj["status"] = json!({"phase": "Pending"}),
                _ => {
                    if let Value::Object(m) = &mut obj {
                        m.remove("status");
                    }
                }
            }
        }
        if info.plural == "namespaces" && info.group.is_empty() {
            obj["spec"] = json!({"finalizers": ["kubernetes"]});
        }
        let obj = label(info, obj);
        self.finish(info, None, obj, opts, op, None, fields)
    }

    /// PUT on the resource (`sub` None) or on a subresource (`status`, `approval`).
    pub fn update(
        &mut self,
        info: &ResourceInfo,
        ns: &str,
        name: &str,
        body: Value,
        sub: Option<&str>,
        opts: &WriteOpts,
    ) -> ApiResult<Value> {
        if !body.is_object() {
            return Err(ApiError::bad_request(format!("Object 'Kind' is missing in '{body}'")));
        }
        check_type(info, &body)?;
        let body_ns = meta::namespace(&body);
        if info.namespaced && !body_ns.is_empty() && body_ns != ns {
            return Err(ApiError::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            ));
        }
        let body_name = meta::name(&body);
        if !body_name.is_empty() && body_name != name {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({body_name}) does not match the name on the URL ({name})"
            )));
        }
        let old = self
            .store
            .get(&info.store_key(), ns_of(info, ns), name)
            .cloned()
            .ok_or_else(|| ApiError::not_found(&info.plural, &info.group, name))?;
        let old = present(info, old);
        let rv = meta::resource_version(&body);
        if !rv.is_empty() && rv != meta::resource_version(&old) {
            return Err(ApiError::conflict(&info.plural, &info.group, name));
        }
        let body_uid = meta::uid(&body);
        if !body_uid.is_empty() && body_uid != meta::uid(&old) {
            return Err(ApiError::conflict_msg(
                &info.plural,
                &info.group,
                name,
                &format!(
                    "Precondition failed: UID in precondition: {body_uid}, UID in object meta: {}",
                    meta::uid(&old)
                ),
            ));
        }
        let new = merge_for_update(info, &old, body, sub);
        self.finish(info, Some(&old), new, opts, "Update", sub, Value::Object(Map::new()))
    }

    /// PATCH in any flavour; apply creates when absent.
    #[allow(clippy::too_many_arguments)]
    pub fn patch(
        &mut self,
        info: &ResourceInfo,
        ns: &str,
        name: &str,
        sub: Option<&str>,
        ptype: PatchType,
        body: Value,
        opts: &WriteOpts,
    ) -> ApiResult<Value> {
        if ptype == PatchType::Strategic && info.crd {
            return Err(ApiError::unsupported_media(
                "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml",
            ));
        }
        if ptype == PatchType::Apply && !body.is_object() {
            return Err(ApiError::bad_request(format!("Object 'Kind' is missing in '{body}'")));
        }
        let existing = self.store.get(&info.store_key(), ns_of(info, ns), name).cloned();
        let Some(old) = existing else {
            if ptype != PatchType::Apply {
                return Err(ApiError::not_found(&info.plural, &info.group, name));
            }
            let fields = ssa::fieldset(&body);
            check_apply_type(info, &body)?;
            if meta::name(&body) != name {
                return Err(ApiError::bad_request(format!(
                    "the name of the object ({}) does not match the name on the URL ({name})",
                    meta::name(&body)
                )));
            }
            return self.create_with(info, ns, body, opts, "Apply", fields);
        };
        let old = present(info, old);
        let mut target = old.clone();
        let mut op = "Update";
        let mut fields = Value::Object(Map::new());
        match ptype {
            PatchType::Merge => patch::merge(&mut target, &body),
            PatchType::Strategic => patch::strategic(&mut target, &body),
            PatchType::Json => patch::json_patch(&mut target, &body).map_err(|_| ApiError::patch_rejected())?,
            PatchType::Apply => {
                check_apply_type(info, &body)?;
                let rv = meta::resource_version(&body);
                if !rv.is_empty() && rv != meta::resource_version(&old) {
                    return Err(ApiError::conflict(&info.plural, &info.group, name));
                }
                op = "Apply";
                fields = ssa::fieldset(&body);
                if !opts.force {
                    let c = ssa::conflicts(&old, &body, &opts.manager);
                    if !c.is_empty() {
                        return Err(apply_conflict(&c));
                    }
                }
                let entries = old
                    .pointer("/metadata/managedFields")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default();
                let prev = entries
                    .iter()
                    .find(|e| e["manager"] == opts.manager.as_str() && e["operation"] == "Apply")
                    .map(|e| e["fieldsV1"].clone());
                let others: Vec<Value> = entries
                    .iter()
                    .filter(|e| !(e["manager"] == opts.manager.as_str() && e["operation"] == "Apply"))
                    .map(|e| e["fieldsV1"].clone())
                    .collect();
                let mut applied = body.clone();
                if let Some(m) = applied.get_mut("metadata").and_then(Value::as_object_mut) {
                    m.retain(|k, _| matches!(k.as_str(), "labels" | "annotations" | "finalizers" | "ownerReferences"));
                }
                ssa::apply_merge(&mut target, &applied);
                if let Some(prev) = prev {
                    ssa::remove_dropped(&mut target, &prev, &fields, &others);
                }
            }
        }
        if !target.is_object() {
            return Err(ApiError::bad_request("the patch turned the object into a non-object"));
        }
        let (new_uid, old_uid) = (meta::uid(&target), meta::uid(&old));
        if !new_uid.is_empty() && new_uid != old_uid {
            // The apiserver validates metadata twice on patches and reports the cause twice.
            let cause = (
                "metadata.uid".to_string(),
                "FieldValueInvalid".to_string(),
                format!("metadata.uid: Invalid value: \"{new_uid}\": field is immutable"),
            );
            return Err(ApiError::invalid(
                &info.kind,
                &info.group,
                name,
                &[cause.clone(), cause],
            ));
        }
        if sub.is_some() {
            let new = merge_for_update(info, &old, target, sub);
            return self.finish(info, Some(&old), new, opts, op, sub, fields);
        }
        let rv = meta::resource_version(&target);
        if !rv.is_empty() && rv != meta::resource_version(&old) {
            return Err(ApiError::conflict(&info.plural, &info.group, name));
        }
        let new = merge_for_update(info, &old, target, None);
        self.finish(info, Some(&old), new, opts, op, sub, fields)
    }

    /// Common tail of every write: schema, finalizers, generation, no-op detection, storage.
    #[allow(clippy::too_many_arguments)]
    fn finish(
        &mut self,
        info: &ResourceInfo,
        old: Option<&Value>,
        mut new: Value,
        opts: &WriteOpts,
        op: &str,
        sub: Option<&str>,
        fields: Value,
    ) -> ApiResult<Value> {
        let name = meta::name(&new).to_string();
        drop_empty_metadata(&mut new);
        builtin_defaults(info, &mut new);
        self.schema_check(info, &mut new, old, opts)?;
        if crate::csr::is_csr(info) {
            crate::csr::validate(info, old, &new)?;
        }
        let is_crd = info.group == "apiextensions.k8s.io" && info.plural == "customresourcedefinitions";
        let crd_infos = if is_crd {
            Some(crd::prepare(&mut new, old.is_none())?)
        } else {
            None
        };
        if let Some(old) = old {
            if meta::is_deleting(old) {
                let of = meta::finalizers(old);
                let added: Vec<String> = meta::finalizers(&new).into_iter().filter(|f| !of.contains(f)).collect();
                if !added.is_empty() {
                    // Go's %#v of the []string, and (as the apiserver validates metadata twice
                    // on updates) the cause twice.
                    let quoted: Vec<String> = added.iter().map(|f| format!("{:?}", f)).collect();
                    let msg = format!(
                        "metadata.finalizers: Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers []string{{{}}}",
                        quoted.join(", ")
                    );
                    let cause = (
                        "metadata.finalizers".to_string(),
                        "FieldValueForbidden".to_string(),
                        msg,
                    );
                    return Err(ApiError::invalid(
                        &info.kind,
                        &info.group,
                        &name,
                        &[cause.clone(), cause],
                    ));
                }
            }
            if strip_volatile(old) == strip_volatile(&new) {
                // Unchanged content: a no-op, unless an apply changes field ownership.
                if op != "Apply" {
                    return Ok(label(info, old.clone()));
                }
                let mut owned = new.clone();
                ssa::record(
                    Some(old),
                    &mut owned,
                    &info.api_version(),
                    &opts.manager,
                    op,
                    sub,
                    &fields,
                );
                if ssa::without_time(old) == ssa::without_time(&owned) {
                    return Ok(label(info, old.clone()));
                }
            }
            if info.has_generation() {
                let generation = old.pointer("/metadata/generation").and_then(Value::as_i64).unwrap_or(1);
                let bump = content(old, info.has_status()) != content(&new, info.has_status());
                meta_mut(&mut new).insert(
                    "generation".into(),
                    json!(if bump { generation + 1 } else { generation }),
                );
            }
        }
        ssa::record(old, &mut new, &info.api_version(), &opts.manager, op, sub, &fields);
        if opts.dry_run {
            return Ok(new);
        }
        let new = if crate::events::is_event(info) {
            crate::events::to_storage(info, new)
        } else {
            new
        };
        let key = info.store_key();
        let ns = meta::namespace(&new).to_string();
        if meta::is_deleting(&new) && meta::finalizers(&new).is_empty() {
            let out = self.store.remove_as(&key, &ns, &name, Some(new)).unwrap_or_default();
            self.after_delete(&key, &out);
            gc::collect(self);
            // The apiserver answers with the object as written but never stored: it keeps the
            // last stored resourceVersion (the DELETED event carries the new one).
            let mut answer = present(info, out);
            if let Some(old) = old {
                meta_mut(&mut answer).insert("resourceVersion".into(), json!(meta::resource_version(old)));
            }
            return Ok(answer);
        }
        let stored = self.store.put(&key, new);
        if key == "/pods" || key == crate::eviction::PDB_KEY {
            self.refresh_pdbs();
        }
        if let Some(infos) = crd_infos {
            crd::register(&mut self.reg, &stored, infos);
        }
        if !meta::owner_refs(&stored).is_empty() {
            let t = std::time::Instant::now();
            gc::collect(self);
            if std::env::var("MK_DEBUG").is_ok() {
                eprintln!("collect {:?}", t.elapsed());
            }
        }
        Ok(present(info, stored))
    }

    /// Side effects of an object leaving the store (CRDs unregister their kind).
    pub fn after_delete(&mut self, key: &str, obj: &Value) {
        if key == CRD_KEY {
            crd::unregister(self, obj);
        }
        if key == NS_KEY {
            let ns = meta::name(obj).to_string();
            for k in self.reg.namespaced_store_keys() {
                for o in self.store.list(&k, Some(&ns)) {
                    self.store.remove(&k, &ns, meta::name(&o));
                }
            }
        }
    }
}

/// Go's `omitempty`: empty labels, annotations, finalizers and ownerReferences are not kept.
fn drop_empty_metadata(obj: &mut Value) {
    let m = meta_mut(obj);
    for k in ["labels", "annotations", "finalizers", "ownerReferences"] {
        let empty = match m.get(k) {
            Some(Value::Array(a)) => a.is_empty(),
            Some(Value::Object(o)) => o.is_empty(),
            Some(Value::Null) => true,
            _ => false,
        };
        if empty {
            m.remove(k);
        }
    }
}

/// The few built-in defaults controllers rely on: apps/v1 workloads get `spec.replicas: 1`,
/// Secrets `type: Opaque`, and a Secret's write-only `stringData` is folded into `data`
/// (base64), as the API server does.
fn builtin_defaults(info: &ResourceInfo, obj: &mut Value) {
    if info.group.is_empty()
        && info.plural == "secrets"
        && let Some(map) = obj.as_object_mut()
        && map.get("type").is_none_or(|t| t.is_null() || t == "")
    {
        map.insert("type".into(), json!("Opaque"));
    }
    if info.group.is_empty()
        && info.plural == "secrets"
        && let Some(map) = obj.as_object_mut()
        && let Some(Value::Object(strings)) = map.remove("stringData")
    {
        use base64::Engine as _;
        let data = map.entry("data").or_insert_with(|| json!({}));
        if !data.is_object() {
            *data = json!({});
        }
        if let Some(data) = data.as_object_mut() {
            for (key, value) in strings {
                let text = match value {
                    Value::String(s) => s,
                    other => other.to_string(),
                };
                data.insert(key, json!(base64::engine::general_purpose::STANDARD.encode(text)));
            }
        }
    }
    if info.group == "apps"
        && matches!(info.plural.as_str(), "deployments" | "replicasets" | "statefulsets")
        && let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut)
        && spec.get("replicas").is_none_or(Value::is_null)
    {
        spec.insert("replicas".into(), json!(1));
    }
}

fn ns_of<'a>(info: &ResourceInfo, ns: &'a str) -> &'a str {
    if info.namespaced { ns } else { "" }
}

/// Like [`check_type`], worded as the apiserver's apply path: `invalid object type: <gvk>`.
fn check_apply_type(info: &ResourceInfo, body: &Value) -> ApiResult<()> {
    let av = body.get("apiVersion").and_then(Value::as_str).unwrap_or("");
    let kind = body.get("kind").and_then(Value::as_str).unwrap_or("");
    if kind.is_empty() || av.is_empty() || (av == info.api_version() && kind == info.kind) {
        return check_type(info, body);
    }
    let gv = if av.contains('/') {
        av.to_string()
    } else {
        format!("/{av}")
    };
    Err(ApiError::bad_request(format!("invalid object type: {gv}, Kind={kind}")))
}

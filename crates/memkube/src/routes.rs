//! HTTP front end: parses Kubernetes API paths by hand (so any malformed path is a clean 404),
//! decodes JSON or YAML bodies, and dispatches to discovery, CRUD, watch, table, eviction and
//! TokenRequest.

use crate::discovery;
use crate::gc::DeleteOpts;
use crate::hooks::{FaultMode, Injected, RequestInfo};
use crate::ops::{PatchType, WriteOpts, present};
use crate::selectors::{FieldSelector, LabelSelector, Selectors};
use crate::server::Shared;
use crate::status::{ApiError, ApiResult};
use crate::watch::{self, WatchParams};
use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use http::{HeaderMap, Method};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

const MAX_BODY: usize = 32 * 1024 * 1024;

/// A parsed resource path.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ResPath {
    group: String,
    version: String,
    plural: String,
    ns: Option<String>,
    name: Option<String>,
    sub: Option<String>,
}

enum Route {
    Json(Value),
    NotFound,
    Resource(ResPath),
}

fn parse_path(path: &str, reg: &crate::registry::Registry) -> Route {
    let segs: Vec<&str> = path.trim_end_matches('/').split('/').skip(1).collect();
    let (group, version, rest) = match segs.as_slice() {
        ["version"] => return Route::Json(discovery::version()),
        ["healthz" | "readyz" | "livez"] => return Route::Json(json!("ok")),
        ["api"] => return Route::Json(discovery::api()),
        ["apis"] => return Route::Json(discovery::apis(reg)),
        ["apis", g] => return discovery::group(reg, g).map_or(Route::NotFound, Route::Json),
        ["api", v] => return discovery::resources(reg, "", v).map_or(Route::NotFound, Route::Json),
        ["apis", g, v] => return discovery::resources(reg, g, v).map_or(Route::NotFound, Route::Json),
        ["api", v, rest @ ..] => ("", *v, rest),
        ["apis", g, v, rest @ ..] => (*g, *v, rest),
        _ => return Route::NotFound,
    };
    let ns_sub = group.is_empty() && rest.len() == 3 && matches!(rest[2], "status" | "finalize");
    let (ns, rest) = if rest.first() == Some(&"namespaces") && rest.len() >= 3 && !ns_sub {
        (Some(rest[1].to_string()), &rest[2..])
    } else {
        (None, rest)
    };
    if rest.is_empty() || rest.len() > 3 || rest.iter().any(|s| s.is_empty()) || ns.as_deref() == Some("") {
        return Route::NotFound;
    }
    Route::Resource(ResPath {
        group: group.into(),
        version: version.into(),
        plural: rest[0].into(),
        ns,
        name: rest.get(1).map(|s| s.to_string()),
        sub: rest.get(2).map(|s| s.to_string()),
    })
}

/// Add `Warning: 299` headers (kubectl prints them as `Warning: ...`).
fn with_warnings(mut r: Response, opts: &WriteOpts) -> Response {
    for w in opts.warnings.borrow_mut().drain(..) {
        let text = format!("299 - {}", serde_json::Value::String(w));
        if let Ok(h) = http::HeaderValue::from_str(&text) {
            r.headers_mut().append(http::header::WARNING, h);
        }
    }
    r
}

fn json_resp(code: u16, v: &Value) -> Response {
    let code = http::StatusCode::from_u16(code).unwrap_or(http::StatusCode::OK);
    (code, [(http::header::CONTENT_TYPE, "application/json")], v.to_string()).into_response()
}

fn header(h: &HeaderMap, name: http::header::HeaderName) -> &str {
    h.get(name).and_then(|v| v.to_str().ok()).unwrap_or("")
}

/// Decode a JSON or YAML request body.
fn decode(ct: &str, body: &[u8]) -> ApiResult<Value> {
    if ct.contains("protobuf") {
        return Err(ApiError::unsupported_media(format!(
            "the body of the request was in an unknown format - accepted media types include: application/json, application/yaml ({ct} is not supported)"
        )));
    }
    if body.iter().all(u8::is_ascii_whitespace) {
        return Err(ApiError::bad_request("Object 'Kind' is missing in ''"));
    }
    if ct.contains("yaml") {
        return serde_yaml::from_slice::<Value>(body)
            .map_err(|e| ApiError::bad_request(format!("error converting YAML to JSON: yaml: {e}")));
    }
    match serde_json::from_slice::<Value>(body) {
        Ok(v) => Ok(v),
        Err(e) if ct.contains("json") => Err(ApiError::bad_request(format!(
            "couldn't get version/kind; json parse error: {e}"
        ))),
        Err(e) => serde_yaml::from_slice::<Value>(body)
            .map_err(|_| ApiError::bad_request(format!("couldn't get version/kind; json parse error: {e}"))),
    }
}

/// A create or update body; a truncated JSON document is worded as the apiserver does.
fn decode_object(info: &crate::registry::ResourceInfo, ct: &str, bytes: &[u8]) -> ApiResult<Value> {
    if ct.contains("json")
        && let Err(e) = serde_json::from_slice::<Value>(bytes)
        && e.is_eof()
        && !bytes.iter().all(u8::is_ascii_whitespace)
    {
        return Err(ApiError::bad_request(format!(
            "the object provided is unrecognized (must be of type {}): couldn't get version/kind; json parse error: unexpected end of JSON input ({})",
            info.kind,
            String::from_utf8_lossy(bytes)
        )));
    }
    decode(ct, bytes)
}

/// Go's wording for a truncated document, serde's for anything else.
fn json_error_text(e: &serde_json::Error) -> String {
    if e.is_eof() {
        "unexpected end of JSON input".into()
    } else {
        e.to_string()
    }
}

/// A PATCH body, with the apiserver's `error decoding patch` / `error decoding YAML` prefixes.
fn decode_patch(pt: PatchType, bytes: &[u8]) -> ApiResult<Value> {
    if pt == PatchType::Apply {
        return decode("application/yaml", bytes)
            .map_err(|e| ApiError::bad_request(format!("error decoding YAML: {}", e.message)));
    }
    let v: Value = serde_json::from_slice(bytes)
        .map_err(|e| ApiError::bad_request(format!("error decoding patch: {}", json_error_text(&e))))?;
    if pt == PatchType::Json && !v.is_array() {
        return Err(ApiError::bad_request(format!(
            "error decoding patch: json: cannot unmarshal {} into Go value of type []handlers.jsonPatchOp",
            match v {
                Value::Object(_) => "object",
                Value::String(_) => "string",
                Value::Number(_) => "number",
                Value::Bool(_) => "bool",
                _ => "null",
            }
        )));
    }
    Ok(v)
}

fn patch_type(ct: &str) -> ApiResult<PatchType> {
    let base = ct.split(';').next().unwrap_or("").trim();
    match base {
        "application/merge-patch+json" => Ok(PatchType::Merge),
        "application/json-patch+json" => Ok(PatchType::Json),
        "application/strategic-merge-patch+json" => Ok(PatchType::Strategic),
        "application/apply-patch+yaml" => Ok(PatchType::Apply),
        _ => {
            let mut e = ApiError::unsupported_media("415: Unsupported Media Type");
            e.details = Some(json!({}));
            Err(e)
        }
    }
}

fn continue_token(ns: &str, name: &str) -> String {
    format!("{ns}/{name}").bytes().map(|b| format!("{b:02x}")).collect()
}

fn parse_continue(tok: &str) -> ApiResult<(String, String)> {
    let bad = || {
        ApiError::bad_request(
            "continue key is not valid: incorrect encoded start resourceVersion (version meta.k8s.io/v1)",
        )
    };
    if !tok.len().is_multiple_of(2) || !tok.is_ascii() {
        return Err(bad());
    }
    let bytes: Result<Vec<u8>, _> = (0..tok.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&tok[i..i + 2], 16))
        .collect();
    let s = String::from_utf8(bytes.map_err(|_| bad())?).map_err(|_| bad())?;
    let (a, b) = s.split_once('/').ok_or_else(bad)?;
    Ok((a.to_string(), b.to_string()))
}

fn user_agent_manager(h: &HeaderMap) -> String {
    let ua = header(h, http::header::USER_AGENT);
    let m = ua.split('/').next().unwrap_or("").trim();
    if m.is_empty() { "unknown".into() } else { m.to_string() }
}

/// ListOptions validation: `resourceVersionMatch` takes `Exact` or `NotOlderThan`, and only
/// next to a `resourceVersion` (422 like the apiserver's).
fn check_list_options(rv: &str, rv_match: &str) -> ApiResult<()> {
    let cause = match rv_match {
        "" => return Ok(()),
        "Exact" | "NotOlderThan" if rv.is_empty() => (
            "FieldValueForbidden",
            "resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided",
        ),
        "Exact" | "NotOlderThan" => return Ok(()),
        _ => ("FieldValueNotSupported", ""),
    };
    let msg = if cause.1.is_empty() {
        format!(
            "resourceVersionMatch: Unsupported value: \"{rv_match}\": supported values: \"Exact\", \"NotOlderThan\", \"\""
        )
    } else {
        cause.1.to_string()
    };
    Err(ApiError::invalid(
        "ListOptions",
        "meta.k8s.io",
        "",
        &[("resourceVersionMatch".into(), cause.0.into(), msg)],
    ))
}

/// Watch ListOptions validation: `resourceVersionMatch` only with `sendInitialEvents`, and
/// then only `NotOlderThan` (422 like the apiserver's; memkube serves streaming lists as if the
/// WatchList feature gate were on).
fn check_watch_options(rv_match: &str, send_initial_events: bool) -> ApiResult<()> {
    let mut causes = vec![];
    if send_initial_events && rv_match != "NotOlderThan" {
        causes.push((
            "resourceVersionMatch".to_string(),
            "FieldValueForbidden".to_string(),
            "resourceVersionMatch: Forbidden: sendInitialEvents requires setting resourceVersionMatch to NotOlderThan"
                .to_string(),
        ));
    }
    if !rv_match.is_empty() && !send_initial_events {
        causes.push((
            "resourceVersionMatch".into(),
            "FieldValueForbidden".into(),
            "resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided"
                .into(),
        ));
    }
    if !rv_match.is_empty() && rv_match != "NotOlderThan" {
        causes.push((
            "resourceVersionMatch".into(),
            "FieldValueNotSupported".into(),
            format!("resourceVersionMatch: Unsupported value: \"{rv_match}\": supported values: \"NotOlderThan\""),
        ));
    }
    if causes.is_empty() {
        return Ok(());
    }
    Err(ApiError::invalid("ListOptions", "meta.k8s.io", "", &causes))
}

/// The single fallback handler.
pub async fn handle(State(shared): State<Arc<Shared>>, req: Request) -> Response {
    let mut after = None;
    let answer = handle_inner(shared, req, &mut after).await;
    match (after, answer) {
        (
            Some(Injected {
                mode: FaultMode::Hang, ..
            }),
            _,
        ) => std::future::pending().await,
        (Some(Injected { error, .. }), _) | (None, Err(error)) => error.into_response(),
        (None, Ok(r)) => r,
    }
}

/// Serve `req`; a fault that lets the request be carried out is left in `after`.
async fn handle_inner(shared: Arc<Shared>, req: Request, after: &mut Option<Injected>) -> ApiResult<Response> {
    let latency = shared.hooks().latency;
    if let Some(d) = latency {
        tokio::time::sleep(d).await;
    }
    let (parts, body) = req.into_parts();
    let path = parts.uri.path().to_string();
    if path == "/openapi/v2" {
        // An empty protobuf OpenAPI document: kubectl finds no schema for any kind and skips
        // client-side validation, so `kubectl apply` works without `--validate=false`.
        return Ok((
            [(
                http::header::CONTENT_TYPE,
                "application/com.github.proto-openapi.spec.v2.v1.0+protobuf",
            )],
            Vec::<u8>::new(),
        )
            .into_response());
    }
    if path.starts_with("/openapi/") {
        return Err(ApiError::no_resource());
    }
    let q: HashMap<String, String> =
        serde_urlencoded::from_str::<Vec<(String, String)>>(parts.uri.query().unwrap_or(""))
            .map_err(|e| ApiError::bad_request(format!("invalid query: {e}")))?
            .into_iter()
            .collect();
    let route = {
        let st = shared.lock();
        parse_path(&path, &st.reg)
    };
    let rp = match route {
        Route::Json(v) if parts.method == Method::GET => return Ok(json_resp(200, &v)),
        Route::Json(_) => return Err(ApiError::method_not_allowed()),
        Route::NotFound => return Err(ApiError::no_resource()),
        Route::Resource(rp) => rp,
    };
    let info = {
        let st = shared.lock();
        st.reg.get(&rp.group, &rp.version, &rp.plural)
    };
    let Some(info) = info else {
        return Err(ApiError::no_resource());
    };
    if (rp.ns.is_some() && !info.namespaced) || rp.sub.as_ref().is_some_and(|s| !info.has_sub(s)) {
        return Err(ApiError::no_resource());
    }
    let accept = header(&parts.headers, http::header::ACCEPT).to_string();
    if accept.contains("protobuf") && !accept.contains("json") && !accept.contains("*/*") && !accept.contains("yaml") {
        return Err(ApiError::new(
            406,
            "NotAcceptable",
            "only the following media types are accepted: application/json, application/yaml",
        ));
    }
    let watching = matches!(q.get("watch").map(String::as_str), Some("true" | "1"));
    let verb = match (&parts.method, rp.name.is_some()) {
        (&Method::GET, true) => "get",
        (&Method::GET, false) if watching => "watch",
        (&Method::GET, false) => "list",
        (&Method::POST, _) => "create",
        (&Method::PUT, true) => "update",
        (&Method::PATCH, true) => "patch",
        (&Method::DELETE, true) => "delete",
        (&Method::DELETE, false) => "deletecollection",
        _ => return Err(ApiError::method_not_allowed()),
    };
    let ri = RequestInfo {
        verb: verb.into(),
        group: info.group.clone(),
        resource: info.plural.clone(),
        name: rp.name.clone().unwrap_or_default(),
        namespace: rp.ns.clone().unwrap_or_default(),
        subresource: rp.sub.clone().unwrap_or_default(),
        user: header(
            &parts.headers,
            http::header::HeaderName::from_static("impersonate-user"),
        )
        .to_string(),
    };
    match shared.hooks().on_request(&ri) {
        Some(Injected {
            error,
            mode: FaultMode::Refuse,
        }) => return Err(error),
        injected => *after = injected,
    }
    let bytes = axum::body::to_bytes(body, MAX_BODY)
        .await
        .map_err(|e| ApiError::bad_request(format!("reading body: {e}")))?;
    let ct = header(&parts.headers, http::header::CONTENT_TYPE).to_string();
    let dry_run = q.get("dryRun").is_some_and(|v| v == "All");
    let manager = q
        .get("fieldManager")
        .cloned()
        .unwrap_or_else(|| user_agent_manager(&parts.headers));
    let force = q.get("force").is_some_and(|v| v == "true");
    let field_validation = q.get("fieldValidation").cloned().unwrap_or_else(|| "Warn".into());
    let opts = WriteOpts {
        dry_run,
        manager,
        force,
        field_validation,
        ..Default::default()
    };
    let ns = rp.ns.clone().unwrap_or_default();
    let name = rp.name.clone().unwrap_or_default();
    let sub = rp.sub.as_deref();
    let table = accept.contains("as=Table");
    let meta_only = !table && accept.contains("as=PartialObjectMetadata");
    let include = q.get("includeObject").cloned().unwrap_or_else(|| "Metadata".into());
    let sels = || -> ApiResult<Selectors> {
        Ok(Selectors {
            labels: LabelSelector::parse(q.get("labelSelector").map_or("", String::as_str))
                .map_err(ApiError::bad_request)?,
            fields: {
                let f = FieldSelector::parse(q.get("fieldSelector").map_or("", String::as_str))
                    .map_err(ApiError::bad_request)?;
                f.check_supported(&info).map_err(ApiError::bad_request)?;
                f
            },
        })
    };
    let list_ns = rp.ns.clone().filter(|_| info.namespaced);
    if sub == Some("scale") {
        return scale_request(&shared, &info, &ns, &name, verb, &ct, &bytes, &opts);
    }
    match verb {
        "watch" => {
            check_watch_options(
                q.get("resourceVersionMatch").map_or("", String::as_str),
                q.get("sendInitialEvents").is_some_and(|v| v == "true"),
            )?;
            let p = WatchParams {
                resource_version: q.get("resourceVersion").cloned().unwrap_or_default(),
                bookmarks: q.get("allowWatchBookmarks").is_some_and(|v| v == "true"),
                send_initial_events: q.get("sendInitialEvents").is_some_and(|v| v == "true"),
                timeout: q
                    .get("timeoutSeconds")
                    .and_then(|t| t.parse::<u64>().ok())
                    .map(Duration::from_secs),
                table: table.then(|| include.clone()),
                meta_only,
            };
            let sel = sels()?;
            watch::start(shared.clone(), info, list_ns, sel, p)
        }
        "list" => {
            let sel = sels()?;
            let rv_param = q.get("resourceVersion").map_or("", String::as_str);
            check_list_options(rv_param, q.get("resourceVersionMatch").map_or("", String::as_str))?;
            // Like a real apiserver, listing in a missing namespace is an empty list.
            let st = shared.lock();
            let rv = st.store.rv().to_string();
            let mut items: Vec<Value> = st
                .store
                .list(&info.store_key(), list_ns.as_deref())
                .into_iter()
                .map(|o| present(&info, o))
                .filter(|o| sel.matches(o))
                .collect();
            drop(st);
            if let Some(tok) = q.get("continue").filter(|t| !t.is_empty()) {
                let after = parse_continue(tok)?;
                items.retain(|o| (crate::meta::namespace(o).to_string(), crate::meta::name(o).to_string()) > after);
            }
            let mut md = json!({"resourceVersion": rv});
            // resourceVersion=0 is served from the watch cache, which ignores `limit`.
            if let Some(limit) = q.get("limit").and_then(|l| l.parse::<usize>().ok()).filter(|l| *l > 0)
                && rv_param != "0"
                && items.len() > limit
            {
                md["remainingItemCount"] = json!(items.len() - limit);
                items.truncate(limit);
                if let Some(last) = items.last() {
                    md["continue"] = json!(continue_token(crate::meta::namespace(last), crate::meta::name(last)));
                }
            }
            if table {
                return Ok(json_resp(200, &crate::table::table(&info, &items, &rv, &include)));
            }
            if meta_only {
                let items: Vec<Value> = items.iter().map(crate::table::partial).collect();
                return Ok(json_resp(
                    200,
                    &json!({"kind": "PartialObjectMetadataList", "apiVersion": "meta.k8s.io/v1", "metadata": md, "items": items}),
                ));
            }
            Ok(json_resp(
                200,
                &json!({"kind": format!("{}List", info.kind), "apiVersion": info.api_version(), "metadata": md, "items": items}),
            ))
        }
        "get" => {
            let st = shared.lock();
            let key_ns = if info.namespaced { ns.as_str() } else { "" };
            let obj = st
                .store
                .get(&info.store_key(), key_ns, &name)
                .cloned()
                .ok_or_else(|| ApiError::not_found(&info.plural, &info.group, &name))?;
            let rv = st.store.rv().to_string();
            drop(st);
            let obj = present(&info, obj);
            if table {
                return Ok(json_resp(200, &crate::table::table(&info, &[obj], &rv, &include)));
            }
            if meta_only {
                return Ok(json_resp(200, &crate::table::partial(&obj)));
            }
            Ok(json_resp(200, &obj))
        }
        "create" => {
            let body = decode_object(&info, &ct, &bytes)?;
            if sub == Some("eviction") {
                let out = shared.lock().evict(&info, &ns, &name, &body)?;
                return Ok(json_resp(201, &out));
            }
            if sub == Some("token") {
                let out = shared.lock().token_request(&info, &ns, &name, &body)?;
                return Ok(json_resp(201, &out));
            }
            if rp.name.is_some() {
                return Err(ApiError::method_not_allowed());
            }
            let out = shared.lock().create(&info, &ns, body, &opts)?;
            Ok(with_warnings(json_resp(201, &out), &opts))
        }
        "update" => {
            let body = decode_object(&info, &ct, &bytes)?;
            let out = shared.lock().update(&info, &ns, &name, body, sub, &opts)?;
            Ok(with_warnings(json_resp(200, &out), &opts))
        }
        "patch" => {
            let pt = patch_type(&ct)?;
            let body = decode_patch(pt, &bytes)?;
            if pt == PatchType::Apply && !q.contains_key("fieldManager") {
                return Err(ApiError::invalid(
                    "PatchOptions",
                    "meta.k8s.io",
                    "",
                    &[(
                        "fieldManager".into(),
                        "FieldValueRequired".into(),
                        "fieldManager: Required value: is required for apply patch".into(),
                    )],
                ));
            }
            let mut st = shared.lock();
            let key_ns = if info.namespaced { ns.as_str() } else { "" };
            let existed = st.store.get(&info.store_key(), key_ns, &name).is_some();
            let out = st.patch(&info, &ns, &name, sub, pt, body, &opts)?;
            drop(st);
            if !existed {
                // A real API server authorizes an apply that creates the object as `create`
                // too: record it, so RBAC checks on recorded requests ask for that verb.
                shared.hooks().record_authorization(&RequestInfo {
                    verb: "create".into(),
                    ..ri.clone()
                });
            }
            Ok(with_warnings(json_resp(if existed { 200 } else { 201 }, &out), &opts))
        }
        "delete" => {
            let d = delete_opts(&ct, &bytes, &q)?;
            let (out, gone) = {
                let mut st = shared.lock();
                let out = st.delete(&info, &ns, &name, &d)?;
                let key_ns = if info.namespaced { ns.as_str() } else { "" };
                let gone = st.store.get(&info.store_key(), key_ns, &name).is_none();
                (out, gone)
            };
            let immediate = gone || (d.dry_run && crate::meta::finalizers(&out).is_empty());
            if immediate && !info.returns_deleted_object() {
                return Ok(json_resp(200, &deleted_status(&info, &out)));
            }
            Ok(json_resp(if !gone && d.cascade_requested { 202 } else { 200 }, &out))
        }
        _ => {
            let mut d = delete_opts(&ct, &bytes, &q)?;
            d.dry_run |= dry_run;
            let sel = sels()?;
            let items = shared.lock().delete_collection(&info, list_ns.as_deref(), &sel, &d)?;
            Ok(json_resp(
                200,
                &json!({"kind": format!("{}List", info.kind), "apiVersion": info.api_version(), "metadata": {}, "items": items}),
            ))
        }
    }
}

/// GET, PUT or PATCH on `/scale`: an `autoscaling/v1 Scale` view of the parent's replicas.
#[allow(clippy::too_many_arguments)]
fn scale_request(
    shared: &Shared,
    info: &crate::registry::ResourceInfo,
    ns: &str,
    name: &str,
    verb: &str,
    ct: &str,
    bytes: &[u8],
    opts: &WriteOpts,
) -> ApiResult<Response> {
    let mut st = shared.lock();
    let key_ns = if info.namespaced { ns } else { "" };
    let cur = st
        .store
        .get(&info.store_key(), key_ns, name)
        .cloned()
        .ok_or_else(|| ApiError::not_found(&info.plural, &info.group, name))?;
    let cur = present(info, cur);
    let scale = crate::scale::scale_of(info, &cur);
    let wanted = match verb {
        "get" => return Ok(json_resp(200, &scale)),
        "update" => decode(ct, bytes)?,
        "patch" => {
            let pt = patch_type(ct)?;
            let body = if pt == PatchType::Apply {
                decode("application/yaml", bytes)?
            } else {
                decode("application/json", bytes)?
            };
            let mut s = scale;
            match pt {
                PatchType::Merge | PatchType::Apply => crate::patch::merge(&mut s, &body),
                PatchType::Strategic => crate::patch::strategic(&mut s, &body),
                PatchType::Json => crate::patch::json_patch(&mut s, &body).map_err(|e| match e {
                    crate::patch::JsonPatchError::Decode(m) => ApiError::bad_request(m),
                    crate::patch::JsonPatchError::Apply(m) => ApiError::new(
                        422,
                        "Invalid",
                        format!("the server rejected our request due to an error in our request: {m}"),
                    ),
                })?,
            }
            s
        }
        _ => return Err(ApiError::method_not_allowed()),
    };
    let obj = crate::scale::apply_scale(info, &cur, &wanted)?;
    let out = st.update(info, ns, name, obj, None, opts)?;
    Ok(with_warnings(json_resp(200, &crate::scale::scale_of(info, &out)), opts))
}

/// The `Status` an immediate DELETE answers with (unless the kind returns the object).
fn deleted_status(info: &crate::registry::ResourceInfo, obj: &Value) -> Value {
    let mut details = json!({"name": crate::meta::name(obj), "kind": info.plural, "uid": crate::meta::uid(obj)});
    if !info.group.is_empty() {
        details["group"] = json!(info.group);
    }
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": details})
}

/// DeleteOptions from the body or, as the apiserver does, from the query only when the body
/// is empty (a body's options win entirely: `?dryRun=All` next to a body is ignored).
fn delete_opts(ct: &str, bytes: &[u8], q: &HashMap<String, String>) -> ApiResult<DeleteOpts> {
    let body = if bytes.iter().all(u8::is_ascii_whitespace) {
        let mut from_query = json!({});
        if let Some(p) = q.get("propagationPolicy") {
            from_query["propagationPolicy"] = json!(p);
        }
        if q.get("dryRun").is_some_and(|v| v == "All") {
            from_query["dryRun"] = json!(["All"]);
        }
        if let Some(o) = q.get("orphanDependents") {
            from_query["orphanDependents"] = json!(o == "true");
        }
        from_query
    } else {
        decode(ct, bytes)?
    };
    let s = |p: &str| body.pointer(p).and_then(Value::as_str).map(String::from);
    Ok(DeleteOpts {
        propagation: s("/propagationPolicy").or_else(|| match body.get("orphanDependents").and_then(Value::as_bool) {
            Some(true) => Some("Orphan".into()),
            _ => None,
        }),
        uid: s("/preconditions/uid"),
        resource_version: s("/preconditions/resourceVersion"),
        dry_run: body
            .get("dryRun")
            .and_then(Value::as_array)
            .is_some_and(|a| !a.is_empty()),
        cascade_requested: body.get("orphanDependents") == Some(&json!(false)),
    })
}

/// Build the router with the fallback handler.
pub fn router(shared: Arc<Shared>) -> axum::Router {
    axum::Router::new()
        .fallback(handle)
        .with_state(shared)
        .layer(axum::extract::DefaultBodyLimit::disable())
}

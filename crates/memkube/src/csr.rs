//! CertificateSigningRequest validation the apiserver does and clients trip over: the request
//! must be a PEM `CERTIFICATE REQUEST`, `Approved`/`Denied` conditions can only be `True`, and
//! once set they cannot be removed. Signing is not simulated (see the crate docs).

use crate::registry::ResourceInfo;
use crate::status::{ApiError, ApiResult};
use base64::Engine as _;
use serde_json::Value;

/// Whether `info` is `certificates.k8s.io` CertificateSigningRequests.
pub fn is_csr(info: &ResourceInfo) -> bool {
    info.group == "certificates.k8s.io" && info.plural == "certificatesigningrequests"
}

/// 422 Invalid when `new` (replacing `old`, if any) breaks one of the rules above.
pub fn validate(info: &ResourceInfo, old: Option<&Value>, new: &Value) -> ApiResult<()> {
    let mut causes = vec![];
    if old.is_none() {
        request_cause(new, &mut causes);
    }
    let conditions = |o: &Value| -> Vec<Value> {
        o.pointer("/status/conditions")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    };
    for (i, c) in conditions(new).iter().enumerate() {
        let status = c.get("status").and_then(Value::as_str).unwrap_or("");
        if matches!(c.get("type").and_then(Value::as_str), Some("Approved" | "Denied")) && status != "True" {
            let field = format!("status.conditions[{i}].status");
            let msg = format!("{field}: Unsupported value: \"{status}\": supported values: \"True\"");
            causes.push((field, "FieldValueNotSupported".into(), msg));
        }
    }
    if let Some(old) = old {
        let has = |list: &[Value], t: &str| list.iter().any(|c| c.get("type").and_then(Value::as_str) == Some(t));
        let (before, after) = (conditions(old), conditions(new));
        for t in ["Approved", "Denied"] {
            if has(&before, t) && !has(&after, t) {
                let msg = format!("status.conditions: Forbidden: updates may not remove a condition of type \"{t}\"");
                causes.push(("status.conditions".into(), "FieldValueForbidden".into(), msg));
            }
        }
    }
    if causes.is_empty() {
        return Ok(());
    }
    Err(ApiError::invalid(
        &info.kind,
        &info.group,
        crate::meta::name(new),
        &causes,
    ))
}

/// `spec.request` must decode to a PEM CERTIFICATE REQUEST; the apiserver prints the bytes
/// as Go's `%#v` of a `[]byte`.
fn request_cause(csr: &Value, causes: &mut Vec<(String, String, String)>) {
    let encoded = csr.pointer("/spec/request").and_then(Value::as_str).unwrap_or("");
    let Ok(bytes) = base64::engine::general_purpose::STANDARD.decode(encoded) else {
        return;
    };
    if String::from_utf8_lossy(&bytes).contains("-----BEGIN CERTIFICATE REQUEST-----") {
        return;
    }
    let shown: Vec<String> = bytes.iter().map(|b| format!("0x{b:x}")).collect();
    let msg = format!(
        "spec.request: Invalid value: []byte{{{}}}: PEM block type must be CERTIFICATE REQUEST",
        shown.join(", ")
    );
    causes.push(("spec.request".into(), "FieldValueInvalid".into(), msg));
}

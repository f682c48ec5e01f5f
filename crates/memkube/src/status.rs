//! `meta.k8s.io/v1 Status` errors with the codes, reasons and messages a real apiserver uses,
//! because kube-rs and kubectl both parse and print them.

use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

/// An API error, rendered as a `Status` object.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    /// HTTP status code.
    pub code: u16,
    /// Machine-readable reason (`NotFound`, `Conflict`, ...).
    pub reason: String,
    /// Human-readable message.
    pub message: String,
    /// `details` of the Status, if any.
    pub details: Option<Value>,
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({}): {}", self.code, self.reason, self.message)
    }
}

impl std::error::Error for ApiError {}

/// Result of an API operation.
pub type ApiResult<T> = Result<T, ApiError>;

fn details(name: &str, group: &str, kind: &str) -> Option<Value> {
    let mut d = serde_json::Map::new();
    if !name.is_empty() {
        d.insert("name".into(), json!(name));
    }
    if !group.is_empty() {
        d.insert("group".into(), json!(group));
    }
    if !kind.is_empty() {
        d.insert("kind".into(), json!(kind));
    }
    Some(Value::Object(d))
}

/// `plural.group`, or just `plural` for the core group, as apiserver messages spell it.
pub fn qualified(plural: &str, group: &str) -> String {
    if group.is_empty() {
        plural.to_string()
    } else {
        format!("{plural}.{group}")
    }
}

impl ApiError {
    /// Any error with a code, reason and message.
    pub fn new(code: u16, reason: &str, message: impl Into<String>) -> Self {
        ApiError {
            code,
            reason: reason.into(),
            message: message.into(),
            details: None,
        }
    }

    /// 404 for a named object.
    pub fn not_found(plural: &str, group: &str, name: &str) -> Self {
        ApiError {
            code: 404,
            reason: "NotFound".into(),
            message: format!("{} \"{name}\" not found", qualified(plural, group)),
            details: details(name, group, plural),
        }
    }

    /// 404 for a path that names no resource.
    pub fn no_resource() -> Self {
        ApiError {
            code: 404,
            reason: "NotFound".into(),
            message: "the server could not find the requested resource".into(),
            details: Some(json!({})),
        }
    }

    /// 409 AlreadyExists on create.
    pub fn already_exists(plural: &str, group: &str, name: &str) -> Self {
        ApiError {
            code: 409,
            reason: "AlreadyExists".into(),
            message: format!("{} \"{name}\" already exists", qualified(plural, group)),
            details: details(name, group, plural),
        }
    }

    /// 409 Conflict for a stale resourceVersion.
    pub fn conflict(plural: &str, group: &str, name: &str) -> Self {
        Self::conflict_msg(
            plural,
            group,
            name,
            "the object has been modified; please apply your changes to the latest version and try again",
        )
    }

    /// 409 Conflict with a custom tail (preconditions).
    pub fn conflict_msg(plural: &str, group: &str, name: &str, tail: &str) -> Self {
        ApiError {
            code: 409,
            reason: "Conflict".into(),
            message: format!(
                "Operation cannot be fulfilled on {} \"{name}\": {tail}",
                qualified(plural, group)
            ),
            details: details(name, group, plural),
        }
    }

    /// 409 Conflict for a failed DELETE precondition: the apiserver names the Kind there, not
    /// the resource.
    pub fn precondition(kind: &str, group: &str, name: &str, tail: &str) -> Self {
        ApiError {
            code: 409,
            reason: "Conflict".into(),
            message: format!(
                "Operation cannot be fulfilled on {} \"{name}\": {tail}",
                qualified(kind, group)
            ),
            details: details(name, group, kind),
        }
    }

    /// 400 BadRequest.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }

    /// 405 MethodNotAllowed.
    pub fn method_not_allowed() -> Self {
        let mut e = Self::new(
            405,
            "MethodNotAllowed",
            "the server does not allow this method on the requested resource",
        );
        e.details = Some(json!({}));
        e
    }

    /// 500 for errors the apiserver does not classify: no `reason` in the Status.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(500, "", message)
    }

    /// 422 for a JSON patch that cannot be applied (unknown op, failed test, missing path):
    /// the apiserver says no more than this.
    pub fn patch_rejected() -> Self {
        let mut e = Self::new(
            422,
            "Invalid",
            "the server rejected our request due to an error in our request",
        );
        e.details = Some(json!({}));
        e
    }

    /// 415 UnsupportedMediaType.
    pub fn unsupported_media(message: impl Into<String>) -> Self {
        Self::new(415, "UnsupportedMediaType", message)
    }

    /// 410 Expired for a too-old resourceVersion.
    pub fn expired(message: impl Into<String>) -> Self {
        Self::new(410, "Expired", message)
    }

    /// 422 Invalid from a list of `(field, reason, full message)` causes.
    pub fn invalid(kind: &str, group: &str, name: &str, causes: &[(String, String, String)]) -> Self {
        // As Go's ErrorList.ToAggregate: the message names each distinct error once, the
        // causes keep them all.
        let mut msgs: Vec<&str> = vec![];
        for c in causes {
            if !msgs.contains(&c.2.as_str()) {
                msgs.push(c.2.as_str());
            }
        }
        let joined = if msgs.len() == 1 {
            msgs[0].to_string()
        } else {
            format!("[{}]", msgs.join(", "))
        };
        let gk = qualified(kind, group);
        let mut d = details(name, group, kind).unwrap_or_else(|| json!({}));
        let causes: Vec<Value> = causes
            .iter()
            .map(|(field, reason, msg)| {
                let short = msg.strip_prefix(&format!("{field}: ")).unwrap_or(msg).to_string();
                json!({"reason": reason, "message": short, "field": field})
            })
            .collect();
        d["causes"] = Value::Array(causes);
        ApiError {
            code: 422,
            reason: "Invalid".into(),
            message: format!("{gk} \"{name}\" is invalid: {joined}"),
            details: Some(d),
        }
    }

    /// 422 Forbidden-style field error (e.g. adding finalizers while deleting).
    pub fn forbidden_field(kind: &str, group: &str, name: &str, field: &str, msg: &str) -> Self {
        Self::invalid(
            kind,
            group,
            name,
            &[(
                field.to_string(),
                "FieldValueForbidden".to_string(),
                format!("{field}: Forbidden: {msg}"),
            )],
        )
    }

    /// The `Status` object.
    pub fn to_status(&self) -> Value {
        let mut v = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if self.reason.is_empty()
            && let Some(m) = v.as_object_mut()
        {
            m.remove("reason");
        }
        if let Some(d) = &self.details {
            v["details"] = d.clone();
        }
        v
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let code = http::StatusCode::from_u16(self.code).unwrap_or(http::StatusCode::INTERNAL_SERVER_ERROR);
        let body = self.to_status().to_string();
        (code, [(http::header::CONTENT_TYPE, "application/json")], body).into_response()
    }
}

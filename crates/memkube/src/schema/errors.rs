//! Field errors shaped like apimachinery's `field.Error`, so that a 422 from
//! memkube reads the same as one from a real kube-apiserver.

use serde_json::Value;
use std::fmt;

/// The kind of a field error; each maps to one apimachinery `field.ErrorType`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FieldErrorKind {
    Required,
    Invalid,
    NotSupported,
    TypeInvalid,
    TooLong,
    TooMany,
    Duplicate,
    Forbidden,
}

impl FieldErrorKind {
    /// The `reason` of a `StatusCause` (`FieldValueRequired`, ...).
    pub fn reason(self) -> &'static str {
        match self {
            FieldErrorKind::Required => "FieldValueRequired",
            FieldErrorKind::Invalid => "FieldValueInvalid",
            FieldErrorKind::NotSupported => "FieldValueNotSupported",
            FieldErrorKind::TypeInvalid => "FieldValueTypeInvalid",
            FieldErrorKind::TooLong => "FieldValueTooLong",
            FieldErrorKind::TooMany => "FieldValueTooMany",
            FieldErrorKind::Duplicate => "FieldValueDuplicate",
            FieldErrorKind::Forbidden => "FieldValueForbidden",
        }
    }

    /// The human label apimachinery prints (`ErrorType.String()`).
    fn label(self) -> &'static str {
        match self {
            FieldErrorKind::Required => "Required value",
            FieldErrorKind::Invalid | FieldErrorKind::TypeInvalid => "Invalid value",
            FieldErrorKind::NotSupported => "Unsupported value",
            FieldErrorKind::TooLong => "Too long",
            FieldErrorKind::TooMany => "Too many",
            FieldErrorKind::Duplicate => "Duplicate value",
            FieldErrorKind::Forbidden => "Forbidden",
        }
    }
}

/// One problem with one field.
///
/// `field` is the apimachinery path (`spec.list[2].x`). For the object root
/// [`super::CompiledSchema::validate`] gives `<nil>`, which is what the
/// apiserver puts in `causes[].field`; compile errors are relative to the
/// schema and use the empty string for the schema itself. `Display` is
/// always `{field}: {message}`. `message` is the
/// whole text after `field: ` (apimachinery's `ErrorBody()`, e.g.
/// `Required value`), so `Display` is `field: message`; the bad value is
/// already rendered into it the way Go's `%q`/`%v` would.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    pub field: String,
    pub kind: FieldErrorKind,
    pub message: String,
}

impl FieldError {
    /// The `reason` of the `StatusCause` for this error.
    pub fn reason(&self) -> &'static str {
        self.kind.reason()
    }

    /// An error whose body omits the value (`Required value: detail`,
    /// `Forbidden: detail`, `Too long: detail`).
    pub(crate) fn without_value(field: &str, kind: FieldErrorKind, detail: &str) -> FieldError {
        let mut message = kind.label().to_string();
        if !detail.is_empty() {
            message.push_str(": ");
            message.push_str(detail);
        }
        FieldError {
            field: field.to_string(),
            kind,
            message,
        }
    }

    /// An error that prints its bad value (`Invalid value: "x": detail`).
    pub(crate) fn with_value(field: &str, kind: FieldErrorKind, value: &BadValue, detail: &str) -> FieldError {
        let mut message = format!("{}: {}", kind.label(), value);
        if !detail.is_empty() {
            message.push_str(": ");
            message.push_str(detail);
        }
        FieldError {
            field: field.to_string(),
            kind,
            message,
        }
    }

    pub(crate) fn required(field: &str, detail: &str) -> FieldError {
        FieldError::without_value(field, FieldErrorKind::Required, detail)
    }

    pub(crate) fn forbidden(field: &str, detail: &str) -> FieldError {
        FieldError::without_value(field, FieldErrorKind::Forbidden, detail)
    }

    pub(crate) fn invalid(field: &str, value: &BadValue, detail: &str) -> FieldError {
        FieldError::with_value(field, FieldErrorKind::Invalid, value, detail)
    }

    pub(crate) fn type_invalid(field: &str, value: &BadValue, detail: &str) -> FieldError {
        FieldError::with_value(field, FieldErrorKind::TypeInvalid, value, detail)
    }

    /// `Unsupported value: "x": supported values: "a", "b"`.
    pub(crate) fn not_supported(field: &str, value: &BadValue, supported: &[String]) -> FieldError {
        let quoted: Vec<String> = supported.iter().map(|s| go_quote(s)).collect();
        let detail = if quoted.is_empty() {
            String::new()
        } else {
            format!("supported values: {}", quoted.join(", "))
        };
        FieldError::with_value(field, FieldErrorKind::NotSupported, value, &detail)
    }

    /// `Too many: 5: must have at most 3 items`.
    pub(crate) fn too_many(field: &str, actual: usize, max: u64, what: &str) -> FieldError {
        FieldError::with_value(
            field,
            FieldErrorKind::TooMany,
            &BadValue::Int(i64::try_from(actual).unwrap_or(i64::MAX)),
            &format!("must have at most {max} {what}"),
        )
    }

    pub(crate) fn duplicate(field: &str, value: &BadValue) -> FieldError {
        FieldError::with_value(field, FieldErrorKind::Duplicate, value, "")
    }

    /// Same error, placed under `prefix` (used to report a bad `default`
    /// under the schema path where it was declared).
    pub(crate) fn prefixed(mut self, prefix: &str) -> FieldError {
        if self.field.is_empty() || self.field == ROOT_FIELD {
            self.field = prefix.to_string();
        } else if self.field.starts_with('[') {
            self.field = format!("{prefix}{}", self.field);
        } else {
            self.field = format!("{prefix}.{}", self.field);
        }
        self
    }
}

/// What apimachinery prints for a nil `*field.Path` (root-level errors).
pub(crate) const ROOT_FIELD: &str = "<nil>";

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

impl std::error::Error for FieldError {}

/// A bad value as Go's `ErrorBody` prints it: strings `%q`, numbers and
/// bools `%v`, anything else in a Go-ish `%#v` rendering.
#[derive(Debug, Clone)]
pub(crate) enum BadValue {
    Str(String),
    Int(i64),
    Raw(String),
}

impl BadValue {
    pub(crate) fn str(s: &str) -> BadValue {
        BadValue::Str(s.to_string())
    }

    /// Render a JSON value the way apimachinery would print the decoded Go
    /// value (`map[string]interface {}{...}` for objects).
    pub(crate) fn json(v: &Value) -> BadValue {
        match v {
            Value::String(s) => BadValue::Str(s.clone()),
            Value::Null => BadValue::Str("null".to_string()),
            other => BadValue::Raw(go_value(other)),
        }
    }
}

impl fmt::Display for BadValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BadValue::Str(s) => f.write_str(&go_quote(s)),
            BadValue::Int(i) => write!(f, "{i}"),
            BadValue::Raw(s) => f.write_str(s),
        }
    }
}

/// Go's `%q` for a string (close enough: JSON escaping is a subset).
pub(crate) fn go_quote(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| format!("\"{s}\""))
}

/// Go's `%v` for a float64 (`0`, `1.5`, `1e+21`).
pub(crate) fn go_float(f: f64) -> String {
    if f.fract() == 0.0 && f.abs() < 1e21 {
        format!("{f:.0}")
    } else if f.abs() >= 1e21 {
        let s = format!("{f:e}");
        match s.split_once('e') {
            Some((m, e)) if !e.starts_with('-') => format!("{m}e+{e}"),
            _ => s,
        }
    } else {
        format!("{f}")
    }
}

/// A Go-ish rendering of a decoded JSON value.
pub(crate) fn go_value(v: &Value) -> String {
    match v {
        Value::Null => "<nil>".to_string(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => match (n.as_i64(), n.as_u64(), n.as_f64()) {
            (Some(i), _, _) => i.to_string(),
            (_, Some(u), _) => u.to_string(),
            (_, _, Some(f)) => go_float(f),
            _ => n.to_string(),
        },
        Value::String(s) => go_quote(s),
        Value::Array(items) => {
            let parts: Vec<String> = items.iter().map(go_value).collect();
            format!("[]interface {{}}{{{}}}", parts.join(", "))
        }
        Value::Object(map) => {
            let parts: Vec<String> = map
                .iter()
                .map(|(k, v)| format!("{}:{}", go_quote(k), go_value(v)))
                .collect();
            format!("map[string]interface {{}}{{{}}}", parts.join(", "))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_matches_apiserver() {
        let e = FieldError::required("spec.uri", "");
        assert_eq!(e.to_string(), "spec.uri: Required value");
        assert_eq!(e.reason(), "FieldValueRequired");
        let e = FieldError::not_supported("spec.firmware", &BadValue::str("x"), &["uefi".into(), "bios".into()]);
        assert_eq!(
            e.to_string(),
            r#"spec.firmware: Unsupported value: "x": supported values: "uefi", "bios""#
        );
        let e = FieldError::invalid(
            "spec.vcpus",
            &BadValue::Int(-1),
            "spec.vcpus in body should be greater than or equal to 0",
        );
        assert_eq!(
            e.to_string(),
            "spec.vcpus: Invalid value: -1: spec.vcpus in body should be greater than or equal to 0"
        );
        let e = FieldError::invalid(ROOT_FIELD, &BadValue::str("object"), "boom");
        assert_eq!(e.to_string(), r#"<nil>: Invalid value: "object": boom"#);
        assert_eq!(
            FieldError::too_many("spec.l", 4, 3, "items").to_string(),
            "spec.l: Too many: 4: must have at most 3 items"
        );
    }

    #[test]
    fn go_rendering() {
        assert_eq!(go_float(0.0), "0");
        assert_eq!(go_float(1.5), "1.5");
        assert_eq!(go_float(-3.0), "-3");
        assert_eq!(go_float(1e21), "1e+21");
        assert_eq!(
            go_value(&serde_json::json!({"name": "a", "n": 1})),
            r#"map[string]interface {}{"n":1, "name":"a"}"#
        );
        let e = FieldError::invalid("x", &BadValue::str("a"), "d").prefixed("p.default");
        assert_eq!(e.field, "p.default.x");
        let e = FieldError::invalid("", &BadValue::str("a"), "d").prefixed("p.default");
        assert_eq!(e.field, "p.default");
    }
}

//! Reading Butane's YAML: mappings with their keys checked against what the subset supports,
//! and typed optional fields, each error naming the field's path.

use std::collections::BTreeMap;

use serde_json::{Map, Value};
use serde_yaml::Value as Yaml;

use crate::ignition::error::{Error, safe_key};

pub(super) type Fields<'a> = BTreeMap<String, &'a Yaml>;

pub(super) fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}

pub(super) fn unsupported(field: &str, value: Option<&Yaml>) -> Error {
    let field = match value {
        Some(Yaml::Sequence(s)) if s.first().is_some_and(Yaml::is_mapping) => format!("{field}[0]"),
        _ => field.to_owned(),
    };
    Error::UnsupportedButaneField { field }
}

pub(super) fn is_empty(v: &Yaml) -> bool {
    match v {
        Yaml::Null => true,
        Yaml::Sequence(s) => s.is_empty(),
        _ => false,
    }
}

/// The mapping at `path`, keyed by string, with every key checked against `allowed`. Null values
/// are dropped.
pub(super) fn fields<'a>(v: &'a Yaml, path: &str, allowed: &[&str]) -> Result<Fields<'a>, Error> {
    let Yaml::Mapping(map) = v else {
        let at = if path.is_empty() { "the document" } else { path };
        return Err(Error::butane(at, "expected a mapping"));
    };
    let mut out = Fields::new();
    for (k, val) in map {
        let Yaml::String(key) = k else {
            return Err(Error::butane(
                if path.is_empty() { "the document" } else { path },
                "keys must be strings",
            ));
        };
        let field = join(path, &safe_key(key));
        if !allowed.contains(&key.as_str()) {
            if is_empty(val) {
                continue;
            }
            return Err(unsupported(&field, Some(val)));
        }
        if !val.is_null() {
            out.insert(key.clone(), val);
        }
    }
    Ok(out)
}

pub(super) fn string(v: &Yaml, field: &str) -> Result<String, Error> {
    match v {
        Yaml::String(s) => Ok(s.clone()),
        _ => Err(Error::butane(field, "expected a string")),
    }
}

pub(super) fn req_str(f: &Fields<'_>, path: &str, key: &str) -> Result<String, Error> {
    let field = join(path, key);
    let s = f.get(key).map(|v| string(v, &field)).transpose()?.unwrap_or_default();
    if s.is_empty() {
        return Err(Error::butane(field, "required"));
    }
    Ok(s)
}

pub(super) fn opt_str(f: &Fields<'_>, path: &str, key: &str) -> Result<Option<String>, Error> {
    f.get(key).map(|v| string(v, &join(path, key))).transpose()
}

pub(super) fn opt_bool(f: &Fields<'_>, path: &str, key: &str) -> Result<Option<bool>, Error> {
    let field = join(path, key);
    f.get(key)
        .map(|v| match v {
            Yaml::Bool(b) => Ok(*b),
            Yaml::String(s) => match s.as_str() {
                "true" | "True" | "TRUE" | "yes" | "Yes" | "YES" | "on" | "On" | "ON" | "y" | "Y" => Ok(true),
                "false" | "False" | "FALSE" | "no" | "No" | "NO" | "off" | "Off" | "OFF" | "n" | "N" => Ok(false),
                _ => Err(Error::butane(&field, "expected a boolean")),
            },
            _ => Err(Error::butane(&field, "expected a boolean")),
        })
        .transpose()
}

pub(super) fn opt_int(f: &Fields<'_>, path: &str, key: &str) -> Result<Option<i64>, Error> {
    let field = join(path, key);
    f.get(key)
        .map(|v| match v {
            Yaml::Number(n) => n.as_i64().ok_or_else(|| Error::butane(&field, "expected an integer")),
            _ => Err(Error::butane(&field, "expected an integer")),
        })
        .transpose()
}

pub(super) fn opt_mode(f: &Fields<'_>, path: &str) -> Result<Option<u32>, Error> {
    let field = join(path, "mode");
    let bad = || {
        Error::butane(
            &field,
            "expected a file mode such as 0644 (octal) or 420 (decimal), at most 07777",
        )
    };
    f.get("mode")
        .map(|v| {
            let n = match v {
                Yaml::Number(n) => n.as_u64().ok_or_else(bad)?,
                Yaml::String(s) if s.len() > 1 && s.starts_with('0') => {
                    u64::from_str_radix(&s[1..], 8).map_err(|_| bad())?
                }
                _ => return Err(bad()),
            };
            u32::try_from(n).ok().filter(|m| *m <= 0o7777).ok_or_else(bad)
        })
        .transpose()
}

pub(super) fn opt_list<'a>(f: &Fields<'a>, path: &str, key: &str) -> Result<&'a [Yaml], Error> {
    match f.get(key) {
        None => Ok(&[]),
        Some(Yaml::Sequence(s)) => Ok(s.as_slice()),
        Some(_) => Err(Error::butane(join(path, key), "expected a list")),
    }
}

pub(super) fn opt_str_list(f: &Fields<'_>, path: &str, key: &str) -> Result<Option<Vec<Value>>, Error> {
    let list = opt_list(f, path, key)?;
    if list.is_empty() {
        return Ok(None);
    }
    let field = join(path, key);
    list.iter()
        .enumerate()
        .map(|(i, v)| string(v, &format!("{field}[{i}]")).map(Value::from))
        .collect::<Result<_, _>>()
        .map(Some)
}

/// Copies the given optional fields into `out` under their Ignition names.
pub(super) fn copy_opt(
    out: &mut Map<String, Value>,
    f: &Fields<'_>,
    path: &str,
    spec: &[(&str, &str, Kind)],
) -> Result<(), Error> {
    for (butane, ignition, kind) in spec {
        let v = match kind {
            Kind::Str => opt_str(f, path, butane)?.map(Value::from),
            Kind::Bool => opt_bool(f, path, butane)?.map(Value::from),
            Kind::Int => opt_int(f, path, butane)?.map(Value::from),
            Kind::StrList => opt_str_list(f, path, butane)?.map(Value::Array),
        };
        if let Some(v) = v {
            out.insert((*ignition).to_owned(), v);
        }
    }
    Ok(())
}

#[derive(Clone, Copy)]
pub(super) enum Kind {
    /// A string.
    Str,
    /// A boolean.
    Bool,
    /// An integer.
    Int,
    /// A list of strings.
    StrList,
}

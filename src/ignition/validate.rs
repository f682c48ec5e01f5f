//! Validation of bootstrap Ignition.
//!
//! Steps, each with its own [`Error`] variant:
//! 1. size: at most [`MAX_CONFIG_BYTES`] ([`Error::TooLarge`]);
//! 2. JSON syntax ([`Error::InvalidJson`]);
//! 3. `ignition.version`: 2.x is [`Error::IgnitionSpec2`] (with the `curl` line that fetches 3.x from
//!    the Machine Config Server); anything but 3.0.0–3.6.0 is [`Error::UnsupportedIgnitionVersion`];
//! 4. the schema of that version, through `ignition-config` ([`Error::InvalidIgnition`]).
//!
//! Keys the schema does not know are not errors (Ignition ignores them too) but come back as
//! warnings, as JSON paths.
//!
//! Errors never quote the document: `serde_json` messages such as `invalid type: string "…"` embed
//! the offending value, so they are reduced here to a fixed phrase, the line/column, and the JSON
//! path found by re-scanning the (syntactically valid) document up to that position.
//!
//! Limits: `ignition-config` checks structure and types only. Semantic rules Ignition applies at
//! boot (absolute paths, duplicate paths, valid URLs, hash formats) are not checked here.

use ignition_config::Config;
use serde_json::Value;

use super::error::{Error, echoable_version, safe_key};

/// Largest accepted document: 1 MiB. The bootstrap data lives in a Kubernetes Secret, whose total
/// size the API server caps at 1 MiB, so nothing larger can reach us through CAPI anyway; and a
/// config that big already takes many seconds to read through QEMU fw_cfg.
pub const MAX_CONFIG_BYTES: usize = 1024 * 1024;

/// The Ignition spec versions accepted, oldest first.
pub const SUPPORTED_VERSIONS: [&str; 7] = ["3.0.0", "3.1.0", "3.2.0", "3.3.0", "3.4.0", "3.5.0", "3.6.0"];

/// A bootstrap config that passed validation.
#[derive(Debug, Clone, PartialEq)]
pub struct Validated {
    /// The typed config.
    pub config: Config,
    /// Its spec version, e.g. `3.4.0`.
    pub version: String,
    /// Unused keys, as JSON paths (`$.storage.files.0.foo`).
    pub warnings: Vec<String>,
}

/// Validates bootstrap Ignition (see the module docs).
pub fn validate(data: &[u8]) -> Result<Validated, Error> {
    check_size(data)?;
    validate_unbounded(data).map(|(validated, _)| validated)
}

pub(crate) fn check_size(data: &[u8]) -> Result<(), Error> {
    if data.len() > MAX_CONFIG_BYTES {
        return Err(Error::TooLarge {
            size: data.len(),
            limit: MAX_CONFIG_BYTES,
        });
    }
    Ok(())
}

/// Validation without the size check; also returns the generic JSON tree.
pub(crate) fn validate_unbounded(data: &[u8]) -> Result<(Validated, Value), Error> {
    let value: Value = serde_json::from_slice(data).map_err(|e| Error::InvalidJson {
        problem: syntax_phrase(&e),
        line: e.line(),
        column: e.column(),
    })?;
    let version = version_of(&value)?;
    let (config, warnings) = Config::parse_slice(data).map_err(|e| schema_error(data, &version, &e))?;
    let warnings = warnings.iter().map(|w| warning_path(&w.to_string())).collect();
    Ok((
        Validated {
            config,
            version,
            warnings,
        },
        value,
    ))
}

fn version_of(value: &Value) -> Result<String, Error> {
    let Some(root) = value.as_object() else {
        return Err(Error::InvalidIgnition {
            version: "?".into(),
            path: "$".into(),
            line: 1,
            column: 1,
            problem: "the top level must be a JSON object".into(),
        });
    };
    let raw = root
        .get("ignition")
        .and_then(|i| i.get("version"))
        .and_then(Value::as_str);
    let Some(raw) = raw else {
        return Err(Error::UnsupportedIgnitionVersion { version: None });
    };
    let echoed = echoable_version(raw);
    if SUPPORTED_VERSIONS.contains(&raw) {
        return Ok(raw.to_owned());
    }
    match echoed {
        Some(v) if v.starts_with("2.") => Err(Error::IgnitionSpec2 { version: v }),
        other => Err(Error::UnsupportedIgnitionVersion { version: other }),
    }
}

/// ignition-config prints `unused key: $.a.b`; keep the path, masked.
fn warning_path(w: &str) -> String {
    let path = w.strip_prefix("unused key: ").unwrap_or(w);
    path.split('.')
        .map(|seg| if seg == "$" { seg.to_owned() } else { safe_key(seg) })
        .collect::<Vec<_>>()
        .join(".")
}

/// serde_json's syntax messages are a fixed set; find ours by prefix, never echo the message.
fn syntax_phrase(e: &serde_json::Error) -> &'static str {
    const PHRASES: [&str; 22] = [
        "EOF while parsing a list",
        "EOF while parsing an object",
        "EOF while parsing a string",
        "EOF while parsing a value",
        "expected `:`",
        "expected `,` or `]`",
        "expected `,` or `}`",
        "expected ident",
        "expected value",
        "expected `\"`",
        "invalid escape",
        "invalid number",
        "number out of range",
        "invalid unicode code point",
        "control character (\\u0000-\\u001F) found while parsing a string",
        "key must be a string",
        "lone leading surrogate in hex escape",
        "trailing comma",
        "trailing characters",
        "unexpected end of hex escape",
        "recursion limit exceeded",
        "invalid UTF-8",
    ];
    let msg = e.to_string();
    PHRASES
        .iter()
        .find(|p| msg.starts_with(*p))
        .copied()
        .unwrap_or("syntax error")
}

fn schema_error(data: &[u8], version: &str, e: &ignition_config::Error) -> Error {
    match e {
        ignition_config::Error::Serialization(se) => {
            let (line, column) = (se.line(), se.column());
            Error::InvalidIgnition {
                version: version.to_owned(),
                path: json_path_at(data, line, column),
                line,
                column,
                problem: data_phrase(&se.to_string()),
            }
        }
        _ => Error::UnsupportedIgnitionVersion {
            version: echoable_version(version),
        },
    }
}

/// Reduces a serde data-error message to a phrase without the offending value.
fn data_phrase(msg: &str) -> String {
    if let Some(rest) = msg.strip_prefix("missing field `")
        && let Some(field) = rest.split('`').next()
    {
        return format!("missing field `{}`", safe_key(field));
    }
    let phrase = if msg.starts_with("invalid type") {
        "wrong JSON type for this field"
    } else if msg.starts_with("invalid value") {
        "invalid value for this field"
    } else if msg.starts_with("invalid length") {
        "wrong number of elements"
    } else if msg.starts_with("unknown variant") {
        "value not allowed for this field"
    } else if msg.starts_with("duplicate field") {
        "duplicate key"
    } else {
        "does not match the Ignition schema"
    };
    phrase.to_owned()
}

/// The JSON path (`$.storage.files.0.mode`) of the value being read at `line`/`column` (1-based) of a
/// syntactically valid JSON document. Keys are masked with [`safe_key`].
pub(crate) fn json_path_at(data: &[u8], line: usize, column: usize) -> String {
    enum Frame {
        Object { key: Option<String>, expect_key: bool },
        Array { index: usize },
    }
    let mut offset = 0;
    let mut current_line = 1;
    while current_line < line && offset < data.len() {
        if data[offset] == b'\n' {
            current_line += 1;
        }
        offset += 1;
    }
    let end = offset.saturating_add(column.saturating_sub(1)).min(data.len());
    let mut stack: Vec<Frame> = Vec::new();
    let mut i = 0;
    while i < end {
        match data[i] {
            b'{' => stack.push(Frame::Object {
                key: None,
                expect_key: true,
            }),
            b'[' => stack.push(Frame::Array { index: 0 }),
            b'}' | b']' => {
                stack.pop();
            }
            b',' => match stack.last_mut() {
                Some(Frame::Object { key, expect_key }) => {
                    *key = None;
                    *expect_key = true;
                }
                Some(Frame::Array { index }) => *index += 1,
                None => {}
            },
            b'"' => {
                let start = i + 1;
                let mut j = start;
                while j < data.len() && data[j] != b'"' {
                    j += if data[j] == b'\\' { 2 } else { 1 };
                }
                if let Some(Frame::Object { key, expect_key }) = stack.last_mut()
                    && *expect_key
                {
                    let raw = data.get(start..j.min(data.len())).unwrap_or_default();
                    *key = Some(String::from_utf8_lossy(raw).into_owned());
                    *expect_key = false;
                }
                i = j;
            }
            _ => {}
        }
        i += 1;
    }
    let mut path = String::from("$");
    for frame in &stack {
        match frame {
            Frame::Object { key: Some(k), .. } => {
                path.push('.');
                path.push_str(&safe_key(k));
            }
            Frame::Object { key: None, .. } => {}
            Frame::Array { index } => {
                path.push('.');
                path.push_str(&index.to_string());
            }
        }
    }
    path
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const SECRET: &str = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIKsecretsecretsecretsecret user@host";

    #[test]
    fn every_supported_version_parses() {
        for v in SUPPORTED_VERSIONS {
            let doc = format!(r#"{{"ignition":{{"version":"{v}"}},"extra":1}}"#);
            let ok = validate(doc.as_bytes()).unwrap();
            assert_eq!(ok.version, v);
            assert_eq!(ok.warnings, vec!["$.extra".to_owned()]);
        }
    }

    #[test]
    fn too_large() {
        let mut doc = br#"{"ignition":{"version":"3.2.0"},"x":""#.to_vec();
        doc.resize(MAX_CONFIG_BYTES + 10, b'a');
        doc.extend_from_slice(b"\"}");
        let e = validate(&doc).unwrap_err();
        assert_eq!(e.reason().as_str(), "TooLarge");
        assert!(matches!(
            e,
            Error::TooLarge {
                limit: MAX_CONFIG_BYTES,
                ..
            }
        ));
    }

    #[test]
    fn invalid_json() {
        let e = validate(b"{\"ignition\": {\"version\": \"3.2.0\"},").unwrap_err();
        assert_eq!(e.reason().as_str(), "InvalidJSON");
        let e = validate(format!("{{\"ignition\": \"{SECRET}").as_bytes()).unwrap_err();
        assert!(
            matches!(
                e,
                Error::InvalidJson {
                    problem: "EOF while parsing a string",
                    line: 1,
                    ..
                }
            ),
            "{e:?}"
        );
        let e = validate(b"\xff\xfe").unwrap_err();
        assert_eq!(e.reason().as_str(), "InvalidJSON");
        let e = validate(b"").unwrap_err();
        assert!(
            matches!(
                e,
                Error::InvalidJson {
                    problem: "EOF while parsing a value",
                    ..
                }
            ),
            "{e:?}"
        );
    }

    #[test]
    fn spec2_is_rejected_with_the_fix() {
        let e = validate(br#"{"ignition":{"version":"2.2.0"},"storage":{"files":[]}}"#).unwrap_err();
        assert_eq!(e.reason().as_str(), "IgnitionSpec2");
        let msg = e.to_string();
        assert!(msg.contains("2.2.0"), "{msg}");
        assert!(
            msg.contains("curl -H 'Accept: application/vnd.coreos.ignition+json;version=3.4.0' https://api-int.<domain>:22623/config/worker"),
            "{msg}"
        );
    }

    #[test]
    fn unsupported_versions() {
        for (doc, shown) in [
            (r#"{"ignition":{"version":"3.7.0"}}"#, Some("3.7.0")),
            (
                r#"{"ignition":{"version":"3.5.0-experimental"}}"#,
                Some("3.5.0-experimental"),
            ),
            (r#"{"ignition":{"version":"1.0.0"}}"#, Some("1.0.0")),
            (r#"{"ignition":{"version":3}}"#, None),
            (r#"{"ignitionVersion":1}"#, None),
            (r#"{"ignition":{}}"#, None),
            (r#"{"ignition":{"version":"hunter2"}}"#, None),
        ] {
            let e = validate(doc.as_bytes()).unwrap_err();
            assert_eq!(
                e,
                Error::UnsupportedIgnitionVersion {
                    version: shown.map(str::to_owned)
                },
                "{doc}"
            );
            assert_eq!(e.reason().as_str(), "UnsupportedIgnitionVersion");
        }
    }

    #[test]
    fn schema_errors_name_the_path_not_the_value() {
        let doc = format!(
            "{{\"ignition\":{{\"version\":\"3.2.0\"}},\n\"storage\":{{\"files\":[{{\"path\":\"/a\"}},\n{{\"path\":\"/b\",\"mode\":\"{SECRET}\"}}]}}}}"
        );
        let e = validate(doc.as_bytes()).unwrap_err();
        assert_eq!(e.reason().as_str(), "InvalidIgnition");
        let Error::InvalidIgnition {
            path,
            line,
            problem,
            version,
            ..
        } = &e
        else {
            panic!("{e:?}")
        };
        assert_eq!(path, "$.storage.files.1.mode");
        assert_eq!(*line, 3);
        assert_eq!(version, "3.2.0");
        assert_eq!(problem, "wrong JSON type for this field");
        assert!(!e.to_string().contains("AAAA"), "{e}");

        let e = validate(br#"{"ignition":{"version":"3.4.0"},"storage":{"files":[{"mode":420}]}}"#).unwrap_err();
        let Error::InvalidIgnition { path, problem, .. } = &e else {
            panic!("{e:?}")
        };
        assert_eq!(problem, "missing field `path`");
        assert!(path.starts_with("$.storage.files"), "{path}");

        let e = validate(b"[1,2]").unwrap_err();
        assert_eq!(e.reason().as_str(), "InvalidIgnition");
    }

    #[test]
    fn no_error_display_ever_contains_the_secret() {
        let docs = [
            format!(r#"{{"ignition":{{"version":"{SECRET}"}}}}"#),
            format!(
                r#"{{"ignition":{{"version":"2.2.0"}},"passwd":{{"users":[{{"name":"core","sshAuthorizedKeys":"{SECRET}"}}]}}}}"#
            ),
            format!(
                r#"{{"ignition":{{"version":"3.3.0"}},"passwd":{{"users":[{{"name":"core","sshAuthorizedKeys":"{SECRET}"}}]}}}}"#
            ),
            format!(r#"{{"ignition":{{"version":"3.3.0"}},"passwd":{{"users":[{{"name":{{"{SECRET}":1}}}}]}}}}"#),
            format!(
                r#"{{"ignition":{{"version":"3.3.0"}},"storage":{{"files":[{{"path":"/x","contents":{{"compression":7,"source":"data:,{SECRET}"}}}}]}}}}"#
            ),
            format!(
                r#"{{"ignition":{{"version":"3.3.0"}},"systemd":{{"units":[{{"name":"a","enabled":"{SECRET}"}}]}}}}"#
            ),
            format!(r#"{{"{SECRET}": ]"#),
            format!(r#"{{"ignition":{{"version":"3.3.0"}},"kernelArguments":{{"shouldExist":"{SECRET}"}}}}"#),
        ];
        for doc in docs {
            let e = validate(doc.as_bytes()).unwrap_err();
            let shown = format!("{e} {e:?}");
            assert!(!shown.contains("AAAAC3"), "{shown}");
            assert!(!shown.contains("secret"), "{shown}");
        }
    }

    #[test]
    fn json_path_scanner() {
        let doc = br#"{"a":{"b":[1,{"c":"x,y"}]}}"#;
        // position after `"x,y"`
        let col = doc.iter().position(|b| *b == b'y').unwrap() + 3;
        assert_eq!(json_path_at(doc, 1, col), "$.a.b.1.c");
        assert_eq!(json_path_at(doc, 1, 1), "$");
        assert_eq!(json_path_at(doc, 99, 99), "$");
        assert_eq!(json_path_at(br#"{"k\"q":[0,"#, 1, 12), "$.k??q.1");
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

        #[test]
        fn arbitrary_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..512)) {
            let _ = validate(&data);
        }

        #[test]
        fn scanner_never_panics(data in proptest::collection::vec(any::<u8>(), 0..256), l in 0usize..8, c in 0usize..300) {
            let _ = json_path_at(&data, l, c);
        }
    }
}

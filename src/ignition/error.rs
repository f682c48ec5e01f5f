//! The one error type of the Ignition library.
//!
//! Bootstrap Ignition carries secrets (SSH keys, pull secrets, bootstrap tokens, CA keys), and these
//! errors end up in conditions, events and logs. So no variant ever holds a piece of the input
//! document: only sizes, line/column positions, JSON paths made of schema keys, spec versions that
//! parsed as semver, and fixed problem phrases. Machine facts (node name, addresses) are not secret
//! and may be named in [`Error::InvalidMachineFacts`].

use std::fmt;

/// Everything that can go wrong validating, translating or rendering Ignition.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The document is larger than [`MAX_CONFIG_BYTES`](super::MAX_CONFIG_BYTES).
    #[error("the document is {size} bytes, over the {limit}-byte limit (a Kubernetes Secret holds at most 1 MiB)")]
    TooLarge {
        /// Size of the document in bytes.
        size: usize,
        /// The limit in bytes.
        limit: usize,
    },
    /// The document is not JSON.
    #[error("the document is not valid JSON: {problem} at line {line} column {column}")]
    InvalidJson {
        /// A fixed phrase describing the syntax problem.
        problem: &'static str,
        /// 1-based line of the problem.
        line: usize,
        /// 1-based column of the problem.
        column: usize,
    },
    /// The document is Ignition spec 2.x, which the Machine Config Server serves to clients that do
    /// not ask for 3.x.
    #[error(
        "Ignition spec {version} is not supported, only 3.0.0 to 3.6.0; the Machine Config Server serves spec 2.x \
         when the request has no Accept header, so fetch spec 3 with \
         `curl -H 'Accept: application/vnd.coreos.ignition+json;version=3.4.0' https://api-int.<domain>:22623/config/worker`"
    )]
    IgnitionSpec2 {
        /// The 2.x version found.
        version: String,
    },
    /// `ignition.version` is missing, not semver, or not one of 3.0.0 to 3.6.0.
    #[error("unsupported Ignition version {}: only spec 3.0.0 to 3.6.0 is accepted", VersionDisplay(.version))]
    UnsupportedIgnitionVersion {
        /// The version found, when it parsed as semver; `None` when missing or unparseable.
        version: Option<String>,
    },
    /// The document is JSON with a supported version but does not match the Ignition schema.
    #[error("invalid Ignition {version} config at {path} (line {line} column {column}): {problem}")]
    InvalidIgnition {
        /// The Ignition spec version of the document.
        version: String,
        /// JSON path of the offending value, e.g. `$.storage.files.0.mode`.
        path: String,
        /// 1-based line of the problem (0 when not known).
        line: usize,
        /// 1-based column of the problem (0 when not known).
        column: usize,
        /// What is wrong, without the value itself.
        problem: String,
    },
    /// A machine fact (node name, provider ID, network) is invalid.
    #[error("invalid machine facts: {field}: {problem}")]
    InvalidMachineFacts {
        /// The offending field, e.g. `network.gateway` or `network.addresses[1]`.
        field: String,
        /// What is wrong.
        problem: String,
    },
    /// The Butane `variant`/`version` pair is not supported.
    #[error(
        "unsupported Butane variant/version {variant} {version}: supported are fcos 1.0.0-1.7.0 and openshift 4.8.0-4.22.0"
    )]
    UnsupportedButaneVersion {
        /// The variant, when it looked like one; `?` otherwise.
        variant: String,
        /// The version, when it looked like one; `?` otherwise.
        version: String,
    },
    /// A Butane field outside the supported subset.
    #[error("unsupported Butane field {field}")]
    UnsupportedButaneField {
        /// Path of the field, e.g. `storage.filesystems[0]`.
        field: String,
    },
    /// The Butane document is not valid YAML or a supported field has a wrong value.
    #[error("invalid Butane config at {location}: {problem}")]
    InvalidButane {
        /// A field path (`storage.files[0].mode`) or a YAML position (`line 3 column 5`).
        location: String,
        /// What is wrong, without the value itself.
        problem: String,
    },
}

crate::condition_names! {
    /// Why Ignition or Butane input was refused: the condition reason of whatever carried it.
    pub enum Reason {
        /// Over the size limit.
        TooLarge,
        /// Not JSON.
        InvalidJson = "InvalidJSON",
        /// Ignition spec 2, which RHCOS no longer reads.
        IgnitionSpec2,
        /// A version this manager does not validate.
        UnsupportedIgnitionVersion,
        /// JSON that is not a valid Ignition config.
        InvalidIgnition,
        /// A machine fact (hostname, address) that cannot be injected.
        InvalidMachineFacts,
        /// A Butane version outside the supported subset.
        UnsupportedButaneVersion,
        /// A Butane field outside the supported subset.
        UnsupportedButaneField,
        /// Butane that does not parse or validate.
        InvalidButane,
    }
}

impl Error {
    /// A bounded CamelCase reason for conditions and metrics labels.
    #[must_use]
    pub fn reason(&self) -> Reason {
        match self {
            Self::TooLarge { .. } => Reason::TooLarge,
            Self::InvalidJson { .. } => Reason::InvalidJson,
            Self::IgnitionSpec2 { .. } => Reason::IgnitionSpec2,
            Self::UnsupportedIgnitionVersion { .. } => Reason::UnsupportedIgnitionVersion,
            Self::InvalidIgnition { .. } => Reason::InvalidIgnition,
            Self::InvalidMachineFacts { .. } => Reason::InvalidMachineFacts,
            Self::UnsupportedButaneVersion { .. } => Reason::UnsupportedButaneVersion,
            Self::UnsupportedButaneField { .. } => Reason::UnsupportedButaneField,
            Self::InvalidButane { .. } => Reason::InvalidButane,
        }
    }

    pub(crate) fn facts(field: impl Into<String>, problem: impl Into<String>) -> Self {
        Self::InvalidMachineFacts {
            field: field.into(),
            problem: problem.into(),
        }
    }

    pub(crate) fn butane(location: impl Into<String>, problem: impl Into<String>) -> Self {
        Self::InvalidButane {
            location: location.into(),
            problem: problem.into(),
        }
    }
}

struct VersionDisplay<'a>(&'a Option<String>);

impl fmt::Display for VersionDisplay<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(v) => f.write_str(v),
            None => f.write_str("(missing or not a semantic version)"),
        }
    }
}

/// Returns `s` when it is a short semantic version (so safe to echo), else `None`.
pub(crate) fn echoable_version(s: &str) -> Option<String> {
    let short = s.len() <= 32;
    let charset = s
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-' || b == b'+');
    let mut parts = s.splitn(3, '.');
    let numeric = |p: Option<&str>| p.is_some_and(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
    let major = numeric(parts.next());
    let minor = numeric(parts.next());
    let patch = parts
        .next()
        .map(|rest| rest.split(['-', '+']).next().unwrap_or_default())
        .is_some_and(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
    (short && charset && major && minor && patch).then(|| s.to_owned())
}

/// A map key or field name made safe to echo: at most 64 characters of `[A-Za-z0-9_./-]`,
/// anything else replaced by `?`.
pub(crate) fn safe_key(key: &str) -> String {
    let mut out: String = key
        .chars()
        .take(64)
        .map(|c| {
            if c.is_ascii_alphanumeric() || "_./-".contains(c) {
                c
            } else {
                '?'
            }
        })
        .collect();
    if key.chars().count() > 64 {
        out.push_str("...");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_are_camel_case_and_distinct() {
        let all = [
            Error::TooLarge { size: 2, limit: 1 },
            Error::InvalidJson {
                problem: "x",
                line: 1,
                column: 1,
            },
            Error::IgnitionSpec2 {
                version: "2.2.0".into(),
            },
            Error::UnsupportedIgnitionVersion { version: None },
            Error::InvalidIgnition {
                version: "3.2.0".into(),
                path: "$".into(),
                line: 0,
                column: 0,
                problem: "p".into(),
            },
            Error::facts("nodeName", "p"),
            Error::UnsupportedButaneVersion {
                variant: "?".into(),
                version: "?".into(),
            },
            Error::UnsupportedButaneField { field: "f".into() },
            Error::butane("f", "p"),
        ];
        let mut seen = std::collections::BTreeSet::new();
        for e in &all {
            let r = e.reason().as_str();
            assert!(r.chars().next().is_some_and(|c| c.is_ascii_uppercase()), "{r}");
            assert!(r.chars().all(|c| c.is_ascii_alphanumeric()), "{r}");
            assert!(seen.insert(r), "duplicate reason {r}");
            assert!(!e.to_string().is_empty());
        }
    }

    #[test]
    fn version_echo_only_for_semver() {
        assert_eq!(echoable_version("3.2.0").as_deref(), Some("3.2.0"));
        assert_eq!(
            echoable_version("3.5.0-experimental").as_deref(),
            Some("3.5.0-experimental")
        );
        assert_eq!(echoable_version("ssh-ed25519 AAAAC3"), None);
        assert_eq!(echoable_version("hunter2"), None);
        assert_eq!(echoable_version("1.2"), None);
        assert_eq!(echoable_version(&"9.".repeat(40)), None);
    }

    #[test]
    fn safe_key_masks() {
        assert_eq!(safe_key("storage"), "storage");
        assert_eq!(safe_key("a b\"c"), "a?b?c");
        assert!(safe_key(&"k".repeat(100)).ends_with("..."));
    }
}

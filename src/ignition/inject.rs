//! Per-VM injection: the shared bootstrap Ignition plus one VM's facts gives that VM's Ignition.
//!
//! Three files are merged into a copy of the bootstrap config's `storage.files`:
//! - [`HOSTNAME_PATH`] (mode 0644): the node name and a newline;
//! - [`PROVIDER_ID_DROPIN_PATH`] (mode 0644): `[Service]` / `Environment="KUBELET_PROVIDERID=<id>"`,
//!   which OpenShift's kubelet unit passes as `--provider-id`;
//! - one NetworkManager keyfile [`keyfile_path`] per interface (mode 0600, NetworkManager ignores
//!   profiles others can read), see [`keyfile`](super::keyfile).
//!
//! All of them have `overwrite: true` and data-URL contents (see [`dataurl`](super::dataurl)).
//!
//! Why a copy and not a wrapper: Ignition merges `ignition.config.merge` children over the parent
//! and the child wins conflicts, so per-VM files in a wrapper would lose to a bootstrap config that
//! writes the same paths. Editing the copy directly makes ours the only entries for those paths:
//! any file, directory or link already at one of them (compared after path normalisation) is
//! removed, everything else (other files, units, users, `ignition.config.merge` pointers,
//! TLS settings, unknown keys) is kept, and so is `ignition.version`. The result is re-parsed with
//! `ignition-config` at that version before it is returned.
//!
//! Limits:
//! - a config with `ignition.config.replace` is rejected: Ignition would discard the parent,
//!   injected files included;
//! - a pointer config's merged child (e.g. the Machine Config Server's) is fetched at boot and can
//!   still write the same paths and win; the MCS does not write these three today;
//! - the output is re-serialised, so key order and whitespace differ from the input.

use serde_json::{Map, Value, json};

use super::dataurl;
use super::error::Error;
use super::facts::{CheckedFacts, MachineFacts};
use super::keyfile::{self, keyfile_path};
use super::validate::{check_size, validate_unbounded};

/// Where the hostname goes.
pub const HOSTNAME_PATH: &str = "/etc/hostname";
/// The kubelet drop-in that sets `KUBELET_PROVIDERID`.
pub const PROVIDER_ID_DROPIN_PATH: &str = "/etc/systemd/system/kubelet.service.d/90-provider-id.conf";

/// One VM's Ignition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rendered {
    /// The config, compact JSON.
    pub json: Vec<u8>,
    /// Its Ignition spec version, the bootstrap config's.
    pub version: String,
    /// `json.len()`: the fw_cfg payload size in bytes.
    pub size: usize,
}

/// A file the injection writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InjectedFile {
    /// Absolute path.
    pub path: String,
    /// Permission bits (decimal in JSON: 0644 is 420).
    pub mode: u32,
    /// Contents.
    pub contents: String,
}

/// The files written for validated facts (one entry per NIC, the first carrying the node name
/// and provider ID), in the order they are appended.
#[must_use]
pub fn injected_files(nics: &[CheckedFacts]) -> Vec<InjectedFile> {
    let Some(f) = nics.first() else {
        return Vec::new();
    };
    let mut files = vec![
        InjectedFile {
            path: HOSTNAME_PATH.into(),
            mode: 0o644,
            contents: format!("{}\n", f.node_name),
        },
        InjectedFile {
            path: PROVIDER_ID_DROPIN_PATH.into(),
            mode: 0o644,
            contents: format!("[Service]\nEnvironment=\"KUBELET_PROVIDERID={}\"\n", f.provider_id),
        },
    ];
    files.extend(nics.iter().map(|n| InjectedFile {
        path: keyfile_path(&n.interface_name),
        mode: 0o600,
        contents: keyfile::render(n),
    }));
    files
}

/// Renders one VM's Ignition from the bootstrap config (any spec 3.0.0–3.6.0) and its facts.
pub fn render(bootstrap: &[u8], facts: &MachineFacts) -> Result<Rendered, Error> {
    check_size(bootstrap)?;
    let (validated, mut value) = validate_unbounded(bootstrap)?;
    let checked = facts.check_all()?;
    let version = validated.version;
    let invalid = |path: &str, problem: &str| Error::InvalidIgnition {
        version: version.clone(),
        path: path.to_owned(),
        line: 0,
        column: 0,
        problem: problem.to_owned(),
    };
    let replace = value.pointer("/ignition/config/replace");
    if replace.is_some_and(|r| r.get("source").is_some_and(|s| !s.is_null())) {
        return Err(invalid(
            "$.ignition.config.replace",
            "replace discards this config and the per-VM files with it; use ignition.config.merge",
        ));
    }
    let files = injected_files(&checked);
    let root = value
        .as_object_mut()
        .ok_or_else(|| invalid("$", "the top level must be a JSON object"))?;
    let storage = root.entry("storage").or_insert(Value::Null);
    if storage.is_null() {
        *storage = Value::Object(Map::new());
    }
    let storage = storage
        .as_object_mut()
        .ok_or_else(|| invalid("$.storage", "must be an object"))?;
    let ours: Vec<String> = files.iter().map(|f| clean_path(&f.path)).collect();
    for kind in ["files", "directories", "links"] {
        if let Some(Value::Array(entries)) = storage.get_mut(kind) {
            entries.retain(|e| {
                e.get("path")
                    .and_then(Value::as_str)
                    .is_none_or(|p| !ours.contains(&clean_path(p)))
            });
        }
    }
    let list = storage.entry("files").or_insert(Value::Null);
    if list.is_null() {
        *list = Value::Array(Vec::new());
    }
    let list = list
        .as_array_mut()
        .ok_or_else(|| invalid("$.storage.files", "must be an array"))?;
    list.extend(files.iter().map(file_json));
    let json = serde_json::to_vec(&value).map_err(|_| invalid("$", "could not serialise the result"))?;
    let (again, _) = validate_unbounded(&json)?;
    if again.version != version {
        return Err(invalid("$.ignition.version", "the version changed while rendering"));
    }
    Ok(Rendered {
        size: json.len(),
        json,
        version,
    })
}

fn file_json(f: &InjectedFile) -> Value {
    let enc = dataurl::encode(f.contents.as_bytes(), true);
    let mut contents = json!({ "source": enc.source });
    if let (Some(c), Some(obj)) = (enc.compression, contents.as_object_mut()) {
        obj.insert("compression".into(), Value::from(c));
    }
    json!({ "path": f.path, "mode": f.mode, "overwrite": true, "contents": contents })
}

/// Lexical normalisation as Go's `filepath.Clean` does for absolute paths: `//`, `.` and `..`
/// collapse, the trailing `/` goes.
pub(crate) fn clean_path(p: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for seg in p.split('/') {
        match seg {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            s => parts.push(s),
        }
    }
    let joined = parts.join("/");
    if p.starts_with('/') {
        format!("/{joined}")
    } else {
        joined
    }
}

#[cfg(test)]
mod tests;

//! A Butane subset, translated to Ignition JSON.
//!
//! Supported (field names as in Butane):
//! - `variant`/`version`: see [`BUTANE_VERSIONS`]; the output's `ignition.version` is the spec the
//!   real Butane emits for that pair;
//! - `metadata` (openshift only, and required there as Butane requires it): `name` and `labels`,
//!   which must include `machineconfiguration.openshift.io/role`. They are checked, not emitted:
//!   the output is raw Ignition (`butane --raw`), not a MachineConfig;
//! - `storage.files[]`: `path`, `mode`, `overwrite`, `user`/`group` (`id`, `name`), `contents` and
//!   `append[]` with either `inline` (encoded as a data URL, gzip-compressed when that is shorter,
//!   as Butane does) or `source` (+ `compression`, `verification.hash`);
//! - `storage.directories[]`: `path`, `mode`, `overwrite`, `user`, `group`;
//! - `storage.links[]`: `path`, `target`, `hard`, `overwrite`, `user`, `group`;
//! - `systemd.units[]`: `name`, `enabled`, `mask`, `contents`, `dropins[]` (`name`, `contents`);
//! - `passwd.users[]`: `name`, `uid`, `password_hash`, `ssh_authorized_keys`, `gecos`, `home_dir`,
//!   `no_create_home`, `primary_group`, `groups`, `no_user_group`, `no_log_init`, `shell`, `system`;
//! - `passwd.groups[]`: `name`, `gid`, `password_hash`, `system`.
//!
//! Any other field is an [`Error::UnsupportedButaneField`] naming its path
//! (`storage.filesystems[0]` for a list of objects, else the key: `systemd.units[1].contents_local`,
//! `ignition`); a field whose value is
//! `null` or an empty list is ignored, as it means nothing. The openshift rules Butane applies are
//! kept: `contents.source` must be a `data:` URL, and openshift 4.8.0/4.9.0 have no compression.
//!
//! YAML details: `mode: 0644` is octal, as in Butane (YAML 1.1 integers; `serde_yaml` reads it as
//! the string `"0644"`, which is converted here); `0o644` and decimal `420` work too. Booleans
//! accept the YAML 1.1 spellings (`yes`, `on`, …) Butane's YAML library accepts for boolean fields.
//!
//! Limits: no `*_local` fields (there is no files directory), no `ignition` section (merge, TLS), no
//! disks/filesystems/RAID/LUKS, `kernel_arguments`, `boot_device`, `grub`, `openshift` extensions.
//! Paths must be absolute and unique across files, directories and links; unit names unique.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};
use serde_yaml::Value as Yaml;

mod fields;

use fields::{Fields, Kind, copy_opt, fields, join, opt_list, opt_mode, opt_str, req_str, string, unsupported};

use super::dataurl;
use super::error::{Error, echoable_version, safe_key};
use super::validate::{check_size, validate_unbounded};

/// `(variant, Butane version, Ignition spec version)`, as published by Butane.
pub const BUTANE_VERSIONS: [(&str, &str, &str); 23] = [
    ("fcos", "1.0.0", "3.0.0"),
    ("fcos", "1.1.0", "3.1.0"),
    ("fcos", "1.2.0", "3.2.0"),
    ("fcos", "1.3.0", "3.2.0"),
    ("fcos", "1.4.0", "3.3.0"),
    ("fcos", "1.5.0", "3.4.0"),
    ("fcos", "1.6.0", "3.5.0"),
    ("fcos", "1.7.0", "3.6.0"),
    ("openshift", "4.8.0", "3.2.0"),
    ("openshift", "4.9.0", "3.2.0"),
    ("openshift", "4.10.0", "3.2.0"),
    ("openshift", "4.11.0", "3.2.0"),
    ("openshift", "4.12.0", "3.2.0"),
    ("openshift", "4.13.0", "3.2.0"),
    ("openshift", "4.14.0", "3.4.0"),
    ("openshift", "4.15.0", "3.4.0"),
    ("openshift", "4.16.0", "3.4.0"),
    ("openshift", "4.17.0", "3.4.0"),
    ("openshift", "4.18.0", "3.4.0"),
    ("openshift", "4.19.0", "3.5.0"),
    ("openshift", "4.20.0", "3.5.0"),
    ("openshift", "4.21.0", "3.5.0"),
    ("openshift", "4.22.0", "3.6.0"),
];

/// The label every openshift Butane config must carry in `metadata.labels`.
pub const OPENSHIFT_ROLE_LABEL: &str = "machineconfiguration.openshift.io/role";

/// The Ignition spec version Butane emits for `variant`/`version`.
#[must_use]
pub fn ignition_version_for(variant: &str, version: &str) -> Option<&'static str> {
    BUTANE_VERSIONS
        .iter()
        .find(|(v, b, _)| *v == variant && *b == version)
        .map(|(_, _, i)| *i)
}

/// A translated Butane config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Translated {
    /// Ignition JSON (compact).
    pub json: Vec<u8>,
    /// Its Ignition spec version.
    pub version: String,
}

/// Translates a Butane YAML document (see the module docs for the subset).
pub fn translate(yaml: &[u8]) -> Result<Translated, Error> {
    check_size(yaml)?;
    let doc: Yaml = serde_yaml::from_slice(yaml).map_err(|e| {
        let location = e.location().map_or_else(
            || "the document".to_owned(),
            |l| format!("line {} column {}", l.line(), l.column()),
        );
        Error::butane(location, "not a valid single YAML document")
    })?;
    let top = fields(
        &doc,
        "",
        &["variant", "version", "metadata", "storage", "systemd", "passwd"],
    )?;
    let variant = req_str(&top, "", "variant")?;
    let version = req_str(&top, "", "version")?;
    let Some(ign_version) = ignition_version_for(&variant, &version) else {
        let safe_variant = (!variant.is_empty()
            && variant.len() <= 16
            && variant.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit()))
        .then(|| variant.clone());
        return Err(Error::UnsupportedButaneVersion {
            variant: safe_variant.unwrap_or_else(|| "?".into()),
            version: echoable_version(&version).unwrap_or_else(|| "?".into()),
        });
    };
    let openshift = variant == "openshift";
    let ctx = Ctx {
        openshift,
        allow_gzip: !(openshift && matches!(version.as_str(), "4.8.0" | "4.9.0")),
    };
    if openshift {
        check_metadata(top.get("metadata").copied())?;
    } else if top.contains_key("metadata") {
        return Err(unsupported("metadata", top.get("metadata").copied()));
    }
    let mut out = Map::new();
    out.insert("ignition".into(), json!({ "version": ign_version }));
    if let Some(storage) = top.get("storage") {
        let s = ctx.storage(storage)?;
        if !s.is_empty() {
            out.insert("storage".into(), Value::Object(s));
        }
    }
    if let Some(systemd) = top.get("systemd") {
        let units = systemd_units(systemd)?;
        if !units.is_empty() {
            out.insert("systemd".into(), json!({ "units": units }));
        }
    }
    if let Some(passwd) = top.get("passwd") {
        let p = passwd_section(passwd)?;
        if !p.is_empty() {
            out.insert("passwd".into(), Value::Object(p));
        }
    }
    let value = Value::Object(out);
    let json = serde_json::to_vec(&value).map_err(|_| Error::butane("the document", "could not serialise"))?;
    let (validated, _) = validate_unbounded(&json)?;
    Ok(Translated {
        json,
        version: validated.version,
    })
}

struct Ctx {
    openshift: bool,
    allow_gzip: bool,
}

fn check_metadata(meta: Option<&Yaml>) -> Result<(), Error> {
    let Some(meta) = meta else {
        return Err(Error::butane(
            "metadata",
            "required for variant openshift (name and labels)",
        ));
    };
    let m = fields(meta, "metadata", &["name", "labels"])?;
    req_str(&m, "metadata", "name")?;
    let Some(labels) = m.get("labels") else {
        return Err(Error::butane(
            "metadata.labels",
            format!("required, with {OPENSHIFT_ROLE_LABEL}"),
        ));
    };
    let Yaml::Mapping(labels) = labels else {
        return Err(Error::butane("metadata.labels", "expected a mapping"));
    };
    let mut role = false;
    for (k, v) in labels {
        let Yaml::String(k) = k else {
            return Err(Error::butane("metadata.labels", "keys must be strings"));
        };
        let value = string(v, &format!("metadata.labels.{}", safe_key(k)))?;
        role |= k == OPENSHIFT_ROLE_LABEL && !value.is_empty();
    }
    if !role {
        return Err(Error::butane(
            format!("metadata.labels.{OPENSHIFT_ROLE_LABEL}"),
            "required",
        ));
    }
    Ok(())
}

impl Ctx {
    fn storage(&self, v: &Yaml) -> Result<Map<String, Value>, Error> {
        let s = fields(v, "storage", &["files", "directories", "links"])?;
        let mut out = Map::new();
        let mut seen: BTreeMap<String, String> = BTreeMap::new();
        for kind in ["files", "directories", "links"] {
            let path = format!("storage.{kind}");
            let mut entries = Vec::new();
            for (i, item) in opt_list(&s, "storage", kind)?.iter().enumerate() {
                let at = format!("{path}[{i}]");
                let entry = match kind {
                    "files" => self.file(item, &at)?,
                    "directories" => node(item, &at, &["path", "mode", "overwrite", "user", "group"])?.0,
                    _ => link(item, &at)?,
                };
                let p = entry.get("path").and_then(Value::as_str).unwrap_or_default().to_owned();
                if let Some(first) = seen.insert(super::inject::clean_path(&p), at.clone()) {
                    return Err(Error::butane(
                        format!("{at}.path"),
                        format!("duplicate path, also used at {first}"),
                    ));
                }
                entries.push(Value::Object(entry));
            }
            if !entries.is_empty() {
                out.insert(kind.to_owned(), Value::Array(entries));
            }
        }
        Ok(out)
    }

    fn file(&self, v: &Yaml, at: &str) -> Result<Map<String, Value>, Error> {
        let (mut out, f) = node(
            v,
            at,
            &["path", "mode", "overwrite", "user", "group", "contents", "append"],
        )?;
        if let Some(c) = f.get("contents") {
            out.insert(
                "contents".into(),
                Value::Object(self.resource(c, &join(at, "contents"))?),
            );
        }
        let append = opt_list(&f, at, "append")?;
        if !append.is_empty() {
            let list = append
                .iter()
                .enumerate()
                .map(|(i, r)| self.resource(r, &format!("{at}.append[{i}]")).map(Value::Object))
                .collect::<Result<Vec<_>, _>>()?;
            out.insert("append".into(), Value::Array(list));
        }
        Ok(out)
    }

    fn resource(&self, v: &Yaml, at: &str) -> Result<Map<String, Value>, Error> {
        let allowed: &[&str] = if self.allow_gzip {
            &["inline", "source", "compression", "verification"]
        } else {
            &["inline", "source", "verification"]
        };
        let f = fields(v, at, allowed)?;
        let inline = opt_str(&f, at, "inline")?;
        let source = opt_str(&f, at, "source")?;
        let mut out = Map::new();
        match (inline, source) {
            (Some(_), Some(_)) => return Err(Error::butane(at, "inline and source are mutually exclusive")),
            (Some(text), None) => {
                for key in ["compression", "verification"] {
                    if f.contains_key(key) {
                        return Err(Error::butane(join(at, key), "only allowed with source"));
                    }
                }
                let enc = dataurl::encode(text.as_bytes(), self.allow_gzip);
                out.insert("source".into(), Value::from(enc.source));
                if let Some(c) = enc.compression {
                    out.insert("compression".into(), Value::from(c));
                }
            }
            (None, Some(src)) => {
                if self.openshift && !src.starts_with("data:") {
                    return Err(Error::butane(
                        join(at, "source"),
                        "variant openshift only allows data: URLs",
                    ));
                }
                out.insert("source".into(), Value::from(src));
                if let Some(c) = opt_str(&f, at, "compression")? {
                    if c != "gzip" {
                        return Err(Error::butane(join(at, "compression"), "only gzip is supported"));
                    }
                    out.insert("compression".into(), Value::from(c));
                }
                if let Some(ver) = f.get("verification") {
                    let vat = join(at, "verification");
                    let vf = fields(ver, &vat, &["hash"])?;
                    if let Some(h) = opt_str(&vf, &vat, "hash")? {
                        let algo_ok = h.split_once('-').is_some_and(|(a, d)| {
                            matches!(a, "sha512" | "sha256")
                                && !d.is_empty()
                                && d.bytes().all(|b| b.is_ascii_hexdigit())
                        });
                        if !algo_ok {
                            return Err(Error::butane(
                                join(&vat, "hash"),
                                "expected sha512-<hex> or sha256-<hex>",
                            ));
                        }
                        out.insert("verification".into(), json!({ "hash": h }));
                    }
                }
            }
            (None, None) => {
                for key in ["compression", "verification"] {
                    if f.contains_key(key) {
                        return Err(Error::butane(join(at, key), "only allowed with source"));
                    }
                }
            }
        }
        Ok(out)
    }
}

/// The fields common to files, directories and links.
fn node<'a>(v: &'a Yaml, at: &str, allowed: &[&str]) -> Result<(Map<String, Value>, Fields<'a>), Error> {
    let f = fields(v, at, allowed)?;
    let path = req_str(&f, at, "path")?;
    if !path.starts_with('/') {
        return Err(Error::butane(join(at, "path"), "must be absolute"));
    }
    let mut out = Map::new();
    out.insert("path".into(), Value::from(path));
    copy_opt(&mut out, &f, at, &[("overwrite", "overwrite", Kind::Bool)])?;
    if let Some(mode) = opt_mode(&f, at)? {
        out.insert("mode".into(), Value::from(mode));
    }
    for key in ["user", "group"] {
        if let Some(owner) = f.get(key) {
            let oat = join(at, key);
            let of = fields(owner, &oat, &["id", "name"])?;
            let mut o = Map::new();
            copy_opt(
                &mut o,
                &of,
                &oat,
                &[("id", "id", Kind::Int), ("name", "name", Kind::Str)],
            )?;
            out.insert(key.to_owned(), Value::Object(o));
        }
    }
    Ok((out, f))
}

fn link(v: &Yaml, at: &str) -> Result<Map<String, Value>, Error> {
    let (mut out, f) = node(v, at, &["path", "target", "hard", "overwrite", "user", "group"])?;
    out.insert("target".into(), Value::from(req_str(&f, at, "target")?));
    copy_opt(&mut out, &f, at, &[("hard", "hard", Kind::Bool)])?;
    Ok(out)
}

fn systemd_units(v: &Yaml) -> Result<Vec<Value>, Error> {
    let s = fields(v, "systemd", &["units"])?;
    let mut units = Vec::new();
    let mut names: BTreeMap<String, String> = BTreeMap::new();
    for (i, u) in opt_list(&s, "systemd", "units")?.iter().enumerate() {
        let at = format!("systemd.units[{i}]");
        let f = fields(u, &at, &["name", "enabled", "mask", "contents", "dropins"])?;
        let name = req_str(&f, &at, "name")?;
        if let Some(first) = names.insert(name.clone(), at.clone()) {
            return Err(Error::butane(
                format!("{at}.name"),
                format!("duplicate unit, also at {first}"),
            ));
        }
        let mut out = Map::new();
        out.insert("name".into(), Value::from(name));
        copy_opt(
            &mut out,
            &f,
            &at,
            &[
                ("enabled", "enabled", Kind::Bool),
                ("mask", "mask", Kind::Bool),
                ("contents", "contents", Kind::Str),
            ],
        )?;
        let mut dropins = Vec::new();
        for (j, d) in opt_list(&f, &at, "dropins")?.iter().enumerate() {
            let dat = format!("{at}.dropins[{j}]");
            let df = fields(d, &dat, &["name", "contents"])?;
            let mut dout = Map::new();
            dout.insert("name".into(), Value::from(req_str(&df, &dat, "name")?));
            copy_opt(&mut dout, &df, &dat, &[("contents", "contents", Kind::Str)])?;
            dropins.push(Value::Object(dout));
        }
        if !dropins.is_empty() {
            out.insert("dropins".into(), Value::Array(dropins));
        }
        units.push(Value::Object(out));
    }
    Ok(units)
}

fn passwd_section(v: &Yaml) -> Result<Map<String, Value>, Error> {
    let p = fields(v, "passwd", &["users", "groups"])?;
    let mut out = Map::new();
    let users = named_list(
        &p,
        "users",
        &[
            ("uid", "uid", Kind::Int),
            ("password_hash", "passwordHash", Kind::Str),
            ("ssh_authorized_keys", "sshAuthorizedKeys", Kind::StrList),
            ("gecos", "gecos", Kind::Str),
            ("home_dir", "homeDir", Kind::Str),
            ("no_create_home", "noCreateHome", Kind::Bool),
            ("primary_group", "primaryGroup", Kind::Str),
            ("groups", "groups", Kind::StrList),
            ("no_user_group", "noUserGroup", Kind::Bool),
            ("no_log_init", "noLogInit", Kind::Bool),
            ("shell", "shell", Kind::Str),
            ("system", "system", Kind::Bool),
        ],
    )?;
    let groups = named_list(
        &p,
        "groups",
        &[
            ("gid", "gid", Kind::Int),
            ("password_hash", "passwordHash", Kind::Str),
            ("system", "system", Kind::Bool),
        ],
    )?;
    if !users.is_empty() {
        out.insert("users".into(), Value::Array(users));
    }
    if !groups.is_empty() {
        out.insert("groups".into(), Value::Array(groups));
    }
    Ok(out)
}

fn named_list(p: &Fields<'_>, kind: &str, spec: &[(&str, &str, Kind)]) -> Result<Vec<Value>, Error> {
    let mut allowed: Vec<&str> = spec.iter().map(|(b, _, _)| *b).collect();
    allowed.push("name");
    let mut out = Vec::new();
    for (i, item) in opt_list(p, "passwd", kind)?.iter().enumerate() {
        let at = format!("passwd.{kind}[{i}]");
        let f = fields(item, &at, &allowed)?;
        let mut o = Map::new();
        o.insert("name".into(), Value::from(req_str(&f, &at, "name")?));
        copy_opt(&mut o, &f, &at, spec)?;
        out.push(Value::Object(o));
    }
    Ok(out)
}

#[cfg(test)]
mod tests;

//! Storage volume XML for a machine's root disk and Ignition payload (pure; no libvirt calls).
//!
//! - **Copy-on-write root disk**: a qcow2 overlay whose `<backingStore>` is the base image's
//!   path, with `<compat>1.1</compat>` (libvirt 9.0 otherwise writes the ancient 0.10 header).
//!   Its virtual size is `rootDisk.size`, which must not be smaller than the base image's.
//! - **Full clone**: the XML for `virStorageVolCreateXMLFrom`; libvirt copies the base volume.
//! - **Ignition payload**: a raw file volume `<node>-ignition.ign` exactly as large as the payload,
//!   created empty and filled through a libvirt stream upload, so no shell is ever needed on the
//!   host. QEMU reads it through `<sysinfo type='fwcfg'>`; libvirt relabels it for QEMU at start.
//!
//! `rootDisk.size` is a Kubernetes quantity: [`parse_quantity_bytes`] accepts whole numbers with
//! an optional binary (`Ki Mi Gi Ti Pi Ei`) or decimal (`k M G T P E`) suffix and rejects
//! fractions, exponents, signs, zero and overflow with a message that says which.

use super::xml::{XmlInputError, escape_attr, escape_text, validate_name, validate_path};

/// On-disk format of a volume.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum VolumeFormat {
    /// qcow2 (root disks).
    #[default]
    Qcow2,
    /// Raw bytes (the Ignition payload).
    Raw,
}

impl VolumeFormat {
    /// libvirt's name for the format.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Qcow2 => "qcow2",
            Self::Raw => "raw",
        }
    }
}

/// Volume XML together with the name it defines, so the backend can look the volume up first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VolumeXml {
    /// Volume name inside its pool.
    pub name: String,
    /// The `<volume>` document.
    pub xml: String,
}

/// Name of a machine's root volume.
#[must_use]
pub fn root_volume_name(node_name: &str) -> String {
    format!("{node_name}-root.qcow2")
}

/// Name of a machine's Ignition volume.
#[must_use]
pub fn ignition_volume_name(node_name: &str) -> String {
    format!("{node_name}-ignition.ign")
}

/// A qcow2 overlay `name` of `capacity_bytes`, backed by the file at `backing_path` in
/// `backing_format`.
pub fn overlay_volume(
    name: &str,
    capacity_bytes: u64,
    backing_path: &str,
    backing_format: VolumeFormat,
) -> Result<VolumeXml, XmlInputError> {
    validate_name("volume name", name)?;
    validate_path("backing image path", backing_path)?;
    check_capacity(capacity_bytes)?;
    let xml = format!(
        "<volume type='file'>\n  <name>{name}</name>\n  <capacity unit='bytes'>{capacity_bytes}</capacity>\n  \
         <target>\n    <format type='qcow2'/>\n    <compat>1.1</compat>\n  </target>\n  <backingStore>\n    \
         <path>{path}</path>\n    <format type='{fmt}'/>\n  </backingStore>\n</volume>\n",
        name = escape_text(name),
        path = escape_text(backing_path),
        fmt = backing_format.as_str(),
    );
    Ok(VolumeXml {
        name: name.to_owned(),
        xml,
    })
}

/// The new volume's XML for a full clone (`virStorageVolCreateXMLFrom`) of a base image.
/// `capacity_bytes` should be at least the base image's capacity. libvirt copies the data; whether
/// it also grows the copy to a larger capacity depends on the pool backend, so callers should
/// check the new volume's capacity.
pub fn full_clone_volume(name: &str, capacity_bytes: u64, format: VolumeFormat) -> Result<VolumeXml, XmlInputError> {
    validate_name("volume name", name)?;
    check_capacity(capacity_bytes)?;
    let compat = match format {
        VolumeFormat::Qcow2 => "\n    <compat>1.1</compat>",
        VolumeFormat::Raw => "",
    };
    let xml = format!(
        "<volume type='file'>\n  <name>{name}</name>\n  <capacity unit='bytes'>{capacity_bytes}</capacity>\n  \
         <target>\n    <format type='{fmt}'/>{compat}\n  </target>\n</volume>\n",
        name = escape_text(name),
        fmt = format.as_str(),
    );
    Ok(VolumeXml {
        name: name.to_owned(),
        xml,
    })
}

/// An empty, thin qcow2 data volume of `capacity_bytes` (a clone target's XML used with a plain
/// create: no backing store, no preallocation).
pub fn empty_qcow2_volume(name: &str, capacity_bytes: u64) -> Result<VolumeXml, XmlInputError> {
    full_clone_volume(name, capacity_bytes, VolumeFormat::Qcow2)
}

/// A raw volume `<node_name>-ignition.ign` sized for a payload of `payload_len` bytes, mode 0600
/// (the payload carries bootstrap credentials; libvirt hands it to QEMU when the domain starts).
pub fn ignition_volume(node_name: &str, payload_len: u64) -> Result<VolumeXml, XmlInputError> {
    let name = ignition_volume_name(node_name);
    validate_name("volume name", &name)?;
    if payload_len == 0 {
        return Err(XmlInputError::InvalidValue {
            field: "ignition payload",
            reason: "the payload is empty".to_owned(),
        });
    }
    let xml = format!(
        "<volume type='file'>\n  <name>{name}</name>\n  <capacity unit='bytes'>{payload_len}</capacity>\n  \
         <allocation unit='bytes'>{payload_len}</allocation>\n  <target>\n    <format type='raw'/>\n    \
         <permissions>\n      <mode>0600</mode>\n    </permissions>\n  </target>\n</volume>\n",
        name = escape_attr(&name),
    );
    Ok(VolumeXml { name, xml })
}

fn check_capacity(capacity_bytes: u64) -> Result<(), XmlInputError> {
    if capacity_bytes == 0 {
        Err(XmlInputError::InvalidValue {
            field: "capacity",
            reason: "must be greater than zero".to_owned(),
        })
    } else {
        Ok(())
    }
}

/// Parses a Kubernetes quantity that must be a whole, positive number of bytes: digits with an
/// optional suffix `Ki Mi Gi Ti Pi Ei` (powers of 1024) or `k M G T P E` (powers of 1000).
pub fn parse_quantity_bytes(q: &str) -> Result<u64, XmlInputError> {
    let err = |reason: &str| XmlInputError::InvalidValue {
        field: "rootDisk.size",
        reason: format!("{q:?} {reason}"),
    };
    let s = q.trim();
    if s.starts_with('-') {
        return Err(err("is negative"));
    }
    if s.starts_with('+') {
        return Err(err("has a sign; write a plain number such as 20Gi"));
    }
    let digits_end = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (digits, suffix) = s.split_at(digits_end);
    if digits.is_empty() {
        return Err(err("has no number; write for example 20Gi"));
    }
    if suffix.starts_with('.') {
        return Err(err(
            "is fractional; write a whole number of bytes or units, e.g. 1536Mi",
        ));
    }
    let multiplier: u64 = match suffix {
        "" => 1,
        "Ki" => 1 << 10,
        "Mi" => 1 << 20,
        "Gi" => 1 << 30,
        "Ti" => 1 << 40,
        "Pi" => 1 << 50,
        "Ei" => 1 << 60,
        "k" => 1_000,
        "M" => 1_000_000,
        "G" => 1_000_000_000,
        "T" => 1_000_000_000_000,
        "P" => 1_000_000_000_000_000,
        "E" => 1_000_000_000_000_000_000,
        other if other.starts_with(['e', 'E']) => {
            return Err(err("uses exponent notation; use a suffix such as G or Gi"));
        }
        "m" => return Err(err("is in milli-units, which is fractional for bytes")),
        _ => return Err(err("has an unknown suffix; use Ki, Mi, Gi, Ti, k, M, G or T")),
    };
    let n: u64 = digits.parse().map_err(|_| err("is too large"))?;
    if n == 0 {
        return Err(err("is zero"));
    }
    n.checked_mul(multiplier).ok_or_else(|| err("is too large"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities() {
        assert_eq!(parse_quantity_bytes("20Gi").unwrap(), 20 << 30);
        assert_eq!(parse_quantity_bytes("512Mi").unwrap(), 512 << 20);
        assert_eq!(parse_quantity_bytes("4Ki").unwrap(), 4096);
        assert_eq!(parse_quantity_bytes("2Ti").unwrap(), 2 << 40);
        assert_eq!(parse_quantity_bytes("10G").unwrap(), 10_000_000_000);
        assert_eq!(parse_quantity_bytes("3k").unwrap(), 3000);
        assert_eq!(parse_quantity_bytes("7M").unwrap(), 7_000_000);
        assert_eq!(parse_quantity_bytes("1T").unwrap(), 1_000_000_000_000);
        assert_eq!(parse_quantity_bytes("123456").unwrap(), 123_456);
        for (bad, why) in [
            ("1.5Gi", "fractional"),
            ("-1Gi", "negative"),
            ("0", "zero"),
            ("0Gi", "zero"),
            ("+1Gi", "sign"),
            ("1e9", "exponent"),
            ("Gi", "no number"),
            ("", "no number"),
            ("10GB", "unknown suffix"),
            ("100m", "milli"),
            ("99999999999999999999", "too large"),
            ("16Ei", "too large"),
        ] {
            let e = parse_quantity_bytes(bad).unwrap_err().to_string();
            assert!(e.contains(why), "{bad}: {e}");
        }
    }

    #[test]
    fn overlay_has_backing_store_and_compat() {
        let v = overlay_volume(
            "w1-root.qcow2",
            20 << 30,
            "/var/lib/pool/base & co.qcow2",
            VolumeFormat::Qcow2,
        )
        .unwrap();
        assert_eq!(v.name, "w1-root.qcow2");
        assert!(v.xml.contains("<name>w1-root.qcow2</name>"));
        assert!(v.xml.contains("<capacity unit='bytes'>21474836480</capacity>"));
        assert!(v.xml.contains("<format type='qcow2'/>\n    <compat>1.1</compat>"));
        assert!(
            v.xml
                .contains("<backingStore>\n    <path>/var/lib/pool/base &amp; co.qcow2</path>")
        );
        assert!(overlay_volume("a b", 1, "/x", VolumeFormat::Qcow2).is_err());
        assert!(overlay_volume("a", 1, "x", VolumeFormat::Qcow2).is_err());
        assert!(overlay_volume("a", 0, "/x", VolumeFormat::Qcow2).is_err());
    }

    #[test]
    fn full_clone_and_ignition() {
        let c = full_clone_volume("w1-root.qcow2", 1 << 30, VolumeFormat::Qcow2).unwrap();
        assert!(c.xml.contains("<compat>1.1</compat>") && !c.xml.contains("backingStore"));
        let r = full_clone_volume("w1-root.img", 1 << 30, VolumeFormat::Raw).unwrap();
        assert!(r.xml.contains("<format type='raw'/>") && !r.xml.contains("compat"));
        let i = ignition_volume("w1", 1234).unwrap();
        assert_eq!(i.name, "w1-ignition.ign");
        assert_eq!(i.name, ignition_volume_name("w1"));
        assert!(i.xml.contains("<capacity unit='bytes'>1234</capacity>"));
        assert!(i.xml.contains("<mode>0600</mode>"));
        assert!(ignition_volume("w1", 0).is_err());
        assert!(ignition_volume("bad/name", 10).is_err());
        assert_eq!(root_volume_name("w1"), "w1-root.qcow2");
    }
}

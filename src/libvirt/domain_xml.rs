//! libvirt domain XML for one worker VM, built from a [`DomainPlan`] (pure; no libvirt calls).
//!
//! The document follows the recipe tested on libvirt 9.0 + QEMU 10 (see the project research):
//! q35, ACPI/APIC, UEFI (explicit OVMF loader plus a per-VM NVRAM copied from a template, or
//! libvirt's firmware auto-selection with `<os firmware='efi'>`) or BIOS, the root disk as a
//! `<disk type='volume'>` (libvirt resolves pool/volume to the path itself) followed by the data
//! disks (`vdb`, `vdc`, … per bus family), one `network`, `bridge` or `direct` (macvtap) NIC per
//! interface in order, the serial console to a log file, and the Ignition config through QEMU fw_cfg:
//! `<sysinfo type='fwcfg'><entry name='opt/com.coreos/config' file='…'/></sysinfo>`. Unlike
//! `type='smbios'`, fw_cfg sysinfo needs no `<smbios mode='sysinfo'/>` element (checked against
//! libvirt's `domaincommon.rng`); libvirt relabels the file for QEMU while the domain runs.
//!
//! Lifecycle: `on_poweroff` and `on_crash` are `destroy` (a dead worker stays visible as shut off
//! for the controller to report and restart); `on_reboot` is `restart`.
//!
//! CPU: `host-passthrough` for KVM; for TCG (`type='qemu'`) `maximum`, because QEMU's default
//! `qemu64` model lacks x86-64-v2, which RHEL 9 based guests (RHCOS, recent FCOS) require.
//!
//! Every name, path and MAC is validated before any XML is produced, and every value is escaped.

use uuid::Uuid;

use super::xml::{XmlInputError, escape_attr, escape_text, is_printable_xml_char, validate_name, validate_path};
use crate::api::libvirt_machine::{DirectMode, DiskBus, DomainType, NetworkType};

/// Everything that goes into a domain definition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DomainPlan {
    /// Domain name (= node name = hostname).
    pub name: String,
    /// Domain UUID (decided up front from the LibvirtMachine's uid).
    pub uuid: Uuid,
    /// Virtual CPUs, at least 1.
    pub vcpus: u32,
    /// Memory in MiB, at least 1.
    pub memory_mib: u64,
    /// `kvm` or `qemu` (TCG).
    pub domain_type: DomainType,
    /// QEMU machine type, e.g. `q35`.
    pub machine: String,
    /// Boot firmware.
    pub firmware: FirmwarePlan,
    /// The root disk.
    pub root_disk: DiskPlan,
    /// Data disks, attached after the root disk in this order.
    pub additional_disks: Vec<DiskPlan>,
    /// The NICs, in guest order (at least one).
    pub interfaces: Vec<InterfacePlan>,
    /// Where the serial console goes.
    pub console: ConsolePlan,
    /// Host path of the Ignition file handed to the guest through fw_cfg, if any.
    pub ignition_path: Option<String>,
    /// Free-text `<description>` (e.g. which LibvirtMachine owns the domain).
    pub description: Option<String>,
}

/// Boot firmware.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FirmwarePlan {
    /// UEFI with an explicit OVMF code image and a per-VM NVRAM file created from a template.
    UefiExplicit {
        /// OVMF code image, e.g. `/usr/share/OVMF/OVMF_CODE_4M.fd`.
        loader_path: String,
        /// Variable-store template copied for this VM, e.g. `/usr/share/OVMF/OVMF_VARS_4M.fd`.
        nvram_template: Option<String>,
        /// This VM's NVRAM file; libvirt picks `<nvram dir>/<name>_VARS.fd` when `None`.
        nvram_path: Option<String>,
        /// Whether the loader is a Secure Boot build (adds `secure='yes'` and SMM).
        secure_boot: bool,
    },
    /// UEFI chosen by libvirt's firmware auto-selection (`<os firmware='efi'>`).
    UefiAuto {
        /// Ask for (or exclude) Secure Boot capable firmware.
        secure_boot: bool,
    },
    /// Legacy BIOS (SeaBIOS).
    Bios,
}

/// The root disk: a volume in a libvirt storage pool.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DiskPlan {
    /// Storage pool name.
    pub pool: String,
    /// Volume name.
    pub volume: String,
    /// Image format the volume holds.
    pub format: super::volume_xml::VolumeFormat,
    /// Disk bus (virtio → `vda`; sata, scsi → `sda`).
    pub bus: DiskBus,
}

/// One NIC.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InterfacePlan {
    /// libvirt network, host bridge or macvtap.
    pub kind: NetworkType,
    /// Network, bridge or host NIC name.
    pub source: String,
    /// macvtap mode (`direct` only).
    pub mode: Option<DirectMode>,
    /// NIC model, e.g. `virtio`.
    pub model: String,
    /// MAC address `xx:xx:xx:xx:xx:xx`.
    pub mac: String,
}

/// Where the first serial port goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ConsolePlan {
    /// Serial port written to a file on the host (the tested recipe); `virsh console` is not
    /// available, the log is.
    LogFile(String),
    /// Serial port on a pty (`virsh console` works) whose output virtlogd also appends to a file.
    PtyWithLog(String),
}

/// A domain definition ready for the hypervisor: the XML with the name and UUID it defines.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DomainXml {
    /// Domain name.
    pub name: String,
    /// Domain UUID.
    pub uuid: Uuid,
    /// The `<domain>` document.
    pub xml: String,
}

/// The fw_cfg key Ignition reads on x86_64 and aarch64.
pub const IGNITION_FW_CFG_NAME: &str = "opt/com.coreos/config";

/// Where libvirt's system instance puts a domain's NVRAM when the XML does not say.
#[must_use]
pub fn default_system_nvram_path(domain_name: &str) -> String {
    format!("/var/lib/libvirt/qemu/nvram/{domain_name}_VARS.fd")
}

/// The guest device name of the first disk on `bus`.
#[must_use]
pub fn target_dev(bus: DiskBus) -> &'static str {
    match bus {
        DiskBus::Virtio => "vda",
        DiskBus::Sata | DiskBus::Scsi => "sda",
    }
}

/// Guest device names for the root disk followed by `extra`: `vd*` for virtio, `sd*` shared by
/// SATA and SCSI, each counted from `a` in attach order.
fn target_devs(root: DiskBus, extra: &[DiskPlan]) -> Vec<String> {
    let (mut vd, mut sd) = (0u8, 0u8);
    std::iter::once(root)
        .chain(extra.iter().map(|d| d.bus))
        .map(|bus| {
            let (prefix, n) = match bus {
                DiskBus::Virtio => ("vd", &mut vd),
                DiskBus::Sata | DiskBus::Scsi => ("sd", &mut sd),
            };
            let dev = format!("{prefix}{}", char::from(b'a' + *n));
            *n += 1;
            dev
        })
        .collect()
}

fn mode_name(mode: DirectMode) -> &'static str {
    match mode {
        DirectMode::Vepa => "vepa",
        DirectMode::Bridge => "bridge",
        DirectMode::Private => "private",
        DirectMode::Passthrough => "passthrough",
    }
}

fn bus_name(bus: DiskBus) -> &'static str {
    match bus {
        DiskBus::Virtio => "virtio",
        DiskBus::Sata => "sata",
        DiskBus::Scsi => "scsi",
    }
}

fn validate_mac(mac: &str) -> Result<(), XmlInputError> {
    let parts: Vec<&str> = mac.split(':').collect();
    let ok = parts.len() == 6
        && parts
            .iter()
            .all(|p| p.len() == 2 && p.bytes().all(|b| b.is_ascii_hexdigit()));
    // The low bit of the first octet marks multicast, which a NIC cannot use.
    let unicast = parts
        .first()
        .and_then(|p| u8::from_str_radix(p, 16).ok())
        .is_some_and(|b| b & 1 == 0);
    if ok && unicast {
        Ok(())
    } else {
        Err(XmlInputError::InvalidValue {
            field: "MAC address",
            reason: format!("{mac:?} is not a unicast xx:xx:xx:xx:xx:xx address"),
        })
    }
}

fn validate_interface(nic: &InterfacePlan) -> Result<(), XmlInputError> {
    let field = match nic.kind {
        NetworkType::Network => "network name",
        NetworkType::Bridge => "bridge name",
        NetworkType::Direct => "host interface name",
    };
    validate_name(field, &nic.source)?;
    if (nic.kind == NetworkType::Direct) != nic.mode.is_some() {
        return Err(XmlInputError::InvalidValue {
            field: "direct mode",
            reason: "a mode is required for direct interfaces and only there".to_owned(),
        });
    }
    validate_token("NIC model", &nic.model)?;
    validate_mac(&nic.mac)
}

fn validate_token(field: &'static str, value: &str) -> Result<(), XmlInputError> {
    let ok = !value.is_empty()
        && value.len() <= 64
        && value
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'.' | b'_' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(XmlInputError::InvalidValue {
            field,
            reason: format!("{value:?} must be 1-64 characters from [a-z0-9._-]"),
        })
    }
}

impl DomainPlan {
    /// Checks every input that ends up in the XML.
    pub fn validate(&self) -> Result<(), XmlInputError> {
        validate_name("domain name", &self.name)?;
        if self.vcpus == 0 {
            return Err(XmlInputError::InvalidValue {
                field: "vcpus",
                reason: "must be at least 1".to_owned(),
            });
        }
        if self.memory_mib == 0 || self.memory_mib > (1 << 34) {
            return Err(XmlInputError::InvalidValue {
                field: "memory",
                reason: format!("{} MiB is out of range", self.memory_mib),
            });
        }
        validate_token("machine type", &self.machine)?;
        match &self.firmware {
            FirmwarePlan::UefiExplicit {
                loader_path,
                nvram_template,
                nvram_path,
                ..
            } => {
                validate_path("firmware path", loader_path)?;
                if let Some(t) = nvram_template {
                    validate_path("NVRAM template path", t)?;
                }
                if let Some(p) = nvram_path {
                    validate_path("NVRAM path", p)?;
                }
            }
            FirmwarePlan::UefiAuto { .. } | FirmwarePlan::Bios => {}
        }
        for disk in std::iter::once(&self.root_disk).chain(&self.additional_disks) {
            validate_name("storage pool", &disk.pool)?;
            validate_name("volume", &disk.volume)?;
        }
        if self.additional_disks.len() > 20 || self.interfaces.is_empty() || self.interfaces.len() > 16 {
            return Err(XmlInputError::InvalidValue {
                field: "devices",
                reason: "1-16 interfaces and at most 20 data disks".to_owned(),
            });
        }
        for (i, nic) in self.interfaces.iter().enumerate() {
            validate_interface(nic)?;
            if self.interfaces[..i]
                .iter()
                .any(|o| o.mac.eq_ignore_ascii_case(&nic.mac))
            {
                return Err(XmlInputError::InvalidValue {
                    field: "MAC address",
                    reason: format!("{:?} is used by two interfaces", nic.mac),
                });
            }
        }
        match &self.console {
            ConsolePlan::LogFile(p) | ConsolePlan::PtyWithLog(p) => validate_path("console log path", p)?,
        }
        if let Some(p) = &self.ignition_path {
            validate_path("Ignition file path", p)?;
        }
        if let Some(d) = &self.description
            && !d.chars().all(|c| is_printable_xml_char(c) || c == '\n' || c == '\t')
        {
            return Err(XmlInputError::InvalidValue {
                field: "description",
                reason: "contains control characters or characters XML cannot carry".to_owned(),
            });
        }
        Ok(())
    }

    /// Validates the plan and renders the domain XML.
    pub fn to_xml(&self) -> Result<DomainXml, XmlInputError> {
        self.validate()?;
        let mut x = String::with_capacity(2048);
        let dtype = match self.domain_type {
            DomainType::Kvm => "kvm",
            DomainType::Qemu => "qemu",
        };
        x.push_str(&format!("<domain type='{dtype}'>\n"));
        x.push_str(&format!("  <name>{}</name>\n", escape_text(&self.name)));
        x.push_str(&format!("  <uuid>{}</uuid>\n", self.uuid.hyphenated()));
        if let Some(d) = &self.description {
            x.push_str(&format!("  <description>{}</description>\n", escape_text(d)));
        }
        x.push_str(&format!("  <memory unit='MiB'>{}</memory>\n", self.memory_mib));
        x.push_str(&format!("  <vcpu placement='static'>{}</vcpu>\n", self.vcpus));
        if let Some(p) = &self.ignition_path {
            x.push_str(&format!(
                "  <sysinfo type='fwcfg'>\n    <entry name='{IGNITION_FW_CFG_NAME}' file='{}'/>\n  </sysinfo>\n",
                escape_attr(p)
            ));
        }
        self.push_os(&mut x);
        x.push_str("  <features>\n    <acpi/>\n    <apic/>\n");
        if self.needs_smm() {
            x.push_str("    <smm state='on'/>\n");
        }
        x.push_str("  </features>\n");
        match self.domain_type {
            DomainType::Kvm => x.push_str("  <cpu mode='host-passthrough' check='none'/>\n"),
            DomainType::Qemu => x.push_str("  <cpu mode='maximum' check='none'/>\n"),
        }
        x.push_str("  <clock offset='utc'/>\n");
        x.push_str("  <on_poweroff>destroy</on_poweroff>\n  <on_reboot>restart</on_reboot>\n");
        x.push_str("  <on_crash>destroy</on_crash>\n");
        x.push_str("  <devices>\n");
        self.push_disks(&mut x);
        for nic in &self.interfaces {
            push_interface(&mut x, nic);
        }
        self.push_console(&mut x);
        x.push_str("    <rng model='virtio'>\n      <backend model='random'>/dev/urandom</backend>\n    </rng>\n");
        x.push_str("  </devices>\n</domain>\n");
        Ok(DomainXml {
            name: self.name.clone(),
            uuid: self.uuid,
            xml: x,
        })
    }

    fn needs_smm(&self) -> bool {
        matches!(
            self.firmware,
            FirmwarePlan::UefiExplicit { secure_boot: true, .. } | FirmwarePlan::UefiAuto { secure_boot: true }
        )
    }

    fn push_os(&self, x: &mut String) {
        let type_line = format!(
            "    <type arch='x86_64' machine='{}'>hvm</type>\n",
            escape_attr(&self.machine)
        );
        match &self.firmware {
            FirmwarePlan::UefiExplicit {
                loader_path,
                nvram_template,
                nvram_path,
                secure_boot,
            } => {
                x.push_str("  <os>\n");
                x.push_str(&type_line);
                let secure = if *secure_boot { "yes" } else { "no" };
                x.push_str(&format!(
                    "    <loader readonly='yes' secure='{secure}' type='pflash'>{}</loader>\n",
                    escape_text(loader_path)
                ));
                let template = nvram_template
                    .as_deref()
                    .map(|t| format!(" template='{}'", escape_attr(t)))
                    .unwrap_or_default();
                match nvram_path {
                    Some(p) => x.push_str(&format!("    <nvram{template}>{}</nvram>\n", escape_text(p))),
                    None if !template.is_empty() => x.push_str(&format!("    <nvram{template}/>\n")),
                    None => {}
                }
            }
            FirmwarePlan::UefiAuto { secure_boot } => {
                x.push_str("  <os firmware='efi'>\n");
                x.push_str(&type_line);
                let enabled = if *secure_boot { "yes" } else { "no" };
                x.push_str(&format!(
                    "    <firmware>\n      <feature enabled='{enabled}' name='secure-boot'/>\n    </firmware>\n"
                ));
            }
            FirmwarePlan::Bios => {
                x.push_str("  <os>\n");
                x.push_str(&type_line);
            }
        }
        x.push_str("    <boot dev='hd'/>\n  </os>\n");
    }

    fn push_disks(&self, x: &mut String) {
        let disks: Vec<&DiskPlan> = std::iter::once(&self.root_disk).chain(&self.additional_disks).collect();
        if disks.iter().any(|d| d.bus == DiskBus::Scsi) {
            x.push_str("    <controller type='scsi' index='0' model='virtio-scsi'/>\n");
        }
        let devs = target_devs(self.root_disk.bus, &self.additional_disks);
        for (d, dev) in disks.into_iter().zip(devs) {
            x.push_str(&format!(
                "    <disk type='volume' device='disk'>\n      <driver name='qemu' type='{}' discard='unmap'/>\n      \
                 <source pool='{}' volume='{}'/>\n      <target dev='{dev}' bus='{}'/>\n    </disk>\n",
                d.format.as_str(),
                escape_attr(&d.pool),
                escape_attr(&d.volume),
                bus_name(d.bus),
            ));
        }
    }

    fn push_console(&self, x: &mut String) {
        match &self.console {
            ConsolePlan::LogFile(p) => {
                x.push_str(&format!(
                    "    <serial type='file'>\n      <source path='{}' append='on'/>\n      <target port='0'/>\n    \
                     </serial>\n",
                    escape_attr(p)
                ));
                x.push_str("    <console type='file'>\n");
                x.push_str(&format!("      <source path='{}' append='on'/>\n", escape_attr(p)));
                x.push_str("      <target type='serial' port='0'/>\n    </console>\n");
            }
            ConsolePlan::PtyWithLog(p) => {
                x.push_str(&format!(
                    "    <serial type='pty'>\n      <log file='{}' append='on'/>\n      <target port='0'/>\n    \
                     </serial>\n",
                    escape_attr(p)
                ));
                x.push_str("    <console type='pty'>\n      <target type='serial' port='0'/>\n    </console>\n");
            }
        }
    }
}

fn push_interface(x: &mut String, i: &InterfacePlan) {
    let (kind, source) = match (i.kind, i.mode) {
        (NetworkType::Network, _) => ("network", format!("network='{}'", escape_attr(&i.source))),
        (NetworkType::Bridge, _) => ("bridge", format!("bridge='{}'", escape_attr(&i.source))),
        (NetworkType::Direct, mode) => (
            "direct",
            format!(
                "dev='{}' mode='{}'",
                escape_attr(&i.source),
                mode_name(mode.unwrap_or(DirectMode::Bridge))
            ),
        ),
    };
    x.push_str(&format!(
        "    <interface type='{kind}'>\n      <mac address='{}'/>\n      <source {source}/>\n      \
         <model type='{}'/>\n    </interface>\n",
        escape_attr(&i.mac.to_ascii_lowercase()),
        escape_attr(&i.model),
    ));
}

#[cfg(test)]
pub(crate) mod tests;

//! The domain XML builder with any names, paths, MACs and sizes: refused with an error naming
//! the input, or a well-formed `<domain>` that says exactly what the plan says (no value can
//! inject markup, drop a device or move the Ignition file).
#![no_main]

use arbitrary::Arbitrary;
use caplv::{
    api::libvirt_machine::{DirectMode, DiskBus, DomainType, NetworkType},
    libvirt::{
        domain_xml::{ConsolePlan, DiskPlan, DomainPlan, FirmwarePlan, IGNITION_FW_CFG_NAME, InterfacePlan},
        volume_xml::VolumeFormat,
    },
};
use libfuzzer_sys::fuzz_target;

/// One change to the seed's worker plan (a fuzzer finds valid documents at once and mutates
/// one value at a time from there).
#[derive(Arbitrary, Debug)]
enum Edit {
    Name(String),
    Description(Option<String>),
    Machine(String),
    Uuid(u128),
    Vcpus(u32),
    MemoryMib(u64),
    Kvm(bool),
    Firmware(u8, String, Option<String>),
    RootDisk(String, String, u8),
    AddDisk(String, u8),
    AddNic(Nic),
    Nic(Nic),
    Console(bool, String),
    Ignition(Option<String>),
}

#[derive(Arbitrary, Debug)]
struct Nic {
    kind: u8,
    source: String,
    model: String,
    mac: String,
}

fn bus(n: u8) -> DiskBus {
    [DiskBus::Virtio, DiskBus::Sata, DiskBus::Scsi][usize::from(n % 3)]
}

fn disk(pool: &str, volume: &str, n: u8) -> DiskPlan {
    DiskPlan {
        pool: pool.to_owned(),
        volume: volume.to_owned(),
        format: if n & 4 == 0 {
            VolumeFormat::Qcow2
        } else {
            VolumeFormat::Raw
        },
        bus: bus(n),
    }
}

fn interface(nic: &Nic) -> InterfacePlan {
    let kind = [NetworkType::Network, NetworkType::Bridge, NetworkType::Direct][usize::from(nic.kind % 3)];
    let modes = [
        DirectMode::Vepa,
        DirectMode::Bridge,
        DirectMode::Private,
        DirectMode::Passthrough,
    ];
    // Bit 7 asks for a mode where there must be none (or none where one is needed).
    let mode = ((kind == NetworkType::Direct) != (nic.kind & 0x80 != 0)).then(|| modes[usize::from(nic.kind >> 2) % 4]);
    InterfacePlan {
        kind,
        source: nic.source.clone(),
        mode,
        model: nic.model.clone(),
        mac: nic.mac.clone(),
    }
}

/// The seed's worker, as the controller plans it.
fn seed() -> DomainPlan {
    DomainPlan {
        name: "spot-worker-01".to_owned(),
        uuid: uuid::Uuid::from_u128(0x0b9e_3ab4_6ad4_4b1e_9d47_8d2f_3bcb_0c1f),
        vcpus: 4,
        memory_mib: 16384,
        domain_type: DomainType::Kvm,
        machine: "q35".to_owned(),
        firmware: FirmwarePlan::UefiExplicit {
            loader_path: "/usr/share/OVMF/OVMF_CODE_4M.fd".to_owned(),
            nvram_template: Some("/usr/share/OVMF/OVMF_VARS_4M.fd".to_owned()),
            nvram_path: None,
            secure_boot: false,
        },
        root_disk: disk("default", "spot-worker-01-root.qcow2", 0),
        additional_disks: Vec::new(),
        interfaces: vec![InterfacePlan {
            kind: NetworkType::Network,
            source: "default".to_owned(),
            mode: None,
            model: "virtio".to_owned(),
            mac: "52:54:00:12:34:56".to_owned(),
        }],
        console: ConsolePlan::LogFile("/var/log/libvirt/qemu/spot-worker-01-console.log".to_owned()),
        ignition_path: Some("/var/lib/libvirt/images/spot-worker-01.ign".to_owned()),
        description: Some("LibvirtMachine default/spot-worker-01".to_owned()),
    }
}

fn apply(plan: &mut DomainPlan, edit: Edit) {
    match edit {
        Edit::Name(name) => plan.name = name,
        Edit::Description(d) => plan.description = d,
        Edit::Machine(m) => plan.machine = m,
        Edit::Uuid(u) => plan.uuid = uuid::Uuid::from_u128(u),
        Edit::Vcpus(n) => plan.vcpus = n,
        Edit::MemoryMib(n) => plan.memory_mib = n,
        Edit::Kvm(kvm) => plan.domain_type = if kvm { DomainType::Kvm } else { DomainType::Qemu },
        Edit::Firmware(n, loader, nvram) => {
            plan.firmware = match n % 3 {
                0 => FirmwarePlan::UefiExplicit {
                    loader_path: loader,
                    nvram_path: nvram.as_ref().map(|p| format!("{p}.vars")),
                    nvram_template: nvram,
                    secure_boot: n & 0x10 != 0,
                },
                1 => FirmwarePlan::UefiAuto {
                    secure_boot: n & 0x10 != 0,
                },
                _ => FirmwarePlan::Bios,
            }
        }
        Edit::RootDisk(pool, volume, n) => plan.root_disk = disk(&pool, &volume, n),
        Edit::AddDisk(volume, n) => plan.additional_disks.push(disk("default", &volume, n)),
        Edit::AddNic(nic) => plan.interfaces.push(interface(&nic)),
        Edit::Nic(nic) => plan.interfaces = vec![interface(&nic)],
        Edit::Console(pty, path) => {
            plan.console = if pty {
                ConsolePlan::PtyWithLog(path)
            } else {
                ConsolePlan::LogFile(path)
            }
        }
        Edit::Ignition(path) => plan.ignition_path = path,
    }
}

fn child_text<'a>(node: roxmltree::Node<'a, '_>, tag: &str) -> Option<&'a str> {
    node.children().find(|n| n.has_tag_name(tag)).and_then(|n| n.text())
}

fuzz_target!(|edits: Vec<Edit>| {
    let mut plan = seed();
    for edit in edits {
        apply(&mut plan, edit);
    }
    let domain = match plan.to_xml() {
        Ok(domain) => domain,
        Err(e) => {
            assert!(!e.to_string().is_empty(), "an empty error");
            return;
        }
    };
    let doc = match roxmltree::Document::parse(&domain.xml) {
        Ok(doc) => doc,
        Err(e) => panic!("not well-formed ({e}):\n{}", domain.xml),
    };
    let root = doc.root_element();
    assert_eq!(root.tag_name().name(), "domain");
    assert_eq!(child_text(root, "name"), Some(plan.name.as_str()), "{}", domain.xml);
    let uuid = plan.uuid.hyphenated().to_string();
    assert_eq!(child_text(root, "uuid"), Some(uuid.as_str()), "{}", domain.xml);
    if let Some(d) = plan.description.as_deref().filter(|d| !d.is_empty()) {
        assert_eq!(child_text(root, "description"), Some(d), "{}", domain.xml);
    }
    let devices = root.children().find(|n| n.has_tag_name("devices")).unwrap_or(root);
    let count = |tag: &str| devices.children().filter(|n| n.has_tag_name(tag)).count();
    assert_eq!(count("interface"), plan.interfaces.len(), "{}", domain.xml);
    assert_eq!(count("disk"), 1 + plan.additional_disks.len(), "{}", domain.xml);
    let entries: Vec<_> = root
        .descendants()
        .filter(|n| n.has_tag_name("entry") && n.attribute("name") == Some(IGNITION_FW_CFG_NAME))
        .map(|n| n.attribute("file"))
        .collect();
    assert_eq!(
        entries,
        plan.ignition_path.iter().map(|p| Some(p.as_str())).collect::<Vec<_>>()
    );
});

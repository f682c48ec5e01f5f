//! Domain XML rendering: the tested recipe, variants, escaping and input validation.

use super::*;
use crate::libvirt::volume_xml::VolumeFormat;

pub(crate) fn plan() -> DomainPlan {
    DomainPlan {
        name: "worker-1".into(),
        uuid: Uuid::parse_str("3f1c9a6e-1b2d-4e5f-8a9b-0c1d2e3f4a5b").unwrap(),
        vcpus: 2,
        memory_mib: 2048,
        domain_type: DomainType::Qemu,
        machine: "q35".into(),
        firmware: FirmwarePlan::UefiAuto { secure_boot: false },
        root_disk: DiskPlan {
            pool: "pool1".into(),
            volume: "worker-1-root.qcow2".into(),
            format: VolumeFormat::Qcow2,
            bus: DiskBus::Virtio,
        },
        additional_disks: vec![],
        interfaces: vec![InterfacePlan {
            kind: NetworkType::Network,
            source: "default".into(),
            model: "virtio".into(),
            mac: "52:54:00:AB:cd:01".into(),
            mode: None,
        }],
        console: ConsolePlan::LogFile("/var/log/caplv/worker-1-serial.log".into()),
        ignition_path: Some("/pool/worker-1-ignition.ign".into()),
        description: Some("caplv: default/worker-1".into()),
    }
}

#[test]
fn renders_the_tested_recipe() {
    let d = plan().to_xml().unwrap();
    assert_eq!(d.name, "worker-1");
    let x = d.xml;
    for want in [
        "<domain type='qemu'>",
        "<name>worker-1</name>",
        "<uuid>3f1c9a6e-1b2d-4e5f-8a9b-0c1d2e3f4a5b</uuid>",
        "<description>caplv: default/worker-1</description>",
        "<memory unit='MiB'>2048</memory>",
        "<vcpu placement='static'>2</vcpu>",
        "<sysinfo type='fwcfg'>\n    <entry name='opt/com.coreos/config' file='/pool/worker-1-ignition.ign'/>",
        "<os firmware='efi'>\n    <type arch='x86_64' machine='q35'>hvm</type>",
        "<feature enabled='no' name='secure-boot'/>",
        "<boot dev='hd'/>",
        "<acpi/>\n    <apic/>\n  </features>",
        "<cpu mode='maximum' check='none'/>",
        "<on_poweroff>destroy</on_poweroff>",
        "<on_crash>destroy</on_crash>",
        "<disk type='volume' device='disk'>",
        "<driver name='qemu' type='qcow2' discard='unmap'/>",
        "<source pool='pool1' volume='worker-1-root.qcow2'/>",
        "<target dev='vda' bus='virtio'/>",
        "<interface type='network'>\n      <mac address='52:54:00:ab:cd:01'/>\n      <source network='default'/>",
        "<model type='virtio'/>",
        "<serial type='file'>\n      <source path='/var/log/caplv/worker-1-serial.log' append='on'/>",
        "<console type='file'>",
    ] {
        assert!(x.contains(want), "missing {want:?} in\n{x}");
    }
    assert!(!x.contains("smbios") && !x.contains("<loader") && !x.contains("smm"));
    assert_eq!(x.matches("<disk ").count(), 1);
}

#[test]
fn firmware_variants() {
    let mut p = plan();
    p.firmware = FirmwarePlan::UefiExplicit {
        loader_path: "/usr/share/OVMF/OVMF_CODE_4M.fd".into(),
        nvram_template: Some("/usr/share/OVMF/OVMF_VARS_4M.fd".into()),
        nvram_path: Some(default_system_nvram_path("worker-1")),
        secure_boot: false,
    };
    let x = p.to_xml().unwrap().xml;
    assert!(x.contains("  <os>\n"), "{x}");
    assert!(x.contains("<loader readonly='yes' secure='no' type='pflash'>/usr/share/OVMF/OVMF_CODE_4M.fd</loader>"));
    assert!(x.contains(
        "<nvram template='/usr/share/OVMF/OVMF_VARS_4M.fd'>/var/lib/libvirt/qemu/nvram/worker-1_VARS.fd</nvram>"
    ));
    assert!(!x.contains("firmware='efi'") && !x.contains("smm"));

    p.firmware = FirmwarePlan::UefiExplicit {
        loader_path: "/usr/share/OVMF/OVMF_CODE.secboot.fd".into(),
        nvram_template: Some("/usr/share/OVMF/OVMF_VARS.fd".into()),
        nvram_path: None,
        secure_boot: true,
    };
    let x = p.to_xml().unwrap().xml;
    assert!(x.contains("secure='yes'") && x.contains("<smm state='on'/>"));
    assert!(x.contains("<nvram template='/usr/share/OVMF/OVMF_VARS.fd'/>"));

    p.firmware = FirmwarePlan::UefiAuto { secure_boot: true };
    let x = p.to_xml().unwrap().xml;
    assert!(x.contains("<feature enabled='yes' name='secure-boot'/>") && x.contains("<smm state='on'/>"));

    p.firmware = FirmwarePlan::Bios;
    let x = p.to_xml().unwrap().xml;
    assert!(!x.contains("<loader") && !x.contains("efi") && !x.contains("nvram"));
    assert!(x.contains("  <os>\n    <type arch='x86_64' machine='q35'>hvm</type>\n    <boot dev='hd'/>"));
}

#[test]
fn buses_networks_consoles_and_types() {
    let mut p = plan();
    p.domain_type = DomainType::Kvm;
    p.root_disk.bus = DiskBus::Sata;
    p.interfaces[0].kind = NetworkType::Bridge;
    p.interfaces[0].source = "br0".into();
    p.interfaces[0].model = "e1000e".into();
    p.console = ConsolePlan::PtyWithLog("/var/log/w.log".into());
    p.ignition_path = None;
    p.description = None;
    let x = p.to_xml().unwrap().xml;
    assert!(x.contains("<domain type='kvm'>") && x.contains("<cpu mode='host-passthrough' check='none'/>"));
    assert!(x.contains("<target dev='sda' bus='sata'/>") && !x.contains("virtio-scsi"));
    assert!(x.contains("<interface type='bridge'>") && x.contains("<source bridge='br0'/>"));
    assert!(x.contains("<model type='e1000e'/>"));
    assert!(x.contains("<serial type='pty'>\n      <log file='/var/log/w.log' append='on'/>"));
    assert!(x.contains("<console type='pty'>"));
    assert!(!x.contains("sysinfo") && !x.contains("<description>"));
    p.root_disk.bus = DiskBus::Scsi;
    let x = p.to_xml().unwrap().xml;
    assert!(x.contains("<controller type='scsi' index='0' model='virtio-scsi'/>"));
    assert!(x.contains("<target dev='sda' bus='scsi'/>"));
}

#[test]
fn escapes_text_and_attributes() {
    let mut p = plan();
    p.ignition_path = Some("/pool/it's <a> & \"b\".ign".into());
    p.description = Some("<owner> & 'quotes'".into());
    let x = p.to_xml().unwrap().xml;
    assert!(
        x.contains("file='/pool/it&apos;s &lt;a&gt; &amp; &quot;b&quot;.ign'"),
        "{x}"
    );
    assert!(x.contains("<description>&lt;owner&gt; &amp; &apos;quotes&apos;</description>"));
}

#[test]
fn rejects_bad_input_without_emitting_xml() {
    type Mutation = fn(&mut DomainPlan);
    let cases: [(&str, Mutation); 18] = [
        ("domain name", |p| p.name = "a'b".into()),
        ("vcpus", |p| p.vcpus = 0),
        ("memory", |p| p.memory_mib = 0),
        ("machine type", |p| p.machine = "q35'/>".into()),
        ("storage pool", |p| p.root_disk.pool = "pool 1".into()),
        ("volume", |p| p.root_disk.volume = "../etc".into()),
        ("network name", |p| p.interfaces[0].source = "def<ault".into()),
        ("bridge name", |p| {
            p.interfaces[0].kind = NetworkType::Bridge;
            p.interfaces[0].source = "br 0".into();
        }),
        ("NIC model", |p| p.interfaces[0].model = "Virtio'".into()),
        ("MAC address", |p| p.interfaces[0].mac = "52:54:00:ab:cd".into()),
        ("MAC address", |p| p.interfaces[0].mac = "01:54:00:ab:cd:ef".into()),
        ("console log path", |p| {
            p.console = ConsolePlan::LogFile("relative.log".into())
        }),
        ("Ignition file path", |p| p.ignition_path = Some("/a\nb".into())),
        ("firmware path", |p| {
            p.firmware = FirmwarePlan::UefiExplicit {
                loader_path: "OVMF.fd".into(),
                nvram_template: None,
                nvram_path: None,
                secure_boot: false,
            };
        }),
        ("NVRAM path", |p| {
            p.firmware = FirmwarePlan::UefiExplicit {
                loader_path: "/OVMF.fd".into(),
                nvram_template: Some("/t".into()),
                nvram_path: Some("/a/../b".into()),
                secure_boot: false,
            };
        }),
        ("description", |p| p.description = Some("\u{1b}[31m".into())),
        // XML 1.0 has no way to carry the noncharacters, escaped or not (found by fuzzing).
        ("description", |p| p.description = Some("owner \u{FFFF}".into())),
        ("console log path", |p| {
            p.console = ConsolePlan::LogFile("/var/log/\u{FFFE}.log".into())
        }),
    ];
    for (field, mutate) in cases {
        let mut p = plan();
        mutate(&mut p);
        let e = p.to_xml().unwrap_err();
        let shown = format!("{e:?}");
        assert!(shown.contains(field), "{field}: {shown}");
    }
}

#[test]
fn several_nics_direct_mode_and_data_disks() {
    let mut p = plan();
    p.interfaces.push(InterfacePlan {
        kind: NetworkType::Direct,
        source: "eno1".into(),
        model: "virtio".into(),
        mac: "52:54:00:ab:cd:02".into(),
        mode: Some(DirectMode::Vepa),
    });
    let disk = |volume: &str, bus| DiskPlan {
        pool: "data".into(),
        volume: volume.into(),
        format: VolumeFormat::Qcow2,
        bus,
    };
    p.additional_disks = vec![
        disk("worker-1-data.qcow2", DiskBus::Virtio),
        disk("worker-1-logs.qcow2", DiskBus::Scsi),
        disk("worker-1-more.qcow2", DiskBus::Sata),
    ];
    let x = p.to_xml().unwrap().xml;
    assert_eq!(x.matches("<interface ").count(), 2);
    assert!(
        x.contains("<interface type='direct'>\n      <mac address='52:54:00:ab:cd:02'/>\n      <source dev='eno1' mode='vepa'/>"),
        "{x}"
    );
    assert!(
        x.find("52:54:00:ab:cd:01") < x.find("52:54:00:ab:cd:02"),
        "guest order kept"
    );
    assert!(x.contains("<source pool='data' volume='worker-1-data.qcow2'/>\n      <target dev='vdb' bus='virtio'/>"));
    assert!(x.contains("<source pool='data' volume='worker-1-logs.qcow2'/>\n      <target dev='sda' bus='scsi'/>"));
    assert!(x.contains("<source pool='data' volume='worker-1-more.qcow2'/>\n      <target dev='sdb' bus='sata'/>"));
    assert_eq!(x.matches("virtio-scsi").count(), 1);

    let mut twice = plan();
    twice.interfaces.push(twice.interfaces[0].clone());
    assert!(format!("{:?}", twice.to_xml().unwrap_err()).contains("used by two interfaces"));
    let mut no_mode = p.clone();
    no_mode.interfaces[1].mode = None;
    assert!(format!("{:?}", no_mode.to_xml().unwrap_err()).contains("direct mode"));
    let mut none = plan();
    none.interfaces.clear();
    assert!(none.to_xml().is_err());
}

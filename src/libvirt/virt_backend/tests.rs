use super::convert::version_string;
use super::*;
use crate::api::libvirt_machine::DomainType;
use crate::libvirt::domain_xml::{ConsolePlan, DomainPlan, FirmwarePlan, default_system_nvram_path};
use crate::libvirt::hypervisor::{DomainState, StopReason};
use crate::libvirt::volume_xml::{
    VolumeFormat, full_clone_volume, ignition_volume, ignition_volume_name, overlay_volume, root_volume_name,
};

/// A private test-driver instance: a node with one dir pool (holding `base.qcow2`, 1 GiB),
/// the `default` network, 4 CPUs and 8 GiB.
struct Fixture {
    dir: tempfile::TempDir,
    hv: VirtHypervisor,
}

impl Fixture {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let pool_dir = dir.path().join("pool");
        std::fs::create_dir(&pool_dir).unwrap();
        let node = format!(
            "<node>\n  <cpu><nodes>1</nodes><sockets>1</sockets><cores>4</cores><threads>1</threads>\
                 <active>4</active><mhz>2000</mhz><model>x86_64</model></cpu>\n  <memory>8388608</memory>\n  \
                 <pool type='dir'><name>pool1</name><uuid>35bb2ad9-388a-cdfe-461a-b8907f6e53fe</uuid><source/>\
                 <target><path>{}</path></target>\n    <volume type='file'><name>base.qcow2</name>\
                 <capacity unit='GiB'>1</capacity><target><format type='qcow2'/></target></volume>\n  </pool>\n  \
                 <network><name>default</name><uuid>dd8fe884-6c02-601e-7551-cca97df1c5df</uuid>\
                 <bridge name='virbr0'/><forward/><ip address='192.168.122.1' netmask='255.255.255.0'/></network>\n\
                 </node>\n",
            pool_dir.display()
        );
        let file = dir.path().join("node.xml");
        std::fs::write(&file, node).unwrap();
        let hv = VirtHypervisor::connect(&format!("test://{}", file.display())).unwrap();
        Self { dir, hv }
    }

    fn pool_dir(&self) -> std::path::PathBuf {
        self.dir.path().join("pool")
    }
}

fn plan(f: &Fixture, name: &str) -> DomainPlan {
    let mut p = crate::libvirt::domain_xml::tests::plan();
    p.name = name.to_owned();
    p.uuid = Uuid::new_v5(&Uuid::NAMESPACE_OID, name.as_bytes());
    p.domain_type = DomainType::Qemu;
    p.root_disk.pool = "pool1".into();
    p.root_disk.volume = root_volume_name(name);
    let ign = f.pool_dir().join(ignition_volume_name(name));
    p.ignition_path = Some(ign.display().to_string());
    p.console = ConsolePlan::LogFile(f.dir.path().join(format!("{name}-serial.log")).display().to_string());
    p
}

#[test]
fn capabilities_of_a_private_test_node() {
    let f = Fixture::new();
    let h = f.hv.capabilities().unwrap();
    assert_eq!(h.cpus, 4);
    assert_eq!(h.memory_mib, 8192);
    assert!(!h.kvm_available, "the test driver offers only type='test' guests");
    assert_eq!(h.free_memory_mib, None);
    assert!(h.libvirt_version.split('.').count() == 3 && !h.libvirt_version.starts_with("0."));
    assert_eq!(h.driver.to_ascii_lowercase(), "test");
    assert!(f.hv.is_alive());
    assert!(f.hv.uri().starts_with("test:///"));
    assert!(f.hv.list_domains().unwrap().is_empty(), "a private node starts empty");
}

#[test]
fn node_stats_of_the_test_driver_have_cpu_but_no_memory() {
    let f = Fixture::new();
    let stats = f.hv.node_stats().unwrap();
    assert_eq!(
        stats.available_memory_mib, None,
        "the test driver has no memory statistics"
    );
    assert!(
        stats.cpu_total_ns > stats.cpu_busy_ns && stats.cpu_busy_ns > 0,
        "{stats:?}"
    );
    assert_eq!(stats.guest_cpu_ns, 0, "no guests run");
    // A test can fake them beside the node file.
    std::fs::write(
        faked_stats_path(f.hv.uri()).unwrap(),
        r#"{"availableMemoryMib": 700, "cpuBusyNs": 5, "cpuTotalNs": 9}"#,
    )
    .unwrap();
    let faked = f.hv.node_stats().unwrap();
    assert_eq!(
        (faked.available_memory_mib, faked.cpu_busy_ns, faked.cpu_total_ns),
        (Some(700), 5, 9)
    );
}

#[test]
fn connection_failures_are_typed() {
    let e = VirtHypervisor::connect("test:///nonexistent/dir/node.xml").unwrap_err();
    assert_eq!(e.reason(), "ConnectionFailed", "{e}");
    let e = VirtHypervisor::connect("qemu+unix:///system?socket=/nonexistent/caplv.sock").unwrap_err();
    assert_eq!(e.reason(), "ConnectionFailed", "{e}");
    assert!(e.is_transient());
}

#[test]
fn pools_and_volume_lookups() {
    let f = Fixture::new();
    let pool = f.hv.pool("pool1").unwrap().unwrap();
    assert!(pool.active);
    assert_eq!(pool.path.as_deref(), Some(f.pool_dir().to_str().unwrap()));
    assert_eq!(f.hv.pool("nope").unwrap(), None);
    let base = f.hv.volume("pool1", "base.qcow2").unwrap().unwrap();
    assert_eq!(base.capacity, 1 << 30);
    assert_eq!(base.path, f.pool_dir().join("base.qcow2").display().to_string());
    assert_eq!(f.hv.volume("pool1", "nope.qcow2").unwrap(), None);
    assert_eq!(
        f.hv.volume("nope", "base.qcow2").unwrap_err().reason(),
        "StoragePoolNotFound"
    );
    assert_eq!(f.hv.list_volumes("nope").unwrap_err().reason(), "StoragePoolNotFound");
    assert_eq!(f.hv.delete_volume("pool1", "nope").unwrap_err().reason(), "NotFound");
    assert_eq!(
        f.hv.upload_volume("pool1", "nope", b"x").unwrap_err().reason(),
        "NotFound"
    );
    let bad = overlay_volume("x.qcow2", 1 << 30, "/b", VolumeFormat::Qcow2).unwrap();
    assert_eq!(
        f.hv.create_volume("nope", &bad).unwrap_err().reason(),
        "StoragePoolNotFound"
    );
}

#[test]
fn overlay_clone_and_ignition_volumes() {
    let f = Fixture::new();
    let base = f.hv.volume("pool1", "base.qcow2").unwrap().unwrap();
    let overlay = overlay_volume("w1-root.qcow2", 20 << 30, &base.path, VolumeFormat::Qcow2).unwrap();
    let v = f.hv.create_volume("pool1", &overlay).unwrap();
    assert_eq!(v.capacity, 20 << 30);
    assert_eq!(v.name, "w1-root.qcow2");
    let e = f.hv.create_volume("pool1", &overlay).unwrap_err();
    assert_eq!(e.reason(), "AlreadyExists", "{e}");

    let clone = full_clone_volume("w2-root.qcow2", 1 << 30, VolumeFormat::Qcow2).unwrap();
    let from = VolumeRef {
        pool: "pool1",
        name: "base.qcow2",
    };
    assert_eq!(f.hv.clone_volume("pool1", &clone, from).unwrap().name, "w2-root.qcow2");
    assert_eq!(
        f.hv.clone_volume("pool1", &clone, from).unwrap_err().reason(),
        "AlreadyExists"
    );
    let missing = VolumeRef {
        pool: "pool1",
        name: "missing.qcow2",
    };
    assert_eq!(
        f.hv.clone_volume("pool1", &clone, missing).unwrap_err().reason(),
        "BaseImageNotFound"
    );
    let no_pool = VolumeRef {
        pool: "nopool",
        name: "base.qcow2",
    };
    assert_eq!(
        f.hv.clone_volume("pool1", &clone, no_pool).unwrap_err().reason(),
        "StoragePoolNotFound"
    );

    let payload = br#"{"ignition":{"version":"3.2.0"}}"#;
    let ign = ignition_volume("w1", payload.len() as u64).unwrap();
    let iv = f.hv.create_volume("pool1", &ign).unwrap();
    assert_eq!(iv.capacity, payload.len() as u64);
    f.hv.upload_volume("pool1", &ign.name, payload).unwrap();
    assert_eq!(f.hv.download_volume("pool1", &ign.name, 1 << 20).unwrap(), payload);
    assert_eq!(f.hv.download_volume("pool1", &ign.name, 4).unwrap(), &payload[..4]);
    assert_eq!(
        std::fs::read(&iv.path).unwrap(),
        payload,
        "the fallback wrote the volume's path"
    );

    for name in ["w1-root.qcow2", "w2-root.qcow2", "w1-ignition.ign"] {
        f.hv.delete_volume("pool1", name).unwrap();
        assert!(f.hv.delete_volume("pool1", name).unwrap_err().is_not_found());
    }
    assert_eq!(f.hv.list_volumes("pool1").unwrap(), vec!["base.qcow2".to_owned()]);
    assert!(!std::path::Path::new(&iv.path).exists(), "nothing left behind");
}

#[test]
fn domain_lifecycle_leaves_nothing_behind() {
    let f = Fixture::new();
    let base = f.hv.volume("pool1", "base.qcow2").unwrap().unwrap();
    let root = overlay_volume(&root_volume_name("w1"), 2 << 30, &base.path, VolumeFormat::Qcow2).unwrap();
    f.hv.create_volume("pool1", &root).unwrap();
    let payload = b"{}";
    f.hv.create_volume("pool1", &ignition_volume("w1", 2).unwrap()).unwrap();
    f.hv.upload_volume("pool1", &ignition_volume_name("w1"), payload)
        .unwrap();

    for firmware in [
        FirmwarePlan::UefiAuto { secure_boot: false },
        FirmwarePlan::UefiExplicit {
            loader_path: "/usr/share/OVMF/OVMF_CODE_4M.fd".into(),
            nvram_template: Some("/usr/share/OVMF/OVMF_VARS_4M.fd".into()),
            nvram_path: Some(default_system_nvram_path("w1")),
            secure_boot: false,
        },
        FirmwarePlan::Bios,
    ] {
        let mut p = plan(&f, "w1");
        p.firmware = firmware;
        let def = p.to_xml().unwrap();
        assert_eq!(f.hv.domain("w1").unwrap(), None);
        let info = f.hv.define_and_start(&def).unwrap();
        assert_eq!(info.name, "w1");
        assert_eq!(info.uuid, p.uuid);
        assert_eq!(info.state, DomainState::Running);
        assert!(info.persistent);
        assert_eq!(f.hv.domain("w1").unwrap().unwrap(), info);
        assert_eq!(f.hv.list_domains().unwrap(), vec!["w1".to_owned()]);

        // Crash-restart: a second define never overwrites, whatever the name or UUID clash.
        let e = f.hv.define_and_start(&def).unwrap_err();
        assert_eq!(e.reason(), "AlreadyExists", "{e}");
        let mut other = p.clone();
        other.name = "w1-other".into();
        let e = f.hv.define_and_start(&other.to_xml().unwrap()).unwrap_err();
        assert_eq!(e.reason(), "AlreadyExists", "same UUID: {e}");
        assert_eq!(f.hv.list_domains().unwrap(), vec!["w1".to_owned()]);

        f.hv.start("w1").unwrap();
        f.hv.destroy("w1").unwrap();
        assert_eq!(f.hv.domain("w1").unwrap().unwrap().state, DomainState::Shutoff);
        f.hv.destroy("w1").unwrap();
        f.hv.start("w1").unwrap();
        assert_eq!(f.hv.domain("w1").unwrap().unwrap().state, DomainState::Running);
        f.hv.destroy("w1").unwrap();
        f.hv.undefine_with_nvram("w1").unwrap();
        assert_eq!(f.hv.domain("w1").unwrap(), None);
        assert!(f.hv.list_domains().unwrap().is_empty());
    }

    for op in [
        VirtHypervisor::start as fn(&VirtHypervisor, &str) -> HvResult<()>,
        VirtHypervisor::destroy,
        VirtHypervisor::shutdown,
        VirtHypervisor::undefine_with_nvram,
    ] {
        let e = op(&f.hv, "w1").unwrap_err();
        assert_eq!(e.reason(), "NotFound", "{e}");
        assert!(e.is_not_found());
    }
    f.hv.delete_volume("pool1", &root_volume_name("w1")).unwrap();
    f.hv.delete_volume("pool1", &ignition_volume_name("w1")).unwrap();
    assert_eq!(f.hv.list_volumes("pool1").unwrap(), vec!["base.qcow2".to_owned()]);
    let left: Vec<_> = std::fs::read_dir(f.pool_dir()).unwrap().collect();
    assert!(left.is_empty(), "{left:?}");
}

/// A bare test-driver domain whose guest does `on_poweroff` (the test driver honours it).
fn bare_domain(name: &str, on_poweroff: &str) -> DomainXml {
    let uuid = Uuid::new_v5(&Uuid::NAMESPACE_OID, name.as_bytes());
    let xml = format!(
        "<domain type='test'><name>{name}</name><uuid>{uuid}</uuid><memory unit='MiB'>64</memory>\
         <vcpu>1</vcpu><os><type arch='x86_64'>hvm</type></os><on_poweroff>{on_poweroff}</on_poweroff></domain>"
    );
    DomainXml {
        name: name.to_owned(),
        uuid,
        xml,
    }
}

#[test]
fn shutdown_asks_the_guest_and_the_state_says_why_it_stopped() {
    let f = Fixture::new();
    let reason = |name: &str| {
        let d = f.hv.domain(name).unwrap().unwrap();
        (d.state, d.stop_reason)
    };
    let info = f.hv.define_and_start(&bare_domain("polite", "destroy")).unwrap();
    assert_eq!(info.stop_reason, None, "running");
    f.hv.shutdown("polite").unwrap();
    assert_eq!(reason("polite"), (DomainState::Shutoff, Some(StopReason::ShutDown)));
    f.hv.shutdown("polite").unwrap();
    f.hv.start("polite").unwrap();
    assert_eq!(reason("polite"), (DomainState::Running, None));
    f.hv.destroy("polite").unwrap();
    assert_eq!(reason("polite"), (DomainState::Shutoff, Some(StopReason::Destroyed)));

    // A guest that restarts on power-off never stops: what a guest ignoring ACPI looks like.
    f.hv.define_and_start(&bare_domain("stubborn", "restart")).unwrap();
    f.hv.shutdown("stubborn").unwrap();
    assert_eq!(reason("stubborn"), (DomainState::Running, None));
}

#[test]
fn bridge_and_pty_variants_define_on_the_test_driver() {
    let f = Fixture::new();
    let mut p = plan(&f, "w2");
    p.interfaces[0].kind = crate::api::libvirt_machine::NetworkType::Bridge;
    p.interfaces[0].source = "br0".into();
    p.console = ConsolePlan::PtyWithLog(f.dir.path().join("w2.log").display().to_string());
    p.root_disk.bus = crate::api::libvirt_machine::DiskBus::Scsi;
    p.firmware = FirmwarePlan::UefiAuto { secure_boot: true };
    let info = f.hv.define_and_start(&p.to_xml().unwrap()).unwrap();
    assert_eq!(info.state, DomainState::Running);
    f.hv.destroy("w2").unwrap();
    f.hv.undefine_with_nvram("w2").unwrap();
    assert!(f.hv.list_domains().unwrap().is_empty());
}

#[test]
fn private_instances_do_not_share_state() {
    let a = Fixture::new();
    let b = Fixture::new();
    a.hv.define_and_start(&plan(&a, "w3").to_xml().unwrap()).unwrap();
    assert_eq!(b.hv.domain("w3").unwrap(), None);
    assert_eq!(a.hv.list_domains().unwrap(), vec!["w3".to_owned()]);
    a.hv.destroy("w3").unwrap();
    a.hv.undefine_with_nvram("w3").unwrap();
}

#[test]
fn define_validates_against_the_libvirt_schema() {
    // The test driver honours VIR_DOMAIN_DEFINE_VALIDATE, so every define in these tests is
    // checked against libvirt's RelaxNG schema, not only parsed.
    let f = Fixture::new();
    let mut def = plan(&f, "w4").to_xml().unwrap();
    def.xml = def.xml.replace("<devices>", "<devices>\n    <bogus/>");
    let e = f.hv.define_and_start(&def).unwrap_err();
    assert_eq!(e.reason(), "LibvirtError", "{e}");
    assert!(e.to_string().contains("schema"), "{e}");
    assert!(f.hv.list_domains().unwrap().is_empty());
}

/// This machine's `MemTotal`, in KiB.
fn mem_total_kib() -> u64 {
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap();
    let line = meminfo.lines().find(|l| l.starts_with("MemTotal:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// Against a real libvirtd: set `CAPLV_TEST_LIBVIRT_URI` (e.g.
/// `qemu+unix:///session?socket=/run/user/0/libvirt/libvirt-sock`) and `CAPLV_TEST_POOL_DIR`
/// (an empty directory the daemon may write), then run with `--ignored`. Exercises what the
/// test driver cannot: a real dir pool, qemu-img overlays, stream upload and download.
#[test]
#[ignore = "needs a real libvirtd; see the doc comment"]
fn real_libvirt_storage_roundtrip() {
    let (Ok(uri), Ok(dir)) = (
        std::env::var("CAPLV_TEST_LIBVIRT_URI"),
        std::env::var("CAPLV_TEST_POOL_DIR"),
    ) else {
        panic!("set CAPLV_TEST_LIBVIRT_URI and CAPLV_TEST_POOL_DIR");
    };
    let hv = VirtHypervisor::connect(&uri).unwrap();
    match hv.capabilities() {
        Ok(host) => assert!(host.cpus > 0 && host.memory_mib > 0, "{host:?}"),
        // A daemon without any QEMU binary still serves storage.
        Err(e) => assert_eq!(e.reason(), "HypervisorUnavailable", "{e}"),
    }
    // The host's own statistics, as the reclaim measurement reads them.
    let stats = hv.node_stats().unwrap();
    // The daemon is local, and its memory statistics are /proc/meminfo's; the node info's
    // total may count NUMA cells differently (a VM with hot-plugged memory reports less).
    let total_mib = mem_total_kib() / 1024;
    let available = stats.available_memory_mib.expect("QEMU hosts report memory statistics");
    assert!(available > 0 && available <= total_mib, "{stats:?} of {total_mib} MiB");
    assert!(
        stats.cpu_total_ns >= stats.cpu_busy_ns && stats.cpu_busy_ns > 0,
        "{stats:?}"
    );
    let c = hv.conn().unwrap();
    let pool_xml = format!(
        "<pool type='dir'><name>caplv-rt</name><target><path>{}</path></target></pool>",
        crate::libvirt::xml::escape_text(&dir)
    );
    let pool = c.create_storage_pool_xml(&pool_xml, 0).unwrap();
    let result = std::panic::catch_unwind(AssertUnwindSafe(|| {
        let base = full_clone_volume("base.qcow2", 64 << 20, VolumeFormat::Qcow2).unwrap();
        let base = hv.create_volume("caplv-rt", &base).unwrap();
        let overlay = overlay_volume("w1-root.qcow2", 128 << 20, &base.path, VolumeFormat::Qcow2).unwrap();
        let v = hv.create_volume("caplv-rt", &overlay).unwrap();
        assert_eq!(v.capacity, 128 << 20);
        // qcow2 header: magic, version 3 (= compat 1.1), a backing file name naming the base.
        let header = std::fs::read(&v.path).unwrap();
        assert_eq!(&header[..4], b"QFI\xfb");
        assert_eq!(u32::from_be_bytes(header[4..8].try_into().unwrap()), 3);
        let off = usize::try_from(u64::from_be_bytes(header[8..16].try_into().unwrap())).unwrap();
        let len = usize::try_from(u32::from_be_bytes(header[16..20].try_into().unwrap())).unwrap();
        assert_eq!(std::str::from_utf8(&header[off..off + len]).unwrap(), base.path);
        let from = VolumeRef {
            pool: "caplv-rt",
            name: "base.qcow2",
        };
        let clone = full_clone_volume("w2-root.qcow2", 64 << 20, VolumeFormat::Qcow2).unwrap();
        hv.clone_volume("caplv-rt", &clone, from).unwrap();
        let payload: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
        let ign = ignition_volume("w1", payload.len() as u64).unwrap();
        hv.create_volume("caplv-rt", &ign).unwrap();
        hv.upload_volume("caplv-rt", &ign.name, &payload).unwrap();
        assert_eq!(hv.download_volume("caplv-rt", &ign.name, 1 << 20).unwrap(), payload);
        let on_disk = std::fs::read(std::path::Path::new(&dir).join(&ign.name)).unwrap();
        assert_eq!(on_disk, payload);
        // A file copied in behind libvirt's back: a base image's lookup refreshes the pool and
        // finds it; a lookup of a volume libvirt created does not pay for a refresh.
        let copied = std::path::Path::new(&dir).join("copied.qcow2");
        std::fs::copy(&base.path, &copied).unwrap();
        assert!(hv.created_volume("caplv-rt", "copied.qcow2").unwrap().is_none());
        assert!(hv.volume("caplv-rt", "copied.qcow2").unwrap().is_some());
        assert!(hv.created_volume("caplv-rt", "w1-root.qcow2").unwrap().is_some());
        // The host's facts are read once per connection; free memory on every probe.
        if let (Ok(first), Ok(again)) = (hv.capabilities(), hv.capabilities()) {
            assert_eq!(
                (first.cpus, first.memory_mib, first.kvm_available),
                (again.cpus, again.memory_mib, again.kvm_available)
            );
            assert!(again.free_memory_mib.is_some(), "{again:?}");
        }
        for name in [
            "w1-root.qcow2",
            "w2-root.qcow2",
            "w1-ignition.ign",
            "base.qcow2",
            "copied.qcow2",
        ] {
            hv.delete_volume("caplv-rt", name).unwrap();
        }
        assert!(hv.list_volumes("caplv-rt").unwrap().is_empty());
    }));
    pool.destroy().unwrap();
    if let Err(p) = result {
        std::panic::resume_unwind(p);
    }
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0, "nothing left behind");
}

#[test]
fn one_connection_serves_many_threads() {
    fn shareable<T: Send + Sync + 'static>() {}
    shareable::<VirtHypervisor>();
    let f = Fixture::new();
    let plans: Vec<_> = (0..4).map(|i| plan(&f, &format!("t{i}")).to_xml().unwrap()).collect();
    let hv: std::sync::Arc<dyn Hypervisor> = std::sync::Arc::new(f.hv);
    let handles: Vec<_> = plans
        .into_iter()
        .map(|def| {
            let hv = std::sync::Arc::clone(&hv);
            std::thread::spawn(move || {
                hv.define_and_start(&def).unwrap();
                hv.destroy(&def.name).unwrap();
                hv.undefine_with_nvram(&def.name).unwrap();
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    assert!(hv.list_domains().unwrap().is_empty());
    drop(f.dir);
}

#[test]
fn versions_are_formatted() {
    assert_eq!(version_string(9_000_000), "9.0.0");
    assert_eq!(version_string(10_000_002), "10.0.2");
    assert_eq!(version_string(8_010_003), "8.10.3");
}

#[test]
fn dhcp_hosts_direct_nics_data_disks_and_addresses_on_the_test_driver() {
    let f = Fixture::new();
    let entry = DhcpHost {
        mac: "52:54:00:ab:cd:01".into(),
        ip: "192.168.122.50".into(),
        name: Some("w9".into()),
    };
    assert!(f.hv.dhcp_hosts("default").unwrap().is_empty());
    f.hv.add_dhcp_host("default", &entry).unwrap();
    assert_eq!(f.hv.dhcp_hosts("default").unwrap(), std::slice::from_ref(&entry));
    let mut clash = entry.clone();
    clash.mac = "52:54:00:00:00:09".into();
    clash.name = None;
    let e = f.hv.add_dhcp_host("default", &clash).unwrap_err();
    assert!(matches!(e, HypervisorError::AlreadyExists { .. }), "{e:?}");
    f.hv.remove_dhcp_host("default", &entry).unwrap();
    assert!(f.hv.remove_dhcp_host("default", &entry).unwrap_err().is_not_found());
    assert!(f.hv.dhcp_hosts("nowhere").unwrap_err().is_not_found());

    let mut p = plan(&f, "w9");
    f.hv.create_volume(
        "pool1",
        &crate::libvirt::volume_xml::empty_qcow2_volume("w9-data.qcow2", 1 << 30).unwrap(),
    )
    .unwrap();
    p.additional_disks.push(crate::libvirt::domain_xml::DiskPlan {
        pool: "pool1".into(),
        volume: "w9-data.qcow2".into(),
        format: VolumeFormat::Qcow2,
        bus: crate::api::libvirt_machine::DiskBus::Virtio,
    });
    p.interfaces.push(crate::libvirt::domain_xml::InterfacePlan {
        kind: crate::api::libvirt_machine::NetworkType::Direct,
        source: "eth0".into(),
        model: "virtio".into(),
        mac: "52:54:00:ab:cd:02".into(),
        mode: Some(crate::api::libvirt_machine::DirectMode::Bridge),
    });
    assert_eq!(
        f.hv.define_and_start(&p.to_xml().unwrap()).unwrap().state,
        DomainState::Running
    );
    let found = f.hv.interface_addresses("w9").unwrap();
    assert!(
        found
            .iter()
            .any(|a| a.mac == "52:54:00:ab:cd:01" && a.ip.starts_with("192.168.122.")),
        "{found:?}"
    );
    assert!(f.hv.interface_addresses("gone").unwrap_err().is_not_found());
}

use super::*;
use crate::libvirt::{domain_xml::tests::plan, volume_xml::ignition_volume};

fn hv() -> FakeHypervisor {
    FakeHypervisor::new()
        .with_pool("p", "/pool/", true)
        .with_volume("p", "base", 100)
}

#[test]
fn keeps_the_lookup_and_creator_contract() {
    let hv = hv();
    assert_eq!(hv.volume("p", "nope").unwrap(), None);
    assert_eq!(hv.domain("nope").unwrap(), None);
    assert!(matches!(
        hv.volume("q", "x"),
        Err(HypervisorError::StoragePoolNotFound { .. })
    ));
    let ign = ignition_volume("w", 4).unwrap();
    let info = hv.create_volume("p", &ign).unwrap();
    assert_eq!((info.path.as_str(), info.capacity), ("/pool/w-ignition.ign", 4));
    assert_eq!(hv.volume_bytes("p", &ign.name).unwrap(), [0; 4], "preallocated zeros");
    assert!(matches!(
        hv.create_volume("p", &ign),
        Err(HypervisorError::AlreadyExists { .. })
    ));
    let from = VolumeRef {
        pool: "p",
        name: "gone",
    };
    assert!(matches!(
        hv.clone_volume("p", &ign, from),
        Err(HypervisorError::BaseImageNotFound { .. })
    ));
    hv.upload_volume("p", &ign.name, b"ab").unwrap();
    assert_eq!(hv.download_volume("p", &ign.name, 3).unwrap(), b"ab\0");
    assert!(hv.upload_volume("p", "gone", b"x").unwrap_err().is_not_found());
    assert!(hv.delete_volume("p", "gone").unwrap_err().is_not_found());
    hv.set_pool_active("p", false);
    assert!(hv.volume("p", "base").unwrap_err().is_transient());
}

#[test]
fn domains_follow_the_contract_and_failures_fire_once() {
    let hv = hv();
    let xml = plan().to_xml().unwrap();
    hv.fail_next(Op::DefineAndStart, invalid("x", "injected"));
    assert!(hv.define_and_start(&xml).is_err());
    assert!(hv.domains().is_empty(), "a failed call changes nothing");
    let d = hv.define_and_start(&xml).unwrap();
    assert_eq!(
        (d.name.as_str(), d.uuid, d.state),
        ("worker-1", xml.uuid, DomainState::Running)
    );
    assert_eq!(hv.calls(Op::DefineAndStart), 2);
    let mut renamed = xml.clone();
    renamed.name = "other".into();
    renamed.xml = renamed.xml.replace("<name>worker-1</name>", "<name>other</name>");
    assert!(matches!(
        hv.define_and_start(&renamed),
        Err(HypervisorError::AlreadyExists { .. })
    ));
    hv.start("worker-1").unwrap();
    hv.destroy("worker-1").unwrap();
    hv.destroy("worker-1").unwrap();
    assert_eq!(hv.domain("worker-1").unwrap().unwrap().state, DomainState::Shutoff);
    hv.undefine_with_nvram("worker-1").unwrap();
    assert!(hv.undefine_with_nvram("worker-1").unwrap_err().is_not_found());
    assert!(hv.destroy("worker-1").unwrap_err().is_not_found());
    hv.insert_domain("t", Uuid::nil(), DomainState::Running);
    hv.undefine_with_nvram("t").unwrap();
    assert!(!hv.domains()[0].persistent, "a running domain becomes transient");
    hv.destroy("t").unwrap();
    assert!(hv.list_domains().unwrap().is_empty());
}

#[test]
fn node_stats_are_what_the_test_set() {
    let hv = hv();
    assert_eq!(hv.node_stats().unwrap(), NodeStats::default());
    let stats = NodeStats {
        available_memory_mib: Some(512),
        cpu_busy_ns: 3,
        cpu_total_ns: 10,
        guest_cpu_ns: 1,
    };
    hv.set_node_stats(stats);
    assert_eq!(hv.node_stats().unwrap(), stats);
    assert_eq!(hv.calls(Op::NodeStats), 2);
}

#[test]
fn a_stopped_domain_says_why_and_a_guest_may_ignore_acpi() {
    let hv = hv();
    hv.define_and_start(&plan().to_xml().unwrap()).unwrap();
    let info = |hv: &FakeHypervisor| hv.domain("worker-1").unwrap().unwrap();
    assert_eq!(info(&hv).stop_reason, None, "a running domain has not stopped");
    hv.shutdown("worker-1").unwrap();
    assert_eq!(
        (info(&hv).state, info(&hv).stop_reason),
        (DomainState::Shutoff, Some(StopReason::ShutDown))
    );
    hv.shutdown("worker-1").unwrap();
    hv.start("worker-1").unwrap();
    assert_eq!(info(&hv).stop_reason, None, "started again");
    hv.destroy("worker-1").unwrap();
    assert_eq!(info(&hv).stop_reason, Some(StopReason::Destroyed));

    hv.start("worker-1").unwrap();
    hv.ignore_acpi("worker-1");
    hv.shutdown("worker-1").unwrap();
    assert_eq!(info(&hv).state, DomainState::Running, "the guest ignored the request");
    assert_eq!(hv.calls(Op::Shutdown), 3);
    hv.set_domain_state("worker-1", DomainState::Crashed);
    assert_eq!(info(&hv).stop_reason, Some(StopReason::Crashed));
    hv.start("worker-1").unwrap();
    hv.stop_domain("worker-1", StopReason::Crashed);
    assert_eq!(
        (info(&hv).state, info(&hv).stop_reason),
        (DomainState::Shutoff, Some(StopReason::Crashed))
    );
    assert!(hv.shutdown("gone").unwrap_err().is_not_found());
}

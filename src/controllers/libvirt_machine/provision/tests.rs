//! The provisioning steps' decisions on an in-memory hypervisor: what each step creates, what a
//! rerun after a failure at each point does, and that foreign objects are left alone.

use super::*;
use crate::{
    controllers::libvirt_machine::plan::pool_volume,
    libvirt::{
        domain_xml::tests::plan as domain_xml_plan,
        fake::{FakeHypervisor, Op},
        volume_xml::{ignition_volume_name, root_volume_name},
    },
};

const NAME: &str = "worker-1";
const POOL: &str = "pool1";
const POOL_PATH: &str = "/var/lib/caplv/pool1";
const BASE: &str = "rhcos.qcow2";
const BASE_SIZE: u64 = 16 << 30;
const IGNITION: &[u8] = br#"{"ignition":{"version":"3.4.0"}}"#;

fn uuid() -> Uuid {
    domain_xml_plan().uuid
}

fn foreign_uuid() -> Uuid {
    Uuid::from_u128(0x0bad_cafe)
}

/// A host with an active pool holding the base image.
fn host() -> FakeHypervisor {
    FakeHypervisor::new()
        .with_pool(POOL, POOL_PATH, true)
        .with_volume(POOL, BASE, BASE_SIZE)
}

/// What `plan::root_disk` gives for a 20Gi copy-on-write disk on [`BASE`] in [`POOL`].
fn root() -> RootDiskPlan {
    RootDiskPlan {
        pool: POOL.into(),
        volume: root_volume_name(NAME),
        base_pool: POOL.into(),
        base_image: BASE.into(),
        size_bytes: 20 << 30,
        strategy: CloneStrategy::CopyOnWrite,
    }
}

/// What `plan::domain` gives: the Ignition and console paths still to be filled in.
fn domain() -> DomainPlan {
    let mut d = domain_xml_plan();
    assert_eq!((d.name.as_str(), d.root_disk.pool.as_str()), (NAME, POOL));
    assert_eq!(d.root_disk.volume, root_volume_name(NAME));
    d.ignition_path = None;
    d.console = ConsolePlan::PtyWithLog(String::new());
    d
}

fn run_with(hv: &FakeHypervisor, root: &RootDiskPlan, ignition: &[u8]) -> Result<Provisioned, ProvisionError> {
    provision(
        hv,
        &Request {
            root,
            domain: &domain(),
            ignition,
            data_disks: &[],
            reservations: &[],
            read_addresses: false,
        },
    )
}

fn run(hv: &FakeHypervisor) -> Result<Provisioned, ProvisionError> {
    run_with(hv, &root(), IGNITION)
}

/// What `plan::artifacts` records for this machine.
fn artifacts() -> ManagedArtifacts {
    ManagedArtifacts {
        domain_name: Some(NAME.into()),
        root_volume: Some(pool_volume(POOL, &root_volume_name(NAME))),
        ignition_volume: Some(pool_volume(POOL, &ignition_volume_name(NAME))),
        console_log: Some(pool_volume(POOL, &console_volume_name(NAME))),
        nvram_path: None,
        additional_volumes: vec![],
        dhcp_reservations: vec![],
    }
}

fn libvirt_error() -> HypervisorError {
    HypervisorError::Libvirt {
        operation: "define domain",
        code: "InternalError".into(),
        message: "injected".into(),
    }
}

fn all_volumes() -> Vec<String> {
    vec![BASE.to_owned(), ignition_volume_name(NAME), root_volume_name(NAME)]
}

#[test]
fn a_fresh_machine_gets_an_overlay_its_ignition_and_a_running_domain() {
    let hv = host();
    let p = run(&hv).unwrap();
    assert!(p.defined_now && p.started_now);
    assert_eq!((p.domain.name.as_str(), p.domain.uuid), (NAME, uuid()));
    assert_eq!(p.domain.state, DomainState::Running);
    assert_eq!(hv.domains(), [p.domain]);
    assert_eq!(hv.volume_names(POOL), all_volumes());
    let rootvol = hv.volume(POOL, &root_volume_name(NAME)).unwrap().unwrap();
    assert_eq!(rootvol.capacity, 20 << 30);
    assert_eq!(
        (hv.calls(Op::CreateVolume), hv.calls(Op::CloneVolume)),
        (2, 0),
        "overlay, not copy"
    );
    assert_eq!(hv.volume_bytes(POOL, &ignition_volume_name(NAME)).unwrap(), IGNITION);
    let xml = hv.domain_xml(NAME).unwrap();
    for want in [
        "<entry name='opt/com.coreos/config' file='/var/lib/caplv/pool1/worker-1-ignition.ign'/>",
        "<log file='/var/lib/caplv/pool1/worker-1-console.log' append='on'/>",
        "<source pool='pool1' volume='worker-1-root.qcow2'/>",
    ] {
        assert!(xml.contains(want), "missing {want:?} in\n{xml}");
    }
}

#[test]
fn a_full_clone_copies_the_base_image() {
    let hv = host();
    hv.upload_volume(POOL, BASE, b"base image bytes").unwrap();
    let mut plan = root();
    plan.strategy = CloneStrategy::FullClone;
    run_with(&hv, &plan, IGNITION).unwrap();
    assert_eq!((hv.calls(Op::CloneVolume), hv.calls(Op::CreateVolume)), (1, 1));
    assert_eq!(
        hv.volume_bytes(POOL, &root_volume_name(NAME)).unwrap(),
        b"base image bytes"
    );
}

#[test]
fn a_rerun_finds_everything_and_creates_nothing() {
    let hv = host();
    let first = run(&hv).unwrap();
    let again = run(&hv).unwrap();
    assert!(!again.defined_now && !again.started_now);
    assert_eq!(again.domain, first.domain);
    assert_eq!(hv.domains().len(), 1);
    assert_eq!(hv.volume_names(POOL), all_volumes());
    assert_eq!(hv.calls(Op::DefineAndStart), 1);
    assert_eq!((hv.calls(Op::CreateVolume), hv.calls(Op::UploadVolume)), (2, 1));
    assert_eq!(hv.calls(Op::Start), 0);
}

#[test]
fn a_missing_pool_is_reported_and_nothing_is_made() {
    let hv = FakeHypervisor::new();
    let e = run(&hv).unwrap_err();
    assert_eq!(e.reason().as_str(), "StoragePoolNotFound");
    assert!(!e.is_transient());
    assert!(hv.domains().is_empty());
    assert_eq!(hv.calls(Op::CreateVolume) + hv.calls(Op::DefineAndStart), 0);
}

#[test]
fn an_inactive_pool_is_reported_and_a_rerun_after_starting_it_succeeds() {
    let hv = host();
    hv.set_pool_active(POOL, false);
    let e = run(&hv).unwrap_err();
    assert_eq!(e.reason().as_str(), "StoragePoolInactive");
    assert!(!e.is_transient());
    assert_eq!(hv.volume_names(POOL), [BASE]);
    hv.set_pool_active(POOL, true);
    assert!(run(&hv).unwrap().defined_now);
}

#[test]
fn a_missing_base_image_is_reported() {
    let hv = FakeHypervisor::new().with_pool(POOL, POOL_PATH, true);
    let e = run(&hv).unwrap_err();
    assert_eq!(e.reason().as_str(), "BaseImageNotFound");
    assert!(hv.volume_names(POOL).is_empty());
    assert!(hv.domains().is_empty());
}

#[test]
fn a_root_disk_smaller_than_the_base_image_is_refused() {
    let hv = host();
    let mut plan = root();
    plan.size_bytes = 8 << 30;
    let e = run_with(&hv, &plan, IGNITION).unwrap_err();
    assert_eq!(e.reason().as_str(), "RootDiskTooSmall");
    assert!(
        matches!(e, ProvisionError::RootDiskTooSmall { size, base, .. } if size == 8 << 30 && base == BASE_SIZE),
        "{e:?}"
    );
    assert_eq!(hv.volume_names(POOL), [BASE]);
}

#[test]
fn a_foreign_domain_with_our_name_is_a_conflict_and_left_untouched() {
    let hv = host();
    hv.insert_domain(NAME, foreign_uuid(), DomainState::Shutoff);
    let before = hv.domains();
    let e = run(&hv).unwrap_err();
    assert_eq!(e.reason().as_str(), "DomainNameConflict");
    assert!(
        matches!(&e, ProvisionError::DomainNameConflict { found, ours, .. } if *found == foreign_uuid() && *ours == uuid())
    );
    assert_eq!(hv.domains(), before, "not started, not replaced");
    assert_eq!(hv.calls(Op::Start) + hv.calls(Op::DefineAndStart), 0);
    // The root volume is made before the domain is looked at; the Ignition volume is not.
    assert_eq!(hv.volume_names(POOL), [BASE.to_owned(), root_volume_name(NAME)]);
    assert!(matches!(
        inspect(&hv, NAME, uuid()),
        Err(ProvisionError::DomainNameConflict { .. })
    ));
}

#[test]
fn a_volume_already_holding_the_root_volume_name_is_used_as_is() {
    let hv = host().with_volume(POOL, &root_volume_name(NAME), 1 << 30);
    let p = run(&hv).unwrap();
    assert!(p.defined_now);
    let kept = hv.volume(POOL, &root_volume_name(NAME)).unwrap().unwrap();
    assert_eq!(
        kept.capacity,
        1 << 30,
        "neither checked against the base image nor resized"
    );
    assert_eq!(hv.calls(Op::CreateVolume), 1, "only the Ignition volume");
}

#[test]
fn a_stale_ignition_volume_is_replaced_before_define() {
    for stale in [&b"{\"old\":1}"[..], &[0; IGNITION.len()][..]] {
        let hv = host();
        let name = ignition_volume_name(NAME);
        let vol = ignition_volume(NAME, stale.len() as u64).unwrap();
        hv.create_volume(POOL, &vol).unwrap();
        hv.upload_volume(POOL, &name, stale).unwrap();
        hv.fail_next(Op::DefineAndStart, libvirt_error());
        assert!(run(&hv).is_err());
        assert_eq!(
            hv.volume_bytes(POOL, &name).unwrap(),
            IGNITION,
            "replaced before define"
        );
        assert_eq!(hv.calls(Op::DeleteVolume), 1);
        assert!(run(&hv).unwrap().defined_now);
        assert_eq!(hv.calls(Op::DeleteVolume), 1, "the second pass keeps the good payload");
    }
}

#[test]
fn a_failed_define_is_transient_and_a_rerun_defines() {
    let hv = host();
    hv.fail_next(Op::DefineAndStart, libvirt_error());
    let e = run(&hv).unwrap_err();
    assert!(e.is_transient());
    assert_eq!(e.reason().as_str(), "LibvirtError");
    assert!(hv.domains().is_empty());
    assert_eq!(hv.volume_names(POOL), all_volumes(), "the volumes stay for the rerun");
    let p = run(&hv).unwrap();
    assert!(p.defined_now && p.started_now);
    assert_eq!(hv.calls(Op::DefineAndStart), 2);
    assert_eq!(hv.calls(Op::CreateVolume), 2, "nothing made twice");
}

#[test]
fn a_domain_defined_but_not_started_is_started_on_the_rerun() {
    let hv = host();
    hv.fail_next(Op::DefineAndStart, libvirt_error());
    assert!(run(&hv).is_err());
    // What define_and_start leaves when defining worked and starting failed.
    hv.insert_domain(NAME, uuid(), DomainState::Shutoff);
    hv.fail_next(Op::Start, libvirt_error());
    assert!(run(&hv).unwrap_err().is_transient());
    assert_eq!(hv.domains()[0].state, DomainState::Shutoff);
    let p = run(&hv).unwrap();
    assert!(p.started_now && !p.defined_now);
    assert_eq!(p.domain.state, DomainState::Running);
    assert_eq!((hv.calls(Op::Start), hv.calls(Op::DefineAndStart)), (2, 1));
}

#[test]
fn inspect_sees_our_domain_and_not_a_vanished_one() {
    let hv = host();
    run(&hv).unwrap();
    assert_eq!(inspect(&hv, NAME, uuid()).unwrap().unwrap().state, DomainState::Running);
    hv.remove_domain(NAME);
    assert_eq!(inspect(&hv, NAME, uuid()).unwrap(), None);
}

#[test]
fn restart_brings_a_shut_off_domain_back() {
    let hv = host();
    run(&hv).unwrap();
    hv.set_domain_state(NAME, DomainState::Shutoff);
    assert_eq!(restart(&hv, NAME).unwrap(), Some(DomainState::Running));
    assert_eq!(hv.domains()[0].state, DomainState::Running);
    hv.remove_domain(NAME);
    assert!(
        restart(&hv, NAME).unwrap_err().is_not_found(),
        "start fails before the lookup"
    );
}

#[test]
fn teardown_removes_the_domain_and_recorded_volumes() {
    let hv = host();
    run(&hv).unwrap();
    let a = artifacts();
    assert_eq!(
        leftovers(&hv, &a, uuid()).unwrap(),
        [
            "domain worker-1",
            "volume pool1/worker-1-root.qcow2",
            "volume pool1/worker-1-ignition.ign",
        ]
    );
    teardown(&hv, &a, uuid()).unwrap();
    assert!(hv.domains().is_empty());
    assert_eq!(hv.volume_names(POOL), [BASE], "the base image stays");
    assert!(leftovers(&hv, &a, uuid()).unwrap().is_empty());
}

/// virtlogd writes the console log into the pool behind libvirt's back: only a pool refresh
/// shows it, and teardown pays for that refresh for this one file only.
#[test]
fn teardown_finds_and_removes_the_console_log_libvirt_did_not_list() {
    let hv = host();
    run(&hv).unwrap();
    let console = console_volume_name(NAME);
    hv.write_behind_libvirt(POOL, &console);
    let a = artifacts();
    assert!(
        leftovers(&hv, &a, uuid())
            .unwrap()
            .contains(&format!("volume {POOL}/{console}")),
        "the leftover check sees the unlisted console log"
    );
    let refreshing_lookups = hv.calls(Op::Volume);
    teardown(&hv, &a, uuid()).unwrap();
    assert_eq!(hv.volume_names(POOL), [BASE], "the console log is gone with the disks");
    assert_eq!(
        hv.calls(Op::Volume) - refreshing_lookups,
        1,
        "only the console log is looked up with a refresh"
    );
    assert!(leftovers(&hv, &a, uuid()).unwrap().is_empty());
}

#[test]
fn teardown_leaves_a_foreign_domain_but_removes_our_volumes() {
    let hv = host();
    run(&hv).unwrap();
    hv.remove_domain(NAME);
    hv.insert_domain(NAME, foreign_uuid(), DomainState::Running);
    let before = hv.domains();
    teardown(&hv, &artifacts(), uuid()).unwrap();
    assert_eq!(hv.domains(), before);
    assert_eq!(hv.calls(Op::Destroy) + hv.calls(Op::UndefineWithNvram), 0);
    assert_eq!(hv.volume_names(POOL), [BASE]);
    assert!(leftovers(&hv, &artifacts(), uuid()).unwrap().is_empty());
}

/// A LibvirtMachine copied with another's `spec.providerID` derives that machine's domain UUID
/// (see `plan::identity`). It must neither take over nor, when deleted, remove that domain.
#[test]
fn a_copy_naming_another_machines_domain_stops_and_leaves_it() {
    let hv = host();
    hv.insert_domain("the-original", uuid(), DomainState::Running);
    let before = hv.domains();
    let err = run(&hv).unwrap_err();
    assert_eq!(err.reason().as_str(), "AlreadyExists");
    teardown(&hv, &artifacts(), uuid()).unwrap();
    assert_eq!(hv.domains(), before, "the original's domain is untouched");
    assert_eq!(hv.calls(Op::Destroy) + hv.calls(Op::UndefineWithNvram), 0);
}

#[test]
fn teardown_twice_and_after_a_failure_is_fine() {
    let hv = host();
    run(&hv).unwrap();
    let a = artifacts();
    hv.fail_next(Op::UndefineWithNvram, libvirt_error());
    assert!(teardown(&hv, &a, uuid()).unwrap_err().is_transient());
    assert_eq!(hv.domains()[0].state, DomainState::Shutoff, "destroyed, still defined");
    teardown(&hv, &a, uuid()).unwrap();
    teardown(&hv, &a, uuid()).unwrap();
    assert!(leftovers(&hv, &a, uuid()).unwrap().is_empty());
    assert_eq!(hv.volume_names(POOL), [BASE]);
    let gone = FakeHypervisor::new();
    teardown(&gone, &a, uuid()).unwrap();
    assert!(
        leftovers(&gone, &a, uuid()).unwrap().is_empty(),
        "a removed pool counts as done"
    );
}

fn reservation() -> DhcpReservation {
    DhcpReservation {
        network: "default".into(),
        mac: "52:54:00:ab:cd:01".into(),
        ip: "192.168.122.50".into(),
        hostname: Some(NAME.into()),
    }
}

#[test]
fn data_disks_and_reservations_are_made_once_read_back_and_torn_down() {
    let hv = host().with_network("default");
    let disks = [DataDiskPlan {
        pool: POOL.into(),
        volume: format!("{NAME}-data.qcow2"),
        size_bytes: 50 << 30,
    }];
    let reservations = [reservation()];
    let found = vec![InterfaceAddress {
        mac: "52:54:00:ab:cd:01".into(),
        ip: "192.168.122.50".into(),
    }];
    let (root, domain) = (root(), domain());
    let req = |read_addresses| Request {
        root: &root,
        domain: &domain,
        ignition: IGNITION,
        data_disks: &disks,
        reservations: &reservations,
        read_addresses,
    };
    let first = provision(&hv, &req(false)).unwrap();
    assert!(first.addresses.is_empty(), "not asked for");
    hv.set_interface_addresses(NAME, found.clone());
    let again = provision(&hv, &req(true)).unwrap();
    assert_eq!(again.addresses, found);
    assert_eq!(hv.calls(Op::AddDhcpHost), 1, "a rerun finds its own entry");
    assert_eq!(hv.dhcp_entries("default"), [dhcp_host(&reservation())]);
    assert_eq!(hv.volume(POOL, &disks[0].volume).unwrap().unwrap().capacity, 50 << 30);

    let mut recorded = artifacts();
    recorded.additional_volumes = vec![pool_volume(POOL, &disks[0].volume)];
    recorded.dhcp_reservations = reservations.to_vec();
    assert_eq!(leftovers(&hv, &recorded, uuid()).unwrap().len(), 5);
    teardown(&hv, &recorded, uuid()).unwrap();
    assert!(hv.dhcp_entries("default").is_empty());
    assert_eq!(leftovers(&hv, &recorded, uuid()).unwrap(), Vec::<String>::new());
    teardown(&hv, &recorded, uuid()).unwrap();
}

#[test]
fn a_reservation_clashing_with_someone_elses_entry_stops_before_the_domain() {
    let hv = host().with_network("default");
    let mut theirs = dhcp_host(&reservation());
    theirs.mac = "52:54:00:99:99:99".into();
    hv.add_dhcp_host("default", &theirs).unwrap();
    let reservations = [reservation()];
    let err = provision(
        &hv,
        &Request {
            root: &root(),
            domain: &domain(),
            ignition: IGNITION,
            data_disks: &[],
            reservations: &reservations,
            read_addresses: false,
        },
    )
    .unwrap_err();
    assert_eq!(err.reason().as_str(), "AlreadyExists");
    assert!(hv.domains().is_empty());
    let mut recorded = artifacts();
    recorded.dhcp_reservations = reservations.to_vec();
    teardown(&hv, &recorded, uuid()).unwrap();
    assert_eq!(hv.dhcp_entries("default"), [theirs], "someone else's entry stays");
}

#[test]
fn a_full_pool_is_pool_full_and_a_rerun_after_space_is_freed_provisions() {
    let out_of_space = || HypervisorError::Libvirt {
        operation: "create volume",
        code: "InternalError".into(),
        message: "qemu-img: /pool/x.qcow2: Could not write qcow2 header: No space left on device".into(),
    };
    for op in [Op::CreateVolume, Op::UploadVolume] {
        let hv = host();
        hv.fail_next(op, out_of_space());
        let e = run(&hv).unwrap_err();
        assert_eq!(e.reason().as_str(), "StoragePoolFull", "{op:?}: {e}");
        assert!(!e.is_transient(), "{op:?}: a full pool is not mended by reconnecting");
        assert!(e.to_string().contains(POOL), "{op:?}: the message names the pool: {e}");
        assert!(run(&hv).unwrap().defined_now, "{op:?}: provisioned once there is room");
    }
    // Any other libvirt failure of the same calls stays an unclassified, transient one.
    let hv = host();
    hv.fail_next(Op::CreateVolume, libvirt_error());
    let e = run(&hv).unwrap_err();
    assert_eq!(e.reason().as_str(), "LibvirtError");
    assert!(e.is_transient());
}

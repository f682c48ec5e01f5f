//! Every provisioning decision, from what was observed, without an API server or a host; and
//! what the host-side steps' results (on the in-memory hypervisor) turn into.

use std::time::Duration;

use k8s_openapi::{ByteString, apimachinery::pkg::apis::meta::v1::Time};
use kube::runtime::{controller::Action, events::EventType};
use serde_json::json;

use super::*;
use crate::{
    api::{
        capi::{ContractRef, MachineView},
        condition,
        libvirt_host::HostReason,
        libvirt_machine::{AllocatedResources, MachineCondition},
    },
    controllers::libvirt_machine::{
        act::{self, Placed, Stamps},
        provision::{self, Request},
        status::{Outcome, current},
        watch,
    },
    libvirt::{
        fake::{FakeHypervisor, Op},
        hypervisor::{DomainState, HypervisorError},
    },
    reconcile::host_connections::{Failure, HostCall},
};
use kube::ResourceExt;

const INTERVAL: Duration = Duration::from_secs(60);
const IGNITION: &str = r#"{"ignition":{"version":"3.4.0"}}"#;

/// The seed's machine as `worker-1`, sized and pooled for [`fake_host`], with `extra` over it.
fn machine(extra: serde_json::Value) -> LibvirtMachine {
    let mut v = json!({
        "metadata": {"name": "worker-1", "generation": 1},
        "spec": {"domain": {"vcpus": 2, "memoryMB": 4096}, "rootDisk": {"storagePool": "pool1"}}
    });
    json_patch::merge(&mut v, &extra);
    plan::tests::machine(v)
}

fn claimed(extra: serde_json::Value) -> LibvirtMachine {
    let mut m = machine(extra);
    m.metadata.finalizers = Some(vec![FINALIZER.to_owned()]);
    m.spec.provider_id = Some(id(&m).provider_id);
    m
}

fn id(m: &LibvirtMachine) -> Identity {
    plan::identity(m).unwrap()
}

fn host(ready: bool) -> LibvirtHost {
    serde_json::from_value(json!({
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1",
        "kind": "LibvirtHost",
        "metadata": {"name": "laptop", "namespace": "default"},
        "spec": {"uri": "test:///default"},
        "status": {"ready": ready, "kvmAvailable": false}
    }))
    .unwrap()
}

fn capi_machine(data_secret: Option<&str>) -> MachineView {
    MachineView {
        name: "worker-1".into(),
        cluster_name: "c".into(),
        bootstrap_config_ref: None,
        data_secret_name: data_secret.map(str::to_owned),
        infrastructure_ref: ContractRef {
            group: "infrastructure.cluster.x-k8s.io".into(),
            kind: "LibvirtMachine".into(),
            name: "worker-1".into(),
        },
        provider_id: None,
        phase: None,
        node_name: None,
        deleting: false,
        failure_domain: None,
    }
}

fn owned(host: Option<LibvirtHost>, data_secret: Option<&str>, bootstrap: Bootstrap) -> Observed {
    Observed::Owned(Box::new(Owned {
        machine: capi_machine(data_secret),
        host,
        pool: None,
        bootstrap,
        ipam: Ipam::Unused,
    }))
}

/// A machine choosing from a pool (no host of its own), with the pool as observed.
fn pooled(pool: Result<Vec<LibvirtHost>, String>) -> (LibvirtMachine, Observed) {
    let mut m = claimed(json!({"spec": {"hostSelector": {"matchLabels": {"pool": "lab"}}}}));
    m.spec.host_ref = None;
    let Observed::Owned(mut o) = owned(None, Some("s"), secret(&[("value", IGNITION)])) else {
        unreachable!()
    };
    o.pool = Some(pool);
    (m, Observed::Owned(o))
}

fn named(mut h: LibvirtHost, name: &str) -> LibvirtHost {
    h.metadata.name = Some(name.to_owned());
    h
}

fn secret(entries: &[(&str, &str)]) -> Bootstrap {
    Bootstrap::Found(
        entries
            .iter()
            .map(|(k, v)| ((*k).to_owned(), ByteString(v.as_bytes().to_vec())))
            .collect(),
    )
}

fn wait_reason(d: &Decision) -> Reason {
    match &d.step {
        Step::Wait(w) => w.reason,
        other => panic!("expected a wait, got {other:?}"),
    }
}

fn now() -> Time {
    Time("2026-12-01T12:00:00Z".parse().unwrap())
}

fn stamps() -> Stamps {
    Stamps {
        now: now(),
        wall: Time("2026-12-01T11:00:00Z".parse().unwrap()),
    }
}

#[test]
fn each_missing_piece_is_its_own_wait_and_nothing_is_claimed_before_the_owner() {
    let m = machine(json!({}));
    let cases = [
        (Observed::NoOwner, MachineReason::WaitingForMachineOwner),
        (Observed::MachineMissing("w".into()), MachineReason::MachineNotFound),
        (Observed::ClusterMissing("c".into()), MachineReason::ClusterNotFound),
    ];
    for (observed, reason) in cases {
        let d = decide(&m, &id(&m), observed, INTERVAL);
        assert_eq!(wait_reason(&d), Reason::Machine(reason));
        assert!(!d.claim, "{reason:?}: no finalizer before an owner");
    }
    let d = decide(&m, &id(&m), Observed::Paused, INTERVAL);
    assert!(matches!(d.step, Step::Pause) && !d.claim);
}

#[test]
fn provisioning_waits_for_bootstrap_data_then_the_host_then_valid_ignition() {
    let m = machine(json!({}));
    let steps = [
        (
            owned(Some(host(true)), None, Bootstrap::NotRead),
            MachineReason::WaitingForBootstrapData,
        ),
        (owned(None, Some("s"), Bootstrap::NotRead), MachineReason::HostNotFound),
        (
            owned(Some(host(false)), Some("s"), Bootstrap::NotRead),
            MachineReason::WaitingForHost,
        ),
        (
            owned(Some(host(true)), Some("s"), Bootstrap::Missing),
            MachineReason::BootstrapDataNotFound,
        ),
        (
            owned(
                Some(host(true)),
                Some("s"),
                secret(&[("format", "cloud-config"), ("value", IGNITION)]),
            ),
            MachineReason::InvalidBootstrapData,
        ),
        (
            owned(Some(host(true)), Some("s"), secret(&[("other", "x")])),
            MachineReason::InvalidBootstrapData,
        ),
    ];
    for (observed, reason) in steps {
        let d = decide(&m, &id(&m), observed, INTERVAL);
        assert_eq!(wait_reason(&d), Reason::Machine(reason));
        assert!(d.claim, "{reason:?}: an owned machine is claimed");
    }
    let d = decide(
        &m,
        &id(&m),
        owned(Some(host(true)), Some("s"), secret(&[("value", "{")])),
        INTERVAL,
    );
    assert_eq!(wait_reason(&d).as_str(), "InvalidJSON");
}

#[test]
fn an_unbootable_spec_waits_before_admission() {
    let m = claimed(json!({"spec": {"rootDisk": {"size": "not-a-size"}}}));
    let d = decide(
        &m,
        &id(&m),
        owned(Some(host(true)), Some("s"), secret(&[("value", IGNITION)])),
        INTERVAL,
    );
    assert_eq!(wait_reason(&d), Reason::Host(HostReason::InvalidSpec));
    assert!(!d.claim, "already claimed");
}

#[test]
fn a_ready_host_and_valid_data_give_a_plan_with_this_vms_ignition() {
    let m = claimed(json!({}));
    let d = decide(
        &m,
        &id(&m),
        owned(Some(host(true)), Some("s"), secret(&[("value", IGNITION)])),
        INTERVAL,
    );
    let Step::Provision(plan) = d.step else {
        panic!("expected a plan");
    };
    let payload = String::from_utf8(plan.payload).unwrap();
    assert!(payload.contains("worker-1"), "the hostname is injected: {payload}");
    assert_eq!(plan.root.pool, "pool1");
}

#[test]
fn a_pool_machine_plans_with_every_usable_host_and_waits_naming_why_otherwise() {
    let (m, observed) = pooled(Ok(vec![
        named(host(true), "a"),
        named(host(false), "b"),
        named(host(true), "c"),
    ]));
    let Step::Provision(plan) = decide(&m, &id(&m), observed, INTERVAL).step else {
        panic!("expected a plan");
    };
    let names: Vec<String> = plan.hosts.iter().map(ResourceExt::name_any).collect();
    assert_eq!(names, ["a", "c"], "the host that is not ready is left out");

    let (m, observed) = pooled(Ok(vec![named(host(false), "b")]));
    let Step::Wait(w) = decide(&m, &id(&m), observed, INTERVAL).step else {
        panic!("expected a wait");
    };
    assert_eq!(w.reason, Reason::Machine(MachineReason::WaitingForHost));
    assert!(w.message.ends_with("b not ready"), "{}", w.message);

    let (m, observed) = pooled(Ok(Vec::new()));
    let Step::Wait(w) = decide(&m, &id(&m), observed, INTERVAL).step else {
        panic!("expected a wait");
    };
    assert_eq!(w.reason, Reason::Machine(MachineReason::HostNotFound));
    assert!(w.message.contains("spec.hostSelector"), "{}", w.message);

    let (m, observed) = pooled(Err("spec.hostSelector: bad operator".to_owned()));
    let Step::Wait(w) = decide(&m, &id(&m), observed, INTERVAL).step else {
        panic!("expected a wait");
    };
    assert_eq!(
        (w.reason, w.message.as_str()),
        (host_invalid_spec(), "spec.hostSelector: bad operator")
    );
}

#[test]
fn a_provisioned_machine_is_watched_or_told_its_host_is_gone() {
    let m = claimed(json!({"status": {"ready": true}}));
    let d = decide(
        &m,
        &id(&m),
        owned(Some(host(true)), Some("s"), Bootstrap::NotRead),
        INTERVAL,
    );
    assert!(matches!(
        d.step,
        Step::Watch {
            owner_deleting: false,
            ..
        }
    ));
    let mut deleting = capi_machine(Some("s"));
    deleting.deleting = true;
    let observed = Observed::Owned(Box::new(Owned {
        machine: deleting,
        host: Some(host(true)),
        pool: None,
        bootstrap: Bootstrap::NotRead,
        ipam: Ipam::Unused,
    }));
    let d = decide(&m, &id(&m), observed, INTERVAL);
    assert!(
        matches!(
            d.step,
            Step::Watch {
                owner_deleting: true,
                ..
            }
        ),
        "the watch learns that the Machine is being deleted"
    );
    let d = decide(&m, &id(&m), owned(None, Some("s"), Bootstrap::NotRead), INTERVAL);
    let Step::Wait(w) = d.step else {
        panic!("expected a wait");
    };
    assert_eq!(
        (w.reason, w.action),
        (Reason::Machine(MachineReason::HostNotFound), Action::requeue(INTERVAL))
    );
}

/// A fake host with the pool and base image `plan::root_disk` names for [`machine`].
fn fake_host() -> FakeHypervisor {
    FakeHypervisor::new()
        .with_pool("pool1", "/pool1", true)
        .with_volume("pool1", "rhcos.qcow2", 16 << 30)
}

/// Run the host-side steps for `m` on `hv` and turn the result into an outcome.
fn provision_on(hv: &FakeHypervisor, m: &LibvirtMachine) -> Outcome {
    let h = host(true);
    let size = AllocatedResources {
        vcpus: 2,
        memory_mb: 4096,
    };
    let identity = id(m);
    let root = plan::root_disk(&identity, &m.spec).unwrap();
    let domain = plan::domain(&identity, m, &h, size).unwrap();
    let result = provision::provision(
        hv,
        &Request {
            root: &root,
            domain: &domain,
            ignition: IGNITION.as_bytes(),
            data_disks: &[],
            reservations: &[],
            read_addresses: false,
        },
    );
    let called = HostCall::Ran {
        result,
        fingerprint: None,
    };
    let placed = Placed { host: &h, size };
    act::outcome(
        m,
        &identity,
        placed,
        called,
        Duration::from_secs(1),
        INTERVAL,
        &stamps(),
    )
}

fn ready(outcome: &Outcome) -> (String, String) {
    let c = condition::find(&outcome.status.conditions, MachineCondition::Ready.as_str()).unwrap();
    (c.status.clone(), c.reason.clone())
}

#[test]
fn provisioning_on_a_fresh_host_runs_the_domain_and_records_it() {
    let hv = fake_host();
    let m = claimed(json!({}));
    let out = provision_on(&hv, &m);
    assert_eq!(ready(&out), ("True".into(), "DomainRunning".into()));
    assert!(out.status.ready && out.status.provisioned_at == Some(stamps().wall));
    assert_eq!(out.counted, ["provisioned"]);
    assert_eq!(out.events[0].1, "Provisioned");
    assert_eq!(hv.domains().len(), 1);
}

#[test]
fn host_side_failures_become_their_reasons_with_the_right_retry() {
    let m = claimed(json!({}));
    let hv = fake_host();
    hv.set_pool_active("pool1", false);
    let out = provision_on(&hv, &m);
    assert_eq!(ready(&out), ("False".into(), "StoragePoolInactive".into()));
    assert_eq!(out.action, Action::requeue(HOST_RETRY));

    let hv = fake_host();
    hv.insert_domain("worker-1", uuid::Uuid::from_u128(7), DomainState::Running);
    let out = provision_on(&hv, &m);
    assert_eq!(ready(&out).1, "DomainNameConflict");
    assert_eq!(
        hv.domains()[0].uuid,
        uuid::Uuid::from_u128(7),
        "the foreign domain is untouched"
    );

    let hv = fake_host();
    hv.fail_next(
        Op::DefineAndStart,
        HypervisorError::Libvirt {
            operation: "define",
            code: "InternalError".into(),
            message: "boom".into(),
        },
    );
    let out = provision_on(&hv, &m);
    assert_eq!(ready(&out).1, "LibvirtError");
    assert_eq!(
        out.action,
        Action::requeue(Duration::from_secs(1)),
        "transient: retried soon"
    );
    assert!(hv.domains().is_empty());
    assert_eq!(ready(&provision_on(&hv, &m)).1, "DomainRunning", "the rerun finishes");
}

#[test]
fn a_defined_but_stopped_domain_is_started_and_reported() {
    let m = claimed(json!({}));
    let hv = fake_host();
    hv.insert_domain("worker-1", id(&m).uuid, DomainState::Shutoff);
    hv.fail_next(
        Op::Start,
        HypervisorError::Libvirt {
            operation: "start",
            code: "InternalError".into(),
            message: "no".into(),
        },
    );
    assert_eq!(ready(&provision_on(&hv, &m)).1, "LibvirtError", "start failed");
    let out = provision_on(&hv, &m);
    assert_eq!(out.counted, ["provisioned", "restarted"]);
    assert!(
        out.events
            .iter()
            .any(|(t, r, _)| *t == EventType::Warning && *r == "DomainRestarted")
    );
}

#[test]
fn an_unreachable_host_waits_with_its_reason() {
    let m = claimed(json!({}));
    let h = host(true);
    let called = HostCall::Unreachable(Failure::new(HostReason::HostKeyMismatch, "key changed"));
    let placed = Placed {
        host: &h,
        size: AllocatedResources {
            vcpus: 2,
            memory_mb: 4096,
        },
    };
    let out = act::outcome(&m, &id(&m), placed, called, Duration::from_secs(1), INTERVAL, &stamps());
    assert_eq!(ready(&out), ("False".into(), "HostKeyMismatch".into()));
    assert!(!out.status.ready);
}

fn watched(hv: &FakeHypervisor, m: &LibvirtMachine) -> Outcome {
    let identity = id(m);
    let result = watch::inspect_and_restart(hv, &identity.node_name, identity.uuid, watch::Owner::Confirmed);
    let called = HostCall::Ran {
        result,
        fingerprint: None,
    };
    watch::outcome(m, &identity, "laptop", called, INTERVAL, &now())
}

#[test]
fn the_watch_restarts_a_shut_off_domain_and_reports_a_vanished_one_once() {
    let m = claimed(json!({"status": {"ready": true}}));
    let hv = fake_host();
    hv.insert_domain("worker-1", id(&m).uuid, DomainState::Shutoff);
    let out = watched(&hv, &m);
    assert_eq!(ready(&out), ("True".into(), "DomainRunning".into()));
    assert_eq!(out.counted, ["restarted"]);
    assert_eq!(hv.calls(Op::Start), 1);

    hv.remove_domain("worker-1");
    let out = watched(&hv, &m);
    assert_eq!(ready(&out), ("False".into(), "DomainMissing".into()));
    assert_eq!(out.counted, ["vanished"]);
    assert!(out.status.ready, "ready stays latched");
    let mut again = m.clone();
    again.status = Some(out.status);
    assert!(
        watched(&hv, &again).counted.is_empty(),
        "a vanished domain is counted once"
    );
    assert_eq!(current(&again).domain_state.as_deref(), Some("missing"));
}

#[test]
fn the_watch_leaves_a_foreign_domain_alone() {
    let m = claimed(json!({"status": {"ready": true}}));
    let hv = fake_host();
    hv.insert_domain("worker-1", uuid::Uuid::from_u128(9), DomainState::Shutoff);
    let out = watched(&hv, &m);
    assert_eq!(ready(&out).1, "DomainNameConflict");
    assert_eq!(hv.calls(Op::Start), 0);
}

/// The seed's machine with one interface whose address comes from a pool, observed with `ipam`.
fn with_ipam(ipam: Ipam) -> (LibvirtMachine, Observed) {
    let mut m = claimed(json!({"spec": {"network": {"addressesFromPools": [
        {"apiGroup": "ipam.cluster.x-k8s.io", "kind": "InClusterIPPool", "name": "workers"}
    ]}}}));
    let network = m.spec.network.as_mut().unwrap();
    network.addresses.clear();
    network.gateway = None;
    let Observed::Owned(mut o) = owned(Some(host(true)), Some("s"), secret(&[("value", IGNITION)])) else {
        unreachable!()
    };
    o.ipam = ipam;
    (m, Observed::Owned(o))
}

#[test]
fn ipam_claims_are_filed_then_awaited_before_any_host_is_touched() {
    let (m, _) = with_ipam(Ipam::Unused);
    let plans = ipam::plans(&m);
    assert_eq!(plans.len(), 1);
    assert_eq!(plans[0].name, "worker-1-0-0");
    let (m, observed) = with_ipam(Ipam::Missing(plans.clone()));
    match decide(&m, &id(&m), observed, INTERVAL).step {
        Step::Claim { cluster, claims } => {
            assert_eq!(cluster, "c", "claims carry the Machine's Cluster");
            assert_eq!(claims, plans);
        }
        other => panic!("expected claims, got {other:?}"),
    }
    let (m, observed) = with_ipam(Ipam::Pending(
        "IPAddressClaim \"worker-1-0-0\" has no address yet".into(),
    ));
    let d = decide(&m, &id(&m), observed, INTERVAL);
    assert_eq!(wait_reason(&d), Reason::Machine(MachineReason::WaitingForIPAddress));
    let (m, observed) = with_ipam(Ipam::Invalid("IPAddress \"a\" has no spec".into()));
    assert_eq!(
        wait_reason(&decide(&m, &id(&m), observed, INTERVAL)),
        Reason::Host(HostReason::InvalidSpec)
    );
}

#[test]
fn a_claimed_address_and_gateway_reach_the_keyfile_and_the_plan() {
    let claimed = vec![ClaimedAddress {
        interface_name: "enp1s0".into(),
        claim: "worker-1-0-0".into(),
        address: "10.10.0.12/24".into(),
        gateway: Some("10.10.0.1".into()),
    }];
    let (m, observed) = with_ipam(Ipam::Bound(claimed.clone()));
    let Step::Provision(plan) = decide(&m, &id(&m), observed, INTERVAL).step else {
        panic!("a bound claim provisions")
    };
    assert_eq!(plan.claimed, claimed);
    let ignition: serde_json::Value = serde_json::from_slice(&plan.payload).unwrap();
    let file = ignition["storage"]["files"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["path"].as_str().unwrap().ends_with("enp1s0.nmconnection"))
        .expect("a keyfile for enp1s0");
    let contents = &file["contents"];
    let keyfile =
        crate::ignition::dataurl::decode(contents["source"].as_str().unwrap(), contents["compression"].as_str())
            .unwrap();
    let keyfile = String::from_utf8(keyfile).unwrap();
    assert!(keyfile.contains("address1=10.10.0.12/24,10.10.0.1"), "{keyfile}");
}

#[test]
fn a_new_machine_reports_its_first_waits_only_after_the_grace() {
    const GRACE: Duration = Duration::from_secs(10);
    use crate::controllers::libvirt_machine::status::unreported_for;
    let at = |s: &str| Time(s.parse().unwrap());
    let new = machine(json!({"metadata": {"creationTimestamp": "2026-01-01T00:00:00Z"}}));
    let wait = |reason: MachineReason| Wait::new(reason, "m", Action::await_change());
    let owner = wait(MachineReason::WaitingForMachineOwner);
    assert_eq!(
        unreported_for(&new, &owner, &at("2026-01-01T00:00:02Z"), GRACE),
        Some(Duration::from_secs(8))
    );
    for reason in [
        MachineReason::WaitingForBootstrapData,
        MachineReason::BootstrapDataNotFound,
        MachineReason::WaitingForHost,
    ] {
        assert!(unreported_for(&new, &wait(reason), &at("2026-01-01T00:00:01Z"), GRACE).is_some());
    }
    assert_eq!(
        unreported_for(&new, &owner, &at("2026-01-01T00:00:10Z"), GRACE),
        None,
        "the grace is over"
    );
    let early = at("2026-01-01T00:00:01Z");
    assert_eq!(
        unreported_for(&new, &wait(MachineReason::WaitingForCapacity), &early, GRACE),
        None,
        "the capacity queue is ordered by the condition, so it is written at once"
    );
    assert_eq!(
        unreported_for(&new, &wait(MachineReason::MachineNotFound), &early, GRACE),
        None,
        "a problem is reported at once"
    );
    let reported = machine(json!({"metadata": {"creationTimestamp": "2026-01-01T00:00:00Z"}, "status": {}}));
    assert_eq!(
        unreported_for(&reported, &owner, &early, GRACE),
        None,
        "once a status is written, every change is"
    );
    let skewed = at("2025-12-31T23:59:00Z");
    assert!(
        unreported_for(&new, &owner, &skewed, GRACE).is_none_or(|left| left <= Duration::from_secs(10)),
        "a clock behind the server's never stretches the grace"
    );
}

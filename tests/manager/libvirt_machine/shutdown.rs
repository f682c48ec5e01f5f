//! Graceful power-off on private libvirt test-driver hosts: deletion asks the guest through
//! ACPI and destroys a guest that ignores it only after `spec.shutdown.timeout`; `Hard` destroys
//! at once; a timeout that cannot be used holds deletion until fixed; and the domain watch tells
//! a guest shutdown from a pulled plug, leaving a guest that powers off while its Machine is
//! being deleted off.
//!
//! The test driver powers a guest off at once on ACPI, unless its `<on_poweroff>` is
//! `restart`: such a domain, defined under the machine's name and UUID before it provisions
//! (the controller adopts it), plays a guest that ignores the power button.

use caplv::{
    api::condition,
    libvirt::{
        domain_xml::DomainXml,
        hypervisor::{DomainState, Hypervisor},
    },
};
use k8s_openapi::api::events::v1::Event;
use kube::{
    ResourceExt,
    api::{DeleteParams, Patch, PatchParams},
};
use serde_json::json;

use super::{capi_machines, fixture, hv, lvms, machine, set_data_secret, volumes, wait_gone, wait_reason};
use crate::support::{Env, events_about, wait_until};

/// The reasons of the Events about `name`, oldest first.
async fn event_reasons(env: &Env, name: &str) -> Vec<String> {
    let mut events = events_about(env, name).await;
    events.sort_by_key(|e| e.event_time.as_ref().map(|t| t.0));
    events.into_iter().filter_map(|e| e.reason).collect()
}

async fn event(env: &Env, name: &str, reason: &str) -> Option<Event> {
    events_about(env, name)
        .await
        .into_iter()
        .find(|e| e.reason.as_deref() == Some(reason))
}

/// Define and start, on the host, a running domain `name` with UUID `uuid` whose guest keeps
/// running when asked to power off.
fn define_ignoring_acpi(hv: &dyn Hypervisor, name: &str, uuid: &str) {
    let xml = format!(
        "<domain type='test'><name>{name}</name><uuid>{uuid}</uuid><memory unit='MiB'>512</memory>\
         <vcpu>1</vcpu><os><type arch='x86_64'>hvm</type></os><on_poweroff>restart</on_poweroff></domain>"
    );
    let def = DomainXml {
        name: name.to_owned(),
        uuid: uuid.parse().unwrap(),
        xml,
    };
    hv.define_and_start(&def).unwrap();
}

async fn delete_machine(env: &Env, name: &str) {
    capi_machines(&env.client)
        .delete(name, &DeleteParams::default())
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deletion_asks_the_guest_first_and_hard_pulls_the_plug() {
    let f = fixture(&["laptop"], 2).await;
    let env = &f.env;
    let hv = hv(env, "laptop").await;
    machine(env, "polite", "laptop", json!({}), Some("boot")).await;
    let hard = json!({"spec": {"shutdown": {"mode": "Hard"}}});
    machine(env, "pulled", "laptop", hard, Some("boot")).await;
    wait_reason(env, "polite", "DomainRunning").await;
    wait_reason(env, "pulled", "DomainRunning").await;
    let polite = lvms(&env.client).get("polite").await.unwrap();
    assert_eq!(
        serde_json::to_value(&polite.spec.shutdown).unwrap(),
        json!({"mode": "Graceful", "timeout": "60s"}),
        "the defaults"
    );

    delete_machine(env, "polite").await;
    delete_machine(env, "pulled").await;
    wait_gone(env, "polite").await;
    wait_gone(env, "pulled").await;
    assert!(hv.list_domains().unwrap().is_empty());
    assert!(volumes(hv.as_ref()).is_empty(), "{:?}", volumes(hv.as_ref()));
    let polite = event_reasons(env, "polite").await;
    assert!(polite.iter().any(|r| r == "ShutdownRequested"), "{polite:?}");
    assert!(
        !polite.iter().any(|r| r == "ShutdownTimedOut"),
        "the guest powered off: {polite:?}"
    );
    let pulled = event_reasons(env, "pulled").await;
    assert!(
        !pulled.iter().any(|r| r.starts_with("Shutdown")),
        "Hard asks nothing: {pulled:?}"
    );
    let counted = |label: &str| env.shared.metrics.machine_events.with_label_values(&[label]).get();
    assert_eq!((counted("shutdown_requested"), counted("shutdown_timed_out")), (1, 0));
    f.env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guest_ignoring_acpi_is_destroyed_once_the_timeout_has_passed() {
    let f = fixture(&["laptop"], 2).await;
    let env = &f.env;
    let hv = hv(env, "laptop").await;
    let spec = json!({"spec": {"shutdown": {"timeout": "2s"}}});
    machine(env, "stubborn", "laptop", spec, None).await;
    wait_reason(env, "stubborn", "WaitingForBootstrapData").await;
    let uid = lvms(&env.client).get("stubborn").await.unwrap().uid().unwrap();
    define_ignoring_acpi(hv.as_ref(), "stubborn", &uid);
    set_data_secret(env, "stubborn", "boot").await;
    wait_reason(env, "stubborn", "DomainRunning").await;

    delete_machine(env, "stubborn").await;
    let waiting = wait_reason(env, "stubborn", "ShuttingDown").await;
    assert!(waiting.message.contains("2s"), "{}", waiting.message);
    let requested_at = lvms(&env.client)
        .get("stubborn")
        .await
        .unwrap()
        .status
        .unwrap()
        .shutdown_requested_at
        .expect("the request time is recorded");
    assert_eq!(
        hv.domain("stubborn").unwrap().unwrap().state,
        DomainState::Running,
        "the guest ignored the request"
    );
    wait_gone(env, "stubborn").await;
    assert!(hv.domain("stubborn").unwrap().is_none(), "destroyed and undefined");
    assert!(volumes(hv.as_ref()).is_empty(), "{:?}", volumes(hv.as_ref()));
    let timed_out = event(env, "stubborn", "ShutdownTimedOut")
        .await
        .expect("a ShutdownTimedOut Event");
    assert_eq!(timed_out.type_.as_deref(), Some("Warning"));
    let at = timed_out.event_time.unwrap().0;
    let waited = at.as_millisecond() - requested_at.0.as_millisecond();
    assert!(
        waited >= 2000,
        "destroyed {waited} ms after the request, before the 2s timeout"
    );
    assert_eq!(
        event_reasons(env, "stubborn")
            .await
            .iter()
            .filter(|r| r.starts_with("Shutdown"))
            .collect::<Vec<_>>(),
        ["ShutdownRequested", "ShutdownTimedOut"],
        "asked once, destroyed once"
    );
    f.env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unusable_timeout_holds_deletion_until_it_is_fixed() {
    let f = fixture(&["laptop"], 2).await;
    let env = &f.env;
    let hv = hv(env, "laptop").await;
    // The CRD pattern admits it; it is longer than a duration can be.
    let spec = json!({"spec": {"shutdown": {"timeout": "3000000h"}}});
    machine(env, "typo", "laptop", spec, Some("boot")).await;
    wait_reason(env, "typo", "DomainRunning").await;
    delete_machine(env, "typo").await;
    wait_until("CleanupStalled InvalidShutdownTimeout", || async {
        lvms(&env.client)
            .get("typo")
            .await
            .ok()
            .and_then(|m| m.status)
            .and_then(|s| condition::find(&s.conditions, "CleanupStalled").cloned())
            .is_some_and(|c| {
                c.status == "True"
                    && c.reason == "InvalidShutdownTimeout"
                    && c.message.contains("spec.shutdown.timeout")
            })
    })
    .await;
    assert_eq!(
        hv.domain("typo").unwrap().unwrap().state,
        DomainState::Running,
        "the host is not touched"
    );
    lvms(&env.client)
        .patch(
            "typo",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"shutdown": {"timeout": "30s"}}})),
        )
        .await
        .unwrap();
    wait_gone(env, "typo").await;
    assert!(hv.domain("typo").unwrap().is_none());
    f.env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guest_shutdown_is_restarted_unless_its_machine_is_being_deleted() {
    let f = fixture(&["laptop"], 2).await;
    let env = &f.env;
    let hv = hv(env, "laptop").await;
    machine(env, "guest", "laptop", json!({}), Some("boot")).await;
    wait_reason(env, "guest", "DomainRunning").await;

    // The guest powers off (the test driver's ACPI shutdown): started again, and said so.
    hv.shutdown("guest").unwrap();
    wait_until("DomainShutDown Event on restart", || async {
        event(env, "guest", "DomainShutDown")
            .await
            .is_some_and(|e| e.note.is_some_and(|n| n.contains("started again")))
    })
    .await;
    wait_until("domain running again", || async {
        hv.domain("guest")
            .unwrap()
            .is_some_and(|d| d.state == DomainState::Running)
    })
    .await;

    // A pre-drain hook holds the Machine in deletion, before Cluster API deletes this object.
    let hook = format!("{}/test", capi_sim::PRE_DRAIN_HOOK_PREFIX);
    capi_machines(&env.client)
        .patch(
            "guest",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {&hook: ""}}})),
        )
        .await
        .unwrap();
    delete_machine(env, "guest").await;
    wait_until("Machine deleting", || async {
        capi_machines(&env.client)
            .get("guest")
            .await
            .unwrap()
            .metadata
            .deletion_timestamp
            .is_some()
    })
    .await;
    hv.shutdown("guest").unwrap();
    let left = wait_reason(env, "guest", "DomainShutDown").await;
    assert_eq!(left.status, "False");
    assert!(left.message.contains("left off"), "{}", left.message);
    let lvm = lvms(&env.client).get("guest").await.unwrap();
    assert!(lvm.metadata.deletion_timestamp.is_none(), "still held by the hook");
    assert_eq!(lvm.status.unwrap().domain_state.as_deref(), Some("shutoff"));
    assert_eq!(
        hv.domain("guest").unwrap().unwrap().state,
        DomainState::Shutoff,
        "not restarted"
    );

    // Released: the domain is already off, so deletion has nothing to ask.
    capi_machines(&env.client)
        .patch(
            "guest",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {&hook: null}}})),
        )
        .await
        .unwrap();
    wait_gone(env, "guest").await;
    assert!(hv.domain("guest").unwrap().is_none());
    let reasons = event_reasons(env, "guest").await;
    assert!(!reasons.iter().any(|r| r == "ShutdownRequested"), "{reasons:?}");
    f.env.stop().await;
}

//! LibvirtCluster reconcile paths: reachable, unreachable, paused, no owner.

use caplv::api::{
    LibvirtCluster,
    condition::{self, Condition},
};
use k8s_openapi::api::events::v1::Event;
use kube::{
    Api,
    api::{DynamicObject, ListParams, Patch, PatchParams},
};
use tokio::net::TcpListener;

use crate::support::{Env, apply_yaml, wait_until};

fn cluster_yaml(name: &str) -> String {
    format!(
        "apiVersion: cluster.x-k8s.io/v1beta1\nkind: Cluster\nmetadata: {{name: {name}, namespace: default}}\n\
         spec:\n  infrastructureRef: {{apiVersion: infrastructure.cluster.x-k8s.io/v1alpha1, kind: LibvirtCluster, name: {name}}}\n"
    )
}

fn libvirt_cluster_yaml(name: &str, port: u16) -> String {
    format!(
        "apiVersion: infrastructure.cluster.x-k8s.io/v1alpha1\nkind: LibvirtCluster\nmetadata: {{name: {name}, namespace: default}}\n\
         spec:\n  controlPlaneEndpoint: {{host: 127.0.0.1, port: {port}}}\n"
    )
}

async fn condition_of(api: &Api<LibvirtCluster>, name: &str, type_: &str) -> Option<Condition> {
    let obj = api.get(name).await.ok()?;
    condition::find(&obj.status?.conditions, type_).cloned()
}

async fn wait_for_condition(api: &Api<LibvirtCluster>, name: &str, type_: &str, status: &str, reason: &str) {
    wait_until(&format!("{name} {type_}={status} ({reason})"), || async {
        condition_of(api, name, type_)
            .await
            .is_some_and(|c| c.status == status && c.reason == reason)
    })
    .await;
}

/// A port on loopback that refuses connections.
async fn closed_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    listener.local_addr().unwrap().port()
}

#[tokio::test]
async fn reachable_endpoint_makes_the_cluster_ready_and_capi_sees_it() {
    let env = Env::start().await;
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    apply_yaml(&env.client, &cluster_yaml("up")).await;
    apply_yaml(&env.client, &libvirt_cluster_yaml("up", port)).await;

    let api: Api<LibvirtCluster> = Api::namespaced(env.client.clone(), "default");
    wait_for_condition(&api, "up", condition::READY, "True", "ControlPlaneReachable").await;
    let status = api.get("up").await.unwrap().status.unwrap();
    assert!(status.ready);
    assert_eq!(status.initialization.unwrap().provisioned, Some(true));
    assert_eq!(status.observed_generation, Some(1));

    // CAPI core (simulated) mirrors infrastructure readiness onto the Cluster.
    let clusters: Api<DynamicObject> = Api::namespaced_with(
        env.client.clone(),
        "default",
        &caplv::api::capi::CapiVersion::V1beta1.cluster(),
    );
    wait_until("Cluster infrastructureReady", || async {
        clusters.get("up").await.unwrap().data["status"]["infrastructureReady"] == true
    })
    .await;
    env.stop().await;
}

#[tokio::test]
async fn unreachable_endpoint_reports_why_and_recovers_when_it_answers() {
    let env = Env::start().await;
    let port = closed_port().await;
    apply_yaml(&env.client, &cluster_yaml("down")).await;
    apply_yaml(&env.client, &libvirt_cluster_yaml("down", port)).await;

    let api: Api<LibvirtCluster> = Api::namespaced(env.client.clone(), "default");
    wait_for_condition(&api, "down", condition::READY, "False", "ControlPlaneUnreachable").await;
    let status = api.get("down").await.unwrap().status.unwrap();
    assert!(!status.ready, "never provisioned while the endpoint has not answered");
    let message = condition::find(&status.conditions, condition::READY)
        .unwrap()
        .message
        .clone();
    assert!(message.contains(&format!("127.0.0.1:{port}")), "{message}");

    // A Warning Event names the reason.
    let events: Api<Event> = Api::namespaced(env.client.clone(), "default");
    wait_until("ControlPlaneUnreachable event", || async {
        events
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .iter()
            .any(|e| e.reason.as_deref() == Some("ControlPlaneUnreachable") && e.type_.as_deref() == Some("Warning"))
    })
    .await;

    // The endpoint starts answering: the periodic probe notices without any watch event.
    let _listener = TcpListener::bind(("127.0.0.1", port)).await.unwrap();
    wait_for_condition(&api, "down", condition::READY, "True", "ControlPlaneReachable").await;
    assert!(api.get("down").await.unwrap().status.unwrap().ready);
    env.stop().await;
}

#[tokio::test]
async fn without_an_owner_cluster_it_waits() {
    let env = Env::start().await;
    apply_yaml(&env.client, &libvirt_cluster_yaml("orphan", closed_port().await)).await;
    let api: Api<LibvirtCluster> = Api::namespaced(env.client.clone(), "default");
    wait_for_condition(&api, "orphan", condition::READY, "False", "WaitingForOwnerCluster").await;

    // Once CAPI makes a Cluster the owner, the controller moves on by itself.
    apply_yaml(&env.client, &cluster_yaml("orphan")).await;
    wait_for_condition(&api, "orphan", condition::READY, "False", "ControlPlaneUnreachable").await;
    env.stop().await;
}

#[tokio::test]
async fn paused_cluster_or_annotation_stops_reconciliation_until_resumed() {
    let env = Env::start().await;
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    apply_yaml(&env.client, &cluster_yaml("p")).await;
    apply_yaml(&env.client, &libvirt_cluster_yaml("p", port)).await;
    let api: Api<LibvirtCluster> = Api::namespaced(env.client.clone(), "default");
    wait_for_condition(&api, "p", condition::READY, "True", "ControlPlaneReachable").await;

    let clusters: Api<DynamicObject> = Api::namespaced_with(
        env.client.clone(),
        "default",
        &caplv::api::capi::CapiVersion::V1beta1.cluster(),
    );
    let pause = |paused: bool| serde_json::json!({"spec": {"paused": paused}});
    clusters
        .patch("p", &PatchParams::default(), &Patch::Merge(pause(true)))
        .await
        .unwrap();
    wait_for_condition(&api, "p", condition::PAUSED, "True", "Paused").await;

    // While paused, an unreachable endpoint is not noticed.
    drop(listener);
    let probes_before = probe_count(&env);
    tokio::time::sleep(std::time::Duration::from_millis(900)).await;
    assert_eq!(probe_count(&env), probes_before, "no probes while paused");
    assert_eq!(condition_of(&api, "p", condition::READY).await.unwrap().status, "True");

    clusters
        .patch("p", &PatchParams::default(), &Patch::Merge(pause(false)))
        .await
        .unwrap();
    wait_for_condition(&api, "p", condition::PAUSED, "False", "NotPaused").await;
    wait_for_condition(&api, "p", condition::READY, "False", "ControlPlaneUnreachable").await;

    // The annotation on the object alone pauses it too.
    let annotate = serde_json::json!({"metadata": {"annotations": {"cluster.x-k8s.io/paused": ""}}});
    api.patch("p", &PatchParams::default(), &Patch::Merge(annotate))
        .await
        .unwrap();
    wait_for_condition(&api, "p", condition::PAUSED, "True", "Paused").await;
    env.stop().await;
}

/// Endpoint probes the manager has made so far.
fn probe_count(env: &Env) -> u64 {
    ["reachable", "unreachable"]
        .iter()
        .map(|r| env.shared.metrics.endpoint_probes.with_label_values(&[r]).get())
        .sum()
}

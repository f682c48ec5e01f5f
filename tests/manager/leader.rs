//! Leader election: only the Lease holder runs controllers, and a standby takes over.

use std::{sync::Arc, time::Duration};

use caplv::{
    app::leader::LeaderConfig,
    app::{self, ManagerConfig, Shared},
    clock::SystemClock,
    controllers::Family,
    endpoint::AlwaysReachable,
};
use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use tokio_util::sync::CancellationToken;

use crate::support::{fast_settings, wait_until};

fn config(identity: &str) -> ManagerConfig {
    ManagerConfig {
        families: Family::compiled(),
        metrics_addr: "127.0.0.1:0".parse().unwrap(),
        settings: fast_settings(),
        leader: Some(LeaderConfig {
            name: "caplv-manager".into(),
            namespace: "default".into(),
            identity: identity.into(),
            duration_seconds: 3,
        }),
        probe: Arc::new(AlwaysReachable),
        clock: Arc::new(SystemClock),
    }
}

#[tokio::test]
async fn only_the_lease_holder_runs_controllers_and_a_standby_takes_over() {
    let server = memkube::Server::new();
    let client = server.client();
    server.install_crds(&caplv::api::crds()).unwrap();
    capi_sim::install(&client, capi_sim::CapiVersions::V1beta1)
        .await
        .unwrap();

    let (a, b) = (Shared::new().unwrap(), Shared::new().unwrap());
    let (stop_a, stop_b) = (CancellationToken::new(), CancellationToken::new());
    let task_a = tokio::spawn(app::run(client.clone(), config("a"), a.clone(), stop_a.clone()));
    wait_until("a leads", || async { a.metrics.leader.get() == 1 }).await;
    let task_b = tokio::spawn(app::run(client.clone(), config("b"), b.clone(), stop_b.clone()));
    wait_until("both ready", || async {
        a.readiness.is_ready() && b.readiness.is_ready()
    })
    .await;
    assert_eq!(b.metrics.leader.get(), 0, "b stands by");
    let leases: Api<Lease> = Api::namespaced(client.clone(), "default");
    let holder = |l: Lease| l.spec.and_then(|s| s.holder_identity);
    assert_eq!(holder(leases.get("caplv-manager").await.unwrap()).as_deref(), Some("a"));

    // a shuts down: it releases the Lease and b starts its controllers.
    stop_a.cancel();
    task_a.await.unwrap().unwrap();
    wait_until("b leads", || async { b.metrics.leader.get() == 1 }).await;
    wait_until("b's controllers synced", || async {
        b.metrics.controller_ready.with_label_values(&["libvirtcluster"]).get() == 1
    })
    .await;
    assert_eq!(holder(leases.get("caplv-manager").await.unwrap()).as_deref(), Some("b"));

    stop_b.cancel();
    tokio::time::timeout(Duration::from_secs(20), task_b)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    server.shutdown();
}

#[tokio::test]
async fn losing_the_lease_stops_the_controllers() {
    let server = memkube::Server::new();
    let client = server.client();
    server.install_crds(&caplv::api::crds()).unwrap();
    capi_sim::install(&client, capi_sim::CapiVersions::V1beta1)
        .await
        .unwrap();
    let a = Shared::new().unwrap();
    let stop = CancellationToken::new();
    let task = tokio::spawn(app::run(client.clone(), config("a"), a.clone(), stop.clone()));
    wait_until("a leads", || async { a.metrics.leader.get() == 1 }).await;
    wait_until("a's controllers synced", || async {
        a.metrics.controller_ready.with_label_values(&["libvirtcluster"]).get() == 1
    })
    .await;

    // Another replica takes the Lease over (as after a network partition).
    let leases: Api<Lease> = Api::namespaced(client.clone(), "default");
    let now = k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(k8s_openapi::jiff::Timestamp::now());
    let steal = serde_json::json!({"spec": {"holderIdentity": "intruder", "leaseDurationSeconds": 3600, "renewTime": now, "acquireTime": now}});
    leases
        .patch(
            "caplv-manager",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(steal),
        )
        .await
        .unwrap();
    wait_until("a notices and stops its controllers", || async {
        a.metrics.leader.get() == 0 && a.metrics.controller_ready.with_label_values(&["libvirtcluster"]).get() == 0
    })
    .await;
    assert!(a.readiness.is_ready(), "a standby stays ready");
    assert!(!task.is_finished(), "it waits to lead again rather than exiting");
    stop.cancel();
    tokio::time::timeout(Duration::from_secs(20), task)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    server.shutdown();
}

//! 5-Spot against memkube + capi-sim with an injected clock: every phase, graceful removal with
//! a blocking PodDisruptionBudget, reopening during shutdown, the kill switch, disabling,
//! deletion, adoption after a crash, bad specs, and a CAPI v1beta2-only server.

use caplv::api::{
    ScheduledMachine,
    condition::{self},
    scheduled_machine::Phase,
};
use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::{
    Api, Client, ResourceExt,
    api::{DeleteParams, DynamicObject, Patch, PatchParams, PostParams},
    core::ApiResource,
};
use serde_json::json;
use tokio::net::TcpListener;

use crate::support::{Env, apply_yaml, wait_until};

/// Monday 2026-12-07, 08:59:58 in New York: two seconds before the seed's window opens.
const BEFORE_OPEN: &str = "2026-12-07T13:59:58Z";
/// The same Monday, 17:59:58 in New York: two seconds before the window closes.
const BEFORE_CLOSE: &str = "2026-12-07T22:59:58Z";
/// Noon on that Monday in New York: inside the window.
const MIDDAY: &str = "2026-12-07T17:00:00Z";

pub(crate) fn at(s: &str) -> DateTime<Utc> {
    s.parse().unwrap()
}

fn ar(api_version: &str, kind: &str, plural: &str) -> ApiResource {
    let (group, version) = api_version.split_once('/').unwrap();
    ApiResource {
        group: group.into(),
        version: version.into(),
        api_version: api_version.into(),
        kind: kind.into(),
        plural: plural.into(),
    }
}

pub(crate) fn machines(env: &Env, version: &str) -> Api<DynamicObject> {
    Api::namespaced_with(
        env.client.clone(),
        "default",
        &ar(&format!("cluster.x-k8s.io/{version}"), "Machine", "machines"),
    )
}

pub(crate) fn libvirt_machines(client: &Client) -> Api<DynamicObject> {
    Api::namespaced_with(
        client.clone(),
        "default",
        &ar(
            "infrastructure.cluster.x-k8s.io/v1alpha1",
            "LibvirtMachine",
            "libvirtmachines",
        ),
    )
}

pub(crate) fn ignition_configs(client: &Client) -> Api<DynamicObject> {
    Api::namespaced_with(
        client.clone(),
        "default",
        &ar(
            "bootstrap.cluster.x-k8s.io/v1alpha1",
            "IgnitionConfig",
            "ignitionconfigs",
        ),
    )
}

/// The seed's Cluster, LibvirtCluster (pointed at a loopback listener), Ignition Secret and
/// LibvirtHost `laptop` (served by a private libvirt test driver shaped like the seed's laptop).
pub(crate) async fn cluster(env: &Env, capi_version: &str) -> (TcpListener, tempfile::TempDir) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let infra_ref = if capi_version == "v1beta1" {
        "{apiVersion: infrastructure.cluster.x-k8s.io/v1alpha1, kind: LibvirtCluster, name: spot}"
    } else {
        "{apiGroup: infrastructure.cluster.x-k8s.io, kind: LibvirtCluster, name: spot}"
    };
    apply_yaml(&env.client, &format!("apiVersion: cluster.x-k8s.io/{capi_version}\nkind: Cluster\nmetadata: {{name: spot, namespace: default}}\nspec:\n  infrastructureRef: {infra_ref}\n")).await;
    apply_yaml(&env.client, &format!("apiVersion: infrastructure.cluster.x-k8s.io/v1alpha1\nkind: LibvirtCluster\nmetadata: {{name: spot, namespace: default}}\nspec:\n  controlPlaneEndpoint: {{host: 127.0.0.1, port: {port}}}\n")).await;
    apply_yaml(
        &env.client,
        include_str!("../../examples/seed/04-secret-worker-ignition.yaml"),
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    let uri = caplv::libvirt::simulated::host_uri(dir.path(), "default", "laptop").unwrap();
    apply_yaml(&env.client, &format!("apiVersion: infrastructure.cluster.x-k8s.io/v1alpha1\nkind: LibvirtHost\nmetadata: {{name: laptop, namespace: default}}\nspec:\n  uri: \"{uri}\"\n")).await;
    (listener, dir)
}

/// The seed's ScheduledMachine named `name`, with `edits` merged into its spec.
pub(crate) async fn scheduled_machine(env: &Env, name: &str, edits: serde_json::Value) {
    let mut sm: serde_json::Value =
        serde_yaml::from_str(include_str!("../../examples/seed/05-scheduledmachine.yaml")).unwrap();
    sm["metadata"]["name"] = json!(name);
    json_patch::merge(&mut sm["spec"], &edits);
    let api: Api<ScheduledMachine> = Api::namespaced(env.client.clone(), "default");
    api.create(&PostParams::default(), &serde_json::from_value(sm).unwrap())
        .await
        .unwrap();
}

pub(crate) fn sms(env: &Env) -> Api<ScheduledMachine> {
    Api::namespaced(env.client.clone(), "default")
}

pub(crate) async fn phase(env: &Env, name: &str) -> Option<Phase> {
    sms(env)
        .get_opt(name)
        .await
        .unwrap()
        .and_then(|sm| sm.status)
        .and_then(|s| s.phase)
}

/// Wait until `name` is in phase `want`; on a timeout, the failure shows its last status.
pub(crate) async fn wait_phase(env: &Env, name: &str, want: Phase) {
    let deadline = tokio::time::Instant::now() + crate::support::deadline();
    loop {
        let sm = sms(env).get_opt(name).await.unwrap();
        let status = sm.as_ref().and_then(|sm| sm.status.as_ref());
        if status.and_then(|s| s.phase) == Some(want) {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for: {name} in phase {want:?}; its status: {}",
            serde_json::to_string(&status).unwrap_or_default()
        );
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
}

/// Make the controller look again after the test moved the clock (as a schedule edit would).
pub(crate) async fn nudge(env: &Env, name: &str) {
    let patch = json!({"metadata": {"annotations": {"test/nudge": chrono::Utc::now().to_rfc3339()}}});
    sms(env)
        .patch(name, &PatchParams::default(), &Patch::Merge(patch))
        .await
        .unwrap();
}

/// Act as the bootstrap provider (the data Secret is "written"), then let the LibvirtMachine
/// controller provision the VM on the test host, so CAPI (simulated) links the Node its
/// emulated kubelet registers.
pub(crate) async fn provision(env: &Env, name: &str) {
    let ignition =
        json!({"status": {"ready": true, "dataSecretName": name, "initialization": {"dataSecretCreated": true}}});
    ignition_configs(&env.client)
        .patch_status(name, &PatchParams::default(), &Patch::Merge(ignition))
        .await
        .unwrap();
    let lvm = libvirt_machines(&env.client);
    wait_until(&format!("LibvirtMachine {name} provisioned"), || async {
        lvm.get(name).await.unwrap().data["status"]["ready"] == true
    })
    .await;
}

pub(crate) async fn wait_running(env: &Env, name: &str) {
    wait_until(&format!("{name} Ready (Machine Running)"), || async {
        sms(env)
            .get(name)
            .await
            .unwrap()
            .status
            .is_some_and(|s| condition::is_true(&s.conditions, condition::READY))
    })
    .await;
}

pub(crate) fn pod(name: &str, node: &str, labels: serde_json::Value, annotations: serde_json::Value) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": labels, "annotations": annotations},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "busybox"}]},
    }))
    .unwrap()
}

async fn node_unschedulable(env: &Env, node: &str) -> Option<bool> {
    let nodes: Api<Node> = Api::all(env.client.clone());
    nodes
        .get_opt(node)
        .await
        .unwrap()
        .map(|n| n.spec.and_then(|s| s.unschedulable).unwrap_or(false))
}

fn status_writes(env: &Env) -> u64 {
    env.server()
        .request_count("patch", "scheduledmachines.5spot.finos.org", "status")
}

#[tokio::test]
async fn a_window_brings_a_worker_up_and_takes_it_down_cleanly() {
    let env = Env::start().await;
    let _endpoint = cluster(&env, "v1beta1").await;
    env.clock.set(at(BEFORE_OPEN));
    scheduled_machine(&env, "w1", json!({})).await;
    wait_phase(&env, "w1", Phase::Inactive).await;
    let status = sms(&env).get("w1").await.unwrap().status.unwrap();
    assert_eq!(status.in_schedule, Some(false));
    assert_eq!(status.next_activation.unwrap().0.to_string(), "2026-12-07T14:00:00Z");

    // The edge arrives on its own: the controller requeued for it.
    wait_phase(&env, "w1", Phase::Active).await;
    let machine = machines(&env, "v1beta1").get("w1").await.unwrap();
    assert_eq!(machine.labels()["5spot.finos.org/scheduled-machine"], "w1");
    assert_eq!(machine.labels()["node-role.kubernetes.io/worker"], "");
    assert_eq!(machine.data["spec"]["nodeDrainTimeout"], "300s");
    for obj in [
        libvirt_machines(&env.client).get("w1").await.unwrap(),
        ignition_configs(&env.client).get("w1").await.unwrap(),
    ] {
        assert_eq!(obj.labels()["5spot.finos.org/priority"], "50");
        assert!(
            obj.owner_references().iter().all(|o| o.kind == "Machine"),
            "only CAPI owns it: {:?}",
            obj.owner_references()
        );
    }
    assert!(env.shared.metrics.schedule_lag.get_sample_count() >= 1);

    provision(&env, "w1").await;
    wait_running(&env, "w1").await;
    let status = sms(&env).get("w1").await.unwrap().status.unwrap();
    assert_eq!(status.node_ref.unwrap().name, "w1");
    assert!(status.provider_id.unwrap().starts_with("libvirt:///"));

    // Workload on the node: a normal pod is evicted, a mirror pod is left alone.
    let pods: Api<Pod> = Api::namespaced(env.client.clone(), "default");
    pods.create(&PostParams::default(), &pod("app", "w1", json!({}), json!({})))
        .await
        .unwrap();
    pods.create(
        &PostParams::default(),
        &pod("static", "w1", json!({}), json!({"kubernetes.io/config.mirror": "x"})),
    )
    .await
    .unwrap();

    env.clock.set(at(BEFORE_CLOSE));
    nudge(&env, "w1").await;
    wait_phase(&env, "w1", Phase::ShuttingDown).await;
    wait_phase(&env, "w1", Phase::Inactive).await;
    assert!(pods.get_opt("app").await.unwrap().is_none(), "evicted");
    assert!(
        pods.get_opt("static").await.unwrap().is_some(),
        "mirror pods are not evicted"
    );
    assert!(machines(&env, "v1beta1").get_opt("w1").await.unwrap().is_none());
    assert!(libvirt_machines(&env.client).get_opt("w1").await.unwrap().is_none());
    assert!(ignition_configs(&env.client).get_opt("w1").await.unwrap().is_none());
    let status = sms(&env).get("w1").await.unwrap().status.unwrap();
    assert!(status.machine_ref.is_none() && status.node_ref.is_none() && status.shutdown_started_at.is_none());
    assert_eq!(
        status.next_activation.unwrap().0.to_string(),
        "2026-12-08T14:00:00Z",
        "Tuesday 09:00 New York"
    );
    assert!(env.shared.metrics.evictions.with_label_values(&["evicted"]).get() >= 1);
    env.stop().await;
}

#[tokio::test]
async fn a_blocking_pdb_holds_the_drain_until_the_drain_timeout() {
    let env = Env::start().await;
    let _endpoint = cluster(&env, "v1beta1").await;
    env.clock.set(at(MIDDAY));
    scheduled_machine(&env, "w2", json!({"nodeDrainTimeout": "3s"})).await;
    wait_phase(&env, "w2", Phase::Active).await;
    provision(&env, "w2").await;
    wait_running(&env, "w2").await;
    let pods: Api<Pod> = Api::namespaced(env.client.clone(), "default");
    pods.create(
        &PostParams::default(),
        &pod("guarded", "w2", json!({"app": "guarded"}), json!({})),
    )
    .await
    .unwrap();
    apply_yaml(&env.client, "apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata: {name: guarded, namespace: default}\nspec:\n  minAvailable: 1\n  selector: {matchLabels: {app: guarded}}\n").await;
    let machine_uid = machines(&env, "v1beta1").get("w2").await.unwrap().uid();

    env.clock.set(at(BEFORE_CLOSE) + chrono::Duration::seconds(10));
    nudge(&env, "w2").await;
    wait_until("eviction refused by the PDB", || async {
        env.shared.metrics.evictions.with_label_values(&["blocked"]).get() > 0
    })
    .await;
    assert_eq!(node_unschedulable(&env, "w2").await, Some(true), "cordoned first");
    assert_eq!(
        machines(&env, "v1beta1").get("w2").await.unwrap().uid(),
        machine_uid,
        "the Machine waits while the drain is blocked"
    );
    assert_eq!(phase(&env, "w2").await, Some(Phase::ShuttingDown));

    // Once nodeDrainTimeout has passed since the shutdown began, the Machine goes anyway.
    wait_phase(&env, "w2", Phase::Inactive).await;
    assert!(
        pods.get_opt("guarded").await.unwrap().is_some(),
        "the PDB was respected: the pod was never evicted"
    );
    env.stop().await;
}

#[tokio::test]
async fn reopening_during_shutdown_keeps_the_machine_and_uncordons() {
    let env = Env::start().await;
    let _endpoint = cluster(&env, "v1beta1").await;
    env.clock.set(at(MIDDAY));
    scheduled_machine(&env, "w3", json!({})).await;
    wait_phase(&env, "w3", Phase::Active).await;
    provision(&env, "w3").await;
    wait_running(&env, "w3").await;
    let pods: Api<Pod> = Api::namespaced(env.client.clone(), "default");
    pods.create(
        &PostParams::default(),
        &pod("guarded", "w3", json!({"app": "g3"}), json!({})),
    )
    .await
    .unwrap();
    apply_yaml(&env.client, "apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata: {name: g3, namespace: default}\nspec:\n  minAvailable: 1\n  selector: {matchLabels: {app: g3}}\n").await;
    let machine_uid = machines(&env, "v1beta1").get("w3").await.unwrap().uid();

    env.clock.set(at(BEFORE_CLOSE) + chrono::Duration::seconds(10));
    nudge(&env, "w3").await;
    wait_phase(&env, "w3", Phase::ShuttingDown).await;
    wait_until("node cordoned", || async {
        node_unschedulable(&env, "w3").await == Some(true)
    })
    .await;

    env.clock.set(at(MIDDAY));
    nudge(&env, "w3").await;
    wait_phase(&env, "w3", Phase::Active).await;
    wait_until("node uncordoned", || async {
        node_unschedulable(&env, "w3").await == Some(false)
    })
    .await;
    assert_eq!(
        machines(&env, "v1beta1").get("w3").await.unwrap().uid(),
        machine_uid,
        "same Machine kept"
    );
    assert!(
        sms(&env)
            .get("w3")
            .await
            .unwrap()
            .status
            .unwrap()
            .shutdown_started_at
            .is_none()
    );
    env.stop().await;
}

#[tokio::test]
async fn kill_switch_removes_at_once_and_resumes_without_hot_loop() {
    let env = Env::start().await;
    let _endpoint = cluster(&env, "v1beta1").await;
    env.clock.set(at(MIDDAY));
    scheduled_machine(&env, "w4", json!({})).await;
    wait_phase(&env, "w4", Phase::Active).await;
    provision(&env, "w4").await;
    wait_running(&env, "w4").await;
    let pods: Api<Pod> = Api::namespaced(env.client.clone(), "default");
    pods.create(&PostParams::default(), &pod("busy", "w4", json!({}), json!({})))
        .await
        .unwrap();

    let kill = |on: bool| json!({"spec": {"killSwitch": on}});
    sms(&env)
        .patch("w4", &PatchParams::default(), &Patch::Merge(kill(true)))
        .await
        .unwrap();
    wait_phase(&env, "w4", Phase::Terminated).await;
    wait_until("Machine and LibvirtMachine gone", || async {
        machines(&env, "v1beta1").get_opt("w4").await.unwrap().is_none()
            && libvirt_machines(&env.client).get_opt("w4").await.unwrap().is_none()
    })
    .await;
    assert_eq!(
        env.shared.metrics.evictions.with_label_values(&["evicted"]).get(),
        0,
        "no drain"
    );
    let machine = machines(&env, "v1beta1");
    assert!(machine.get_opt("w4").await.unwrap().is_none());

    // Terminated is quiet: no status writes while nothing changes (once the status has seen
    // the Machine go).
    wait_until("w4's status reports no Machine", || async {
        sms(&env).get("w4").await.unwrap().status.is_some_and(|s| {
            s.conditions
                .iter()
                .any(|c| c.type_ == "MachineReady" && c.reason == "NoMachine")
        })
    })
    .await;
    let writes = status_writes(&env);
    tokio::time::sleep(std::time::Duration::from_millis(800)).await;
    assert_eq!(status_writes(&env), writes, "no hot loop");

    sms(&env)
        .patch("w4", &PatchParams::default(), &Patch::Merge(kill(false)))
        .await
        .unwrap();
    wait_phase(&env, "w4", Phase::Active).await;
    assert!(machines(&env, "v1beta1").get_opt("w4").await.unwrap().is_some());
    env.stop().await;
}

#[tokio::test]
async fn disable_and_enable() {
    let env = Env::start().await;
    let _endpoint = cluster(&env, "v1beta1").await;
    env.clock.set(at(MIDDAY));
    scheduled_machine(&env, "w5", json!({})).await;
    wait_phase(&env, "w5", Phase::Active).await;
    let enable = |on: bool| json!({"spec": {"schedule": {"enabled": on}}});
    sms(&env)
        .patch("w5", &PatchParams::default(), &Patch::Merge(enable(false)))
        .await
        .unwrap();
    wait_phase(&env, "w5", Phase::Disabled).await;
    assert!(machines(&env, "v1beta1").get_opt("w5").await.unwrap().is_none());
    sms(&env)
        .patch("w5", &PatchParams::default(), &Patch::Merge(enable(true)))
        .await
        .unwrap();
    wait_phase(&env, "w5", Phase::Active).await;
    env.stop().await;
}

#[tokio::test]
async fn deleting_the_scheduled_machine_removes_its_children_first() {
    let env = Env::start().await;
    let _endpoint = cluster(&env, "v1beta1").await;
    env.clock.set(at(MIDDAY));
    scheduled_machine(&env, "w6", json!({})).await;
    wait_phase(&env, "w6", Phase::Active).await;
    provision(&env, "w6").await;
    wait_running(&env, "w6").await;
    assert!(
        sms(&env)
            .get("w6")
            .await
            .unwrap()
            .finalizers()
            .contains(&"5spot.finos.org/scheduled-machine".to_owned())
    );
    sms(&env).delete("w6", &DeleteParams::default()).await.unwrap();
    wait_until("ScheduledMachine gone", || async {
        sms(&env).get_opt("w6").await.unwrap().is_none()
    })
    .await;
    assert!(machines(&env, "v1beta1").get_opt("w6").await.unwrap().is_none());
    assert!(libvirt_machines(&env.client).get_opt("w6").await.unwrap().is_none());
    assert!(ignition_configs(&env.client).get_opt("w6").await.unwrap().is_none());
    let nodes: Api<Node> = Api::all(env.client.clone());
    assert!(nodes.get_opt("w6").await.unwrap().is_none());
    env.stop().await;
}

/// Windows opening together: each object is created exactly once (our own status write wakes
/// a reconcile before the Machine watch has delivered the new Machine; it must not create again),
/// and an idle ScheduledMachine is looked at for leftovers once, not at every reconcile.
#[tokio::test]
async fn windows_opening_together_create_each_object_once() {
    const COUNT: usize = 30;
    let env = Env::start().await;
    let _endpoint = cluster(&env, "v1beta1").await;
    env.clock.set(at("2026-12-07T13:59:50Z"));
    let names: Vec<String> = (0..COUNT).map(|i| format!("burst-{i:02}")).collect();
    for name in &names {
        scheduled_machine(&env, name, json!({})).await;
    }
    for name in &names {
        wait_phase(&env, name, Phase::Active).await;
    }
    let server = env.server();
    for resource in [
        "ignitionconfigs.bootstrap.cluster.x-k8s.io",
        "libvirtmachines.infrastructure.cluster.x-k8s.io",
        "machines.cluster.x-k8s.io",
    ] {
        assert_eq!(
            server.request_count("create", resource, ""),
            COUNT as u64,
            "{resource}: one create per window"
        );
    }
    // Looked for before the first create only: once per ScheduledMachine.
    let leftover_checks = server
        .request_counts_of(crate::support::MANAGER_USER)
        .get(&(
            "get".to_owned(),
            "libvirtmachines.infrastructure.cluster.x-k8s.io".to_owned(),
            String::new(),
        ))
        .copied()
        .unwrap_or(0);
    assert!(
        leftover_checks <= COUNT as u64,
        "leftover checks repeat: {leftover_checks}"
    );
    env.stop().await;
}

/// Windows opening together on a host that is down: each LibvirtMachine reports its wait once,
/// not once for its owner, once for its bootstrap data and once for its host.
#[tokio::test]
async fn machines_opening_together_on_a_host_that_is_down_write_their_status_once() {
    const COUNT: usize = 20;
    let env = Env::start().await;
    let _endpoint = cluster(&env, "v1beta1").await;
    let down = json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1", "kind": "LibvirtHost",
        "metadata": {"name": "down", "namespace": "default"},
        "spec": {"uri": "test:///nonexistent/node.xml"}});
    crate::support::apply_yaml(&env.client, &down.to_string()).await;
    env.clock.set(at("2026-12-07T13:59:50Z"));
    let server = env.server();
    server.reset_counts();
    let names: Vec<String> = (0..COUNT).map(|i| format!("down-{i:02}")).collect();
    for name in &names {
        scheduled_machine(
            &env,
            name,
            json!({"infrastructureSpec": {"spec": {"hostRef": {"name": "down"}}}}),
        )
        .await;
    }
    let lvms = libvirt_machines(&env.client);
    for name in &names {
        wait_until(&format!("{name} waits for its host"), || async {
            lvms.get_opt(name).await.unwrap().is_some_and(|m| {
                m.data["status"]["conditions"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|c| c["type"] == "Ready" && c["reason"] == "WaitingForHost")
            })
        })
        .await;
    }
    let writes = server.request_count("patch", "libvirtmachines.infrastructure.cluster.x-k8s.io", "status");
    assert!(
        writes <= COUNT as u64 + 2,
        "{writes} status writes for {COUNT} machines"
    );
    env.stop().await;
}

#[tokio::test]
async fn objects_left_by_a_crash_are_adopted_and_foreign_ones_are_a_conflict() {
    let env = Env::start().await;
    let _endpoint = cluster(&env, "v1beta1").await;
    env.clock.set(at(MIDDAY));
    // A previous run created the infrastructure object, then crashed before the Machine.
    let sm: ScheduledMachine =
        serde_yaml::from_str(include_str!("../../examples/seed/05-scheduledmachine.yaml")).unwrap();
    let mut leftover = json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1", "kind": "LibvirtMachine",
        "metadata": {"name": "w7", "namespace": "default", "labels": {"5spot.finos.org/scheduled-machine": "w7"}},
        "spec": sm.spec.infrastructure_spec.spec});
    let created = libvirt_machines(&env.client)
        .create(
            &PostParams::default(),
            &serde_json::from_value(leftover.clone()).unwrap(),
        )
        .await
        .unwrap();
    scheduled_machine(&env, "w7", json!({})).await;
    wait_phase(&env, "w7", Phase::Active).await;
    assert_eq!(
        libvirt_machines(&env.client).get("w7").await.unwrap().uid(),
        created.uid(),
        "adopted, not recreated"
    );

    // An object with our name that we did not create is never touched.
    leftover["metadata"] = json!({"name": "w8", "namespace": "default"});
    let foreign = libvirt_machines(&env.client)
        .create(&PostParams::default(), &serde_json::from_value(leftover).unwrap())
        .await
        .unwrap();
    scheduled_machine(&env, "w8", json!({})).await;
    wait_phase(&env, "w8", Phase::Error).await;
    let status = sms(&env).get("w8").await.unwrap().status.unwrap();
    let valid = condition::find(&status.conditions, "ScheduleValid").unwrap();
    assert_eq!(valid.reason, "NameConflict");
    assert!(machines(&env, "v1beta1").get_opt("w8").await.unwrap().is_none());
    assert_eq!(
        libvirt_machines(&env.client).get("w8").await.unwrap().uid(),
        foreign.uid()
    );
    env.stop().await;
}

#[tokio::test]
async fn bad_specs_are_reported_without_a_hot_loop_and_recover() {
    let env = Env::start().await;
    let _endpoint = cluster(&env, "v1beta1").await;
    env.clock.set(at(MIDDAY));
    scheduled_machine(&env, "w9", json!({"schedule": {"timezone": "Mars/Olympus_Mons"}})).await;
    wait_phase(&env, "w9", Phase::Error).await;
    let status = sms(&env).get("w9").await.unwrap().status.unwrap();
    let valid = condition::find(&status.conditions, "ScheduleValid").unwrap();
    assert_eq!(
        (valid.status.as_str(), valid.reason.as_str()),
        ("False", "InvalidTimezone")
    );
    assert!(valid.message.contains("Mars/Olympus_Mons"), "{}", valid.message);
    let writes = status_writes(&env);
    tokio::time::sleep(std::time::Duration::from_millis(800)).await;
    assert_eq!(status_writes(&env), writes, "no hot loop");

    let fix = json!({"spec": {"schedule": {"timezone": "America/New_York", "daysOfWeek": ["mon-fri", "funday"]}}});
    sms(&env)
        .patch("w9", &PatchParams::default(), &Patch::Merge(fix))
        .await
        .unwrap();
    wait_until("days error names the token", || async {
        sms(&env)
            .get("w9")
            .await
            .unwrap()
            .status
            .and_then(|s| condition::find(&s.conditions, "ScheduleValid").cloned())
            .is_some_and(|c| c.message.contains("funday"))
    })
    .await;
    let fix = json!({"spec": {"schedule": {"daysOfWeek": ["mon-fri"]}}});
    sms(&env)
        .patch("w9", &PatchParams::default(), &Patch::Merge(fix))
        .await
        .unwrap();
    wait_phase(&env, "w9", Phase::Active).await;

    // The API server refuses what the schema can tell is wrong, with the field named.
    let api: Api<ScheduledMachine> = sms(&env);
    let mut bad: serde_json::Value =
        serde_yaml::from_str(include_str!("../../examples/seed/05-scheduledmachine.yaml")).unwrap();
    bad["metadata"]["name"] = json!("w10");
    bad["spec"]["bootstrapDataSecretName"] = json!("also");
    let err = api
        .create(&PostParams::default(), &serde_json::from_value(bad).unwrap())
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("exactly one of bootstrapSpec or bootstrapDataSecretName"),
        "{err}"
    );
    env.stop().await;
}

#[tokio::test]
async fn a_v1beta2_only_capi_gets_v1beta2_machines() {
    let env = Env::start_with(capi_sim::CapiVersions::V1beta2).await;
    let _endpoint = cluster(&env, "v1beta2").await;
    env.clock.set(at(MIDDAY));
    scheduled_machine(&env, "w11", json!({})).await;
    wait_phase(&env, "w11", Phase::Active).await;
    let machine = machines(&env, "v1beta2").get("w11").await.unwrap();
    assert_eq!(
        machine.data["spec"]["infrastructureRef"],
        json!({"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "LibvirtMachine", "name": "w11"})
    );
    assert_eq!(machine.data["spec"]["deletion"]["nodeDrainTimeoutSeconds"], 300);
    provision(&env, "w11").await;
    wait_running(&env, "w11").await;
    env.stop().await;
}

/// The taints on Node `name`, as `key=value:Effect`.
pub(crate) async fn node_taints(env: &Env, name: &str) -> Vec<String> {
    let node = Api::<Node>::all(env.client.clone()).get(name).await.unwrap();
    node.spec
        .and_then(|s| s.taints)
        .unwrap_or_default()
        .into_iter()
        .map(|t| format!("{}={}:{}", t.key, t.value.unwrap_or_default(), t.effect))
        .collect()
}

#[tokio::test]
async fn node_taints_are_applied_kept_and_removed_without_touching_others() {
    const OURS: &str = "spot.example.com/ephemeral=true:NoSchedule";
    const THEIRS: &str = "team.example.com/gpu=:NoExecute";
    let env = Env::start().await;
    let _endpoint = cluster(&env, "v1beta1").await;
    env.clock.set(at(MIDDAY));
    let taint = json!({"key": "spot.example.com/ephemeral", "value": "true", "effect": "NoSchedule"});
    scheduled_machine(&env, "w6", json!({"nodeTaints": [taint]})).await;
    wait_phase(&env, "w6", Phase::Active).await;
    provision(&env, "w6").await;
    wait_running(&env, "w6").await;
    wait_until("the spec's taint on the Node", || async {
        node_taints(&env, "w6").await.contains(&OURS.to_owned())
    })
    .await;
    let nodes = Api::<Node>::all(env.client.clone());
    let annotations = nodes.get("w6").await.unwrap().metadata.annotations.unwrap_or_default();
    assert_eq!(
        annotations.get("5spot.finos.org/owned-taints").map(String::as_str),
        Some("spot.example.com/ephemeral:NoSchedule")
    );

    // An administrator replaces the taints: ours gone, one of theirs added.
    let theirs = json!({"key": "team.example.com/gpu", "effect": "NoExecute"});
    nodes
        .patch(
            "w6",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"taints": [theirs]}})),
        )
        .await
        .unwrap();
    wait_until("our taint back beside theirs", || async {
        let taints = node_taints(&env, "w6").await;
        taints.contains(&OURS.to_owned()) && taints.contains(&THEIRS.to_owned())
    })
    .await;

    // Dropped from the spec: ours goes, theirs stays.
    sms(&env)
        .patch(
            "w6",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"nodeTaints": null}})),
        )
        .await
        .unwrap();
    wait_until("our taint removed", || async {
        node_taints(&env, "w6").await == [THEIRS.to_owned()]
    })
    .await;
    let annotations = nodes.get("w6").await.unwrap().metadata.annotations.unwrap_or_default();
    assert!(!annotations.contains_key("5spot.finos.org/owned-taints"));
    env.stop().await;
}

#[tokio::test]
async fn a_reserved_taint_key_is_refused_naming_it() {
    let env = Env::start().await;
    let _endpoint = cluster(&env, "v1beta1").await;
    let mut sm: serde_json::Value =
        serde_yaml::from_str(include_str!("../../examples/seed/05-scheduledmachine.yaml")).unwrap();
    sm["metadata"]["name"] = json!("w7");
    sm["spec"]["nodeTaints"] = json!([{"key": "node-role.kubernetes.io/infra", "effect": "NoSchedule"}]);
    let err = sms(&env)
        .create(&PostParams::default(), &serde_json::from_value(sm).unwrap())
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("key node-role.kubernetes.io/infra uses a reserved prefix"),
        "{err}"
    );
    env.stop().await;
}

#[tokio::test]
async fn an_exclusion_keeps_the_machine_off_for_the_day_and_lifting_it_starts_it() {
    let env = Env::start().await;
    let _endpoint = cluster(&env, "v1beta1").await;
    // Monday 12:00 in New York: inside the seed's window, but the day is excluded.
    env.clock.set(at(MIDDAY));
    scheduled_machine(
        &env,
        "w8",
        json!({"schedule": {"exclusions": [{"date": "2026-12-07"}]}}),
    )
    .await;
    wait_phase(&env, "w8", Phase::Inactive).await;
    let status = sms(&env).get("w8").await.unwrap().status.unwrap();
    assert_eq!(status.in_schedule, Some(false));
    assert_eq!(
        status.next_activation.unwrap().0.to_string(),
        "2026-12-08T14:00:00Z",
        "Tuesday 09:00 New York"
    );
    assert!(machines(&env, "v1beta1").get_opt("w8").await.unwrap().is_none());

    sms(&env)
        .patch(
            "w8",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"schedule": {"exclusions": null}}})),
        )
        .await
        .unwrap();
    wait_phase(&env, "w8", Phase::Active).await;
    env.stop().await;
}

#[tokio::test]
async fn override_annotations_force_the_window_and_expired_ones_are_removed() {
    let env = Env::start().await;
    let _endpoint = cluster(&env, "v1beta1").await;
    env.clock.set(at(MIDDAY));
    scheduled_machine(&env, "w9", json!({})).await;
    let force_off = json!({"metadata": {"annotations": {"5spot.finos.org/force-off-until": "2026-12-07T18:00:00Z"}}});
    sms(&env)
        .patch("w9", &PatchParams::default(), &Patch::Merge(force_off))
        .await
        .unwrap();
    wait_until("w9 forced off", || async {
        sms(&env).get("w9").await.unwrap().status.is_some_and(|s| {
            s.phase == Some(Phase::Inactive)
                && s.message
                    .as_deref()
                    .is_some_and(|m| m.contains("forced off by 5spot.finos.org/force-off-until"))
        })
    })
    .await;
    let status = sms(&env).get("w9").await.unwrap().status.unwrap();
    assert_eq!(status.next_activation.unwrap().0.to_string(), "2026-12-07T18:00:00Z");
    assert!(machines(&env, "v1beta1").get_opt("w9").await.unwrap().is_none());

    // The instant passes: the window decides again, and the annotation goes.
    env.clock.set(at("2026-12-07T18:00:01Z"));
    nudge(&env, "w9").await;
    wait_phase(&env, "w9", Phase::Active).await;
    wait_until("the expired override removed", || async {
        !sms(&env)
            .get("w9")
            .await
            .unwrap()
            .annotations()
            .contains_key("5spot.finos.org/force-off-until")
    })
    .await;

    // A value that is not an instant is reported, naming the annotation.
    let bad = json!({"metadata": {"annotations": {"5spot.finos.org/force-on-until": "tomorrow"}}});
    sms(&env)
        .patch("w9", &PatchParams::default(), &Patch::Merge(bad))
        .await
        .unwrap();
    wait_until("InvalidOverride reported", || async {
        sms(&env).get("w9").await.unwrap().status.is_some_and(|s| {
            s.conditions
                .iter()
                .any(|c| c.type_ == "ScheduleValid" && c.reason == "InvalidOverride")
        })
    })
    .await;
    env.stop().await;
}

/// A name of 63 characters (the longest label value: the name labels every object the
/// ScheduledMachine creates) runs a worker with that name as its node name; a longer one is
/// refused at creation, the field named.
#[tokio::test]
async fn a_name_at_the_label_limit_runs_and_a_longer_one_is_refused_naming_the_field() {
    let env = Env::start().await;
    let _endpoint = cluster(&env, "v1beta1").await;
    env.clock.set(at(MIDDAY));
    let longest = format!("w{}", "0123456789".repeat(7))[..63].to_owned();
    scheduled_machine(&env, &longest, json!({})).await;
    wait_phase(&env, &longest, Phase::Active).await;
    provision(&env, &longest).await;
    wait_running(&env, &longest).await;
    let status = sms(&env).get(&longest).await.unwrap().status.unwrap();
    assert_eq!(status.node_ref.unwrap().name, longest);

    let mut sm: serde_json::Value =
        serde_yaml::from_str(include_str!("../../examples/seed/05-scheduledmachine.yaml")).unwrap();
    sm["metadata"]["name"] = json!(format!("{longest}x"));
    let err = sms(&env)
        .create(&PostParams::default(), &serde_json::from_value(sm).unwrap())
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("metadata.name: at most 63 characters"),
        "{err}"
    );
    env.stop().await;
}

/// Labels are ASCII in Kubernetes: a Unicode label key or value in the template is refused once,
/// naming the entry, before anything is created; annotation values may be any UTF-8 and reach
/// the Machine unchanged.
#[tokio::test]
async fn unicode_labels_are_refused_naming_the_entry_and_unicode_annotations_pass() {
    let env = Env::start().await;
    let _endpoint = cluster(&env, "v1beta1").await;
    env.clock.set(at(MIDDAY));
    let template = json!({"machineTemplate": {
        "labels": {"équipe": "bleu"},
        "annotations": {"spot.example.com/note": "für das Team 🚀"},
    }});
    scheduled_machine(&env, "w12", template).await;
    wait_phase(&env, "w12", Phase::Error).await;
    let status = sms(&env).get("w12").await.unwrap().status.unwrap();
    let valid = condition::find(&status.conditions, "ScheduleValid").unwrap();
    assert_eq!(
        (valid.status.as_str(), valid.reason.as_str()),
        ("False", "InvalidLabel")
    );
    assert!(
        valid.message.starts_with(r#"spec.machineTemplate.labels["équipe"]"#),
        "{}",
        valid.message
    );
    assert!(
        machines(&env, "v1beta1").get_opt("w12").await.unwrap().is_none(),
        "nothing created"
    );
    let writes = status_writes(&env);
    tokio::time::sleep(std::time::Duration::from_millis(800)).await;
    assert_eq!(status_writes(&env), writes, "no hot loop");

    let fix = json!({"spec": {"machineTemplate": {"labels": {"équipe": null, "team": "bleu"}}}});
    sms(&env)
        .patch("w12", &PatchParams::default(), &Patch::Merge(fix))
        .await
        .unwrap();
    wait_phase(&env, "w12", Phase::Active).await;
    let machine = machines(&env, "v1beta1").get("w12").await.unwrap();
    assert_eq!(machine.labels().get("team").map(String::as_str), Some("bleu"));
    assert_eq!(
        machine.annotations().get("spot.example.com/note").map(String::as_str),
        Some("für das Team 🚀")
    );
    env.stop().await;
}

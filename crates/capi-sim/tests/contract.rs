//! Contract tests: the simulator against an in-process memkube server, with a tiny fake
//! infrastructure/bootstrap provider (`FakeCluster`, `FakeMachine`, `FakeConfig`) whose status
//! the test writes directly. Every wait has a deadline; nothing sleeps and hopes.

mod support;

use capi_sim::{CapiVersions, KubeletMode};
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::json;
use support::*;

#[tokio::test]
async fn seed_cluster_applies_unchanged() {
    for versions in [CapiVersions::V1beta1, CapiVersions::Both] {
        let env = Env::new(versions).await;
        let seed = r#"
apiVersion: cluster.x-k8s.io/v1beta1
kind: Cluster
metadata:
  name: spot
  namespace: default
spec:
  controlPlaneEndpoint:
    host: api.spot.labdroid.net
    port: 6443
  infrastructureRef:
    apiVersion: infrastructure.cluster.x-k8s.io/v1alpha1
    kind: LibvirtCluster
    name: spot
"#;
        let obj: DynamicObject = serde_yaml::from_str(seed).unwrap();
        let api: Api<DynamicObject> =
            Api::namespaced_with(env.client.clone(), NS, &ar("cluster.x-k8s.io", "v1beta1", "Cluster"));
        let created = api.create(&PostParams::default(), &obj).await.unwrap();
        assert_eq!(
            created.data["spec"]["controlPlaneEndpoint"]["host"],
            "api.spot.labdroid.net"
        );
        assert_eq!(created.data["spec"]["controlPlaneEndpoint"]["port"], 6443);
        assert_eq!(created.data["spec"]["infrastructureRef"]["kind"], "LibvirtCluster");
        assert_eq!(
            created.data["spec"]["infrastructureRef"]["apiVersion"],
            "infrastructure.cluster.x-k8s.io/v1alpha1"
        );
    }
    // v1beta2-only does not serve v1beta1.
    let env = Env::new(CapiVersions::V1beta2).await;
    let discovery = kube::discovery::group(&env.client, "cluster.x-k8s.io").await.unwrap();
    assert_eq!(discovery.versions().collect::<Vec<_>>(), vec!["v1beta2"]);
}

#[tokio::test]
async fn v1beta1_machine_lifecycle() {
    let mut env = Env::new(CapiVersions::V1beta1).await;
    env.install_fakes();
    env.start(|b| b);
    env.ready_cluster().await;
    let cluster = env.get(&env.capi("Cluster"), "spot").unwrap();
    assert_eq!(phase(&cluster), "Provisioned");
    assert_eq!(cluster["status"]["controlPlaneReady"], true);
    assert_eq!(
        cluster["spec"]["controlPlaneEndpoint"],
        json!({"host": "api.spot.example", "port": 6443}),
        "endpoint copied from the InfraCluster once it is ready"
    );
    let fc = env.get(&ar(INFRA, "v1alpha1", "FakeCluster"), "spot").unwrap();
    assert_eq!(controller_owner(&fc), Some(("Cluster".into(), uid(&cluster))));
    assert_eq!(fc["metadata"]["labels"]["cluster.x-k8s.io/cluster-name"], "spot");

    env.machine("w0", json!({}), json!({}), false).await;
    let machine_ar = env.capi("Machine");
    let m = env
        .wait("finalizer, label and adoption", &machine_ar, "w0", |m| {
            m.pointer("/metadata/finalizers")
                .is_some_and(|f| f.as_array().unwrap().contains(&json!("machine.cluster.x-k8s.io")))
                && m["metadata"]["labels"]["cluster.x-k8s.io/cluster-name"] == "spot"
                && m.pointer("/metadata/ownerReferences/0/kind") == Some(&json!("Cluster"))
                && phase(m) == "Pending"
        })
        .await;
    assert_ne!(
        m["metadata"]["ownerReferences"][0]["controller"],
        json!(true),
        "adoption is not a controller ref"
    );
    let config_ar = ar(BOOT, "v1alpha1", "FakeConfig");
    let fm_ar = ar(INFRA, "v1alpha1", "FakeMachine");
    for (kar, name) in [(&config_ar, "w0"), (&fm_ar, "w0")] {
        let o = env
            .wait("provider object owned by Machine", kar, name, |o| {
                controller_owner(o).is_some()
            })
            .await;
        assert_eq!(controller_owner(&o), Some(("Machine".into(), uid(&m))));
        assert_eq!(o["metadata"]["labels"]["cluster.x-k8s.io/cluster-name"], "spot");
    }

    // Ready without a dataSecretName is an error, not a copy.
    env.patch_status(&config_ar, "w0", json!({"ready": true})).await;
    env.wait("missing dataSecretName reported", &machine_ar, "w0", |m| {
        reason(m, "BootstrapReady") == "DataSecretNameMissingFailed"
    })
    .await;
    env.patch_status(&config_ar, "w0", json!({"dataSecretName": "w0-data"}))
        .await;
    env.wait("dataSecretName copied, Provisioning", &machine_ar, "w0", |m| {
        m.pointer("/spec/bootstrap/dataSecretName") == Some(&json!("w0-data"))
            && phase(m) == "Provisioning"
            && m["status"]["bootstrapReady"] == true
    })
    .await;
    // Copied once: a later change on the config is not followed.
    env.patch_status(&config_ar, "w0", json!({"dataSecretName": "changed"}))
        .await;

    // Infra ready without providerID is an error.
    env.patch(&fm_ar, "w0", json!({"spec": {"providerID": null}})).await;
    env.patch_status(&fm_ar, "w0", json!({"ready": true, "addresses": addresses("w0")}))
        .await;
    env.wait("missing providerID reported", &machine_ar, "w0", |m| {
        reason(m, "InfrastructureReady") == "ProviderIDMissingFailed" && phase(m) == "Provisioning"
    })
    .await;
    env.patch(&fm_ar, "w0", json!({"spec": {"providerID": "fake:///w0"}}))
        .await;
    let m = env
        .wait("providerID and addresses copied, Provisioned", &machine_ar, "w0", |m| {
            m.pointer("/spec/providerID") == Some(&json!("fake:///w0"))
                && m.pointer("/status/addresses") == Some(&addresses("w0"))
                && m["status"]["infrastructureReady"] == true
                && phase(m) == "Provisioned"
        })
        .await;
    assert_eq!(m["spec"]["bootstrap"]["dataSecretName"], "w0-data");

    // Only the Node with exactly the same providerID is linked.
    env.node("decoy", "fake:///w0-other");
    env.node("w0.example", "fake:///w0");
    let m = env
        .wait("nodeRef set, Running", &machine_ar, "w0", |m| phase(m) == "Running")
        .await;
    let node = env.get_node("w0.example").unwrap();
    assert_eq!(
        m["status"]["nodeRef"],
        json!({"apiVersion": "v1", "kind": "Node", "name": "w0.example", "uid": uid(&node)})
    );
    let node = env
        .wait_node("labels synced", "w0.example", |n| {
            n.pointer("/metadata/labels/node-role.kubernetes.io~1worker").is_some()
        })
        .await;
    assert!(
        node.pointer("/metadata/labels/app").is_none(),
        "only managed labels are synced"
    );
    assert!(
        env.get_node("decoy")
            .unwrap()
            .pointer("/metadata/labels/node-role.kubernetes.io~1worker")
            .is_none()
    );
    assert_eq!(reason(&m, "NodeHealthy"), "NodeReady");
    assert!(m.pointer("/status/nodeInfo").is_none(), "test Node has no nodeInfo");
    let sim = env.sim.take().unwrap();
    tokio::time::timeout(WAIT, sim.stop()).await.unwrap().unwrap();
}

#[tokio::test]
async fn sync_all_labels_like_openshift() {
    let mut env = Env::new(CapiVersions::V1beta1).await;
    env.install_fakes();
    env.start(|b| b.sync_all_labels(true));
    env.ready_cluster().await;
    env.machine("w1", json!({}), json!({}), false).await;
    env.provider_ready("w1").await;
    env.node("w1.example", "fake:///w1");
    env.wait("Running", &env.capi("Machine"), "w1", |m| phase(m) == "Running")
        .await;
    env.wait_node("all labels synced", "w1.example", |n| {
        n.pointer("/metadata/labels/app") == Some(&json!("x"))
    })
    .await;
}

#[tokio::test]
async fn ownership_conflict_is_reported() {
    let mut env = Env::new(CapiVersions::V1beta1).await;
    env.install_fakes();
    env.start(|b| b);
    env.ready_cluster().await;
    let thief = owner_uid(&env.server);
    env.create(
        &ar(INFRA, "v1alpha1", "FakeMachine"),
        json!({
            "apiVersion": format!("{INFRA}/v1alpha1"), "kind": "FakeMachine",
            "metadata": {"name": "taken", "namespace": NS, "ownerReferences": [{
                "apiVersion": "example.com/v1", "kind": "Thief", "name": "t", "uid": thief, "controller": true}]},
            "spec": {"providerID": "fake:///taken"}
        }),
    )
    .await;
    env.create(
        &env.capi("Machine"),
        json!({
            "apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Machine",
            "metadata": {"name": "taken", "namespace": NS},
            "spec": {"clusterName": "spot", "bootstrap": {"dataSecretName": "s"},
                     "infrastructureRef": env.infra_ref("FakeMachine", "taken")}
        }),
    )
    .await;
    let m = env
        .wait("ownership failure", &env.capi("Machine"), "taken", |m| {
            reason(m, "InfrastructureReady") == "OwnershipFailed"
        })
        .await;
    assert!(
        condition(&m, "InfrastructureReady").unwrap()["message"]
            .as_str()
            .unwrap()
            .contains("Thief")
    );
}

#[tokio::test]
async fn kinds_installed_late_are_picked_up() {
    let mut env = Env::new(CapiVersions::V1beta1).await;
    env.start(|b| b.nodes_need_cluster_infra(false));
    env.create(
        &env.capi("Machine"),
        json!({
            "apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Machine",
            "metadata": {"name": "late", "namespace": NS},
            "spec": {"clusterName": "spot", "bootstrap": {"dataSecretName": "s"},
                     "infrastructureRef": env.infra_ref("FakeMachine", "late")}
        }),
    )
    .await;
    env.create(
        &env.capi("Cluster"),
        json!({
            "apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Cluster",
            "metadata": {"name": "spot", "namespace": NS}, "spec": {}
        }),
    )
    .await;
    env.wait(
        "finalizer added despite unknown kind",
        &env.capi("Machine"),
        "late",
        |m| m.pointer("/metadata/finalizers/0").is_some(),
    )
    .await;
    env.install_fakes();
    env.create(
        &ar(INFRA, "v1alpha1", "FakeMachine"),
        json!({
            "apiVersion": format!("{INFRA}/v1alpha1"), "kind": "FakeMachine",
            "metadata": {"name": "late", "namespace": NS}, "spec": {"providerID": "fake:///late"}
        }),
    )
    .await;
    env.wait(
        "owner set once the kind exists",
        &ar(INFRA, "v1alpha1", "FakeMachine"),
        "late",
        |o| controller_owner(o).is_some(),
    )
    .await;
}

#[tokio::test]
async fn missing_contract_label_is_an_error() {
    let mut env = Env::new(CapiVersions::V1beta1).await;
    let mut crd = fake_crd(INFRA, "FakeMachine", false);
    crd["metadata"]["labels"] = json!({});
    env.server.install_crds(&[crd]).unwrap();
    env.start(|b| b);
    env.create(
        &ar(INFRA, "v1alpha1", "FakeMachine"),
        json!({
            "apiVersion": format!("{INFRA}/v1alpha1"), "kind": "FakeMachine",
            "metadata": {"name": "nolabel", "namespace": NS}, "spec": {}
        }),
    )
    .await;
    env.create(
        &env.capi("Cluster"),
        json!({
            "apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Cluster",
            "metadata": {"name": "spot", "namespace": NS}, "spec": {}
        }),
    )
    .await;
    env.create(
        &env.capi("Machine"),
        json!({
            "apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Machine",
            "metadata": {"name": "nolabel", "namespace": NS},
            "spec": {"clusterName": "spot", "bootstrap": {"dataSecretName": "s"},
                     "infrastructureRef": env.infra_ref("FakeMachine", "nolabel")}
        }),
    )
    .await;
    env.wait("finalizer", &env.capi("Machine"), "nolabel", |m| {
        m.pointer("/metadata/finalizers/0").is_some()
    })
    .await;
    // Core never touches an object whose CRD lacks the contract label; neither do we. Prove the
    // sim kept retrying by fixing the label and seeing ownership arrive.
    let fm = env.get(&ar(INFRA, "v1alpha1", "FakeMachine"), "nolabel").unwrap();
    assert!(controller_owner(&fm).is_none());
    env.server
        .install_crds(&[fake_crd(INFRA, "FakeMachine", true)])
        .unwrap();
    env.wait(
        "owned after label fix",
        &ar(INFRA, "v1alpha1", "FakeMachine"),
        "nolabel",
        |o| controller_owner(o).is_some(),
    )
    .await;
}

#[tokio::test]
async fn deletion_follows_core_order() {
    let mut env = Env::new(CapiVersions::V1beta1).await;
    env.install_fakes();
    env.start(|b| b);
    env.ready_cluster().await;
    let hooks = json!({
        "pre-drain.delete.hook.machine.cluster.x-k8s.io/test": "tester",
        "pre-terminate.delete.hook.machine.cluster.x-k8s.io/test": "tester",
    });
    env.machine("w2", json!({"nodeDrainTimeout": "2s"}), hooks, true).await;
    env.provider_ready("w2").await;
    env.node("w2.example", "fake:///w2");
    let machine_ar = env.capi("Machine");
    env.wait("Running", &machine_ar, "w2", |m| phase(m) == "Running").await;

    let srv = &env.server;
    let owner = owner_uid(srv);
    let (rs, ds) = (
        Some(("ReplicaSet", owner.as_str())),
        Some(("DaemonSet", owner.as_str())),
    );
    srv.put_object(pod("web", "w2.example", json!({"app": "web"}), json!({}), rs))
        .unwrap();
    srv.put_object(pod("ds", "w2.example", json!({}), json!({}), ds))
        .unwrap();
    srv.put_object(pod(
        "mirror",
        "w2.example",
        json!({}),
        json!({"kubernetes.io/config.mirror": "x"}),
        None,
    ))
    .unwrap();
    srv.put_object(pod(
        "skip",
        "w2.example",
        json!({"cluster.x-k8s.io/drain": "skip"}),
        json!({}),
        None,
    ))
    .unwrap();
    srv.put_object(pod("guarded", "w2.example", json!({"app": "guarded"}), json!({}), rs))
        .unwrap();
    srv.put_object(pod("elsewhere", "other-node", json!({}), json!({}), None))
        .unwrap();
    srv.put_object(json!({
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": "guard", "namespace": NS},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "guarded"}}}
    }))
    .unwrap();

    env.api(&machine_ar).delete("w2", &Default::default()).await.unwrap();
    env.wait("pre-drain hook blocks", &machine_ar, "w2", |m| {
        phase(m) == "Deleting" && reason(m, "Deleting") == "WaitingForPreDrainHook"
    })
    .await;
    assert_ne!(
        env.get_node("w2.example").unwrap()["spec"]["unschedulable"],
        json!(true),
        "no cordon before the hook is gone"
    );
    let get_pod = |n: &str| env.server.get_object("v1", "Pod", NS, n);
    assert!(get_pod("web").is_some());

    env.patch(
        &machine_ar,
        "w2",
        json!({"metadata": {"annotations": {
        "pre-drain.delete.hook.machine.cluster.x-k8s.io/test": null}}}),
    )
    .await;
    let m = env
        .wait("draining, blocked by the PDB", &machine_ar, "w2", |m| {
            reason(m, "Deleting") == "DrainingNode"
                && condition(m, "Deleting")
                    .is_some_and(|c| c["message"].as_str().unwrap_or("").contains("default/guarded"))
        })
        .await;
    assert!(m.pointer("/status/deletion/nodeDrainStartTime").is_some());
    assert_eq!(
        env.get_node("w2.example").unwrap()["spec"]["unschedulable"],
        true,
        "cordoned"
    );
    assert!(get_pod("web").is_none(), "evicted");
    for kept in ["ds", "mirror", "skip", "guarded", "elsewhere"] {
        assert!(get_pod(kept).is_some(), "{kept} must stay");
    }
    // Retried until the drain timeout expires, then the pre-terminate hook blocks.
    let m = env
        .wait(
            "drain timeout expired, pre-terminate hook blocks",
            &machine_ar,
            "w2",
            |m| reason(m, "Deleting") == "WaitingForPreTerminateHook",
        )
        .await;
    let evictions = env.server.request_count("create", "pods", "eviction");
    assert!(
        evictions >= 3,
        "PDB-refused eviction retried ({evictions} eviction calls)"
    );
    assert!(get_pod("guarded").is_some());
    let fm_ar = ar(INFRA, "v1alpha1", "FakeMachine");
    let cfg_ar = ar(BOOT, "v1alpha1", "FakeConfig");
    assert!(
        !deleting(&env.get(&fm_ar, "w2").unwrap()),
        "infra not deleted before pre-terminate hooks"
    );
    assert!(m.pointer("/metadata/finalizers/0").is_some());

    env.patch(
        &machine_ar,
        "w2",
        json!({"metadata": {"annotations": {
        "pre-terminate.delete.hook.machine.cluster.x-k8s.io/test": null}}}),
    )
    .await;
    env.wait("waiting for infra deletion", &machine_ar, "w2", |m| {
        reason(m, "Deleting") == "WaitingForInfrastructureDeletion"
    })
    .await;
    assert!(deleting(&env.get(&fm_ar, "w2").unwrap()));
    assert!(
        !deleting(&env.get(&cfg_ar, "w2").unwrap()),
        "bootstrap is deleted after infra is gone"
    );

    env.patch(&fm_ar, "w2", json!({"metadata": {"finalizers": null}})).await;
    env.wait("waiting for bootstrap deletion", &machine_ar, "w2", |m| {
        reason(m, "Deleting") == "WaitingForBootstrapDeletion"
    })
    .await;
    assert!(env.get(&fm_ar, "w2").is_none());
    assert!(deleting(&env.get(&cfg_ar, "w2").unwrap()));
    assert!(
        env.get_node("w2.example").is_some(),
        "Node deleted after infra and bootstrap"
    );

    env.patch(&cfg_ar, "w2", json!({"metadata": {"finalizers": null}}))
        .await;
    env.wait("Machine gone", &machine_ar, "w2", |m| m.is_null()).await;
    assert!(
        env.get_node("w2.example").is_none(),
        "Node deleted before the finalizer was removed"
    );
    assert!(env.get(&cfg_ar, "w2").is_none());
}

#[tokio::test]
async fn excluded_node_is_not_drained() {
    let mut env = Env::new(CapiVersions::V1beta1).await;
    env.install_fakes();
    env.start(|b| b);
    env.ready_cluster().await;
    env.machine(
        "w3",
        json!({}),
        json!({"machine.cluster.x-k8s.io/exclude-node-draining": ""}),
        false,
    )
    .await;
    env.provider_ready("w3").await;
    env.node("w3.example", "fake:///w3");
    let machine_ar = env.capi("Machine");
    env.wait("Running", &machine_ar, "w3", |m| phase(m) == "Running").await;
    env.server
        .put_object(pod("stays", "w3.example", json!({}), json!({}), None))
        .unwrap();
    env.api(&machine_ar).delete("w3", &Default::default()).await.unwrap();
    env.wait("Machine gone", &machine_ar, "w3", |m| m.is_null()).await;
    assert!(env.server.get_object("v1", "Pod", NS, "stays").is_some());
    assert!(env.get_node("w3.example").is_none());
}

#[tokio::test]
async fn v1beta2_only() {
    let mut env = Env::new(CapiVersions::V1beta2).await;
    env.install_fakes();
    env.start(|b| b);
    env.ready_cluster().await;
    let cluster = env.get(&env.capi("Cluster"), "spot").unwrap();
    assert_eq!(cluster["status"]["initialization"]["controlPlaneInitialized"], true);
    assert_eq!(phase(&cluster), "Provisioned");
    assert!(cluster["status"].get("infrastructureReady").is_none());

    env.machine(
        "w4",
        json!({"deletion": {"nodeDrainTimeoutSeconds": 1}}),
        json!({}),
        false,
    )
    .await;
    let machine_ar = env.capi("Machine");
    // v1beta1-style readiness on the provider is ignored under the v1beta2 contract.
    env.patch_status(
        &ar(BOOT, "v1alpha1", "FakeConfig"),
        "w4",
        json!({"ready": true, "dataSecretName": "w4-data"}),
    )
    .await;
    env.patch_status(&ar(INFRA, "v1alpha1", "FakeMachine"), "w4", json!({"ready": true}))
        .await;
    env.wait("v1beta1 fields ignored", &machine_ar, "w4", |m| {
        reason(m, "BootstrapConfigReady") == "WaitingForDataSecret"
            && reason(m, "InfrastructureReady") == "WaitingForInfrastructure"
    })
    .await;
    env.provider_ready("w4").await;
    env.node("w4.example", "fake:///w4");
    let m = env.wait("Running", &machine_ar, "w4", |m| phase(m) == "Running").await;
    assert_eq!(m["status"]["nodeRef"], json!({"name": "w4.example"}));
    assert_eq!(
        m["status"]["initialization"],
        json!({"bootstrapDataSecretCreated": true, "infrastructureProvisioned": true})
    );
    assert_eq!(m["spec"]["bootstrap"]["dataSecretName"], "w4-data");
    assert_eq!(m["spec"]["providerID"], "fake:///w4");
    assert!(m["status"].get("bootstrapReady").is_none());

    env.server
        .put_object(pod("web", "w4.example", json!({"app": "guarded"}), json!({}), None))
        .unwrap();
    env.server
        .put_object(json!({
            "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": "guard", "namespace": NS},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "guarded"}}}
        }))
        .unwrap();
    env.api(&machine_ar).delete("w4", &Default::default()).await.unwrap();
    env.wait("Machine gone after the drain timeout", &machine_ar, "w4", |m| {
        m.is_null()
    })
    .await;
    assert!(env.get_node("w4.example").is_none());
}

#[tokio::test]
async fn emulated_kubelet_registers_node_and_files_csrs() {
    use rcgen::{CertificateSigningRequestParams, DnType, DnValue, SanType};
    let mut env = Env::new(CapiVersions::V1beta1).await;
    env.install_fakes();
    env.start(|b| b.kubelet(KubeletMode::WithProviderId));
    env.ready_cluster().await;
    env.machine("w5", json!({"version": "v1.31.4"}), json!({}), false).await;
    env.provider_ready("w5").await;
    let machine_ar = env.capi("Machine");
    let node = env
        .wait_node("kubelet registered the Node", "w5.example", |n| {
            n.pointer("/status/conditions/0/status") == Some(&json!("True"))
        })
        .await;
    assert_eq!(node["spec"]["providerID"], "fake:///w5");
    assert_eq!(node["metadata"]["labels"]["kubernetes.io/hostname"], "w5.example");
    assert_eq!(node["status"]["nodeInfo"]["kubeletVersion"], "v1.31.4");
    env.wait("Running via the kubelet's Node", &machine_ar, "w5", |m| {
        phase(m) == "Running"
    })
    .await;

    let csrs: Api<CertificateSigningRequest> = Api::all(env.client.clone());
    let list = csrs.list(&Default::default()).await.unwrap().items;
    assert_eq!(list.len(), 1, "only the client CSR before approval");
    let client_csr = &list[0];
    let spec = &client_csr.spec;
    assert_eq!(spec.signer_name, "kubernetes.io/kube-apiserver-client-kubelet");
    assert_eq!(
        spec.username.as_deref(),
        Some("system:serviceaccount:openshift-machine-config-operator:node-bootstrapper")
    );
    assert_eq!(spec.usages.clone().unwrap(), vec!["digital signature", "client auth"]);
    let pem = String::from_utf8(spec.request.0.clone()).unwrap();
    let parsed = CertificateSigningRequestParams::from_pem(&pem).unwrap();
    let text = |v: Option<&DnValue>| match v {
        Some(DnValue::Utf8String(s)) => s.clone(),
        Some(DnValue::PrintableString(s)) => s.as_str().to_string(),
        other => panic!("{other:?}"),
    };
    assert_eq!(
        text(parsed.params.distinguished_name.get(&DnType::CommonName)),
        "system:node:w5.example"
    );
    assert_eq!(
        text(parsed.params.distinguished_name.get(&DnType::OrganizationName)),
        "system:nodes"
    );

    // Approve the client CSR: a certificate is issued and the serving CSR follows.
    let name = client_csr.metadata.name.clone().unwrap();
    csrs.patch_approval(
        &name,
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"conditions": [{
            "type": "Approved", "status": "True", "reason": "Test", "message": "approved by test"}]}})),
    )
    .await
    .unwrap();
    let ok = env
        .server
        .wait_for(WAIT, |s| {
            let all = s.list_objects("certificates.k8s.io/v1", "CertificateSigningRequest", None);
            let issued = all
                .iter()
                .any(|c| c["metadata"]["name"] == json!(name) && c.pointer("/status/certificate").is_some());
            let serving = all
                .iter()
                .any(|c| c["spec"]["signerName"] == "kubernetes.io/kubelet-serving");
            issued && serving
        })
        .await;
    assert!(ok, "certificate issued and serving CSR filed");
    let serving = csrs
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .find(|c| c.spec.signer_name == "kubernetes.io/kubelet-serving")
        .unwrap();
    assert_eq!(serving.spec.username.as_deref(), Some("system:node:w5.example"));
    assert_eq!(serving.spec.groups.clone().unwrap()[0], "system:nodes");
    assert_eq!(
        serving.spec.usages.clone().unwrap(),
        vec!["digital signature", "server auth"]
    );
    let parsed =
        CertificateSigningRequestParams::from_pem(&String::from_utf8(serving.spec.request.0).unwrap()).unwrap();
    let sans = parsed.params.subject_alt_names;
    assert!(sans.contains(&SanType::DnsName("w5.example".try_into().unwrap())));
    assert!(sans.contains(&SanType::DnsName("w5".try_into().unwrap())));
    assert!(sans.contains(&SanType::IpAddress("10.0.0.5".parse().unwrap())));

    // The machine disappears from under the kubelet: the Node goes Unknown but stays.
    env.api(&ar(INFRA, "v1alpha1", "FakeMachine"))
        .delete("w5", &Default::default())
        .await
        .unwrap();
    env.wait_node("Node Ready=Unknown", "w5.example", |n| {
        n.pointer("/status/conditions/0/status") == Some(&json!("Unknown"))
    })
    .await;
}

#[tokio::test]
async fn kubelet_without_provider_id() {
    let mut env = Env::new(CapiVersions::V1beta1).await;
    env.install_fakes();
    env.start(|b| b.kubelet(KubeletMode::WithoutProviderId));
    env.ready_cluster().await;
    env.machine("w6", json!({}), json!({}), false).await;
    env.provider_ready("w6").await;
    let node = env.wait_node("registered", "w6.example", |n| !n.is_null()).await;
    assert!(node.pointer("/spec/providerID").is_none());
    let m = env.get(&env.capi("Machine"), "w6").unwrap();
    assert_ne!(phase(&m), "Running");
    // A provider patching the providerID in makes the link.
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(env.client.clone());
    nodes
        .patch(
            "w6.example",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"providerID": "fake:///w6"}})),
        )
        .await
        .unwrap();
    env.wait("Running", &env.capi("Machine"), "w6", |m| phase(m) == "Running")
        .await;
}

#[tokio::test]
async fn kubelet_waits_for_client_csr_approval_when_asked() {
    let mut env = Env::new(CapiVersions::V1beta1).await;
    env.install_fakes();
    env.start(|b| {
        b.kubelet(KubeletMode::WithProviderId)
            .kubelet_waits_for_client_csr(true)
    });
    env.ready_cluster().await;
    env.machine("w7", json!({}), json!({}), false).await;
    env.provider_ready("w7").await;
    let ok = env
        .server
        .wait_for(WAIT, |s| {
            !s.list_objects("certificates.k8s.io/v1", "CertificateSigningRequest", None)
                .is_empty()
        })
        .await;
    assert!(ok, "client CSR filed");
    assert!(
        env.get_node("w7.example").is_none(),
        "no Node before the client CSR is approved"
    );
    let csrs: Api<CertificateSigningRequest> = Api::all(env.client.clone());
    let name = csrs.list(&Default::default()).await.unwrap().items[0]
        .metadata
        .name
        .clone()
        .unwrap();
    csrs.patch_approval(
        &name,
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"conditions": [{
            "type": "Approved", "status": "True", "reason": "Test", "message": "ok"}]}})),
    )
    .await
    .unwrap();
    env.wait_node("registered after approval", "w7.example", |n| !n.is_null())
        .await;
    env.wait("Running", &env.capi("Machine"), "w7", |m| phase(m) == "Running")
        .await;
}

#[tokio::test]
async fn both_served_speaks_v1beta2() {
    let mut env = Env::new(CapiVersions::Both).await;
    let discovery = kube::discovery::group(&env.client, "cluster.x-k8s.io").await.unwrap();
    let mut versions: Vec<&str> = discovery.versions().collect();
    versions.sort();
    assert_eq!(versions, vec!["v1beta1", "v1beta2"]);
    assert_eq!(discovery.preferred_version(), Some("v1beta2"));
    env.install_fakes();
    env.start(|b| b.kubelet(KubeletMode::WithProviderId));
    env.ready_cluster().await;
    env.machine("w8", json!({}), json!({}), false).await;
    env.provider_ready("w8").await;
    let m = env
        .wait("Running", &env.capi("Machine"), "w8", |m| phase(m) == "Running")
        .await;
    assert_eq!(m["status"]["nodeRef"], json!({"name": "w8.example"}));
    assert_eq!(
        m["status"]["nodeInfo"]["kubeletVersion"], "v1.32.0",
        "nodeInfo mirrored from the Node"
    );
}

#[tokio::test]
async fn paused_cluster_stops_machine_reconciles() {
    let mut env = Env::new(CapiVersions::V1beta1).await;
    env.install_fakes();
    env.start(|b| b);
    env.ready_cluster().await;
    env.patch(&env.capi("Cluster"), "spot", json!({"spec": {"paused": true}}))
        .await;
    env.machine("w9", json!({}), json!({}), false).await;
    // A sibling Machine with a missing Cluster proves the sim processed events after w9's.
    env.create(
        &env.capi("Machine"),
        json!({
            "apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Machine",
            "metadata": {"name": "marker", "namespace": NS},
            "spec": {"clusterName": "nowhere", "bootstrap": {"dataSecretName": "s"},
                     "infrastructureRef": env.infra_ref("FakeMachine", "marker")}
        }),
    )
    .await;
    env.wait("marker labelled", &env.capi("Machine"), "marker", |m| {
        m["metadata"]["labels"]["cluster.x-k8s.io/cluster-name"] == "nowhere"
            && reason(m, "InfrastructureReady") == "WaitingForCluster"
    })
    .await;
    let marker = env.get(&env.capi("Machine"), "marker").unwrap();
    assert!(
        marker.pointer("/metadata/finalizers/0").is_none(),
        "no finalizer without a Cluster"
    );
    let w9 = env.get(&env.capi("Machine"), "w9").unwrap();
    assert!(w9.pointer("/metadata/finalizers/0").is_none(), "paused: untouched");
    env.patch(&env.capi("Cluster"), "spot", json!({"spec": {"paused": false}}))
        .await;
    env.wait("reconciled after unpause", &env.capi("Machine"), "w9", |m| {
        m.pointer("/metadata/finalizers/0").is_some()
    })
    .await;
}

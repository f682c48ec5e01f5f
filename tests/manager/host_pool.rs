//! Host pools on memkube + capi-sim + test-driver hosts: a `hostSelector` machine goes to the
//! least allocated matching host, honours its Machine's failure domain, keeps the host it was
//! given, and waits naming every host of the pool when none has room; overcommit lets a small
//! host take more than it has.

use caplv::api::LibvirtMachine;
use kube::api::{DeleteParams, Patch, PatchParams};
use serde_json::json;

use crate::{
    libvirt_machine::{capi_machines, fixture, hosts, lvms, machine, wait_gone, wait_reason},
    support::{Env, apply_yaml, wait_until},
};

/// A machine of `vcpus` from the pool `pool=lab`, whose Machine names `failure_domain`.
async fn pool_machine(env: &Env, name: &str, vcpus: i32, failure_domain: Option<&str>) {
    let edits = json!({"spec": {"hostRef": null, "hostSelector": {"matchLabels": {"pool": "lab"}},
                               "domain": {"vcpus": vcpus, "memoryMB": 1024}}});
    machine(env, name, "unused", edits, Some("boot")).await;
    if let Some(fd) = failure_domain {
        capi_machines(&env.client)
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"failureDomain": fd}})),
            )
            .await
            .unwrap();
    }
}

async fn host_of(env: &Env, name: &str) -> Option<String> {
    let m: LibvirtMachine = lvms(&env.client).get(name).await.unwrap();
    m.status?.host_ref.map(|r| r.name)
}

/// Label `a` and `b` into the pool (racks 1 and 2) and leave `c` out of it.
async fn label_hosts(env: &Env) {
    for (name, labels, fd) in [
        ("a", json!({"pool": "lab"}), "rack-1"),
        ("b", json!({"pool": "lab"}), "rack-2"),
        ("c", json!({"pool": "desk"}), "rack-1"),
    ] {
        let patch = json!({"metadata": {"labels": labels}, "spec": {"failureDomain": fd}});
        hosts(&env.client)
            .patch(name, &PatchParams::default(), &Patch::Merge(patch))
            .await
            .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pool_machines_spread_keep_their_host_and_honour_the_failure_domain() {
    // 16 vCPUs each, none reserved.
    let f = fixture(&["a", "b", "c"], 0).await;
    let env = &f.env;
    label_hosts(env).await;

    pool_machine(env, "one", 8, None).await;
    wait_reason(env, "one", "DomainRunning").await;
    let first = host_of(env, "one").await.unwrap();
    assert!(first == "a" || first == "b", "in the pool: {first}");
    // The next goes to the other host of the pool, the less allocated one.
    pool_machine(env, "two", 8, None).await;
    wait_reason(env, "two", "DomainRunning").await;
    let second = host_of(env, "two").await.unwrap();
    assert_ne!(second, first, "spread");
    assert_ne!(second, "c", "not in the pool");

    // A Machine in rack-2 goes to b whatever the spread says.
    pool_machine(env, "racked", 4, Some("rack-2")).await;
    wait_reason(env, "racked", "DomainRunning").await;
    assert_eq!(host_of(env, "racked").await.as_deref(), Some("b"));

    // Relabelling the host does not move a machine that has one.
    hosts(&env.client)
        .patch(
            &first,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"pool": "gone"}}})),
        )
        .await
        .unwrap();
    let nudge = json!({"metadata": {"annotations": {"test/nudge": "1"}}});
    lvms(&env.client)
        .patch("one", &PatchParams::default(), &Patch::Merge(nudge))
        .await
        .unwrap();
    wait_until("one still Ready on its host", || async {
        host_of(env, "one").await.as_deref() == Some(first.as_str())
    })
    .await;
    f.env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_pool_names_every_host_and_overcommit_makes_room() {
    let f = fixture(&["a", "b", "c"], 0).await;
    let env = &f.env;
    label_hosts(env).await;
    pool_machine(env, "huge", 20, None).await;
    let waiting = wait_reason(env, "huge", "WaitingForCapacity").await;
    for host in ["a: needs 20 vCPUs", "b: needs 20 vCPUs", "overcommit cpuRatio 1"] {
        assert!(waiting.message.contains(host), "{}", waiting.message);
    }
    assert!(
        !waiting.message.contains("c:"),
        "c is not in the pool: {}",
        waiting.message
    );
    assert_eq!(host_of(env, "huge").await, None, "no host until admitted");

    // Twice the vCPUs on b: 32 offered, so the machine fits there.
    hosts(&env.client)
        .patch(
            "b",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"overcommit": {"cpuRatio": 2}}})),
        )
        .await
        .unwrap();
    wait_reason(env, "huge", "DomainRunning").await;
    assert_eq!(host_of(env, "huge").await.as_deref(), Some("b"));
    wait_until("b shows the overcommitted capacity", || async {
        hosts(&env.client)
            .get("b")
            .await
            .unwrap()
            .status
            .and_then(|s| s.capacity)
            .is_some_and(|c| c.allocatable_vcpus == 32 && c.available_vcpus == 12)
    })
    .await;

    capi_machines(&env.client)
        .delete("huge", &DeleteParams::default())
        .await
        .unwrap();
    wait_gone(env, "huge").await;
    f.env.stop().await;
}

/// The LibvirtCluster publishes its namespace's failure domains in the contract's shape, and
/// Cluster API core copies them to the Cluster; a host changing its domain updates both.
async fn failure_domains_reach_the_cluster(versions: capi_sim::CapiVersions) {
    let env = Env::start_with(versions).await;
    let capi = match versions {
        capi_sim::CapiVersions::V1beta2 => caplv::api::capi::CapiVersion::V1beta2,
        _ => caplv::api::capi::CapiVersion::V1beta1,
    };
    let infra_ref = match capi {
        caplv::api::capi::CapiVersion::V1beta1 => {
            "{apiVersion: infrastructure.cluster.x-k8s.io/v1alpha1, kind: LibvirtCluster, name: fd}"
        }
        caplv::api::capi::CapiVersion::V1beta2 => {
            "{apiGroup: infrastructure.cluster.x-k8s.io, kind: LibvirtCluster, name: fd}"
        }
    };
    let version = if capi == caplv::api::capi::CapiVersion::V1beta2 {
        "v1beta2"
    } else {
        "v1beta1"
    };
    apply_yaml(&env.client, &format!("apiVersion: cluster.x-k8s.io/{version}\nkind: Cluster\nmetadata: {{name: fd, namespace: default}}\nspec:\n  infrastructureRef: {infra_ref}\n")).await;
    apply_yaml(&env.client, "apiVersion: infrastructure.cluster.x-k8s.io/v1alpha1\nkind: LibvirtCluster\nmetadata: {name: fd, namespace: default}\nspec: {}\n").await;
    for (host, fd) in [("rack-a", "rack-1"), ("rack-b", "rack-2")] {
        apply_yaml(&env.client, &format!("apiVersion: infrastructure.cluster.x-k8s.io/v1alpha1\nkind: LibvirtHost\nmetadata: {{name: {host}, namespace: default}}\nspec: {{uri: \"test:///default\", failureDomain: {fd}}}\n")).await;
    }
    let names = |domains: &serde_json::Value| -> Vec<String> {
        match domains {
            serde_json::Value::Object(map) => map.keys().cloned().collect(),
            serde_json::Value::Array(list) => list
                .iter()
                .filter_map(|d| d["name"].as_str().map(str::to_owned))
                .collect(),
            _ => Vec::new(),
        }
    };
    let clusters: kube::Api<kube::api::DynamicObject> =
        kube::Api::namespaced_with(env.client.clone(), "default", &capi.cluster());
    let shaped = |d: &serde_json::Value| match capi {
        caplv::api::capi::CapiVersion::V1beta1 => d.is_object(),
        caplv::api::capi::CapiVersion::V1beta2 => d.is_array(),
    };
    wait_until("the Cluster's failure domains", || async {
        let d = clusters.get("fd").await.unwrap().data["status"]["failureDomains"].clone();
        shaped(&d) && names(&d) == ["rack-1", "rack-2"]
    })
    .await;
    hosts(&env.client)
        .patch(
            "rack-b",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"failureDomain": "rack-3"}})),
        )
        .await
        .unwrap();
    wait_until("rack-3 instead of rack-2", || async {
        names(&clusters.get("fd").await.unwrap().data["status"]["failureDomains"]) == ["rack-1", "rack-3"]
    })
    .await;
    env.stop().await;
}

#[tokio::test]
async fn failure_domains_reach_a_v1beta1_cluster() {
    failure_domains_reach_the_cluster(capi_sim::CapiVersions::V1beta1).await;
}

#[tokio::test]
async fn failure_domains_reach_a_v1beta2_cluster() {
    failure_domains_reach_the_cluster(capi_sim::CapiVersions::V1beta2).await;
}

/// A pool template, as a MachineDeployment would use it, publishes its clones' capacity for
/// scale-from-zero; a ClusterClass's LibvirtClusterTemplate is accepted as written.
#[tokio::test]
async fn a_machine_template_publishes_its_clones_capacity() {
    let env = Env::start().await;
    apply_yaml(
        &env.client,
        "apiVersion: infrastructure.cluster.x-k8s.io/v1alpha1\nkind: LibvirtMachineTemplate\nmetadata: {name: pool, namespace: default}\nspec:\n  template:\n    spec:\n      hostSelector: {matchLabels: {pool: lab}}\n      domain: {vcpus: 4, memoryMB: 6144}\n      rootDisk: {baseImage: rhcos.qcow2, storagePool: default, size: 20Gi}\n      network: {type: network, name: default, addresses: [192.168.122.90/24]}\n",
    )
    .await;
    apply_yaml(
        &env.client,
        "apiVersion: infrastructure.cluster.x-k8s.io/v1alpha1\nkind: LibvirtClusterTemplate\nmetadata: {name: lab, namespace: default}\nspec:\n  template:\n    spec: {controlPlaneEndpoint: {host: 127.0.0.1, port: 6443}}\n",
    )
    .await;
    let templates: kube::Api<caplv::api::LibvirtMachineTemplate> = kube::Api::namespaced(env.client.clone(), "default");
    wait_until("the template's capacity", || async {
        templates.get("pool").await.unwrap().status.is_some_and(|s| {
            s.capacity.get("cpu").map(|q| q.0.as_str()) == Some("4")
                && s.capacity.get("memory").map(|q| q.0.as_str()) == Some("6144Mi")
        })
    })
    .await;
    env.stop().await;
}

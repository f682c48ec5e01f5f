//! A machine's Node joining: kubelet CSRs approved by the manager, the Node linked (provider ID)
//! and labelled from the LibvirtMachine's spec, edits followed, strangers' CSRs untouched.

use caplv::libvirt::simulated;
use kube::{
    Api, ResourceExt,
    api::{Patch, PatchParams},
};
use serde_json::json;

use crate::{
    libvirt_machine::{IGNITION, capi_machines, lvms, machine},
    support::{Env, apply_yaml, wait_until},
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_node_joins_through_approved_csrs_and_gets_linked_and_labelled() {
    use k8s_openapi::api::{certificates::v1::CertificateSigningRequest, core::v1::Node};

    // A kubelet without --provider-id: the manager must link the Node itself.
    let started = Env::start_custom(
        capi_sim::CapiVersions::V1beta1,
        capi_sim::KubeletMode::WithoutProviderId,
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    let env = &started;
    apply_yaml(
        &env.client,
        "apiVersion: cluster.x-k8s.io/v1beta1\nkind: Cluster\nmetadata: {name: spot, namespace: default}\nspec: {}\n",
    )
    .await;
    let secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "boot", "namespace": "default"},
        "stringData": {"value": IGNITION}});
    apply_yaml(&env.client, &secret.to_string()).await;
    let uri = simulated::host_uri(dir.path(), "default", "laptop").unwrap();
    let host = json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1", "kind": "LibvirtHost",
        "metadata": {"name": "laptop", "namespace": "default"}, "spec": {"uri": uri}});
    apply_yaml(&env.client, &host.to_string()).await;

    // A stranger's CSR is never touched.
    let csrs: Api<CertificateSigningRequest> = Api::all(env.client.clone());
    let stranger = json!({"apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
        "metadata": {"name": "stranger"},
        "spec": {"request": base64(&capi_sim::csr::client_csr("stranger").unwrap()),
                 "signerName": "kubernetes.io/kube-apiserver-client-kubelet",
                 "usages": ["digital signature", "client auth"]}});
    csrs.create(&Default::default(), &serde_json::from_value(stranger).unwrap())
        .await
        .unwrap();

    let labels = json!({"spec": {"nodeLabels": {"tier": "spot", "keep": "me"}, "nodeAnnotations": {"owner": "caplv"}}});
    machine(env, "joiner", "laptop", labels, Some("boot")).await;
    wait_until("Machine Running with nodeRef", || async {
        let m = capi_machines(&env.client).get("joiner").await.unwrap();
        m.data["status"]["phase"] == "Running" && m.data["status"]["nodeRef"]["name"] == "joiner"
    })
    .await;
    let uid = lvms(&env.client).get("joiner").await.unwrap().uid().unwrap();
    let nodes: Api<Node> = Api::all(env.client.clone());
    wait_until("Node linked and labelled", || async {
        let n = nodes.get("joiner").await.unwrap();
        n.spec.and_then(|s| s.provider_id) == Some(format!("libvirt:///{uid}"))
            && n.metadata.labels.unwrap_or_default().get("tier").map(String::as_str) == Some("spot")
            && n.metadata
                .annotations
                .unwrap_or_default()
                .get("owner")
                .map(String::as_str)
                == Some("caplv")
    })
    .await;
    wait_until("client and serving CSRs approved by the manager", || async {
        let approved: Vec<String> = csrs
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .filter(|c| {
                c.status.as_ref().and_then(|s| s.conditions.as_ref()).is_some_and(|cs| {
                    cs.iter()
                        .any(|c| c.type_ == "Approved" && c.reason.as_deref() == Some("CAPLVApproved"))
                })
            })
            .map(|c| c.spec.signer_name)
            .collect();
        approved.len() == 2 && approved.iter().any(|s| s.ends_with("kubelet-serving"))
    })
    .await;
    let stranger = csrs.get("stranger").await.unwrap();
    assert!(
        stranger
            .status
            .and_then(|s| s.conditions)
            .unwrap_or_default()
            .is_empty(),
        "untouched"
    );

    // Editing the spec's labels updates the Node: a dropped key goes, others' keys stay.
    lvms(&env.client)
        .patch(
            "joiner",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"nodeLabels": {"tier": "gold", "keep": null}}})),
        )
        .await
        .unwrap();
    wait_until("Node labels follow the spec", || async {
        let labels = nodes.get("joiner").await.unwrap().metadata.labels.unwrap_or_default();
        labels.get("tier").map(String::as_str) == Some("gold")
            && !labels.contains_key("keep")
            && labels.contains_key("kubernetes.io/hostname")
    })
    .await;
    started.stop().await;
    drop(dir);
}

fn base64(s: &str) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(s)
}

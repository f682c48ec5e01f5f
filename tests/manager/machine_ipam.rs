//! A LibvirtMachine whose address comes from an IPAM pool (`networks[].addressesFromPools`):
//! the claim it files, the address in its keyfile and status, and the claim's release at
//! deletion.
//!
//! On memkube the test plays the IPAM provider: it binds the claim itself, after showing that
//! the machine waits and says why. On a genuine control plane (`scripts/genuine-test.sh`) the
//! real in-cluster IPAM provider, built from its Go module, allocates from an `InClusterIPPool`.

use caplv::api::common::MachineAddressType;
use kube::{
    Api, Client,
    api::{DeleteParams, DynamicObject, Patch, PatchParams, PostParams},
    core::{ApiResource, GroupVersionKind},
};
use serde_json::json;

use crate::{
    libvirt_machine::{capi_machines, fixture, hv, lvms, machine, wait_gone, wait_reason},
    machine_networking::keyfile_in,
    support::{apply_yaml, genuine, wait_until},
};

const CLAIM: &str = "ipam-01-0-0";

fn api(client: &Client, kind: &str, plural: &str) -> Api<DynamicObject> {
    let ar =
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("ipam.cluster.x-k8s.io", "v1beta1", kind), plural);
    Api::namespaced_with(client.clone(), "default", &ar)
}

fn claims(client: &Client) -> Api<DynamicObject> {
    api(client, "IPAddressClaim", "ipaddressclaims")
}

fn addresses(client: &Client) -> Api<DynamicObject> {
    api(client, "IPAddress", "ipaddresses")
}

/// Play the IPAM provider on memkube: first a claim that cannot be served, then its address.
async fn bind_as_the_provider(client: &Client) {
    let status = |value: serde_json::Value| Patch::Merge(json!({"status": value}));
    claims(client)
        .patch_status(
            CLAIM,
            &PatchParams::default(),
            &status(
                json!({"conditions": [{"type": "Ready", "status": "False", "reason": "PoolExhausted",
                "message": "no free address in pool workers", "lastTransitionTime": "2026-12-01T00:00:00Z"}]}),
            ),
        )
        .await
        .unwrap();
    let reason = wait_reason_message(client, "no free address in pool workers").await;
    assert_eq!(reason, "WaitingForIPAddress");
    let address: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "ipam.cluster.x-k8s.io/v1beta1", "kind": "IPAddress",
        "metadata": {"name": CLAIM, "namespace": "default"},
        "spec": {"address": "10.10.0.10", "prefix": 24, "gateway": "10.10.0.1", "claimRef": {"name": CLAIM},
                 "poolRef": {"apiGroup": "ipam.cluster.x-k8s.io", "kind": "InClusterIPPool", "name": "workers"}}
    }))
    .unwrap();
    addresses(client)
        .create(&PostParams::default(), &address)
        .await
        .unwrap();
    claims(client)
        .patch_status(
            CLAIM,
            &PatchParams::default(),
            &status(json!({"addressRef": {"name": CLAIM}})),
        )
        .await
        .unwrap();
}

/// Poll `read` until it gives a value, within the tests' deadline.
async fn poll<T, Fut>(what: &str, mut read: impl FnMut() -> Fut) -> T
where
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + crate::support::deadline();
    loop {
        if let Some(value) = read().await {
            return value;
        }
        assert!(tokio::time::Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
}

/// Wait until the machine's Ready message contains `text`; returns the reason.
async fn wait_reason_message(client: &Client, text: &str) -> String {
    poll(&format!("Ready message with {text:?}"), || async {
        let status = lvms(client).get("ipam-01").await.ok()?.status?;
        let ready = caplv::api::condition::find(&status.conditions, caplv::api::condition::READY)?;
        ready.message.contains(text).then(|| ready.reason.clone())
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_address_from_a_pool_reaches_the_keyfile_and_goes_back_at_deletion() {
    let f = fixture(&["laptop"], 2).await;
    let env = &f.env;
    let pool = json!({"apiGroup": "ipam.cluster.x-k8s.io", "kind": "InClusterIPPool", "name": "workers"});
    if genuine::selected() {
        apply_yaml(
            &env.client,
            "apiVersion: ipam.cluster.x-k8s.io/v1alpha2\nkind: InClusterIPPool\nmetadata: {name: workers, namespace: default}\n\
             spec: {addresses: [10.10.0.10-10.10.0.20], prefix: 24, gateway: 10.10.0.1}\n",
        )
        .await;
    }
    let edits = json!({"spec": {"network": {"addresses": null, "gateway": null, "addressesFromPools": [pool]}}});
    machine(env, "ipam-01", "laptop", edits, Some("boot")).await;

    let claim = poll("the IPAddressClaim", || async {
        claims(&env.client).get_opt(CLAIM).await.unwrap()
    })
    .await;
    let lm = lvms(&env.client).get("ipam-01").await.unwrap();
    let owner = &claim.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.uid.as_str(), owner.controller),
        ("LibvirtMachine", lm.metadata.uid.as_deref().unwrap(), Some(true))
    );
    assert_eq!(
        claim.metadata.labels.as_ref().unwrap()["cluster.x-k8s.io/cluster-name"],
        "spot"
    );
    assert_eq!(claim.data["spec"]["clusterName"], "spot");
    assert_eq!(claim.data["spec"]["poolRef"], pool);
    if !genuine::selected() {
        bind_as_the_provider(&env.client).await;
    }

    wait_reason(env, "ipam-01", "DomainRunning").await;
    let status = lvms(&env.client).get("ipam-01").await.unwrap().status.unwrap();
    let [claimed] = &status.claimed_addresses[..] else {
        panic!("one claimed address: {:?}", status.claimed_addresses);
    };
    assert_eq!(
        (
            claimed.claim.as_str(),
            claimed.address.as_str(),
            claimed.gateway.as_deref()
        ),
        (CLAIM, "10.10.0.10/24", Some("10.10.0.1"))
    );
    assert!(
        status
            .addresses
            .iter()
            .any(|a| a.type_ == MachineAddressType::InternalIP && a.address == "10.10.0.10"),
        "{:?}",
        status.addresses
    );
    let host = hv(env, "laptop").await;
    let ignition = host
        .download_volume("default", "ipam-01-ignition.ign", 1 << 20)
        .unwrap();
    let keyfile = keyfile_in(&ignition, "enp1s0");
    assert_eq!(keyfile.get("ipv4", "method"), Some("manual"));
    assert_eq!(keyfile.get("ipv4", "address1"), Some("10.10.0.10/24,10.10.0.1"));

    capi_machines(&env.client)
        .delete("ipam-01", &DeleteParams::default())
        .await
        .unwrap();
    wait_gone(env, "ipam-01").await;
    wait_until("the claim released", || async {
        claims(&env.client).get_opt(CLAIM).await.unwrap().is_none()
    })
    .await;
    if genuine::selected() {
        wait_until("the address back in the pool", || async {
            addresses(&env.client).get_opt(CLAIM).await.unwrap().is_none()
        })
        .await;
    }
}

#[tokio::test]
async fn a_pool_interface_cannot_also_use_dhcp_and_needs_no_static_address() {
    let env = crate::support::Env::start().await;
    let lvm = |network: serde_json::Value| {
        serde_json::from_value::<caplv::api::LibvirtMachine>(json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1", "kind": "LibvirtMachine",
            "metadata": {"name": "v", "namespace": "default"},
            "spec": {"hostRef": {"name": "h"}, "network": network,
                     "rootDisk": {"baseImage": "b.qcow2", "storagePool": "default", "size": "20Gi"}}
        }))
        .unwrap()
    };
    let pool = json!([{"apiGroup": "ipam.cluster.x-k8s.io", "kind": "InClusterIPPool", "name": "workers"}]);
    let dry = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let both = lvm(json!({"type": "network", "name": "default", "dhcp": true, "addressesFromPools": pool}));
    let err = lvms(&env.client).create(&dry, &both).await.unwrap_err().to_string();
    assert!(err.contains("addressesFromPools and dhcp exclude each other"), "{err}");
    let bad_kind = lvm(json!({"type": "network", "name": "default",
        "addressesFromPools": [{"apiGroup": "ipam.cluster.x-k8s.io", "kind": "not a kind", "name": "workers"}]}));
    let err = lvms(&env.client).create(&dry, &bad_kind).await.unwrap_err().to_string();
    assert!(err.contains("addressesFromPools[0].kind"), "{err}");
    let only_pools = lvm(json!({"type": "network", "name": "default", "addressesFromPools": pool}));
    lvms(&env.client).create(&dry, &only_pools).await.unwrap();
    env.stop().await;
}

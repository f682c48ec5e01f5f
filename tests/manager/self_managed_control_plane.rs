//! SelfManagedControlPlane: the seed's Cluster gets a control plane and its controlPlaneRef (both
//! Cluster API versions), a Cluster with its own control plane is left alone, and the
//! `<cluster>-kubeconfig` Secret is written, renewed, restored, or left to its user.

use base64::Engine as _;
use capi_sim::CapiVersions;
use caplv::api::{
    SelfManagedControlPlane,
    capi::CapiVersion,
    condition::{self, Condition},
};
use k8s_openapi::{
    ByteString,
    api::{core::v1::Secret, events::v1::Event},
};
use kube::{
    Api, ResourceExt,
    api::{DeleteParams, DynamicObject, ListParams, Patch, PatchParams},
};
use serde_json::json;
use tokio::net::TcpListener;

use crate::support::{Env, MANAGER_USER, TEST_CA_PEM, apply_yaml, deadline, wait_until};

const SEED_CLUSTER: &str = include_str!("../../examples/seed/03-cluster.yaml");
const SEED_SERVER: &str = "https://api.spot.labdroid.net:6443";
const KUBECONFIG: &str = "spot-kubeconfig";

/// The seed's LibvirtCluster with its endpoint on loopback, so the probe never leaves the
/// machine (the Cluster keeps the seed's endpoint, which only names the kubeconfig's server).
async fn libvirt_cluster(env: &Env, name: &str, endpoint: Option<u16>) {
    let endpoint = endpoint
        .map(|port| format!("spec:\n  controlPlaneEndpoint: {{host: 127.0.0.1, port: {port}}}\n"))
        .unwrap_or_else(|| "spec: {}\n".to_owned());
    apply_yaml(
        &env.client,
        &format!(
            "apiVersion: infrastructure.cluster.x-k8s.io/v1alpha1\nkind: LibvirtCluster\n\
             metadata: {{name: {name}, namespace: default}}\n{endpoint}"
        ),
    )
    .await;
}

/// A loopback port nothing listens on.
async fn closed_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn clusters(env: &Env, version: CapiVersion) -> Api<DynamicObject> {
    Api::namespaced_with(env.client.clone(), "default", &version.cluster())
}

fn control_planes(env: &Env) -> Api<SelfManagedControlPlane> {
    Api::namespaced(env.client.clone(), "default")
}

fn secrets(env: &Env) -> Api<Secret> {
    Api::namespaced(env.client.clone(), "default")
}

async fn ready(env: &Env, name: &str) -> Option<Condition> {
    let obj = control_planes(env).get_opt(name).await.unwrap()?;
    condition::find(&obj.status?.conditions, condition::READY).cloned()
}

/// Wait for the control plane's `Ready` to be `status`/`reason`; a timeout shows the last one.
async fn wait_ready(env: &Env, name: &str, status: &str, reason: &str) -> Condition {
    let deadline = tokio::time::Instant::now() + deadline();
    loop {
        let found = ready(env, name).await;
        if let Some(c) = found.as_ref().filter(|c| c.status == status && c.reason == reason) {
            return c.clone();
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {name} Ready={status} ({reason}); last: {found:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
}

/// The parsed kubeconfig of the Secret, once it exists.
async fn kubeconfig(env: &Env, name: &str) -> Option<serde_yaml::Value> {
    let secret = secrets(env).get_opt(name).await.unwrap()?;
    let value = secret.data?.get("value")?.0.clone();
    Some(serde_yaml::from_slice(&value).unwrap())
}

fn token_of(kubeconfig: &serde_yaml::Value) -> String {
    token_in(kubeconfig).unwrap()
}

/// The token, if the value is a kubeconfig with one (a hand edit may have removed it).
fn token_in(kubeconfig: &serde_yaml::Value) -> Option<String> {
    kubeconfig["users"][0]["user"]["token"].as_str().map(str::to_owned)
}

/// Poll `find` until it returns something, failing the test with `what` after [`deadline`].
async fn wait_for<T, Fut: std::future::Future<Output = Option<T>>>(what: &str, mut find: impl FnMut() -> Fut) -> T {
    let deadline = tokio::time::Instant::now() + deadline();
    loop {
        if let Some(found) = find().await {
            return found;
        }
        assert!(tokio::time::Instant::now() < deadline, "timed out waiting for: {what}");
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
}

/// Wait for a kubeconfig whose token differs from `previous`, and return it.
async fn wait_new_token(env: &Env, previous: Option<&str>) -> String {
    wait_for("a kubeconfig Secret with a new token", || async {
        kubeconfig(env, KUBECONFIG)
            .await
            .and_then(|k| token_in(&k))
            .filter(|t| Some(t.as_str()) != previous)
    })
    .await
}

async fn events(env: &Env) -> Vec<Event> {
    let events: Api<Event> = Api::namespaced(env.client.clone(), "default");
    events.list(&ListParams::default()).await.unwrap().items
}

async fn wait_event(env: &Env, reason: &str) -> Event {
    wait_for(&format!("event {reason}"), || async {
        events(env)
            .await
            .into_iter()
            .find(|e| e.reason.as_deref() == Some(reason))
    })
    .await
}

/// The token is in none of: Events, the control plane object (status included), metrics.
async fn assert_token_kept_inside(env: &Env, token: &str) {
    let events = serde_json::to_string(&events(env).await).unwrap();
    assert!(!events.contains(token), "token in Events: {events}");
    let object = serde_json::to_string(&control_planes(env).get("spot").await.unwrap()).unwrap();
    assert!(
        !object.contains(token),
        "token in the SelfManagedControlPlane: {object}"
    );
    let metrics = env.shared.metrics.render();
    assert!(!metrics.contains(token), "token in metrics");
}

#[tokio::test]
async fn the_seed_cluster_gets_a_control_plane_and_a_contract_shaped_kubeconfig() {
    let env = Env::start().await;
    apply_yaml(&env.client, SEED_CLUSTER).await;
    libvirt_cluster(&env, "spot", Some(closed_port().await)).await;

    // The Cluster, which had none, now references a new SelfManagedControlPlane (v1beta1 shape).
    let cluster_api = clusters(&env, CapiVersion::V1beta1);
    wait_until("Cluster spot has a controlPlaneRef", || async {
        !cluster_api.get("spot").await.unwrap().data["spec"]["controlPlaneRef"].is_null()
    })
    .await;
    let cluster = cluster_api.get("spot").await.unwrap();
    assert_eq!(
        cluster.data["spec"]["controlPlaneRef"],
        json!({"apiVersion": "controlplane.cluster.x-k8s.io/v1alpha1", "kind": "SelfManagedControlPlane",
               "name": "spot", "namespace": "default"})
    );
    assert_eq!(
        cluster.data["spec"]["controlPlaneEndpoint"]["host"], "api.spot.labdroid.net",
        "only the reference was patched"
    );
    let linked = wait_event(&env, "ControlPlaneLinked").await;
    assert_eq!(
        linked.regarding.as_ref().and_then(|r| r.kind.as_deref()),
        Some("Cluster")
    );
    let smcp = control_planes(&env).get("spot").await.unwrap();
    assert_eq!(
        smcp.labels().get("cluster.x-k8s.io/cluster-name").map(String::as_str),
        Some("spot")
    );
    assert!(
        smcp.owner_references()
            .iter()
            .all(|r| r.controller != Some(true) || r.kind == "Cluster"),
        "the manager never makes itself the controller"
    );

    // Ready: the kubeconfig Secret exists, with the contract's shape.
    wait_ready(&env, "spot", "True", "KubeconfigAvailable").await;
    let status = control_planes(&env).get("spot").await.unwrap().status.unwrap();
    assert!(status.external_managed_control_plane && status.initialized && status.ready);
    assert_eq!(status.initialization.unwrap().control_plane_initialized, Some(true));
    let reported = status.kubeconfig.unwrap();
    assert_eq!(
        (
            reported.secret_name.as_str(),
            reported.server.as_str(),
            reported.service_account.as_str()
        ),
        (KUBECONFIG, SEED_SERVER, "default/caplv-workload-access")
    );
    let lifetime = reported.expires_at.unwrap().0.as_second() - reported.issued_at.unwrap().0.as_second();
    assert!((86_390..=86_410).contains(&lifetime), "24 h tokens: {lifetime}");

    let secret = secrets(&env).get(KUBECONFIG).await.unwrap();
    assert_eq!(secret.type_.as_deref(), Some("cluster.x-k8s.io/secret"));
    assert_eq!(
        secret.labels().get("cluster.x-k8s.io/cluster-name").map(String::as_str),
        Some("spot")
    );
    let owner = &secret.owner_references()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str(), owner.controller),
        ("SelfManagedControlPlane", "spot", Some(true))
    );
    assert_eq!(Some(&owner.uid), smcp.metadata.uid.as_ref());
    let config = kubeconfig(&env, KUBECONFIG).await.unwrap();
    assert_eq!(config["clusters"][0]["cluster"]["server"], SEED_SERVER);
    let ca = config["clusters"][0]["cluster"]["certificate-authority-data"]
        .as_str()
        .unwrap();
    assert_eq!(
        base64::engine::general_purpose::STANDARD.decode(ca).unwrap(),
        TEST_CA_PEM.as_bytes(),
        "the CA the manager trusts for its API server"
    );
    assert_eq!(config["current-context"], "spot");
    let token = token_of(&config);
    assert!(!token.is_empty());
    assert_token_kept_inside(&env, &token).await;

    // Cluster API core sets a controller ownerRef from the Cluster and the label: tolerated.
    let owner_ref = json!({"metadata": {"ownerReferences": [{"apiVersion": "cluster.x-k8s.io/v1beta1",
        "kind": "Cluster", "name": "spot", "uid": cluster.metadata.uid, "controller": true,
        "blockOwnerDeletion": true}]}});
    control_planes(&env)
        .patch("spot", &PatchParams::default(), &Patch::Merge(owner_ref))
        .await
        .unwrap();
    // Deleting the Secret mints a new token at once.
    secrets(&env)
        .delete(KUBECONFIG, &DeleteParams::default())
        .await
        .unwrap();
    let renewed = wait_new_token(&env, Some(&token)).await;
    let event = wait_event(&env, "KubeconfigRenewed").await;
    assert!(
        event
            .note
            .as_deref()
            .unwrap_or_default()
            .contains("caplv-workload-access")
    );
    assert_eq!(
        clusters(&env, CapiVersion::V1beta1).get("spot").await.unwrap().data["spec"]["controlPlaneRef"]["name"],
        "spot",
        "linked once, never re-linked"
    );
    assert_token_kept_inside(&env, &renewed).await;
    assert_token_kept_inside(&env, &token).await;
    env.stop().await;
}

#[tokio::test]
async fn v1beta2_clusters_get_a_contract_versioned_reference() {
    let env = Env::start_with(CapiVersions::V1beta2).await;
    apply_yaml(
        &env.client,
        "apiVersion: cluster.x-k8s.io/v1beta2\nkind: Cluster\nmetadata: {name: spot, namespace: default}\n\
         spec:\n  controlPlaneEndpoint: {host: api.spot.labdroid.net, port: 6443}\n\
         \x20 infrastructureRef: {apiGroup: infrastructure.cluster.x-k8s.io, kind: LibvirtCluster, name: spot}\n",
    )
    .await;
    libvirt_cluster(&env, "spot", Some(closed_port().await)).await;
    let cluster_api = clusters(&env, CapiVersion::V1beta2);
    wait_until("Cluster spot has a controlPlaneRef", || async {
        !cluster_api.get("spot").await.unwrap().data["spec"]["controlPlaneRef"].is_null()
    })
    .await;
    assert_eq!(
        cluster_api.get("spot").await.unwrap().data["spec"]["controlPlaneRef"],
        json!({"apiGroup": "controlplane.cluster.x-k8s.io", "kind": "SelfManagedControlPlane", "name": "spot"})
    );
    wait_ready(&env, "spot", "True", "KubeconfigAvailable").await;
    let config = kubeconfig(&env, KUBECONFIG).await.unwrap();
    assert_eq!(config["clusters"][0]["cluster"]["server"], SEED_SERVER);
    env.stop().await;
}

#[tokio::test]
async fn a_cluster_with_its_own_control_plane_is_left_untouched() {
    let env = Env::start().await;
    apply_yaml(
        &env.client,
        "apiVersion: cluster.x-k8s.io/v1beta1\nkind: Cluster\nmetadata: {name: own, namespace: default}\n\
         spec:\n  controlPlaneRef: {apiVersion: controlplane.cluster.x-k8s.io/v1beta1, kind: KubeadmControlPlane, name: own-cp}\n\
         \x20 infrastructureRef: {apiVersion: infrastructure.cluster.x-k8s.io/v1alpha1, kind: LibvirtCluster, name: own}\n",
    )
    .await;
    libvirt_cluster(&env, "own", Some(closed_port().await)).await;
    // The LibvirtCluster reconciled past the control plane step: it probed its endpoint.
    let infra: Api<caplv::api::LibvirtCluster> = Api::namespaced(env.client.clone(), "default");
    wait_until("LibvirtCluster own probed", || async {
        infra
            .get("own")
            .await
            .ok()
            .and_then(|o| o.status)
            .and_then(|s| condition::find(&s.conditions, condition::READY).cloned())
            .is_some_and(|c| c.reason == "ControlPlaneUnreachable")
    })
    .await;
    let cluster = clusters(&env, CapiVersion::V1beta1).get("own").await.unwrap();
    assert_eq!(
        cluster.data["spec"]["controlPlaneRef"],
        json!({"apiVersion": "controlplane.cluster.x-k8s.io/v1beta1", "kind": "KubeadmControlPlane", "name": "own-cp"})
    );
    assert!(control_planes(&env).get_opt("own").await.unwrap().is_none());
    assert!(secrets(&env).get_opt("own-kubeconfig").await.unwrap().is_none());
    let cluster_writes: Vec<_> = env
        .server()
        .requests_by(MANAGER_USER)
        .into_iter()
        .filter(|(verb, resource, _, _)| verb == "patch" && resource == "clusters.cluster.x-k8s.io")
        .collect();
    assert!(
        cluster_writes.is_empty(),
        "the Cluster is never written: {cluster_writes:?}"
    );
    env.stop().await;
}

#[tokio::test]
async fn an_edited_kubeconfig_is_restored_and_renewal_follows_the_clock() {
    let env = Env::start().await;
    apply_yaml(&env.client, SEED_CLUSTER).await;
    libvirt_cluster(&env, "spot", Some(closed_port().await)).await;
    let first = wait_new_token(&env, None).await;

    // A hand edit of the value (here: another token) is undone with a freshly minted one.
    let edit = json!({"data": {"value": ByteString(b"apiVersion: v1\nkind: Config\n".to_vec())}});
    secrets(&env)
        .patch(KUBECONFIG, &PatchParams::default(), &Patch::Merge(edit))
        .await
        .unwrap();
    let second = wait_new_token(&env, Some(&first)).await;
    assert_ne!(second, first);

    // Two thirds into the token's life (16 h of 24), the next reconcile mints a new one.
    let issued = control_planes(&env)
        .get("spot")
        .await
        .unwrap()
        .status
        .unwrap()
        .kubeconfig
        .unwrap()
        .issued_at
        .unwrap();
    let mints = env.server().request_count("create", "serviceaccounts", "token");
    env.clock
        .set(chrono::Utc::now() + chrono::Duration::hours(15) + chrono::Duration::minutes(50));
    let reconciles = reconcile_count(&env);
    touch(&env).await;
    wait_until("a reconcile after the clock moved", || async {
        reconcile_count(&env) > reconciles
    })
    .await;
    assert_eq!(
        env.server().request_count("create", "serviceaccounts", "token"),
        mints,
        "not due yet: no new token"
    );
    env.clock
        .set(chrono::Utc::now() + chrono::Duration::hours(16) + chrono::Duration::minutes(1));
    touch(&env).await;
    let third = wait_new_token(&env, Some(&second)).await;
    assert_ne!(third, second);
    let renewed = control_planes(&env).get("spot").await.unwrap().status.unwrap();
    let issued_again = renewed.kubeconfig.unwrap().issued_at.unwrap();
    assert!(
        issued_again.0.as_second() - issued.0.as_second() > 16 * 3600,
        "issued on the manager's clock"
    );
    env.stop().await;
}

/// Successful reconciles of SelfManagedControlPlanes so far.
fn reconcile_count(env: &Env) -> u64 {
    env.shared
        .metrics
        .reconciliations
        .with_label_values(&["selfmanagedcontrolplane", "success"])
        .get()
}

/// Change the control plane's metadata so it is reconciled now.
async fn touch(env: &Env) {
    let stamp = json!({"metadata": {"annotations": {"test/touched": chrono::Utc::now().to_rfc3339()}}});
    control_planes(env)
        .patch("spot", &PatchParams::default(), &Patch::Merge(stamp))
        .await
        .unwrap();
}

#[tokio::test]
async fn a_user_provided_kubeconfig_is_never_overwritten() {
    let env = Env::start().await;
    let theirs = b"apiVersion: v1\nkind: Config\n# the user's own\n".to_vec();
    let secret = json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": KUBECONFIG, "namespace": "default", "labels": {"cluster.x-k8s.io/cluster-name": "spot"}},
        "type": "cluster.x-k8s.io/secret", "data": {"value": ByteString(theirs.clone())}});
    secrets(&env)
        .patch(KUBECONFIG, &PatchParams::apply("user"), &Patch::Apply(secret))
        .await
        .unwrap();
    apply_yaml(&env.client, SEED_CLUSTER).await;
    libvirt_cluster(&env, "spot", Some(closed_port().await)).await;

    let ready = wait_ready(&env, "spot", "True", "UserProvidedKubeconfig").await;
    assert!(
        ready.message.contains("spot-kubeconfig") && ready.message.contains("not owned"),
        "{}",
        ready.message
    );
    let kept = secrets(&env).get(KUBECONFIG).await.unwrap();
    assert_eq!(kept.data.unwrap()["value"].0, theirs);
    assert!(kept.metadata.owner_references.unwrap_or_default().is_empty());
    assert_eq!(env.server().request_count("create", "serviceaccounts", "token"), 0);
    assert!(
        control_planes(&env)
            .get("spot")
            .await
            .unwrap()
            .status
            .unwrap()
            .kubeconfig
            .is_none()
    );

    // Once the user removes it, the manager maintains one.
    secrets(&env)
        .delete(KUBECONFIG, &DeleteParams::default())
        .await
        .unwrap();
    wait_ready(&env, "spot", "True", "KubeconfigAvailable").await;
    wait_new_token(&env, None).await;
    env.stop().await;
}

#[tokio::test]
async fn without_an_endpoint_it_says_so_and_waits_for_one() {
    let env = Env::start().await;
    apply_yaml(
        &env.client,
        "apiVersion: cluster.x-k8s.io/v1beta1\nkind: Cluster\nmetadata: {name: spot, namespace: default}\n\
         spec:\n  infrastructureRef: {apiVersion: infrastructure.cluster.x-k8s.io/v1alpha1, kind: LibvirtCluster, name: spot}\n",
    )
    .await;
    libvirt_cluster(&env, "spot", None).await;
    let waiting = wait_ready(&env, "spot", "False", "NoControlPlaneEndpoint").await;
    assert!(waiting.message.contains("controlPlaneEndpoint"), "{}", waiting.message);
    assert!(secrets(&env).get_opt(KUBECONFIG).await.unwrap().is_none());
    assert_eq!(
        env.server().request_count("create", "serviceaccounts", "token"),
        0,
        "nothing is minted without a server to name"
    );
    let status = control_planes(&env).get("spot").await.unwrap().status.unwrap();
    assert!(status.ready && status.initialized, "the control plane itself is there");

    // An endpoint on the LibvirtCluster is enough.
    let port = closed_port().await;
    libvirt_cluster(&env, "spot", Some(port)).await;
    wait_ready(&env, "spot", "True", "KubeconfigAvailable").await;
    let config = kubeconfig(&env, KUBECONFIG).await.unwrap();
    assert_eq!(
        config["clusters"][0]["cluster"]["server"].as_str(),
        Some(format!("https://127.0.0.1:{port}").as_str())
    );
    env.stop().await;
}

#[tokio::test]
async fn a_missing_service_account_is_reported_then_used_once_created() {
    let env = Env::start().await;
    let service_accounts: Api<k8s_openapi::api::core::v1::ServiceAccount> =
        Api::namespaced(env.client.clone(), "default");
    service_accounts
        .delete("caplv-workload-access", &DeleteParams::default())
        .await
        .unwrap();
    apply_yaml(&env.client, SEED_CLUSTER).await;
    libvirt_cluster(&env, "spot", Some(closed_port().await)).await;
    let missing = wait_ready(&env, "spot", "False", "WorkloadServiceAccountNotFound").await;
    assert!(
        missing.message.contains("default/caplv-workload-access"),
        "{}",
        missing.message
    );
    assert!(secrets(&env).get_opt(KUBECONFIG).await.unwrap().is_none());

    apply_yaml(
        &env.client,
        "apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: caplv-workload-access, namespace: default}\n",
    )
    .await;
    touch(&env).await;
    wait_ready(&env, "spot", "True", "KubeconfigAvailable").await;
    wait_new_token(&env, None).await;
    env.stop().await;
}

#[tokio::test]
async fn a_deleting_cluster_does_not_get_its_control_plane_back() {
    let env = Env::start().await;
    apply_yaml(&env.client, SEED_CLUSTER).await;
    libvirt_cluster(&env, "spot", Some(closed_port().await)).await;
    wait_ready(&env, "spot", "True", "KubeconfigAvailable").await;
    // Core deletes a Cluster's control plane first; a finalizer holds the Cluster meanwhile.
    let cluster_api = clusters(&env, CapiVersion::V1beta1);
    let hold = json!({"metadata": {"finalizers": ["test/hold"]}});
    cluster_api
        .patch("spot", &PatchParams::default(), &Patch::Merge(hold))
        .await
        .unwrap();
    cluster_api.delete("spot", &DeleteParams::default()).await.unwrap();
    control_planes(&env)
        .delete("spot", &DeleteParams::default())
        .await
        .unwrap();
    wait_until("the control plane gone", || async {
        control_planes(&env).get_opt("spot").await.unwrap().is_none()
    })
    .await;
    let reconciled = || {
        env.shared
            .metrics
            .reconciliations
            .with_label_values(&["libvirtcluster", "success"])
            .get()
    };
    let before = reconciled();
    let stamp = json!({"metadata": {"annotations": {"test/touched": "now"}}});
    let libvirt_clusters: Api<caplv::api::LibvirtCluster> = Api::namespaced(env.client.clone(), "default");
    libvirt_clusters
        .patch("spot", &PatchParams::default(), &Patch::Merge(stamp))
        .await
        .unwrap();
    wait_until("a LibvirtCluster reconcile", || async { reconciled() > before }).await;
    assert!(
        control_planes(&env).get_opt("spot").await.unwrap().is_none(),
        "the control plane of a deleting Cluster is not recreated"
    );
    let release = json!({"metadata": {"finalizers": null}});
    cluster_api
        .patch("spot", &PatchParams::default(), &Patch::Merge(release))
        .await
        .unwrap();
    env.stop().await;
}

//! IgnitionConfig reconcile paths: the contract-shaped data Secret (with and without an owner
//! Machine), source updates, bad inputs, Butane, conflicts, pause, and garbage collection.

use std::collections::BTreeMap;

use caplv::api::{
    IgnitionConfig,
    condition::{self, Condition},
};
use k8s_openapi::{ByteString, api::core::v1::Secret};
use kube::{
    Api, ResourceExt,
    api::{DeleteParams, DynamicObject, Patch, PatchParams, PostParams},
};
use serde_json::json;

use crate::support::{Env, apply_yaml, deadline, events_about, wait_until};

/// A fake SSH key inside every config: it must never appear in status or Events.
const SSH_KEY: &str = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIIgnitionConfigTestKeyMustStayInside";

fn ignition(version: &str) -> String {
    format!(
        r#"{{"ignition":{{"version":"{version}"}},"passwd":{{"users":[{{"name":"core","sshAuthorizedKeys":["{SSH_KEY}"]}}]}}}}"#
    )
}

fn secrets(env: &Env) -> Api<Secret> {
    Api::namespaced(env.client.clone(), "default")
}

fn configs(env: &Env) -> Api<IgnitionConfig> {
    Api::namespaced(env.client.clone(), "default")
}

/// Create or replace the source Secret `name` with `data`.
async fn put_source(env: &Env, name: &str, data: &[(&str, &[u8])]) {
    let data: BTreeMap<String, ByteString> = data
        .iter()
        .map(|(k, v)| ((*k).to_owned(), ByteString(v.to_vec())))
        .collect();
    let secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": "default"},
        "type": "Opaque", "data": data});
    secrets(env)
        .patch(name, &PatchParams::apply("test").force(), &Patch::Apply(secret))
        .await
        .unwrap();
}

async fn ignition_config(env: &Env, name: &str, source: &str, key: Option<&str>, labels: &str) {
    let key = key.map(|k| format!(", key: {k}")).unwrap_or_default();
    apply_yaml(
        &env.client,
        &format!(
            "apiVersion: bootstrap.cluster.x-k8s.io/v1alpha1\nkind: IgnitionConfig\n\
             metadata: {{name: {name}, namespace: default, labels: {{{labels}}}}}\n\
             spec:\n  secretRef: {{name: {source}{key}}}\n"
        ),
    )
    .await;
}

async fn ready_condition(env: &Env, name: &str) -> Option<Condition> {
    let obj = configs(env).get_opt(name).await.unwrap()?;
    condition::find(&obj.status?.conditions, condition::READY).cloned()
}

/// Wait for `Ready` to reach `status`/`reason`; on timeout the failure shows the last condition.
async fn wait_ready(env: &Env, name: &str, status: &str, reason: &str) -> Condition {
    let deadline = tokio::time::Instant::now() + deadline();
    loop {
        let found = ready_condition(env, name).await;
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

async fn data_value(env: &Env, name: &str) -> Option<Vec<u8>> {
    let secret = secrets(env).get_opt(name).await.unwrap()?;
    secret.data?.get("value").map(|v| v.0.clone())
}

async fn wait_data(env: &Env, name: &str, want: &[u8]) {
    wait_until(&format!("data Secret {name} holds the expected value"), || async {
        data_value(env, name).await.as_deref() == Some(want)
    })
    .await;
}

async fn wait_event(env: &Env, name: &str, type_: &str, reason: &str) {
    wait_until(&format!("{type_} event {reason} about {name}"), || async {
        events_about(env, name)
            .await
            .iter()
            .any(|e| e.type_.as_deref() == Some(type_) && e.reason.as_deref() == Some(reason))
    })
    .await;
}

/// The key appears in neither the IgnitionConfig (status included) nor its Events.
async fn assert_no_content_leaked(env: &Env, name: &str) {
    let config = serde_json::to_string(&configs(env).get(name).await.unwrap()).unwrap();
    assert!(!config.contains(SSH_KEY), "content in the IgnitionConfig: {config}");
    let events = serde_json::to_string(&events_about(env, name).await).unwrap();
    assert!(!events.contains(SSH_KEY), "content in Events: {events}");
}

fn cluster_yaml(name: &str) -> String {
    format!(
        "apiVersion: cluster.x-k8s.io/v1beta1\nkind: Cluster\nmetadata: {{name: {name}, namespace: default}}\n\
         spec:\n  infrastructureRef: {{apiVersion: infrastructure.cluster.x-k8s.io/v1alpha1, kind: LibvirtCluster, name: {name}}}\n"
    )
}

fn machines(env: &Env) -> Api<DynamicObject> {
    Api::namespaced_with(
        env.client.clone(),
        "default",
        &caplv::api::capi::CapiVersion::V1beta1.machine(),
    )
}

#[tokio::test]
async fn an_owner_machine_gets_the_contract_shaped_secret_which_follows_the_source() {
    let env = Env::start().await;
    let source = ignition("3.4.0");
    put_source(&env, "worker-ignition", &[("value", source.as_bytes())]).await;
    apply_yaml(&env.client, &cluster_yaml("spot")).await;
    ignition_config(&env, "w1", "worker-ignition", None, "").await;
    apply_yaml(
        &env.client,
        "apiVersion: cluster.x-k8s.io/v1beta1\nkind: Machine\nmetadata: {name: w1, namespace: default}\n\
         spec:\n  clusterName: spot\n\
         \x20 bootstrap:\n    configRef: {apiVersion: bootstrap.cluster.x-k8s.io/v1alpha1, kind: IgnitionConfig, name: w1}\n\
         \x20 infrastructureRef: {apiVersion: infrastructure.cluster.x-k8s.io/v1alpha1, kind: LibvirtMachine, name: w1}\n",
    )
    .await;

    let ready = wait_ready(&env, "w1", "True", "DataSecretCreated").await;
    assert!(ready.message.contains("3.4.0"), "{}", ready.message);
    // CAPI (simulated) adopts the config; the label then comes from the Machine's clusterName.
    wait_until("data Secret labelled with the Machine's cluster", || async {
        secrets(&env)
            .get_opt("w1")
            .await
            .unwrap()
            .is_some_and(|s| s.labels().get("cluster.x-k8s.io/cluster-name").map(String::as_str) == Some("spot"))
    })
    .await;
    let config = configs(&env).get("w1").await.unwrap();
    let status = config.status.clone().unwrap();
    assert!(status.ready);
    assert_eq!(status.data_secret_name.as_deref(), Some("w1"));
    assert_eq!(status.initialization.unwrap().data_secret_created, Some(true));
    assert_eq!(status.observed_generation, Some(1));
    assert!(
        config
            .owner_references()
            .iter()
            .any(|r| r.kind == "Machine" && r.name == "w1"),
        "CAPI made the Machine the owner"
    );

    let secret = secrets(&env).get("w1").await.unwrap();
    assert_eq!(secret.type_.as_deref(), Some("cluster.x-k8s.io/secret"));
    let data = secret.data.clone().unwrap();
    assert_eq!(data.keys().collect::<Vec<_>>(), ["format", "value"]);
    assert_eq!(data["value"].0, source.as_bytes(), "the source bytes, unchanged");
    assert_eq!(data["format"].0, b"ignition");
    let owner = secret
        .owner_references()
        .iter()
        .find(|r| r.controller == Some(true))
        .unwrap();
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str(), Some(owner.uid.as_str())),
        ("IgnitionConfig", "w1", config.uid().as_deref())
    );

    // CAPI core copies the name onto the Machine.
    wait_until("Machine spec.bootstrap.dataSecretName", || async {
        machines(&env).get("w1").await.unwrap().data["spec"]["bootstrap"]["dataSecretName"] == "w1"
    })
    .await;

    // A source update reaches the data Secret, and is announced; the first write was not (a
    // config that is ready at once is no news).
    let updated = ignition("3.5.0");
    put_source(&env, "worker-ignition", &[("value", updated.as_bytes())]).await;
    wait_data(&env, "w1", updated.as_bytes()).await;
    wait_ready(&env, "w1", "True", "DataSecretCreated").await;
    wait_event(&env, "w1", "Normal", "DataSecretUpdated").await;
    let reasons: Vec<_> = events_about(&env, "w1")
        .await
        .into_iter()
        .filter_map(|e| e.reason)
        .collect();
    assert!(!reasons.iter().any(|r| r == "DataSecretCreated"), "{reasons:?}");
    wait_until("status message follows the source", || async {
        ready_condition(&env, "w1")
            .await
            .is_some_and(|c| c.message.contains("3.5.0"))
    })
    .await;

    // A hand edit is undone, and so is a deletion.
    let edit = json!({"data": {"value": "e30="}});
    secrets(&env)
        .patch("w1", &PatchParams::default(), &Patch::Merge(edit))
        .await
        .unwrap();
    wait_data(&env, "w1", updated.as_bytes()).await;
    secrets(&env).delete("w1", &DeleteParams::default()).await.unwrap();
    wait_data(&env, "w1", updated.as_bytes()).await;

    // A bad source later: Ready turns False, ready stays (one-time signal), the data stays.
    put_source(&env, "worker-ignition", &[("value", b"{not json")]).await;
    wait_ready(&env, "w1", "False", "InvalidJSON").await;
    wait_event(&env, "w1", "Warning", "InvalidJSON").await;
    let status = configs(&env).get("w1").await.unwrap().status.unwrap();
    assert!(status.ready);
    assert_eq!(status.data_secret_name.as_deref(), Some("w1"));
    assert_eq!(data_value(&env, "w1").await.as_deref(), Some(updated.as_bytes()));
    assert_no_content_leaked(&env, "w1").await;
    env.stop().await;
}

#[tokio::test]
async fn a_v1beta2_machine_is_read_for_the_cluster_name() {
    let env = Env::start_with(capi_sim::CapiVersions::V1beta2).await;
    let source = ignition("3.6.0");
    put_source(&env, "src", &[("value", source.as_bytes())]).await;
    apply_yaml(
        &env.client,
        "apiVersion: cluster.x-k8s.io/v1beta2\nkind: Cluster\nmetadata: {name: spot2, namespace: default}\n\
         spec:\n  infrastructureRef: {apiGroup: infrastructure.cluster.x-k8s.io, kind: LibvirtCluster, name: spot2}\n",
    )
    .await;
    ignition_config(&env, "m2", "src", None, "").await;
    apply_yaml(
        &env.client,
        "apiVersion: cluster.x-k8s.io/v1beta2\nkind: Machine\nmetadata: {name: m2, namespace: default}\n\
         spec:\n  clusterName: spot2\n\
         \x20 bootstrap:\n    configRef: {apiGroup: bootstrap.cluster.x-k8s.io, kind: IgnitionConfig, name: m2}\n\
         \x20 infrastructureRef: {apiGroup: infrastructure.cluster.x-k8s.io, kind: LibvirtMachine, name: m2}\n",
    )
    .await;
    wait_ready(&env, "m2", "True", "DataSecretCreated").await;
    wait_until("data Secret labelled with the v1beta2 Machine's cluster", || async {
        secrets(&env)
            .get_opt("m2")
            .await
            .unwrap()
            .is_some_and(|s| s.labels().get("cluster.x-k8s.io/cluster-name").map(String::as_str) == Some("spot2"))
    })
    .await;
    let machines: Api<DynamicObject> = Api::namespaced_with(
        env.client.clone(),
        "default",
        &caplv::api::capi::CapiVersion::V1beta2.machine(),
    );
    wait_until("v1beta2 Machine spec.bootstrap.dataSecretName", || async {
        machines.get("m2").await.unwrap().data["spec"]["bootstrap"]["dataSecretName"] == "m2"
    })
    .await;
    assert_eq!(data_value(&env, "m2").await.as_deref(), Some(source.as_bytes()));
    env.stop().await;
}

#[tokio::test]
async fn a_standalone_config_produces_data_and_its_deletion_removes_it() {
    let env = Env::start().await;
    let source = ignition("3.2.0");
    put_source(&env, "seed", &[("value", source.as_bytes())]).await;
    ignition_config(&env, "alone", "seed", None, "cluster.x-k8s.io/cluster-name: spot").await;
    wait_ready(&env, "alone", "True", "DataSecretCreated").await;
    let secret = secrets(&env).get("alone").await.unwrap();
    assert_eq!(secret.data.as_ref().unwrap()["value"].0, source.as_bytes());
    assert_eq!(secret.labels()["cluster.x-k8s.io/cluster-name"], "spot");

    // Settled: neither the data Secret nor the status is rewritten while nothing changes.
    let config_version = configs(&env).get("alone").await.unwrap().resource_version();
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    assert_eq!(
        secrets(&env).get("alone").await.unwrap().resource_version(),
        secret.resource_version()
    );
    assert_eq!(
        configs(&env).get("alone").await.unwrap().resource_version(),
        config_version
    );

    // A custom key works too, and without a label none is set.
    put_source(&env, "custom-src", &[("config.ign", source.as_bytes())]).await;
    ignition_config(&env, "custom", "custom-src", Some("config.ign"), "").await;
    wait_ready(&env, "custom", "True", "DataSecretCreated").await;
    assert!(secrets(&env).get("custom").await.unwrap().labels().is_empty());

    configs(&env).delete("alone", &DeleteParams::default()).await.unwrap();
    wait_until("data Secret garbage-collected", || async {
        secrets(&env).get_opt("alone").await.unwrap().is_none()
    })
    .await;
    assert!(
        secrets(&env).get_opt("seed").await.unwrap().is_some(),
        "the source stays"
    );
    env.stop().await;
}

/// A burst of configs sharing one source: the source is read about once (not once per config
/// per reconcile), and each config's data Secret and status are written once. Reconciles woken
/// by the controller's own writes find nothing to read or write.
#[tokio::test]
async fn a_burst_sharing_one_source_reads_it_once_and_writes_each_config_once() {
    const CONFIGS: u64 = 20;
    let env = Env::start().await;
    put_source(&env, "shared", &[("value", ignition("3.4.0").as_bytes())]).await;
    let server = env.server();
    server.reset_counts();
    let names: Vec<String> = (0..CONFIGS).map(|i| format!("b{i:02}")).collect();
    for name in &names {
        ignition_config(&env, name, "shared", None, "cluster.x-k8s.io/cluster-name: spot").await;
    }
    for name in &names {
        wait_ready(&env, name, "True", "DataSecretCreated").await;
    }
    wait_until("every data Secret written", || async {
        server.request_count("create", "secrets", "") >= CONFIGS
    })
    .await;
    let gets = server.request_count("get", "secrets", "");
    let creates = server.request_count("create", "secrets", "");
    let applies = server.request_count("patch", "secrets", "");
    let statuses = server.request_count("patch", "ignitionconfigs.bootstrap.cluster.x-k8s.io", "status");
    // A data Secret the cache has never seen is created without a read; the source is read
    // once, or a few times when the first reconciles start together before any has read it.
    assert!(gets <= CONFIGS / 2, "{gets} Secret reads for {CONFIGS} configs");
    assert_eq!(creates, CONFIGS, "one create per data Secret");
    assert!(applies <= 2, "{applies} data Secret applies besides the creates");
    assert!(
        statuses <= CONFIGS + 2,
        "{statuses} status writes for {CONFIGS} configs"
    );
    env.stop().await;
}

#[tokio::test]
async fn each_bad_input_reports_its_reason_writes_nothing_and_recovers() {
    let env = Env::start().await;
    let spec2 = ignition("2.2.0");
    let unknown = ignition("3.9.0");
    let mut oversize = ignition("3.4.0").into_bytes();
    oversize.extend(std::iter::repeat_n(b' ', 1024 * 1024));
    let not_json = format!("{{not json {SSH_KEY}");
    let valid = ignition("3.4.0");
    put_source(&env, "no-key-src", &[("other", valid.as_bytes())]).await;
    put_source(&env, "not-json-src", &[("value", not_json.as_bytes())]).await;
    put_source(&env, "spec2-src", &[("value", spec2.as_bytes())]).await;
    put_source(&env, "unknown-src", &[("value", unknown.as_bytes())]).await;
    put_source(&env, "oversize-src", &[("value", &oversize)]).await;
    let cases = [
        ("missing", "SourceSecretNotFound"),
        ("no-key", "SourceKeyNotFound"),
        ("not-json", "InvalidJSON"),
        ("spec2", "IgnitionSpec2"),
        ("unknown", "UnsupportedIgnitionVersion"),
        ("oversize", "TooLarge"),
    ];
    for (name, _) in cases {
        ignition_config(&env, name, &format!("{name}-src"), None, "").await;
    }
    for (name, reason) in cases {
        let ready = wait_ready(&env, name, "False", reason).await;
        assert!(
            ready.message.contains(&format!("\"{name}-src\"")),
            "names the Secret: {}",
            ready.message
        );
        wait_event(&env, name, "Warning", reason).await;
        let status = configs(&env).get(name).await.unwrap().status.unwrap();
        assert!(!status.ready);
        assert_eq!(status.data_secret_name, None);
        assert!(
            secrets(&env).get_opt(name).await.unwrap().is_none(),
            "no data Secret for {name}"
        );
        assert_no_content_leaked(&env, name).await;
    }
    let spec2_message = ready_condition(&env, "spec2").await.unwrap().message;
    assert!(
        spec2_message.contains("Accept"),
        "tells how to fetch 3.x: {spec2_message}"
    );

    // No hot loop: nothing is rewritten while nothing changes.
    let before = configs(&env).get("not-json").await.unwrap().resource_version();
    tokio::time::sleep(std::time::Duration::from_millis(600)).await;
    assert_eq!(configs(&env).get("not-json").await.unwrap().resource_version(), before);

    // Fixing the input (or creating the missing Secret) is enough.
    put_source(&env, "not-json-src", &[("value", valid.as_bytes())]).await;
    put_source(&env, "missing-src", &[("value", valid.as_bytes())]).await;
    for name in ["not-json", "missing"] {
        wait_ready(&env, name, "True", "DataSecretCreated").await;
        wait_data(&env, name, valid.as_bytes()).await;
        assert!(configs(&env).get(name).await.unwrap().status.unwrap().ready);
    }
    env.stop().await;
}

#[tokio::test]
async fn butane_is_translated_and_an_unsupported_field_is_named() {
    let env = Env::start().await;
    let butane = format!(
        "variant: fcos\nversion: 1.5.0\n\
         passwd:\n  users:\n    - name: core\n      ssh_authorized_keys: [\"{SSH_KEY}\"]\n\
         storage:\n  files:\n    - path: /etc/motd\n      mode: 0644\n      contents: {{inline: hello}}\n\
         systemd:\n  units:\n    - name: hello.service\n      enabled: true\n      contents: \"[Service]\\nExecStart=/bin/true\\n\"\n"
    );
    put_source(
        &env,
        "butane-src",
        &[("value", butane.as_bytes()), ("format", b"butane")],
    )
    .await;
    ignition_config(&env, "butane", "butane-src", None, "").await;
    let ready = wait_ready(&env, "butane", "True", "DataSecretCreated").await;
    assert!(ready.message.contains("Butane"), "{}", ready.message);
    let secret = secrets(&env).get("butane").await.unwrap();
    let data = secret.data.unwrap();
    assert_eq!(data["format"].0, b"ignition");
    let json: serde_json::Value = serde_json::from_slice(&data["value"].0).unwrap();
    assert_eq!(json["ignition"]["version"], "3.4.0");
    assert_eq!(json["passwd"]["users"][0]["sshAuthorizedKeys"][0], SSH_KEY);
    assert_eq!(json["storage"]["files"][0]["path"], "/etc/motd");
    assert_eq!(json["storage"]["files"][0]["mode"], 0o644);
    assert_eq!(json["systemd"]["units"][0]["name"], "hello.service");
    caplv::ignition::validate(&data["value"].0).unwrap();

    let rejected = format!(
        "variant: fcos\nversion: 1.5.0\npasswd:\n  users:\n    - name: core\n      ssh_authorized_keys: [\"{SSH_KEY}\"]\n\
         storage:\n  filesystems:\n    - device: /dev/vdb\n      format: xfs\n"
    );
    put_source(
        &env,
        "rejected-src",
        &[("value", rejected.as_bytes()), ("format", b"butane")],
    )
    .await;
    ignition_config(&env, "rejected", "rejected-src", None, "").await;
    let ready = wait_ready(&env, "rejected", "False", "UnsupportedButaneField").await;
    assert!(ready.message.contains("storage.filesystems"), "{}", ready.message);
    wait_event(&env, "rejected", "Warning", "UnsupportedButaneField").await;
    assert!(secrets(&env).get_opt("rejected").await.unwrap().is_none());
    assert_no_content_leaked(&env, "rejected").await;
    env.stop().await;
}

#[tokio::test]
async fn a_foreign_secret_with_the_data_name_is_never_overwritten() {
    let env = Env::start().await;
    let valid = ignition("3.4.0");
    put_source(&env, "src", &[("value", valid.as_bytes())]).await;
    put_source(&env, "taken", &[("value", b"someone else's")]).await;
    ignition_config(&env, "taken", "src", None, "").await;
    wait_ready(&env, "taken", "False", "DataSecretConflict").await;
    wait_event(&env, "taken", "Warning", "DataSecretConflict").await;
    assert_eq!(data_value(&env, "taken").await.as_deref(), Some(&b"someone else's"[..]));

    // Once it is gone, ours is written.
    secrets(&env).delete("taken", &DeleteParams::default()).await.unwrap();
    wait_ready(&env, "taken", "True", "DataSecretCreated").await;
    wait_data(&env, "taken", valid.as_bytes()).await;
    env.stop().await;
}

#[tokio::test]
async fn a_create_that_finds_the_data_secret_there_reads_it_and_applies() {
    // The Secret cache has no data Secret, so it is created unread; a 409 says the cache was
    // behind, so it is read, and the write becomes an apply.
    let env = Env::start().await;
    let valid = ignition("3.4.0");
    put_source(&env, "src", &[("value", valid.as_bytes())]).await;
    let server = env.server();
    server.reset_counts();
    server.inject_fault(
        memkube::Fault::new("create", "secrets", 409)
            .reason("AlreadyExists")
            .message("secrets \"raced\" already exists"),
    );
    ignition_config(&env, "raced", "src", None, "").await;
    wait_ready(&env, "raced", "True", "DataSecretCreated").await;
    wait_data(&env, "raced", valid.as_bytes()).await;
    assert_eq!(server.request_count("create", "secrets", ""), 1, "one create, refused");
    assert_eq!(server.request_count("patch", "secrets", ""), 1, "then one apply");
    assert!(
        server.request_count("get", "secrets", "") >= 2,
        "the source and, after the 409, the data Secret were read"
    );
    env.stop().await;
}

#[tokio::test]
async fn paused_by_annotation_or_cluster_writes_nothing_until_resumed() {
    let env = Env::start().await;
    let first = ignition("3.4.0");
    put_source(&env, "src", &[("value", first.as_bytes())]).await;
    apply_yaml(&env.client, &cluster_yaml("spot")).await;
    ignition_config(&env, "p", "src", None, "cluster.x-k8s.io/cluster-name: spot").await;
    wait_ready(&env, "p", "True", "DataSecretCreated").await;

    let paused = |on: bool| {
        let value = if on { json!("") } else { serde_json::Value::Null };
        json!({"metadata": {"annotations": {"cluster.x-k8s.io/paused": value}}})
    };
    let paused_condition = || async {
        let status = configs(&env).get("p").await.unwrap().status.unwrap();
        condition::find(&status.conditions, condition::PAUSED).map(|c| c.status.clone())
    };
    configs(&env)
        .patch("p", &PatchParams::default(), &Patch::Merge(paused(true)))
        .await
        .unwrap();
    wait_until("Paused=True", || async {
        paused_condition().await.as_deref() == Some("True")
    })
    .await;
    let second = ignition("3.5.0");
    put_source(&env, "src", &[("value", second.as_bytes())]).await;
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    assert_eq!(
        data_value(&env, "p").await.as_deref(),
        Some(first.as_bytes()),
        "no writes while paused"
    );

    configs(&env)
        .patch("p", &PatchParams::default(), &Patch::Merge(paused(false)))
        .await
        .unwrap();
    wait_until("Paused=False", || async {
        paused_condition().await.as_deref() == Some("False")
    })
    .await;
    wait_data(&env, "p", second.as_bytes()).await;

    // The Cluster's spec.paused pauses it too, and unpausing resumes without other changes.
    let clusters: Api<DynamicObject> = Api::namespaced_with(
        env.client.clone(),
        "default",
        &caplv::api::capi::CapiVersion::V1beta1.cluster(),
    );
    let pause = |on: bool| json!({"spec": {"paused": on}});
    clusters
        .patch("spot", &PatchParams::default(), &Patch::Merge(pause(true)))
        .await
        .unwrap();
    wait_until("Paused=True by the Cluster", || async {
        paused_condition().await.as_deref() == Some("True")
    })
    .await;
    put_source(&env, "src", &[("value", first.as_bytes())]).await;
    clusters
        .patch("spot", &PatchParams::default(), &Patch::Merge(pause(false)))
        .await
        .unwrap();
    wait_data(&env, "p", first.as_bytes()).await;
    env.stop().await;
}

#[tokio::test]
async fn the_seed_secret_and_config_yield_ready_data() {
    let env = Env::start().await;
    apply_yaml(
        &env.client,
        include_str!("../../examples/seed/04-secret-worker-ignition.yaml"),
    )
    .await;
    let seed: IgnitionConfig =
        serde_yaml::from_str(include_str!("../../examples/seed/reference/ignitionconfig.yaml")).unwrap();
    configs(&env).create(&PostParams::default(), &seed).await.unwrap();
    let name = seed.name_any();
    wait_ready(&env, &name, "True", "DataSecretCreated").await;
    let source = secrets(&env).get("worker-ignition").await.unwrap().data.unwrap();
    assert_eq!(data_value(&env, &name).await, Some(source["value"].0.clone()));
    env.stop().await;
}

//! Test support: a memkube server with the CAPI CRDs, the fake provider kinds and helpers
//! that wait on conditions with deadlines.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers fail loudly by design

use std::time::Duration;

use capi_sim::{CapiVersions, Simulator, SimulatorBuilder, SimulatorHandle};
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams};
use memkube::Server;
use serde_json::{Value, json};

pub const INFRA: &str = "infrastructure.cluster.x-k8s.io";
pub const BOOT: &str = "bootstrap.cluster.x-k8s.io";
pub const NS: &str = "default";
pub const WAIT: Duration = Duration::from_secs(15);

pub fn fake_crd(group: &str, kind: &str, with_v1beta2_label: bool) -> Value {
    let plural = format!("{}s", kind.to_lowercase());
    let mut labels = json!({"cluster.x-k8s.io/v1beta1": "v1alpha1"});
    if with_v1beta2_label {
        labels["cluster.x-k8s.io/v1beta2"] = json!("v1alpha1");
    }
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.{group}"), "labels": labels},
        "spec": {
            "group": group,
            "names": {"kind": kind, "listKind": format!("{kind}List"), "plural": plural,
                      "singular": kind.to_lowercase()},
            "scope": "Namespaced",
            "versions": [{
                "name": "v1alpha1", "served": true, "storage": true,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                    "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}
                }}}
            }]
        }
    })
}

pub fn ar(group: &str, version: &str, kind: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(group, version, kind),
        &format!("{}s", kind.to_lowercase()),
    )
}

pub struct Env {
    pub server: Server,
    pub client: kube::Client,
    pub versions: CapiVersions,
    pub sim: Option<SimulatorHandle>,
}

impl Env {
    pub async fn new(versions: CapiVersions) -> Env {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(
                tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "capi_sim=debug".into()),
            )
            .with_test_writer()
            .try_init();
        let server = Server::new();
        let client = server.client();
        capi_sim::install(&client, versions).await.unwrap();
        Env {
            server,
            client,
            versions,
            sim: None,
        }
    }

    pub fn install_fakes(&self) {
        self.server
            .install_crds(&[
                fake_crd(INFRA, "FakeCluster", true),
                fake_crd(INFRA, "FakeMachine", true),
                fake_crd(BOOT, "FakeConfig", true),
            ])
            .unwrap();
    }

    pub fn start(&mut self, configure: impl FnOnce(SimulatorBuilder) -> SimulatorBuilder) {
        let b = Simulator::builder(self.client.clone())
            .versions(self.versions)
            .drain_retry(Duration::from_millis(100));
        self.sim = Some(configure(b).build().spawn());
    }

    pub fn capi(&self, kind: &str) -> ApiResource {
        ar("cluster.x-k8s.io", self.versions.spoken(), kind)
    }

    pub fn api(&self, ar: &ApiResource) -> Api<DynamicObject> {
        Api::namespaced_with(self.client.clone(), NS, ar)
    }

    pub async fn create(&self, ar: &ApiResource, obj: Value) {
        let obj: DynamicObject = serde_json::from_value(obj).unwrap();
        self.api(ar).create(&PostParams::default(), &obj).await.unwrap();
    }

    pub async fn patch(&self, ar: &ApiResource, name: &str, patch: Value) {
        self.api(ar)
            .patch(name, &PatchParams::default(), &Patch::Merge(patch))
            .await
            .unwrap();
    }

    pub async fn patch_status(&self, ar: &ApiResource, name: &str, status: Value) {
        self.api(ar)
            .patch_status(name, &PatchParams::default(), &Patch::Merge(json!({"status": status})))
            .await
            .unwrap();
    }

    pub fn get(&self, ar: &ApiResource, name: &str) -> Option<Value> {
        self.server.get_object(&ar.api_version, &ar.kind, NS, name)
    }

    pub fn get_node(&self, name: &str) -> Option<Value> {
        self.server.get_object("v1", "Node", "", name)
    }

    /// Waits until `pred` holds for the object (absent objects are passed as Null).
    pub async fn wait(&self, what: &str, ar: &ApiResource, name: &str, mut pred: impl FnMut(&Value) -> bool) -> Value {
        let (av, kind) = (ar.api_version.clone(), ar.kind.clone());
        let ok = self
            .server
            .wait_for(WAIT, |s| {
                pred(&s.get_object(&av, &kind, NS, name).unwrap_or(Value::Null))
            })
            .await;
        let now = self.get(ar, name).unwrap_or(Value::Null);
        assert!(ok, "timed out waiting for {what}; {kind} {name} is now:\n{now:#}");
        now
    }

    pub async fn wait_node(&self, what: &str, name: &str, mut pred: impl FnMut(&Value) -> bool) -> Value {
        let ok = self
            .server
            .wait_for(WAIT, |s| {
                pred(&s.get_object("v1", "Node", "", name).unwrap_or(Value::Null))
            })
            .await;
        let now = self.get_node(name).unwrap_or(Value::Null);
        assert!(ok, "timed out waiting for {what}; Node {name} is now:\n{now:#}");
        now
    }

    pub fn infra_ref(&self, kind: &str, name: &str) -> Value {
        if self.versions.is_v1beta2() {
            json!({"apiGroup": INFRA, "kind": kind, "name": name})
        } else {
            json!({"apiVersion": format!("{INFRA}/v1alpha1"), "kind": kind, "name": name})
        }
    }

    pub fn boot_ref(&self, name: &str) -> Value {
        if self.versions.is_v1beta2() {
            json!({"apiGroup": BOOT, "kind": "FakeConfig", "name": name})
        } else {
            json!({"apiVersion": format!("{BOOT}/v1alpha1"), "kind": "FakeConfig", "name": name})
        }
    }

    /// FakeCluster + Cluster `spot`, infrastructure ready.
    pub async fn ready_cluster(&self) {
        let fc = ar(INFRA, "v1alpha1", "FakeCluster");
        self.create(
            &fc,
            json!({
                "apiVersion": format!("{INFRA}/v1alpha1"), "kind": "FakeCluster",
                "metadata": {"name": "spot", "namespace": NS},
                "spec": {"controlPlaneEndpoint": {"host": "api.spot.example", "port": 6443}}
            }),
        )
        .await;
        self.create(
            &self.capi("Cluster"),
            json!({
                "apiVersion": format!("cluster.x-k8s.io/{}", self.versions.spoken()), "kind": "Cluster",
                "metadata": {"name": "spot", "namespace": NS},
                "spec": {"infrastructureRef": self.infra_ref("FakeCluster", "spot")}
            }),
        )
        .await;
        self.patch_status(&fc, "spot", provisioned(self.versions)).await;
        let infra_field = if self.versions.is_v1beta2() {
            "/status/initialization/infrastructureProvisioned"
        } else {
            "/status/infrastructureReady"
        };
        self.wait("Cluster infrastructure ready", &self.capi("Cluster"), "spot", |c| {
            c.pointer(infra_field) == Some(&json!(true))
        })
        .await;
    }

    /// FakeConfig + FakeMachine + Machine `name` (no status yet).
    pub async fn machine(&self, name: &str, extra_spec: Value, annotations: Value, finalizer: bool) {
        let fin = if finalizer {
            json!(["test.fake/hold"])
        } else {
            json!([])
        };
        self.create(
            &ar(BOOT, "v1alpha1", "FakeConfig"),
            json!({
                "apiVersion": format!("{BOOT}/v1alpha1"), "kind": "FakeConfig",
                "metadata": {"name": name, "namespace": NS, "finalizers": fin}, "spec": {}
            }),
        )
        .await;
        self.create(
            &ar(INFRA, "v1alpha1", "FakeMachine"),
            json!({
                "apiVersion": format!("{INFRA}/v1alpha1"), "kind": "FakeMachine",
                "metadata": {"name": name, "namespace": NS, "finalizers": fin},
                "spec": {"providerID": format!("fake:///{name}")}
            }),
        )
        .await;
        let mut spec = json!({
            "clusterName": "spot",
            "bootstrap": {"configRef": self.boot_ref(name)},
            "infrastructureRef": self.infra_ref("FakeMachine", name),
        });
        if let (Some(s), Some(extra)) = (spec.as_object_mut(), extra_spec.as_object()) {
            s.extend(extra.clone());
        }
        self.create(
            &self.capi("Machine"),
            json!({
                "apiVersion": format!("cluster.x-k8s.io/{}", self.versions.spoken()), "kind": "Machine",
                "metadata": {"name": name, "namespace": NS, "annotations": annotations,
                             "labels": {"node-role.kubernetes.io/worker": "", "app": "x"}},
                "spec": spec
            }),
        )
        .await;
    }

    /// Marks bootstrap and infrastructure ready for machine `name`.
    pub async fn provider_ready(&self, name: &str) {
        let mut boot = provisioned(self.versions);
        if self.versions.is_v1beta2() {
            boot = json!({"initialization": {"dataSecretCreated": true}});
        }
        boot["dataSecretName"] = json!(format!("{name}-data"));
        self.patch_status(&ar(BOOT, "v1alpha1", "FakeConfig"), name, boot).await;
        let mut infra = provisioned(self.versions);
        infra["addresses"] = addresses(name);
        self.patch_status(&ar(INFRA, "v1alpha1", "FakeMachine"), name, infra)
            .await;
    }

    pub fn node(&self, name: &str, provider_id: &str) {
        self.server
            .put_object(json!({
                "apiVersion": "v1", "kind": "Node",
                "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
                "spec": {"providerID": provider_id},
                "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                    "lastHeartbeatTime": "2026-11-30T00:00:00Z", "lastTransitionTime": "2026-11-30T00:00:00Z"}]}
            }))
            .unwrap();
    }
}

pub fn addresses(name: &str) -> Value {
    json!([
        {"type": "InternalDNS", "address": format!("{name}.example")},
        {"type": "Hostname", "address": name},
        {"type": "InternalIP", "address": "10.0.0.5"}
    ])
}

pub fn provisioned(versions: CapiVersions) -> Value {
    if versions.is_v1beta2() {
        json!({"initialization": {"provisioned": true}})
    } else {
        json!({"ready": true})
    }
}

pub fn phase(v: &Value) -> &str {
    v.pointer("/status/phase").and_then(Value::as_str).unwrap_or("")
}

pub fn condition<'a>(v: &'a Value, ty: &str) -> Option<&'a Value> {
    v.pointer("/status/conditions")?
        .as_array()?
        .iter()
        .find(|c| c["type"] == ty)
}

pub fn reason<'a>(v: &'a Value, ty: &str) -> &'a str {
    condition(v, ty).and_then(|c| c["reason"].as_str()).unwrap_or("")
}

pub fn controller_owner(v: &Value) -> Option<(String, String)> {
    v.pointer("/metadata/ownerReferences")?
        .as_array()?
        .iter()
        .find(|r| r["controller"] == json!(true))
        .map(|r| {
            (
                r["kind"].as_str().unwrap_or("").into(),
                r["uid"].as_str().unwrap_or("").into(),
            )
        })
}

pub fn uid(v: &Value) -> String {
    v.pointer("/metadata/uid").and_then(Value::as_str).unwrap_or("").into()
}

pub fn deleting(v: &Value) -> bool {
    v.pointer("/metadata/deletionTimestamp").is_some()
}

/// memkube garbage-collects objects whose owner uid does not exist and has no DaemonSet or
/// ReplicaSet kinds, so Pod owners point at this ConfigMap's uid under the kind drain checks.
pub fn owner_uid(server: &Server) -> String {
    let cm = server
        .put_object(json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "owner", "namespace": NS}}))
        .unwrap();
    uid(&cm)
}

pub fn pod(name: &str, node: &str, labels: Value, annotations: Value, owner: Option<(&str, &str)>) -> Value {
    let mut p = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": NS, "labels": labels, "annotations": annotations},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "busybox"}]},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
    });
    if let Some((kind, uid)) = owner {
        p["metadata"]["ownerReferences"] = json!([{
            "apiVersion": "apps/v1", "kind": kind, "name": "owner", "uid": uid, "controller": true
        }]);
    }
    p
}

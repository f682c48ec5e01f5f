//! capi-sim against genuine Cluster API core: one Machine lifecycle, with this test playing
//! every provider (InfraCluster, externally managed control plane, bootstrap config,
//! InfraMachine) and the kubelet (it creates the Node), run once on memkube + capi-sim and
//! once on the genuine control plane of `scripts/control-plane.sh` (kube-apiserver,
//! kube-controller-manager, Cluster API core of the contract in `CAPLV_CAPI_VERSION`). At
//! each checkpoint both sides are awaited until the same condition holds, and then the facts
//! caplv's tests rely on are compared: finalizer, cluster-name label, ownerRefs, adoption,
//! copied `dataSecretName`/`providerID`/addresses, phases, nodeRef by providerID, Node
//! annotations, cordon and the deletion order. Differences are either fixed in capi-sim or
//! listed in its crate docs and asserted in [`DOCUMENTED`].
//!
//! Run by `scripts/genuine-test.sh` for both contracts.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers fail loudly by design

#[allow(dead_code)] // shared with contract.rs, which uses the rest
mod support;

use std::time::Duration;

use capi_sim::{CapiVersions, Simulator, SimulatorHandle};
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use support::{BOOT, INFRA, ar};

const CONTROL_PLANE: &str = "controlplane.cluster.x-k8s.io";
const PROVIDER_VERSION: &str = "v1alpha1";
/// Genuine core reconciles within seconds; drains and Node deletion go through its
/// ClusterCache, which connects once the Cluster's infrastructure is ready.
const DEADLINE: Duration = Duration::from_secs(90);
const NEEDS_ENV: &str = "needs the genuine control plane: run scripts/genuine-test.sh, or source DIR/env of \
`scripts/control-plane.sh up DIR` (KUBECONFIG, CAPLV_CAPI_VERSION)";

/// One side: a client, its namespace, and the simulator when the side is memkube.
struct Side {
    name: &'static str,
    client: kube::Client,
    ns: String,
    versions: CapiVersions,
    kubeconfig: String,
    sim: Option<(memkube::Server, SimulatorHandle)>,
}

fn versions_from_env() -> CapiVersions {
    match std::env::var("CAPLV_CAPI_VERSION").as_deref() {
        Ok("v1beta2") => CapiVersions::V1beta2,
        Ok("v1beta1") => CapiVersions::V1beta1,
        other => panic!("CAPLV_CAPI_VERSION is {other:?}: {NEEDS_ENV}"),
    }
}

/// The provider CRDs: contract-labelled for both contracts, free-form spec and status.
fn provider_crds() -> Vec<Value> {
    vec![
        support::fake_crd(INFRA, "DiffCluster", true),
        support::fake_crd(INFRA, "DiffMachine", true),
        support::fake_crd(BOOT, "DiffConfig", true),
        support::fake_crd(CONTROL_PLANE, "DiffControlPlane", true),
    ]
}

impl Side {
    async fn memkube(ns: &str, versions: CapiVersions) -> Side {
        let server = memkube::Server::new();
        let client = server.client();
        capi_sim::install(&client, versions).await.unwrap();
        server.install_crds(&provider_crds()).unwrap();
        let sim = Simulator::builder(client.clone())
            .versions(versions)
            .drain_retry(Duration::from_millis(100))
            .build()
            .spawn();
        let side = Side {
            name: "capi-sim",
            client,
            ns: ns.into(),
            versions,
            kubeconfig: "apiVersion: v1\nkind: Config\n".into(),
            sim: Some((server, sim)),
        };
        side.namespace().await;
        side
    }

    async fn genuine(ns: &str, versions: CapiVersions) -> Side {
        let path = std::env::var("KUBECONFIG").unwrap_or_else(|_| panic!("KUBECONFIG is not set: {NEEDS_ENV}"));
        let kubeconfig = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {path}: {e}: {NEEDS_ENV}"));
        let parsed = kube::config::Kubeconfig::read_from(&path).unwrap();
        let config = kube::Config::from_custom_kubeconfig(parsed, &Default::default())
            .await
            .unwrap();
        assert!(
            config.cluster_url.host() == Some("127.0.0.1"),
            "the genuine control plane must be on 127.0.0.1, not {}",
            config.cluster_url
        );
        let client = kube::Client::try_from(config).unwrap();
        let side = Side {
            name: "genuine CAPI",
            client,
            ns: ns.into(),
            versions,
            kubeconfig,
            sim: None,
        };
        let crds: Api<DynamicObject> = Api::all_with(
            side.client.clone(),
            &ar("apiextensions.k8s.io", "v1", "CustomResourceDefinition"),
        );
        for crd in provider_crds() {
            let name = crd["metadata"]["name"].as_str().unwrap().to_string();
            let obj: DynamicObject = serde_json::from_value(crd).unwrap();
            crds.patch(
                &name,
                &PatchParams::apply("genuine-capi-test").force(),
                &Patch::Apply(&obj),
            )
            .await
            .unwrap();
            side.until(&format!("CRD {name} established"), || {
                let crds = crds.clone();
                let name = name.clone();
                async move {
                    let c = crds.get(&name).await.ok()?;
                    let conds = c.data.pointer("/status/conditions")?.as_array()?.clone();
                    conds
                        .iter()
                        .any(|c| c["type"] == "Established" && c["status"] == "True")
                        .then_some(())
                }
            })
            .await;
        }
        side.namespace().await;
        side
    }

    async fn namespace(&self) {
        let api: Api<DynamicObject> = Api::all_with(self.client.clone(), &ar("", "v1", "Namespace"));
        let ns: DynamicObject =
            serde_json::from_value(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": self.ns}}))
                .unwrap();
        api.create(&PostParams::default(), &ns).await.unwrap();
    }

    fn api(&self, ar: &ApiResource) -> Api<DynamicObject> {
        Api::namespaced_with(self.client.clone(), &self.ns, ar)
    }

    fn capi(&self, kind: &str) -> ApiResource {
        ar("cluster.x-k8s.io", self.versions.spoken(), kind)
    }

    fn nodes(&self) -> Api<DynamicObject> {
        Api::all_with(self.client.clone(), &ar("", "v1", "Node"))
    }

    async fn create(&self, ar: &ApiResource, obj: Value) {
        let obj: DynamicObject = serde_json::from_value(obj).unwrap();
        self.api(ar)
            .create(&PostParams::default(), &obj)
            .await
            .unwrap_or_else(|e| panic!("{}: creating {} failed: {e}", self.name, ar.kind));
    }

    async fn patch(&self, ar: &ApiResource, name: &str, patch: Value) {
        self.api(ar)
            .patch(name, &PatchParams::default(), &Patch::Merge(patch))
            .await
            .unwrap();
    }

    async fn patch_status(&self, ar: &ApiResource, name: &str, status: Value) {
        self.api(ar)
            .patch_status(name, &PatchParams::default(), &Patch::Merge(json!({"status": status})))
            .await
            .unwrap();
    }

    async fn get(&self, ar: &ApiResource, name: &str) -> Value {
        self.api(ar)
            .get_opt(name)
            .await
            .unwrap()
            .map_or(Value::Null, |o| serde_json::to_value(o).unwrap())
    }

    async fn node(&self, name: &str) -> Value {
        self.nodes()
            .get_opt(name)
            .await
            .unwrap()
            .map_or(Value::Null, |o| serde_json::to_value(o).unwrap())
    }

    /// Poll `f` until it returns Some; panics naming `what` at the deadline.
    async fn until<T, F, Fut>(&self, what: &str, mut f: F) -> T
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Option<T>>,
    {
        let end = tokio::time::Instant::now() + DEADLINE;
        loop {
            if let Some(v) = f().await {
                return v;
            }
            assert!(
                tokio::time::Instant::now() < end,
                "{}: timed out after {DEADLINE:?} waiting for {what}",
                self.name
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Wait until the object satisfies `pred` (absent objects are Null), and return it.
    async fn wait(&self, what: &str, ar: &ApiResource, name: &str, pred: impl Fn(&Value) -> bool) -> Value {
        let end = tokio::time::Instant::now() + DEADLINE;
        loop {
            let o = self.get(ar, name).await;
            if pred(&o) {
                return o;
            }
            assert!(
                tokio::time::Instant::now() < end,
                "{}: timed out after {DEADLINE:?} waiting for {what}; {} {name} is:\n{o:#}",
                self.name,
                ar.kind
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// A reference to a provider object as this contract spells it.
    fn reference(&self, group: &str, kind: &str, name: &str) -> Value {
        if self.versions.is_v1beta2() {
            json!({"apiGroup": group, "kind": kind, "name": name})
        } else {
            json!({"apiVersion": format!("{group}/{PROVIDER_VERSION}"), "kind": kind, "name": name, "namespace": self.ns})
        }
    }
}

/// The facts of an object caplv's tests rely on.
fn owner_refs(o: &Value) -> Value {
    let refs = o
        .pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    Value::Array(
        refs.iter()
            .map(|r| json!({"kind": r["kind"], "name": r["name"], "controller": r.get("controller"), "blockOwnerDeletion": r.get("blockOwnerDeletion")}))
            .collect(),
    )
}

fn provider_facts(o: &Value) -> Value {
    json!({
        "exists": !o.is_null(),
        "ownerReferences": owner_refs(o),
        "clusterNameLabel": o.pointer("/metadata/labels/cluster.x-k8s.io~1cluster-name"),
        "deleting": o.pointer("/metadata/deletionTimestamp").is_some(),
    })
}

fn machine_facts(m: &Value) -> Value {
    json!({
        "exists": !m.is_null(),
        "finalizers": m.pointer("/metadata/finalizers"),
        "clusterNameLabel": m.pointer("/metadata/labels/cluster.x-k8s.io~1cluster-name"),
        "ownerReferences": owner_refs(m),
        "dataSecretName": m.pointer("/spec/bootstrap/dataSecretName"),
        "providerID": m.pointer("/spec/providerID"),
        "phase": m.pointer("/status/phase"),
        "nodeRef": m.pointer("/status/nodeRef/name"),
        "addresses": m.pointer("/status/addresses"),
        "bootstrapReady": m.pointer("/status/bootstrapReady").or(m.pointer("/status/initialization/bootstrapDataSecretCreated")),
        "infrastructureReady": m.pointer("/status/infrastructureReady").or(m.pointer("/status/initialization/infrastructureProvisioned")),
        "deleting": m.pointer("/metadata/deletionTimestamp").is_some(),
    })
}

fn node_facts(n: &Value) -> Value {
    let capi_annotations: serde_json::Map<String, Value> = n
        .pointer("/metadata/annotations")
        .and_then(Value::as_object)
        .map(|a| {
            a.iter()
                .filter(|(k, _)| k.starts_with("cluster.x-k8s.io/"))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        })
        .unwrap_or_default();
    json!({
        "exists": !n.is_null(),
        "unschedulable": n.pointer("/spec/unschedulable"),
        "capiAnnotations": capi_annotations,
    })
}

fn phase_is(m: &Value, p: &str) -> bool {
    m.pointer("/status/phase") == Some(&json!(p))
}

/// The scenario: returns the facts at each checkpoint.
async fn scenario(s: &Side) -> Value {
    let mut t = serde_json::Map::new();
    let (cluster_ar, machine_ar) = (s.capi("Cluster"), s.capi("Machine"));
    let infra_cluster_ar = ar(INFRA, PROVIDER_VERSION, "DiffCluster");
    let cp_ar = ar(CONTROL_PLANE, PROVIDER_VERSION, "DiffControlPlane");
    let config_ar = ar(BOOT, PROVIDER_VERSION, "DiffConfig");
    let infra_ar = ar(INFRA, PROVIDER_VERSION, "DiffMachine");
    let secret_ar = ar("", "v1", "Secret");
    let endpoint = json!({"host": "127.0.0.1", "port": 6443});

    // The workload cluster is the management cluster: core's ClusterCache connects with it.
    s.create(
        &secret_ar,
        json!({"apiVersion": "v1", "kind": "Secret", "type": "cluster.x-k8s.io/secret",
        "metadata": {"name": "c-kubeconfig", "labels": {"cluster.x-k8s.io/cluster-name": "c"}},
        "stringData": {"value": s.kubeconfig}}),
    )
    .await;
    s.create(
        &infra_cluster_ar,
        json!({"apiVersion": format!("{INFRA}/{PROVIDER_VERSION}"), "kind": "DiffCluster",
        "metadata": {"name": "c"}, "spec": {"controlPlaneEndpoint": endpoint}}),
    )
    .await;
    s.create(
        &cp_ar,
        json!({"apiVersion": format!("{CONTROL_PLANE}/{PROVIDER_VERSION}"), "kind": "DiffControlPlane",
        "metadata": {"name": "c"}, "spec": {"controlPlaneEndpoint": endpoint}}),
    )
    .await;
    s.create(
        &cluster_ar,
        json!({"apiVersion": cluster_ar.api_version, "kind": "Cluster", "metadata": {"name": "c"},
        "spec": {"infrastructureRef": s.reference(INFRA, "DiffCluster", "c"),
                 "controlPlaneRef": s.reference(CONTROL_PLANE, "DiffControlPlane", "c")}}),
    )
    .await;
    s.patch_status(
        &infra_cluster_ar,
        "c",
        json!({"ready": true, "initialization": {"provisioned": true}}),
    )
    .await;
    s.patch_status(
        &cp_ar,
        "c",
        json!({"ready": true, "initialized": true, "externalManagedControlPlane": true,
        "initialization": {"controlPlaneInitialized": true}}),
    )
    .await;
    let cluster = s
        .wait("the Cluster to be Provisioned", &cluster_ar, "c", |c| {
            phase_is(c, "Provisioned")
        })
        .await;
    t.insert(
        "cluster".into(),
        json!({
            "phase": cluster.pointer("/status/phase"),
            "controlPlaneEndpoint": cluster.pointer("/spec/controlPlaneEndpoint"),
            "finalizers": cluster.pointer("/metadata/finalizers"),
        }),
    );
    let ic = s
        .wait("the InfraCluster owned", &infra_cluster_ar, "c", |o| {
            !owner_refs(o).as_array().unwrap().is_empty()
        })
        .await;
    t.insert("infra-cluster".into(), provider_facts(&ic));
    let cp = s
        .wait("the control plane owned", &cp_ar, "c", |o| {
            !owner_refs(o).as_array().unwrap().is_empty()
        })
        .await;
    t.insert("control-plane".into(), provider_facts(&cp));

    // A stand-alone Machine: adopted by its Cluster, owning its provider objects.
    s.create(
        &config_ar,
        json!({"apiVersion": format!("{BOOT}/{PROVIDER_VERSION}"), "kind": "DiffConfig",
        "metadata": {"name": "m"}, "spec": {}}),
    )
    .await;
    s.create(
        &infra_ar,
        json!({"apiVersion": format!("{INFRA}/{PROVIDER_VERSION}"), "kind": "DiffMachine",
        "metadata": {"name": "m", "finalizers": ["diff.caplv.test/hold"]}, "spec": {}}),
    )
    .await;
    s.create(
        &machine_ar,
        json!({"apiVersion": machine_ar.api_version, "kind": "Machine", "metadata": {"name": "m"},
        "spec": {"clusterName": "c", "version": "v1.33.0",
                 "bootstrap": {"configRef": s.reference(BOOT, "DiffConfig", "m")},
                 "infrastructureRef": s.reference(INFRA, "DiffMachine", "m")}}),
    )
    .await;
    let m = s
        .wait("the Machine finalized, labelled and adopted", &machine_ar, "m", |m| {
            m.pointer("/metadata/finalizers").is_some()
                && m.pointer("/metadata/labels/cluster.x-k8s.io~1cluster-name").is_some()
                && !owner_refs(m).as_array().unwrap().is_empty()
                && m.pointer("/status/phase").is_some()
        })
        .await;
    t.insert("machine-created".into(), machine_facts(&m));
    for (step, kind_ar) in [("config-owned", &config_ar), ("infra-owned", &infra_ar)] {
        let o = s
            .wait("the provider object owned by the Machine", kind_ar, "m", |o| {
                owner_refs(o).as_array().unwrap().iter().any(|r| r["kind"] == "Machine")
                    && o.pointer("/metadata/labels/cluster.x-k8s.io~1cluster-name").is_some()
            })
            .await;
        t.insert(step.into(), provider_facts(&o));
    }

    // Bootstrap data ready: dataSecretName is copied.
    s.create(
        &secret_ar,
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "m-data"}, "data": {"value": "e30="}}),
    )
    .await;
    s.patch_status(
        &config_ar,
        "m",
        json!({"ready": true, "dataSecretName": "m-data",
        "initialization": {"dataSecretCreated": true}}),
    )
    .await;
    let m = s
        .wait("dataSecretName copied", &machine_ar, "m", |m| {
            m.pointer("/spec/bootstrap/dataSecretName") == Some(&json!("m-data")) && phase_is(m, "Provisioning")
        })
        .await;
    t.insert("bootstrap-ready".into(), machine_facts(&m));

    // Infrastructure provisioned: providerID and addresses are copied.
    let addresses = json!([{"type": "InternalIP", "address": "10.0.0.7"}, {"type": "Hostname", "address": "m-node"}]);
    s.patch(&infra_ar, "m", json!({"spec": {"providerID": "diff:///m"}}))
        .await;
    s.patch_status(
        &infra_ar,
        "m",
        json!({"ready": true, "addresses": addresses, "initialization": {"provisioned": true}}),
    )
    .await;
    let m = s
        .wait("providerID copied, Provisioned", &machine_ar, "m", |m| {
            m.pointer("/spec/providerID") == Some(&json!("diff:///m")) && phase_is(m, "Provisioned")
        })
        .await;
    t.insert("infra-ready".into(), machine_facts(&m));

    // The Node with the same providerID: nodeRef, Running, annotations on the Node.
    let node: DynamicObject = serde_json::from_value(json!({"apiVersion": "v1", "kind": "Node",
        "metadata": {"name": format!("{}-m-node", s.ns)}, "spec": {"providerID": "diff:///m"}}))
    .unwrap();
    s.nodes().create(&PostParams::default(), &node).await.unwrap();
    let node_name = format!("{}-m-node", s.ns);
    let m = s
        .wait("nodeRef, Running", &machine_ar, "m", |m| phase_is(m, "Running"))
        .await;
    t.insert("running".into(), machine_facts(&m));
    // Core annotates the Node right after linking it; capi-sim does not (documented).
    let n = s
        .until("the Node annotated (core)", || async {
            let n = s.node(&node_name).await;
            (s.sim.is_some() || n.pointer("/metadata/annotations/cluster.x-k8s.io~1machine").is_some()).then_some(n)
        })
        .await;
    t.insert("node".into(), node_facts(&n));

    // Deletion: drain (cordon), then the provider objects, then the Node, then the finalizer.
    s.api(&machine_ar).delete("m", &DeleteParams::default()).await.unwrap();
    let infra = s
        .wait("the InfraMachine deleted by core", &infra_ar, "m", |o| {
            o.pointer("/metadata/deletionTimestamp").is_some()
        })
        .await;
    t.insert("deleting-infra".into(), provider_facts(&infra));
    // Core writes the phase at the end of the reconcile that deleted the InfraMachine: wait
    // for it rather than read the Machine at that instant.
    let m = s
        .wait("the Machine Deleting", &machine_ar, "m", |m| phase_is(m, "Deleting"))
        .await;
    t.insert("deleting-machine".into(), machine_facts(&m));
    t.insert("deleting-node".into(), node_facts(&s.node(&node_name).await));
    s.patch(&infra_ar, "m", json!({"metadata": {"finalizers": null}})).await;
    s.wait("the Machine gone", &machine_ar, "m", Value::is_null).await;
    t.insert("deleted-config".into(), provider_facts(&s.get(&config_ar, "m").await));
    t.insert("deleted-node".into(), node_facts(&s.node(&node_name).await));
    Value::Object(t)
}

/// Places where capi-sim deliberately differs from core (see its crate docs), asserted on
/// both sides: (pointer, capi-sim, genuine).
const DOCUMENTED: &[(&str, &str, &str)] = &[
    // Cluster deletion is not simulated (garbage collection removes what the Cluster owns).
    ("/cluster/finalizers", "null", r#"["cluster.cluster.x-k8s.io"]"#),
];

async fn compare(test: &str) {
    let versions = versions_from_env();
    let ns = format!(
        "{test}-{:x}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis()
            % 0xfffff
    );
    let genuine = Side::genuine(&ns, versions).await;
    let sim = Side::memkube(&ns, versions).await;
    let a = scenario(&sim).await;
    let b = scenario(&genuine).await;
    let (mut a2, mut b2) = (a.clone(), b.clone());
    let mut wrong = vec![];
    for (p, va, vb) in DOCUMENTED {
        let (va, vb): (Value, Value) = (serde_json::from_str(va).unwrap(), serde_json::from_str(vb).unwrap());
        if a.pointer(p) != Some(&va) || b.pointer(p) != Some(&vb) {
            wrong.push(format!(
                "  {p}: documented capi-sim {va} / core {vb}, now {:?} / {:?}",
                a.pointer(p),
                b.pointer(p)
            ));
        }
        *a2.pointer_mut(p).unwrap() = Value::Null;
        *b2.pointer_mut(p).unwrap() = Value::Null;
    }
    let mut diffs = vec![];
    diff(&a2, &b2, String::new(), &mut diffs);
    if let Some((_, handle)) = sim.sim {
        tokio::time::timeout(DEADLINE, handle.stop()).await.unwrap().unwrap();
    }
    let _ = Api::<DynamicObject>::all_with(genuine.client.clone(), &ar("", "v1", "Namespace"))
        .delete(&ns, &DeleteParams::default())
        .await;
    assert!(
        wrong.is_empty() && diffs.is_empty(),
        "capi-sim and Cluster API core ({}) disagree.\nDocumented differences that no longer hold:\n{}\nUndocumented differences:\n{}\n\ncapi-sim:\n{a:#}\n\ncore:\n{b:#}",
        versions.spoken(),
        wrong.join("\n"),
        diffs.join("\n"),
    );
}

/// Every leaf place where `a` and `b` differ, as `pointer: a / b`.
fn diff(a: &Value, b: &Value, at: String, out: &mut Vec<String>) {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let keys: std::collections::BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            for k in keys {
                let p = format!("{at}/{}", k.replace('~', "~0").replace('/', "~1"));
                diff(
                    x.get(k).unwrap_or(&Value::Null),
                    y.get(k).unwrap_or(&Value::Null),
                    p,
                    out,
                );
            }
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
            for (i, (l, r)) in x.iter().zip(y).enumerate() {
                diff(l, r, format!("{at}/{i}"), out);
            }
        }
        _ if a == b => {}
        _ => out.push(format!("  {at}: capi-sim {a} / core {b}")),
    }
}

#[tokio::test]
#[ignore = "needs the genuine control plane: scripts/genuine-test.sh runs it"]
async fn machine_lifecycle_matches_core() {
    compare("capi").await;
}

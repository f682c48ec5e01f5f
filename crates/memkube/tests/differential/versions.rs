//! resourceVersion and generation: every write bumps the resourceVersion, no-op writes do
//! not; generation follows spec changes only (any non-metadata change on a kind without a
//! status subresource); status is ignored on create and main-resource writes and written
//! only through `/status`.

use super::crd::{gadget, plain};
use super::side::{Reply, Side};
use super::transcript::{Transcript, differential};
use serde_json::{Value, json};

/// generation, resourceVersion label, spec and status of a write's answer.
fn facts(t: &mut Transcript, r: &Reply) -> Value {
    let rv = r
        .body
        .pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
        .unwrap_or("");
    json!({
        "code": r.code,
        "generation": r.body.pointer("/metadata/generation"),
        "rv": t.rv(rv),
        "spec": r.body.get("spec"),
        "status": r.body.get("status"),
        "reason": r.body.get("reason"),
    })
}

async fn run(s: &Side, t: &mut Transcript, kind: &str, path: &str, body: Value) {
    let step = |name: &str, r: Reply, t: &mut Transcript| {
        let v = facts(t, &r);
        t.record(&format!("{kind}-{name}"), v);
        r
    };
    let coll = path.rsplit_once('/').unwrap().0.to_string();
    let mut with_status = body.clone();
    with_status["status"] = json!({"phase": "Given"});
    let created = step("create-with-status", s.post(&coll, &with_status).await, t);
    step("spec-change", s.merge(path, &json!({"spec": {"size": 2}})).await, t);
    step("spec-same", s.merge(path, &json!({"spec": {"size": 2}})).await, t);
    step(
        "label",
        s.merge(path, &json!({"metadata": {"labels": {"a": "b"}}})).await,
        t,
    );
    step(
        "annotation",
        s.merge(path, &json!({"metadata": {"annotations": {"a": "b"}}})).await,
        t,
    );
    step(
        "status-on-main",
        s.merge(path, &json!({"status": {"phase": "Main"}})).await,
        t,
    );
    step(
        "status-sub",
        s.merge(&format!("{path}/status"), &json!({"status": {"phase": "Sub"}}))
            .await,
        t,
    );
    step(
        "status-sub-same",
        s.merge(&format!("{path}/status"), &json!({"status": {"phase": "Sub"}}))
            .await,
        t,
    );
    step(
        "spec-on-status-sub",
        s.merge(&format!("{path}/status"), &json!({"spec": {"size": 7}})).await,
        t,
    );
    let current = s.get(path).await;
    step("put-same", s.put(path, &current.body).await, t);
    let mut changed = current.body.clone();
    changed["spec"]["size"] = json!(4);
    changed["status"] = json!({"phase": "ViaPut"});
    step("put-spec-and-status", s.put(path, &changed).await, t);
    step(
        "finalizer",
        s.merge(path, &json!({"metadata": {"finalizers": ["diff.caplv.test/hold"]}}))
            .await,
        t,
    );
    step("delete", s.delete(path, &json!({})).await, t);
    step(
        "spec-while-deleting",
        s.merge(path, &json!({"spec": {"size": 5}})).await,
        t,
    );
    step(
        "release",
        s.merge(path, &json!({"metadata": {"finalizers": null}})).await,
        t,
    );
    let _ = created;
}

async fn scenario(s: Side) -> Transcript {
    let mut t = Transcript::default();
    run(
        &s,
        &mut t,
        "gadget",
        &s.custom("gadgets/g"),
        gadget("g", json!({"size": 1, "mode": "fast"})),
    )
    .await;
    run(
        &s,
        &mut t,
        "plain",
        &s.custom("plains/p"),
        plain("p", json!({"size": 1, "mode": "fast"})),
    )
    .await;
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"k": "v"}});
    let r = s.post(&s.core("configmaps"), &cm).await;
    let v = facts(&mut t, &r);
    t.record("configmap-create", v);
    let r = s.merge(&s.core("configmaps/c"), &json!({"data": {"k": "w"}})).await;
    let v = facts(&mut t, &r);
    t.record("configmap-data", v);
    t
}

#[tokio::test]
#[ignore = "needs the genuine control plane: scripts/genuine-test.sh runs it"]
async fn versions_and_generation() {
    differential("versions", scenario, &[]).await;
}

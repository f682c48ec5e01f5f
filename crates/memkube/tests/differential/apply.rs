//! Server-side apply: apply-create, field ownership in managedFields, conflicts between two
//! managers (409 with the fields in message and causes), `force`, removal of fields a manager
//! stops applying, no-op applies, Update operations next to Apply ones, list-map items owned
//! per key.

use super::crd::gadget;
use super::side::Side;
use super::transcript::{Transcript, differential, only_memkube};
use serde_json::{Value, json};

fn cm(data: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}, "data": data})
}

async fn scenario(s: Side) -> Transcript {
    let mut t = Transcript::default();
    let a = s.core("configmaps/a");
    t.reply(
        "apply-create",
        &s.apply(&a, "alice", false, &cm(json!({"x": "1", "y": "2"}))).await,
    );
    t.reply(
        "apply-same",
        &s.apply(&a, "alice", false, &cm(json!({"x": "1", "y": "2"}))).await,
    );
    t.reply(
        "conflict",
        &s.apply(&a, "bob", false, &cm(json!({"x": "9", "z": "3"}))).await,
    );
    t.reply(
        "same-value-no-conflict",
        &s.apply(&a, "carol", false, &cm(json!({"y": "2"}))).await,
    );
    t.reply(
        "force",
        &s.apply(&a, "bob", true, &cm(json!({"x": "9", "z": "3"}))).await,
    );
    t.reply("drop-field", &s.apply(&a, "alice", false, &cm(json!({"y": "2"}))).await);
    t.reply("drop-shared-field", &s.apply(&a, "alice", false, &cm(json!({}))).await);
    t.reply(
        "update-op",
        &s.merge(
            &format!("{a}?fieldManager=editor"),
            &json!({"data": {"w": "4"}, "metadata": {"labels": {"l": "v"}}}),
        )
        .await,
    );
    t.reply(
        "apply-over-update",
        &s.apply(&a, "alice", false, &cm(json!({"w": "5"}))).await,
    );
    t.reply(
        "apply-with-stale-rv",
        &s.apply(
            &a,
            "alice",
            false,
            &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "resourceVersion": "1"}}),
        )
        .await,
    );
    t.reply(
        "apply-name-mismatch",
        &s.apply(&s.core("configmaps/other"), "alice", false, &cm(json!({})))
            .await,
    );
    t.reply(
        "apply-kind-mismatch",
        &s.apply(
            &a,
            "alice",
            false,
            &json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "a"}}),
        )
        .await,
    );

    let g = s.custom("gadgets/g");
    let ports = |items: Value| {
        let mut body = gadget("g", json!({"size": 1, "mode": "fast", "ports": items}));
        body["metadata"]
            .as_object_mut()
            .unwrap()
            .insert("labels".into(), json!({"team": "a"}));
        body
    };
    t.reply(
        "list-map-create",
        &s.apply(&g, "alice", false, &ports(json!([{"name": "http", "port": 80}])))
            .await,
    );
    let bob = json!({"apiVersion": "diff.caplv.test/v1", "kind": "Gadget", "metadata": {"name": "g"}, "spec": {"ports": [{"name": "https", "port": 443}]}});
    t.reply("list-map-second-owner", &s.apply(&g, "bob", false, &bob).await);
    let bob_conflict = json!({"apiVersion": "diff.caplv.test/v1", "kind": "Gadget", "metadata": {"name": "g"}, "spec": {"ports": [{"name": "http", "port": 8080}]}});
    t.reply("list-map-conflict", &s.apply(&g, "bob", false, &bob_conflict).await);
    t.reply("list-map-drop", &s.apply(&g, "alice", false, &ports(json!([]))).await);
    t.reply("status-apply", &s.apply(&format!("{g}/status"), "status-writer", false, &json!({"apiVersion": "diff.caplv.test/v1", "kind": "Gadget", "metadata": {"name": "g"}, "status": {"phase": "Up"}})).await);
    t
}

#[tokio::test]
#[ignore = "needs the genuine control plane: scripts/genuine-test.sh runs it"]
async fn server_side_apply() {
    // Applying an empty keyed list: memkube has no schema for list types and records the
    // (now empty) list itself as owned; the genuine server records nothing for it.
    let documented = vec![
        only_memkube(
            "/list-map-drop/object/metadata/managedFields/0/fieldsV1/f:spec/f:ports",
            json!({}),
        ),
        only_memkube(
            "/status-apply/object/metadata/managedFields/0/fieldsV1/f:spec/f:ports",
            json!({}),
        ),
    ];
    differential("apply", scenario, &documented).await;
}

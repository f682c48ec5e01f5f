//! Deletion: finalizers keep a deleted object (deletionTimestamp set, no new finalizers),
//! `gracePeriodSeconds`, uid/resourceVersion preconditions, dry runs, and garbage collection
//! by ownerReferences with Background, Foreground (`foregroundDeletion`,
//! `blockOwnerDeletion`) and Orphan propagation. The genuine garbage collector is
//! kube-controller-manager's, so every expectation about it is awaited with a deadline.

use super::side::{Reply, Side};
use super::transcript::{Transcript, differential, known};
use serde_json::{Value, json};

/// Code, finalizers, deletion metadata and ownerReferences of an answer.
fn facts(r: &Reply) -> Value {
    if r.body.get("kind") == Some(&json!("Status")) && r.code >= 400 {
        return super::transcript::reply_value(r);
    }
    let m = &r.body["metadata"];
    json!({
        "code": r.code,
        "kind": r.body.get("kind"),
        "finalizers": m.get("finalizers"),
        "deleting": m.get("deletionTimestamp").is_some(),
        "deletionGracePeriodSeconds": m.get("deletionGracePeriodSeconds"),
        "ownerReferences": m.get("ownerReferences").map(|o| o.as_array().map(|a| a.len())),
        "details": r.body.get("details"),
        "status": r.body.get("status"),
    })
}

fn cm(name: &str, finalizers: &[&str]) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "finalizers": finalizers}})
}

fn child(name: &str, owner: &Reply, block: bool, finalizers: &[&str]) -> Value {
    let mut c = cm(name, finalizers);
    c["metadata"]["ownerReferences"] = json!([{
        "apiVersion": "v1", "kind": "ConfigMap", "name": owner.body["metadata"]["name"],
        "uid": owner.body["metadata"]["uid"], "blockOwnerDeletion": block
    }]);
    c
}

async fn finalizers_and_preconditions(s: &Side, t: &mut Transcript) {
    let coll = s.core("configmaps");
    let held = s.core("configmaps/held");
    let created = s.post(&coll, &cm("held", &["diff.caplv.test/hold"])).await;
    t.record("held-create", facts(&created));
    t.reply(
        "delete-wrong-uid",
        &s.delete(
            &held,
            &json!({"preconditions": {"uid": "00000000-0000-0000-0000-000000000000"}}),
        )
        .await,
    );
    t.reply(
        "delete-wrong-rv",
        &s.delete(&held, &json!({"preconditions": {"resourceVersion": "1"}}))
            .await,
    );
    t.record(
        "delete-dry-run",
        facts(&s.delete(&format!("{held}?dryRun=All"), &json!({})).await),
    );
    t.record("after-dry-run", facts(&s.get(&held).await));
    let uid = created.body["metadata"]["uid"].clone();
    t.record(
        "delete-held",
        facts(
            &s.delete(&held, &json!({"preconditions": {"uid": uid}, "gracePeriodSeconds": 30}))
                .await,
        ),
    );
    t.record("get-held", facts(&s.get(&held).await));
    t.record("delete-held-again", facts(&s.delete(&held, &json!({})).await));
    t.reply(
        "add-finalizer-while-deleting",
        &s.merge(
            &held,
            &json!({"metadata": {"finalizers": ["diff.caplv.test/hold", "diff.caplv.test/more"]}}),
        )
        .await,
    );
    t.record(
        "label-while-deleting",
        facts(
            &s.merge(&held, &json!({"metadata": {"labels": {"still": "writable"}}}))
                .await,
        ),
    );
    t.reply(
        "clear-deletion-timestamp",
        &s.merge(&held, &json!({"metadata": {"deletionTimestamp": null}})).await,
    );
    t.record(
        "release",
        facts(&s.merge(&held, &json!({"metadata": {"finalizers": null}})).await),
    );
    t.reply("get-released", &s.get(&held).await);

    let plain = s.post(&coll, &cm("plain", &[])).await;
    assert_eq!(plain.code, 201);
    t.record(
        "delete-grace",
        facts(
            &s.delete(&s.core("configmaps/plain"), &json!({"gracePeriodSeconds": 30}))
                .await,
        ),
    );
}

async fn garbage_collection(s: &Side, t: &mut Transcript) {
    let coll = s.core("configmaps");
    let path = |n: &str| s.core(&format!("configmaps/{n}"));

    // Background: the owner goes at once, the dependent soon after.
    let owner = s.post(&coll, &cm("bg-owner", &[])).await;
    s.post(&coll, &child("bg-child", &owner, false, &[])).await;
    t.record(
        "background-delete",
        facts(
            &s.delete(&path("bg-owner"), &json!({"propagationPolicy": "Background"}))
                .await,
        ),
    );
    s.wait_gone(&path("bg-child")).await;

    // Foreground: the owner waits, with the foregroundDeletion finalizer, for a blocking
    // dependent (kept here by its own finalizer) to go.
    let owner = s.post(&coll, &cm("fg-owner", &[])).await;
    s.post(&coll, &child("fg-child", &owner, true, &["diff.caplv.test/hold"]))
        .await;
    t.record(
        "foreground-delete",
        facts(
            &s.delete(&path("fg-owner"), &json!({"propagationPolicy": "Foreground"}))
                .await,
        ),
    );
    let child_deleting = s
        .wait("the foreground dependent to be deleted", || async {
            let r = s.get(&path("fg-child")).await;
            r.body.pointer("/metadata/deletionTimestamp").is_some().then_some(r)
        })
        .await;
    t.record("foreground-child-deleting", facts(&child_deleting));
    t.record("foreground-owner-waiting", facts(&s.get(&path("fg-owner")).await));
    s.merge(&path("fg-child"), &json!({"metadata": {"finalizers": null}}))
        .await;
    s.wait_gone(&path("fg-owner")).await;
    t.reply("foreground-child-gone", &s.get(&path("fg-child")).await);

    // Orphan: the owner goes, the dependent stays without its ownerReference.
    let owner = s.post(&coll, &cm("or-owner", &[])).await;
    s.post(&coll, &child("or-child", &owner, true, &[])).await;
    t.record(
        "orphan-delete",
        facts(
            &s.delete(&path("or-owner"), &json!({"propagationPolicy": "Orphan"}))
                .await,
        ),
    );
    s.wait_gone(&path("or-owner")).await;
    let orphan = s
        .wait("the orphan's ownerReference to go", || async {
            let r = s.get(&path("or-child")).await;
            r.body.pointer("/metadata/ownerReferences").is_none().then_some(r)
        })
        .await;
    t.record("orphan-child", facts(&orphan));

    // A dependent whose owner uid never existed is collected too.
    let ghost = json!({"metadata": {"name": "ghost", "uid": "00000000-0000-0000-0000-000000000001"}});
    let ghost = Reply {
        code: 200,
        body: ghost,
        warnings: vec![],
    };
    t.record(
        "dangling-create",
        facts(&s.post(&coll, &child("dangling", &ghost, false, &[])).await),
    );
    s.wait_gone(&path("dangling")).await;
}

async fn scenario(s: Side) -> Transcript {
    let mut t = Transcript::default();
    finalizers_and_preconditions(&s, &mut t).await;
    garbage_collection(&s, &mut t).await;
    t
}

#[tokio::test]
#[ignore = "needs the genuine control plane: scripts/genuine-test.sh runs it"]
async fn deletion_and_garbage_collection() {
    // memkube orphans at once and answers like an immediate delete; the genuine server adds
    // the `orphan` finalizer, answers with the deleting object, and its garbage collector
    // removes the ownerReferences and the finalizer afterwards.
    let documented = vec![known(
        "/orphan-delete",
        json!({"code": 200, "deleting": false, "deletionGracePeriodSeconds": null, "details": {"kind": "configmaps", "name": "or-owner", "uid": "<uid>"},
               "finalizers": null, "kind": "Status", "ownerReferences": null, "status": "Success"}),
        json!({"code": 200, "deleting": true, "deletionGracePeriodSeconds": 0, "details": null,
               "finalizers": ["orphan"], "kind": "ConfigMap", "ownerReferences": null, "status": null}),
    )];
    differential("deletion", scenario, &documented).await;
}

//! Lists: `limit`/`continue` paging, `resourceVersion`/`resourceVersionMatch` combinations,
//! label selectors (equality and set-based) and field selectors. Secrets, because
//! kube-controller-manager puts a ConfigMap (`kube-root-ca.crt`) into every namespace.

use super::side::{Reply, Side};
use super::transcript::{Transcript, differential, known};
use serde_json::{Value, json};

/// The item names, continue token presence and remainingItemCount of a list answer (the list
/// resourceVersion is the server's global one, so only its presence is kept).
fn page(r: &Reply) -> Value {
    if r.code != 200 {
        return super::transcript::reply_value(r);
    }
    let names: Vec<&str> = r.body["items"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|i| i.pointer("/metadata/name").and_then(Value::as_str))
                .collect()
        })
        .unwrap_or_default();
    json!({
        "code": r.code,
        "kind": r.body["kind"],
        "names": names,
        "continue": r.body.pointer("/metadata/continue").is_some(),
        "remainingItemCount": r.body.pointer("/metadata/remainingItemCount"),
        "hasResourceVersion": r.body.pointer("/metadata/resourceVersion").and_then(Value::as_str).is_some_and(|v| !v.is_empty()),
    })
}

async fn scenario(s: Side) -> Transcript {
    let mut t = Transcript::default();
    let coll = s.core("secrets");
    let labels = [
        ("s-0", json!({"app": "web", "tier": "front"})),
        ("s-1", json!({"app": "web", "tier": "back"})),
        ("s-2", json!({"app": "db"})),
        ("s-3", json!({"other": "x"})),
        ("s-4", json!({"app": "cache", "tier": "back"})),
    ];
    let mut first_rv = String::new();
    for (name, l) in &labels {
        let r = s
            .post(
                &coll,
                &json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "labels": l}}),
            )
            .await;
        assert_eq!(r.code, 201, "{r:?}");
        if first_rv.is_empty() {
            first_rv = r.body["metadata"]["resourceVersion"].as_str().unwrap().to_string();
        }
    }
    let list = |q: String| {
        let (s, coll) = (s.clone(), coll.clone());
        async move { page(&s.get(&format!("{coll}?{q}")).await) }
    };
    t.record("all", list(String::new()).await);
    let p1 = s.get(&format!("{coll}?limit=2")).await;
    t.record("page-1", page(&p1));
    let tok = p1.body["metadata"]["continue"].as_str().unwrap_or("").to_string();
    let p2 = s.get(&format!("{coll}?limit=2&continue={tok}")).await;
    t.record("page-2", page(&p2));
    let tok2 = p2.body["metadata"]["continue"].as_str().unwrap_or("").to_string();
    t.record("page-3", list(format!("limit=2&continue={tok2}")).await);
    t.record("continue-garbage", list("limit=2&continue=garbage".into()).await);
    t.record("limit-zero", list("limit=0".into()).await);

    for (step, sel) in [
        ("label-eq", "app=web"),
        ("label-double-eq", "app==web"),
        ("label-neq", "app!=web"),
        ("label-in", "app in (web,db)"),
        ("label-notin", "app notin (web)"),
        ("label-exists", "tier"),
        ("label-not-exists", "!tier"),
        ("label-and", "app=web,tier=back"),
        ("label-bad", "app in web"),
    ] {
        t.record(step, list(format!("labelSelector={}", urlencode(sel))).await);
    }
    for (step, sel) in [
        ("field-name", "metadata.name=s-2"),
        ("field-name-neq", "metadata.name!=s-2"),
        ("field-namespace", &format!("metadata.namespace={}", s.ns) as &str),
        ("field-type", "type=Opaque"),
        ("field-unsupported", "data.k=v"),
    ] {
        t.record(step, list(format!("fieldSelector={}", urlencode(sel))).await);
    }
    let gadgets = s.custom("gadgets");
    t.record(
        "custom-field-unsupported",
        page(&s.get(&format!("{gadgets}?fieldSelector=spec.size%3D1")).await),
    );
    t.record(
        "configmap-field-unsupported",
        page(
            &s.get(&format!("{}?fieldSelector=data.k%3Dv", s.core("configmaps")))
                .await,
        ),
    );
    t.record("rv-0", list("resourceVersion=0".into()).await);
    t.record(
        "rv-match-not-older-than",
        list("resourceVersion=0&resourceVersionMatch=NotOlderThan".into()).await,
    );
    t.record(
        "rv-match-without-rv",
        list("resourceVersionMatch=NotOlderThan".into()).await,
    );
    t.record(
        "rv-match-exact-old",
        list(format!("resourceVersion={first_rv}&resourceVersionMatch=Exact")).await,
    );
    t.record(
        "rv-match-bogus",
        list("resourceVersion=0&resourceVersionMatch=Sometime".into()).await,
    );
    t.record("limit-with-rv-0", list("resourceVersion=0&limit=2".into()).await);
    t
}

fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'.' | b'_' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[tokio::test]
#[ignore = "needs the genuine control plane: scripts/genuine-test.sh runs it"]
async fn lists() {
    let documented = vec![
        // memkube's continue tokens are its own encoding; code and reason match.
        known(
            "/continue-garbage/message",
            json!("continue key is not valid: incorrect encoded start resourceVersion (version meta.k8s.io/v1)"),
            json!(
                "invalid continue token: continue key is not valid: invalid character '\\u0081' looking for beginning of value"
            ),
        ),
        // memkube keeps no history: an Exact list of an old resourceVersion is the current list.
        known(
            "/rv-match-exact-old/names",
            json!(["s-0", "s-1", "s-2", "s-3", "s-4"]),
            json!(["s-0"]),
        ),
    ];
    differential("lists", scenario, &documented).await;
}

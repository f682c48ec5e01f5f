//! Invalid custom resources: OpenAPI schema violations (required, enum, pattern, bounds,
//! types, list sizes) and CEL rules (an object rule and the transition rule
//! `self == oldSelf`) answer 422 Invalid with one cause per field; unknown fields answer 400
//! under `fieldValidation=Strict` and a warning by default; defaults are applied.

use super::crd::gadget;
use super::side::Side;
use super::transcript::{Transcript, differential, known};
use serde_json::json;

/// Code, reason and causes sorted: the genuine server reports errors of different properties
/// in Go map order, which changes from request to request.
fn unordered(r: &super::side::Reply) -> serde_json::Value {
    let mut causes = r
        .body
        .pointer("/details/causes")
        .and_then(serde_json::Value::as_array)
        .cloned()
        .unwrap_or_default();
    causes.sort_by_key(|c| c.to_string());
    json!({"code": r.code, "reason": r.body["reason"], "causes": causes})
}

async fn scenario(s: Side) -> Transcript {
    let mut t = Transcript::default();
    let coll = s.custom("gadgets");
    let create = |name: &str, spec: serde_json::Value| {
        let (s, coll, body) = (s.clone(), coll.clone(), gadget(name, spec));
        async move { s.post(&coll, &body).await }
    };
    t.reply(
        "valid-with-default",
        &create("ok", json!({"size": 3, "mode": "fast", "zone": "a"})).await,
    );
    t.reply("missing-required", &create("r", json!({"code": "abc"})).await);
    t.reply("enum", &create("e", json!({"size": 3, "mode": "medium"})).await);
    t.reply(
        "pattern",
        &create("p", json!({"size": 3, "mode": "fast", "code": "ABCD"})).await,
    );
    t.reply("maximum", &create("x", json!({"size": 11, "mode": "fast"})).await);
    t.reply("minimum", &create("n", json!({"size": 0, "mode": "fast"})).await);
    t.reply(
        "wrong-type",
        &create("w", json!({"size": "three", "mode": "fast"})).await,
    );
    t.reply(
        "max-items",
        &create("m", json!({"size": 3, "mode": "fast", "tags": ["a", "b", "c"]})).await,
    );
    t.reply(
        "max-length",
        &create("l", json!({"size": 3, "mode": "fast", "tags": ["abcdefg"]})).await,
    );
    t.reply(
        "duplicate-map-key",
        &create(
            "d",
            json!({"size": 3, "mode": "fast", "ports": [{"name": "a"}, {"name": "a"}]}),
        )
        .await,
    );
    t.reply(
        "cel-object-rule",
        &create("c", json!({"size": 3, "mode": "fast", "low": 5, "high": 1})).await,
    );
    let several = create(
        "s",
        json!({"size": 20, "mode": "medium", "low": 5, "high": 1, "tags": ["a", "b", "c"]}),
    )
    .await;
    t.record("several-at-once", unordered(&several));
    t.reply(
        "cel-transition",
        &s.merge(&s.custom("gadgets/ok"), &json!({"spec": {"zone": "b"}})).await,
    );
    t.reply(
        "cel-transition-unchanged",
        &s.merge(&s.custom("gadgets/ok"), &json!({"spec": {"zone": "a", "size": 4}}))
            .await,
    );
    t.reply(
        "update-invalid",
        &s.merge(&s.custom("gadgets/ok"), &json!({"spec": {"size": 99}})).await,
    );
    t.reply(
        "status-invalid",
        &s.merge(&s.custom("gadgets/ok/status"), &json!({"status": {"phase": 7}}))
            .await,
    );
    t.reply(
        "bad-name",
        &create("Not_A_Name", json!({"size": 3, "mode": "fast"})).await,
    );

    let unknown = gadget("u", json!({"size": 3, "mode": "fast", "colour": "red"}));
    t.reply(
        "unknown-field-strict",
        &s.post(&format!("{coll}?fieldValidation=Strict"), &unknown).await,
    );
    t.reply("unknown-field-default", &s.post(&coll, &unknown).await);
    let mut ignored = unknown.clone();
    ignored["metadata"]["name"] = json!("u2");
    t.reply(
        "unknown-field-ignore",
        &s.post(&format!("{coll}?fieldValidation=Ignore"), &ignored).await,
    );
    t
}

#[tokio::test]
#[ignore = "needs the genuine control plane: scripts/genuine-test.sh runs it"]
async fn validation() {
    // On `/status` writes the apiserver validates the status schema on its own and names the
    // property relative to it in the text ("phase in body"); memkube names the full path.
    let documented = vec![
        known(
            "/status-invalid/details/causes/0/message",
            json!("Invalid value: \"integer\": status.phase in body must be of type string: \"integer\""),
            json!("Invalid value: \"integer\": phase in body must be of type string: \"integer\""),
        ),
        known(
            "/status-invalid/message",
            json!(
                "Gadget.diff.caplv.test \"ok\" is invalid: [status.phase: Invalid value: \"integer\": status.phase in body must be of type string: \"integer\", <nil>: Invalid value: \"null\": some validation rules were not checked because the object was invalid; correct the existing errors to complete validation]"
            ),
            json!(
                "Gadget.diff.caplv.test \"ok\" is invalid: [status.phase: Invalid value: \"integer\": phase in body must be of type string: \"integer\", <nil>: Invalid value: \"null\": some validation rules were not checked because the object was invalid; correct the existing errors to complete validation]"
            ),
        ),
    ];
    differential("validation", scenario, &documented).await;
}

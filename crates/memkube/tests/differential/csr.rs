//! CertificateSigningRequests: what the server stamps on create (`spec.username`, `groups`,
//! `uid`), approval through `/approval`, status separation, and signing of
//! `kubernetes.io/kube-apiserver-client-kubelet` requests by kube-controller-manager.

use super::side::{Reply, Side};
use super::transcript::{Transcript, differential, known, only_genuine};
use base64::Engine as _;
use serde_json::{Value, json};

/// A PKCS#10 request for a kubelet client certificate of `node`.
fn kubelet_csr(node: &str) -> String {
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, format!("system:node:{node}"));
    params
        .distinguished_name
        .push(rcgen::DnType::OrganizationName, "system:nodes");
    let pem = params.serialize_request(&key).unwrap().pem().unwrap();
    base64::engine::general_purpose::STANDARD.encode(pem)
}

fn facts(r: &Reply) -> Value {
    if r.code >= 400 {
        return super::transcript::reply_value(r);
    }
    let mut spec = r.body["spec"].clone();
    if let Some(m) = spec.as_object_mut() {
        m.remove("request");
        // The credential id is a hash of the control plane's (per run) admin certificate.
        if let Some(Value::Object(extra)) = m.get_mut("extra") {
            extra.values_mut().for_each(|v| *v = json!(["<credential>"]));
        }
    }
    let conditions: Vec<Value> = r
        .body
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|c| json!({"type": c["type"], "status": c["status"], "reason": c["reason"], "message": c["message"]}))
        .collect();
    json!({
        "code": r.code,
        "spec": spec,
        "conditions": conditions,
        "certificate": r.body.pointer("/status/certificate").and_then(Value::as_str).map(|c| !c.is_empty()),
    })
}

async fn scenario(s: Side) -> Transcript {
    let mut t = Transcript::default();
    // CSRs are cluster-scoped: name them after the namespace so runs do not collide.
    let name = format!("{}-node", s.ns);
    let coll = "/apis/certificates.k8s.io/v1/certificatesigningrequests";
    let path = format!("{coll}/{name}");
    let body = json!({
        "apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
        "metadata": {"name": name},
        "spec": {"request": kubelet_csr("worker-0"), "signerName": "kubernetes.io/kube-apiserver-client-kubelet",
                 "usages": ["digital signature", "client auth"], "username": "someone-else", "groups": ["made-up"]},
        "status": {"conditions": [{"type": "Approved", "status": "True", "reason": "Sneaky", "message": "self-approved"}]}
    });
    t.record("create", facts(&s.post(coll, &body).await));
    let mut bad = body.clone();
    bad["metadata"]["name"] = json!(format!("{name}-bad"));
    bad["spec"]["request"] = json!(base64::engine::general_purpose::STANDARD.encode("not a csr"));
    t.reply("create-garbage-request", &s.post(coll, &bad).await);
    let approval = |cond: Value| {
        let (s, path, name) = (s.clone(), path.clone(), name.clone());
        async move {
            let cur = s.get(&path).await;
            let mut obj = cur.body.clone();
            obj["status"] = json!({"conditions": [cond]});
            let _ = name;
            s.put(&format!("{path}/approval"), &obj).await
        }
    };
    t.reply(
        "approve-without-reason",
        &approval(json!({"type": "Approved", "status": "Maybe"})).await,
    );
    t.record("approve", facts(&approval(json!({"type": "Approved", "status": "True", "reason": "DiffTest", "message": "approved by the differential test"})).await));
    let signed = s
        .wait("the signer to issue a certificate (memkube never signs)", || async {
            let r = s.get(&path).await;
            let done = r
                .body
                .pointer("/status/certificate")
                .and_then(Value::as_str)
                .is_some_and(|c| !c.is_empty());
            (done || s.memkube_server().is_some()).then_some(r)
        })
        .await;
    t.record("signed", facts(&signed));
    t.reply(
        "deny-after-approve",
        &approval(json!({"type": "Denied", "status": "True", "reason": "Changed", "message": "mind"})).await,
    );
    t
}

#[tokio::test]
#[ignore = "needs the genuine control plane: scripts/genuine-test.sh runs it"]
async fn certificate_signing_requests() {
    let mut documented = vec![
        // memkube does not sign: capi-sim's emulated kubelet issues a placeholder itself.
        known("/signed/certificate", json!(null), json!(true)),
    ];
    // memkube has no authentication: it keeps the requester fields a client sends (so an
    // emulated kubelet can claim to be system:node:<name>); the genuine server stamps the
    // caller's identity over them.
    for step in ["create", "approve", "signed"] {
        let at = |field: &str| format!("/{step}/spec/{field}");
        documented.push(known(
            at("username"),
            json!("someone-else"),
            json!("caplv-testbed-admin"),
        ));
        documented.push(known(
            at("groups"),
            json!(["made-up"]),
            json!(["system:masters", "system:authenticated"]),
        ));
        documented.push(only_genuine(
            at("extra"),
            json!({"authentication.kubernetes.io/credential-id": ["<credential>"]}),
        ));
    }
    differential("csr", scenario, &documented).await;
}

//! The kubelet CSR approver with any request bytes and requester: never approves a request by
//! another node, for a signer that is not a kubelet one, or for a machine that
//! is not ours. The first byte picks signer, requester and usages; the rest is `spec.request`.
#![no_main]

use caplv::kubelet_csr::{self, CLIENT_SIGNER, Machine, OPENSHIFT_BOOTSTRAPPER, Request, SERVING_SIGNER, Verdict};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use libfuzzer_sys::fuzz_target;

const NODE: &str = "worker-1";

fn request(choice: u8, pem: &[u8]) -> Request {
    let signer = [CLIENT_SIGNER, SERVING_SIGNER, "example.com/other"][usize::from(choice % 3)];
    let (username, groups) = match (choice >> 2) % 4 {
        0 => (format!("system:node:{NODE}"), vec!["system:nodes"]),
        1 => ("system:bootstrap:abcdef".to_owned(), vec!["system:bootstrappers"]),
        2 => (OPENSHIFT_BOOTSTRAPPER.to_owned(), vec![]),
        _ => ("system:node:worker-2".to_owned(), vec!["system:nodes"]),
    };
    let auth = if choice & 0x10 == 0 {
        "client auth"
    } else {
        "server auth"
    };
    let mut usages = vec!["digital signature", "key encipherment", auth];
    if choice & 0x20 != 0 {
        usages.push("code signing");
    }
    Request {
        signer: signer.to_owned(),
        username,
        groups: groups.into_iter().map(str::to_owned).collect(),
        usages: usages.into_iter().map(str::to_owned).collect(),
        pem: pem.to_vec(),
        created: Some(Timestamp::from_second(1_000_100).unwrap_or(Timestamp::UNIX_EPOCH)),
    }
}

fn machine(choice: u8) -> Machine {
    let provider_id = "libvirt:///0b9e3ab4-6ad4-4b1e-9d47-8d2f3bcb0c1f".to_owned();
    Machine {
        id: "default/worker-1".to_owned(),
        node_provider_id: (choice & 0x40 != 0).then(|| provider_id.clone()),
        provider_id,
        ips: vec!["192.0.2.10".parse().unwrap_or(std::net::Ipv4Addr::LOCALHOST.into())],
        dns: vec![NODE.to_owned()],
        provisioned_at: Some(Timestamp::from_second(1_000_000).unwrap_or(Timestamp::UNIX_EPOCH)),
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&choice, pem)) = data.split_first() else {
        return;
    };
    let req = request(choice, pem);
    let now = Timestamp::from_second(1_000_200).unwrap_or(Timestamp::UNIX_EPOCH);
    let window = SignedDuration::from_secs(3600);
    let ours = machine(choice);
    let named = kubelet_csr::node_name(&req);
    assert!(
        matches!(kubelet_csr::decide(&req, None, now, window), Verdict::Ignore(_)),
        "approved for a machine that is not ours"
    );
    // As the controller does: the machine of the node the request names, when it is ours.
    let found = (named.as_deref() == Some(NODE)).then_some(&ours);
    if let Verdict::Approve(why) = kubelet_csr::decide(&req, found, now, window) {
        assert!(req.signer == CLIENT_SIGNER || req.signer == SERVING_SIGNER, "{why}");
        assert!(
            req.username != "system:node:worker-2",
            "approved for another requester: {why}"
        );
        assert!(
            !req.usages.iter().any(|u| u == "code signing"),
            "approved extra usages: {why}"
        );
        assert!(why.contains(NODE) && why.contains(&ours.id), "{why}");
    }
});

use super::*;
use rcgen::{CertificateParams, DistinguishedName, DnType, KeyPair, SanType};

const NODE: &str = "spot-worker-01";
const PID: &str = "libvirt:///3f1c9a6e-1b2d-4e5f-8a9b-0c1d2e3f4a5b";

fn t(s: &str) -> Timestamp {
    s.parse().unwrap()
}

fn window() -> SignedDuration {
    SignedDuration::from_hours(2)
}

fn machine(node_provider_id: Option<&str>) -> Machine {
    Machine {
        id: "default/spot-worker-01".into(),
        provider_id: PID.into(),
        ips: vec!["192.168.122.100".parse().unwrap()],
        dns: vec![NODE.into()],
        provisioned_at: Some(t("2026-01-01T10:00:00Z")),
        node_provider_id: node_provider_id.map(str::to_owned),
    }
}

fn csr(cn: &str, orgs: &[&str], sans: Vec<SanType>) -> Vec<u8> {
    let mut params = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    for o in orgs {
        dn.push(DnType::OrganizationName, *o);
    }
    dn.push(DnType::CommonName, cn);
    params.distinguished_name = dn;
    params.subject_alt_names = sans;
    let key = KeyPair::generate().unwrap();
    params.serialize_request(&key).unwrap().pem().unwrap().into_bytes()
}

fn client(username: &str, groups: &[&str], pem: Vec<u8>) -> Request {
    Request {
        signer: CLIENT_SIGNER.into(),
        username: username.into(),
        groups: groups.iter().map(|g| (*g).to_owned()).collect(),
        usages: vec!["digital signature".into(), "client auth".into()],
        pem,
        created: Some(t("2026-01-01T10:05:00Z")),
    }
}

fn serving(pem: Vec<u8>) -> Request {
    Request {
        signer: SERVING_SIGNER.into(),
        username: format!("system:node:{NODE}"),
        groups: vec!["system:nodes".into(), "system:authenticated".into()],
        usages: vec!["digital signature".into(), "server auth".into()],
        pem,
        created: Some(t("2026-01-01T10:06:00Z")),
    }
}

fn node_csr() -> Vec<u8> {
    csr(&format!("system:node:{NODE}"), &["system:nodes"], vec![])
}

fn now() -> Timestamp {
    t("2026-01-01T10:10:00Z")
}

#[test]
fn a_bootstrap_client_csr_of_our_new_machine_is_approved() {
    let req = client(OPENSHIFT_BOOTSTRAPPER, &["system:serviceaccounts"], node_csr());
    assert_eq!(node_name(&req).as_deref(), Some(NODE));
    let v = decide(&req, Some(&machine(None)), now(), window());
    assert!(matches!(v, Verdict::Approve(ref m) if m.contains("bootstrap")), "{v:?}");
    let token = client("system:bootstrap:abcdef", &["system:bootstrappers"], node_csr());
    assert!(matches!(
        decide(&token, Some(&machine(None)), now(), window()),
        Verdict::Approve(_)
    ));
}

#[test]
fn a_client_csr_is_ignored_for_strangers_and_wrong_subjects() {
    let ok = client(OPENSHIFT_BOOTSTRAPPER, &[], node_csr());
    assert_eq!(decide(&ok, None, now(), window()), Verdict::Ignore("NotOurNode"));
    let cases = [
        (
            csr("system:node:spot-worker-01", &["system:masters"], vec![]),
            "OrganizationNotSystemNodes",
        ),
        (
            csr("system:node:spot-worker-01", &["system:nodes", "x"], vec![]),
            "OrganizationNotSystemNodes",
        ),
        (csr("admin", &["system:nodes"], vec![]), "SubjectNotANode"),
        (
            csr(
                "system:node:spot-worker-01",
                &["system:nodes"],
                vec![SanType::Rfc822Name("a@b.c".try_into().unwrap())],
            ),
            "UnexpectedSANs",
        ),
        (
            csr(
                "system:node:spot-worker-01",
                &["system:nodes"],
                vec![SanType::DnsName(NODE.try_into().unwrap())],
            ),
            "UnexpectedSANs",
        ),
        (
            b"-----BEGIN CERTIFICATE REQUEST-----\nAAAA\n-----END CERTIFICATE REQUEST-----\n".to_vec(),
            "MalformedRequest",
        ),
    ];
    for (pem, reason) in cases {
        let req = client(OPENSHIFT_BOOTSTRAPPER, &[], pem);
        assert_eq!(
            decide(&req, Some(&machine(None)), now(), window()),
            Verdict::Ignore(reason)
        );
    }
}

#[test]
fn a_tampered_request_fails_its_signature() {
    let pem = String::from_utf8(node_csr()).unwrap();
    let (_, parsed) = x509_parser::pem::parse_x509_pem(pem.as_bytes()).unwrap();
    let mut der = parsed.contents;
    // Flip a byte inside the signature (the end of the DER).
    let last = der.len() - 3;
    der[last] ^= 0xff;
    let req = client(OPENSHIFT_BOOTSTRAPPER, &[], der);
    assert_eq!(
        decide(&req, Some(&machine(None)), now(), window()),
        Verdict::Ignore("BadSignature")
    );
}

#[test]
fn client_requester_usages_and_window_are_enforced() {
    let stranger = client("system:serviceaccount:default:builder", &[], node_csr());
    assert_eq!(
        decide(&stranger, Some(&machine(None)), now(), window()),
        Verdict::Ignore("RequesterNotABootstrapper")
    );
    let mut usages = client(OPENSHIFT_BOOTSTRAPPER, &[], node_csr());
    usages.usages.push("server auth".into());
    assert_eq!(
        decide(&usages, Some(&machine(None)), now(), window()),
        Verdict::Ignore("UnexpectedUsages")
    );
    let late = client(OPENSHIFT_BOOTSTRAPPER, &[], node_csr());
    assert_eq!(
        decide(&late, Some(&machine(None)), t("2026-01-01T12:30:00Z"), window()),
        Verdict::Ignore("OutsideApprovalWindow")
    );
    let mut early = client(OPENSHIFT_BOOTSTRAPPER, &[], node_csr());
    early.created = Some(t("2026-01-01T09:00:00Z"));
    assert_eq!(
        decide(&early, Some(&machine(None)), now(), window()),
        Verdict::Ignore("OutsideApprovalWindow")
    );
    let mut unprovisioned = machine(None);
    unprovisioned.provisioned_at = None;
    assert_eq!(
        decide(
            &client(OPENSHIFT_BOOTSTRAPPER, &[], node_csr()),
            Some(&unprovisioned),
            now(),
            window()
        ),
        Verdict::Ignore("MachineNotProvisioned")
    );
    assert_eq!(
        decide(
            &client(OPENSHIFT_BOOTSTRAPPER, &[], node_csr()),
            Some(&machine(Some("libvirt:///other"))),
            now(),
            window()
        ),
        Verdict::Ignore("NodeExistsForAnotherMachine")
    );
}

#[test]
fn renewals_by_the_node_need_the_node_linked() {
    let renewal = client(&format!("system:node:{NODE}"), &["system:nodes"], node_csr());
    assert_eq!(
        decide(&renewal, Some(&machine(Some(""))), now(), window()),
        Verdict::Ignore("NodeNotLinked")
    );
    // Long after the window: a linked node may renew.
    assert!(matches!(
        decide(&renewal, Some(&machine(Some(PID))), t("2026-03-01T00:00:00Z"), window()),
        Verdict::Approve(_)
    ));
}

#[test]
fn serving_sans_must_belong_to_the_machine() {
    let dns = SanType::DnsName(NODE.try_into().unwrap());
    let ip = SanType::IpAddress("192.168.122.100".parse().unwrap());
    let good = serving(csr(
        &format!("system:node:{NODE}"),
        &["system:nodes"],
        vec![dns.clone(), ip.clone()],
    ));
    assert!(matches!(
        decide(&good, Some(&machine(Some(PID))), now(), window()),
        Verdict::Approve(_)
    ));
    assert_eq!(
        decide(&good, Some(&machine(None)), now(), window()),
        Verdict::Ignore("NodeNotLinked")
    );
    let other_ip = serving(csr(
        &format!("system:node:{NODE}"),
        &["system:nodes"],
        vec![dns.clone(), SanType::IpAddress("10.0.0.1".parse().unwrap())],
    ));
    assert_eq!(
        decide(&other_ip, Some(&machine(Some(PID))), now(), window()),
        Verdict::Ignore("IPNotOfTheMachine")
    );
    let other_dns = serving(csr(
        &format!("system:node:{NODE}"),
        &["system:nodes"],
        vec![SanType::DnsName("kubernetes.default".try_into().unwrap())],
    ));
    assert_eq!(
        decide(&other_dns, Some(&machine(Some(PID))), now(), window()),
        Verdict::Ignore("DNSNameNotOfTheMachine")
    );
    let none = serving(node_csr());
    assert_eq!(
        decide(&none, Some(&machine(Some(PID))), now(), window()),
        Verdict::Ignore("NoSANs")
    );
    let mut by_bootstrapper = good.clone();
    by_bootstrapper.username = OPENSHIFT_BOOTSTRAPPER.into();
    assert_eq!(
        decide(&by_bootstrapper, Some(&machine(Some(PID))), now(), window()),
        Verdict::Ignore("RequesterNotTheNode")
    );
}

#[test]
fn other_signers_are_never_ours() {
    let mut req = client(OPENSHIFT_BOOTSTRAPPER, &[], node_csr());
    req.signer = "example.com/custom".into();
    assert_eq!(node_name(&req), None);
    assert_eq!(
        decide(&req, Some(&machine(None)), now(), window()),
        Verdict::Ignore("OtherSigner")
    );
}

#[test]
fn the_simulated_kubelets_requests_are_approved() {
    let client_pem = capi_sim::csr::client_csr(NODE).unwrap().into_bytes();
    let req = client(OPENSHIFT_BOOTSTRAPPER, &["system:serviceaccounts"], client_pem);
    assert!(matches!(
        decide(&req, Some(&machine(None)), now(), window()),
        Verdict::Approve(_)
    ));
    let serving_pem = capi_sim::csr::serving_csr(NODE, &[NODE.into()], &["192.168.122.100".parse().unwrap()])
        .unwrap()
        .into_bytes();
    assert!(matches!(
        decide(&serving(serving_pem), Some(&machine(Some(PID))), now(), window()),
        Verdict::Approve(_)
    ));
}

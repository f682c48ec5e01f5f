//! Which kubelet CertificateSigningRequests the manager approves. Pure: the controller supplies
//! the request and what it knows about the machine the node name belongs to.
//!
//! Only the two kubelet signers are considered, and only for node names of this manager's
//! provisioned LibvirtMachines. Everything else is left untouched: never approved, never denied
//! (another approver, or an administrator, may own it).
//!
//! Always required: a well-formed PKCS#10 request whose self-signature verifies (the requester
//! holds the key), subject CN `system:node:<name>` and O exactly `system:nodes`, no e-mail or URI
//! SANs.
//!
//! - **Client** (`kubernetes.io/kube-apiserver-client-kubelet`): requested by the node itself
//!   (`system:node:<name>`, a renewal) or by a bootstrap identity (`system:bootstrap:*` in
//!   `system:bootstrappers`, or OpenShift's
//!   `system:serviceaccount:openshift-machine-config-operator:node-bootstrapper`); a bootstrap
//!   request only within the approval window after the machine was provisioned and only while no
//!   Node of that name exists unless it is linked to this machine; usages within {digital
//!   signature, key encipherment, client auth} including client auth; no SANs.
//! - **Serving** (`kubernetes.io/kubelet-serving`): requested by `system:node:<name>` in group
//!   `system:nodes`, only once that Node exists and carries this machine's provider ID; usages
//!   within {digital signature, key encipherment, server auth} including server auth; DNS SANs
//!   among the node name and the machine's DNS addresses, IP SANs among its IP addresses, at
//!   least one SAN.

use std::net::IpAddr;

use k8s_openapi::jiff::{SignedDuration, Timestamp};
use x509_parser::{
    certification_request::X509CertificationRequest, extensions::GeneralName, extensions::ParsedExtension,
    prelude::FromDer,
};

/// Signer of kubelet client certificates.
pub const CLIENT_SIGNER: &str = "kubernetes.io/kube-apiserver-client-kubelet";
/// Signer of kubelet serving certificates.
pub const SERVING_SIGNER: &str = "kubernetes.io/kubelet-serving";
/// OpenShift's node bootstrapper service account.
pub const OPENSHIFT_BOOTSTRAPPER: &str = "system:serviceaccount:openshift-machine-config-operator:node-bootstrapper";
const NODES_GROUP: &str = "system:nodes";
const NODE_PREFIX: &str = "system:node:";

/// The parts of a CertificateSigningRequest the decision reads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    /// `spec.signerName`.
    pub signer: String,
    /// `spec.username` of the requester.
    pub username: String,
    /// `spec.groups` of the requester.
    pub groups: Vec<String>,
    /// `spec.usages`.
    pub usages: Vec<String>,
    /// `spec.request`: PEM (or DER) PKCS#10.
    pub pem: Vec<u8>,
    /// When the CSR was created.
    pub created: Option<Timestamp>,
}

/// What the manager knows about the machine a node name belongs to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Machine {
    /// `namespace/name` of the LibvirtMachine (for Events and logs).
    pub id: String,
    /// Its provider ID.
    pub provider_id: String,
    /// IP addresses from its status.
    pub ips: Vec<IpAddr>,
    /// DNS names from its status (InternalDNS, Hostname, ...), including the node name.
    pub dns: Vec<String>,
    /// When it was provisioned.
    pub provisioned_at: Option<Timestamp>,
    /// The provider ID of the Node of that name, when the Node exists (`Some("")` when unset).
    pub node_provider_id: Option<String>,
}

/// The decision.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Approve; the text explains why (for the approval message and the Event).
    Approve(String),
    /// Leave the CSR alone; the bounded reason says why (for logs and metrics).
    Ignore(&'static str),
}

/// The node name a kubelet CSR is about, from the requester or the subject, if it is one of the
/// kubelet signers at all. Lets the controller look up the machine before deciding.
#[must_use]
pub fn node_name(req: &Request) -> Option<String> {
    if req.signer != CLIENT_SIGNER && req.signer != SERVING_SIGNER {
        return None;
    }
    if let Some(n) = req.username.strip_prefix(NODE_PREFIX) {
        return Some(n.to_owned());
    }
    parse(&req.pem)
        .ok()?
        .common_name?
        .strip_prefix(NODE_PREFIX)
        .map(str::to_owned)
}

/// What a PKCS#10 request asks for.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Contents {
    common_name: Option<String>,
    organizations: Vec<String>,
    dns: Vec<String>,
    ips: Vec<IpAddr>,
    other_sans: bool,
}

fn parse(pem_or_der: &[u8]) -> Result<Contents, &'static str> {
    let der = match x509_parser::pem::parse_x509_pem(pem_or_der) {
        Ok((_, pem)) if pem.label == "CERTIFICATE REQUEST" => pem.contents,
        Ok(_) => return Err("NotACertificateRequest"),
        Err(_) => pem_or_der.to_vec(),
    };
    let (_, csr) = X509CertificationRequest::from_der(&der).map_err(|_| "MalformedRequest")?;
    csr.verify_signature().map_err(|_| "BadSignature")?;
    let subject = &csr.certification_request_info.subject;
    let mut out = Contents {
        common_name: subject
            .iter_common_name()
            .next()
            .and_then(|a| a.as_str().ok())
            .map(str::to_owned),
        organizations: subject
            .iter_organization()
            .filter_map(|a| a.as_str().ok().map(str::to_owned))
            .collect(),
        ..Contents::default()
    };
    if subject.iter_common_name().count() > 1 {
        return Err("SeveralCommonNames");
    }
    for ext in csr.requested_extensions().into_iter().flatten() {
        if let ParsedExtension::SubjectAlternativeName(san) = ext {
            for name in &san.general_names {
                match name {
                    GeneralName::DNSName(d) => out.dns.push((*d).to_owned()),
                    GeneralName::IPAddress(bytes) => match ip_from(bytes) {
                        Some(ip) => out.ips.push(ip),
                        None => out.other_sans = true,
                    },
                    _ => out.other_sans = true,
                }
            }
        }
    }
    Ok(out)
}

fn ip_from(bytes: &[u8]) -> Option<IpAddr> {
    match bytes.len() {
        4 => <[u8; 4]>::try_from(bytes).ok().map(IpAddr::from),
        16 => <[u8; 16]>::try_from(bytes).ok().map(IpAddr::from),
        _ => None,
    }
}

fn usages_ok(usages: &[String], required: &str) -> bool {
    let allowed = ["digital signature", "key encipherment", required];
    usages.iter().any(|u| u == required) && usages.iter().all(|u| allowed.contains(&u.as_str()))
}

fn is_bootstrapper(req: &Request) -> bool {
    req.username == OPENSHIFT_BOOTSTRAPPER
        || (req.username.starts_with("system:bootstrap:") && req.groups.iter().any(|g| g == "system:bootstrappers"))
}

/// Decide on `req`, whose node name belongs to `machine` (None: not one of ours), at `now`.
#[must_use]
pub fn decide(req: &Request, machine: Option<&Machine>, now: Timestamp, window: SignedDuration) -> Verdict {
    let serving = match req.signer.as_str() {
        CLIENT_SIGNER => false,
        SERVING_SIGNER => true,
        _ => return Verdict::Ignore("OtherSigner"),
    };
    let Some(machine) = machine else {
        return Verdict::Ignore("NotOurNode");
    };
    let contents = match parse(&req.pem) {
        Ok(c) => c,
        Err(reason) => return Verdict::Ignore(reason),
    };
    let Some(node) = contents
        .common_name
        .as_deref()
        .and_then(|cn| cn.strip_prefix(NODE_PREFIX))
    else {
        return Verdict::Ignore("SubjectNotANode");
    };
    if contents.organizations != [NODES_GROUP] {
        return Verdict::Ignore("OrganizationNotSystemNodes");
    }
    if contents.other_sans {
        return Verdict::Ignore("UnexpectedSANs");
    }
    let by_node = req.username == format!("{NODE_PREFIX}{node}");
    let linked = machine.node_provider_id.as_deref() == Some(machine.provider_id.as_str());
    if serving {
        if !by_node || !req.groups.iter().any(|g| g == NODES_GROUP) {
            return Verdict::Ignore("RequesterNotTheNode");
        }
        if !usages_ok(&req.usages, "server auth") {
            return Verdict::Ignore("UnexpectedUsages");
        }
        if !linked {
            return Verdict::Ignore("NodeNotLinked");
        }
        if contents.dns.is_empty() && contents.ips.is_empty() {
            return Verdict::Ignore("NoSANs");
        }
        if !contents.dns.iter().all(|d| d == node || machine.dns.contains(d)) {
            return Verdict::Ignore("DNSNameNotOfTheMachine");
        }
        if !contents.ips.iter().all(|ip| machine.ips.contains(ip)) {
            return Verdict::Ignore("IPNotOfTheMachine");
        }
        return Verdict::Approve(format!(
            "kubelet serving certificate for node {node} of LibvirtMachine {}",
            machine.id
        ));
    }
    if !usages_ok(&req.usages, "client auth") {
        return Verdict::Ignore("UnexpectedUsages");
    }
    if !contents.dns.is_empty() || !contents.ips.is_empty() {
        return Verdict::Ignore("UnexpectedSANs");
    }
    if by_node {
        if !linked {
            return Verdict::Ignore("NodeNotLinked");
        }
        return Verdict::Approve(format!(
            "kubelet client certificate renewal for node {node} of LibvirtMachine {}",
            machine.id
        ));
    }
    if !is_bootstrapper(req) {
        return Verdict::Ignore("RequesterNotABootstrapper");
    }
    if machine.node_provider_id.is_some() && !linked {
        return Verdict::Ignore("NodeExistsForAnotherMachine");
    }
    let Some(provisioned) = machine.provisioned_at else {
        return Verdict::Ignore("MachineNotProvisioned");
    };
    let created = req.created.unwrap_or(now);
    if created < provisioned || now.duration_since(provisioned) > window {
        return Verdict::Ignore("OutsideApprovalWindow");
    }
    Verdict::Approve(format!(
        "kubelet bootstrap client certificate for node {node} of LibvirtMachine {}",
        machine.id
    ))
}

#[cfg(test)]
mod tests;

//! Real PKCS#10 requests as a kubelet files them, so CSR approvers in the product can be tested
//! against the bytes they will see in production.
//!
//! Kubelets use ECDSA P-256 keys; since Kubernetes dropped `key encipherment` for non-RSA keys,
//! client CSRs ask for `digital signature` + `client auth` and serving CSRs for
//! `digital signature` + `server auth`.

use std::net::IpAddr;

use rcgen::{CertificateParams, DistinguishedName, DnType, KeyPair, SanType};

use crate::error::Result;

/// Signer of kubelet client certificates.
pub const CLIENT_SIGNER: &str = "kubernetes.io/kube-apiserver-client-kubelet";
/// Signer of kubelet serving certificates.
pub const SERVING_SIGNER: &str = "kubernetes.io/kubelet-serving";
/// Usages a kubelet with an ECDSA key requests for its client certificate.
pub const CLIENT_USAGES: [&str; 2] = ["digital signature", "client auth"];
/// Usages a kubelet with an ECDSA key requests for its serving certificate.
pub const SERVING_USAGES: [&str; 2] = ["digital signature", "server auth"];
/// Group every Node identity belongs to.
pub const NODES_GROUP: &str = "system:nodes";

/// The identity a node's certificates carry: `system:node:<name>`.
pub fn node_user(node: &str) -> String {
    format!("system:node:{node}")
}

fn node_subject(node: &str) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    dn.push(DnType::OrganizationName, NODES_GROUP);
    dn.push(DnType::CommonName, node_user(node));
    dn
}

/// A PEM PKCS#10 request with the PEM PKCS#8 private key it was signed with.
pub struct KeyedRequest {
    /// The request, PEM.
    pub csr: String,
    /// Its private key, PEM; a kubelet keeps it to use the issued certificate.
    pub key: String,
}

/// A PEM PKCS#10 client CSR for `node` (CN `system:node:<node>`, O `system:nodes`, no SANs).
pub fn client_csr(node: &str) -> Result<String> {
    Ok(keyed_client_csr(node)?.csr)
}

/// [`client_csr`] with its private key.
pub fn keyed_client_csr(node: &str) -> Result<KeyedRequest> {
    let mut params = CertificateParams::default();
    params.distinguished_name = node_subject(node);
    keyed(&params)
}

/// A PEM PKCS#10 serving CSR for `node` with DNS and IP SANs.
pub fn serving_csr(node: &str, dns: &[String], ips: &[IpAddr]) -> Result<String> {
    let mut params = CertificateParams::default();
    params.distinguished_name = node_subject(node);
    let mut sans = Vec::new();
    for name in dns {
        sans.push(SanType::DnsName(name.as_str().try_into()?));
    }
    sans.extend(ips.iter().copied().map(SanType::IpAddress));
    params.subject_alt_names = sans;
    Ok(keyed(&params)?.csr)
}

fn keyed(params: &CertificateParams) -> Result<KeyedRequest> {
    let key = KeyPair::generate()?;
    Ok(KeyedRequest {
        csr: params.serialize_request(&key)?.pem()?,
        key: key.serialize_pem(),
    })
}

/// A self-signed PEM certificate standing in for what the signer would issue; only its
/// presence matters to consumers of `status.certificate`.
pub fn placeholder_certificate(common_name: &str) -> Result<String> {
    let mut params = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, common_name);
    params.distinguished_name = dn;
    let key = KeyPair::generate()?;
    Ok(params.self_signed(&key)?.pem())
}

#[cfg(test)]
mod tests {
    use super::*;
    use rcgen::{CertificateSigningRequestParams, DnValue};

    fn text(v: Option<&DnValue>) -> String {
        match v {
            Some(DnValue::Utf8String(s)) => s.clone(),
            Some(DnValue::PrintableString(s)) => s.as_str().to_string(),
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn client_csr_parses_back() {
        let pem = client_csr("worker-0").unwrap();
        assert!(pem.starts_with("-----BEGIN CERTIFICATE REQUEST-----"));
        let parsed = CertificateSigningRequestParams::from_pem(&pem).unwrap();
        let dn = &parsed.params.distinguished_name;
        assert_eq!(text(dn.get(&DnType::CommonName)), "system:node:worker-0");
        assert_eq!(text(dn.get(&DnType::OrganizationName)), "system:nodes");
        assert!(parsed.params.subject_alt_names.is_empty());
    }

    #[test]
    fn serving_csr_has_sans() {
        let ip: IpAddr = "192.168.122.100".parse().unwrap();
        let pem = serving_csr("worker-0", &["worker-0".into()], &[ip]).unwrap();
        let parsed = CertificateSigningRequestParams::from_pem(&pem).unwrap();
        assert!(parsed.params.subject_alt_names.contains(&SanType::IpAddress(ip)));
        assert!(
            parsed
                .params
                .subject_alt_names
                .contains(&SanType::DnsName("worker-0".try_into().unwrap()))
        );
        assert!(
            placeholder_certificate("system:node:worker-0")
                .unwrap()
                .contains("BEGIN CERTIFICATE")
        );
    }
}

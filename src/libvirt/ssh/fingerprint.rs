//! Host key fingerprints and the pinning policy.
//!
//! A fingerprint is written exactly as `ssh-keygen -lf key.pub` prints it:
//! `SHA256:` followed by the unpadded standard base64 of the SHA-256 digest of the public key blob.

use base64::Engine as _;
use russh::keys::{HashAlg, PublicKey, PublicKeyOrCertificate};

/// The OpenSSH-style SHA-256 fingerprint of `key` (`SHA256:<base64 without padding>`).
pub fn fingerprint(key: &PublicKey) -> String {
    key.fingerprint(HashAlg::Sha256).to_string()
}

/// Fingerprint of what the server presented; for a certificate, of the host key it certifies.
pub fn server_fingerprint(key: &PublicKeyOrCertificate) -> String {
    match key {
        PublicKeyOrCertificate::PublicKey { key, .. } => fingerprint(key),
        PublicKeyOrCertificate::Certificate(cert) => PublicKey::from(cert.public_key().clone())
            .fingerprint(HashAlg::Sha256)
            .to_string(),
    }
}

/// A `hostKeyFingerprint` value that is not a valid SHA256 fingerprint.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("hostKeyFingerprint {0:?} is not of the form SHA256:<43 base64 characters> (as printed by ssh-keygen -lf)")]
pub struct BadFingerprint(pub String);

/// Normalise a user-supplied pin: trims whitespace and tolerates trailing `=` padding, and checks
/// that it decodes to a 32-byte digest. Returns the canonical `SHA256:...` form.
pub fn parse_pin(pin: &str) -> Result<String, BadFingerprint> {
    let trimmed = pin.trim();
    let b64 = trimmed
        .strip_prefix("SHA256:")
        .ok_or_else(|| BadFingerprint(trimmed.to_string()))?;
    let b64 = b64.trim_end_matches('=');
    match base64::engine::general_purpose::STANDARD_NO_PAD.decode(b64) {
        Ok(digest) if digest.len() == 32 => Ok(format!("SHA256:{b64}")),
        _ => Err(BadFingerprint(trimmed.to_string())),
    }
}

/// How the server's host key is checked. Decided once, from the `LibvirtHost` spec.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HostKeyPolicy {
    /// Accept only a key with this fingerprint (canonical form, see [`parse_pin`]).
    Pinned(String),
    /// No pin configured: refuse, reporting the observed fingerprint so the user can pin it.
    NotPinned,
    /// The user explicitly opted out of verification: accept any key (insecure).
    InsecureAcceptAny,
}

impl HostKeyPolicy {
    /// Build the policy from the spec: a pin, if given, always wins over the opt-out.
    pub fn from_spec(fingerprint: Option<&str>, insecure_skip_verify: bool) -> Result<Self, BadFingerprint> {
        match fingerprint.map(str::trim).filter(|s| !s.is_empty()) {
            Some(pin) => Ok(HostKeyPolicy::Pinned(parse_pin(pin)?)),
            None if insecure_skip_verify => Ok(HostKeyPolicy::InsecureAcceptAny),
            None => Ok(HostKeyPolicy::NotPinned),
        }
    }

    /// Judge an observed fingerprint.
    pub fn check(&self, observed: &str) -> HostKeyVerdict {
        match self {
            HostKeyPolicy::Pinned(want) if want == observed => HostKeyVerdict::Accepted,
            HostKeyPolicy::Pinned(want) => HostKeyVerdict::Mismatch { expected: want.clone() },
            HostKeyPolicy::NotPinned => HostKeyVerdict::NotPinned,
            HostKeyPolicy::InsecureAcceptAny => HostKeyVerdict::Accepted,
        }
    }
}

/// Outcome of [`HostKeyPolicy::check`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HostKeyVerdict {
    /// Key accepted (pinned match or explicit opt-out).
    Accepted,
    /// A pin is configured and the key does not match it.
    Mismatch {
        /// The configured pin.
        expected: String,
    },
    /// No pin and no opt-out.
    NotPinned,
}

#[cfg(test)]
mod tests {
    use super::*;

    const FP: &str = "SHA256:ZsVcGfbNq8JyrWE88Elp5cHJku5rMsUG+ijF3Dprlnw";

    #[test]
    fn pins_are_validated_and_normalised() {
        assert_eq!(parse_pin(FP).as_deref(), Ok(FP));
        assert_eq!(parse_pin(&format!("  {FP}=\n")).as_deref(), Ok(FP));
        for bad in [
            "",
            "ZsVcGfbNq8JyrWE88Elp5cHJku5rMsUG+ijF3Dprlnw",
            "MD5:aa:bb",
            "SHA256:abc",
            "SHA256:!!!",
        ] {
            assert!(parse_pin(bad).is_err(), "{bad}");
        }
        assert!(
            parse_pin("SHA256:x")
                .unwrap_err()
                .to_string()
                .contains("ssh-keygen -lf")
        );
    }

    #[test]
    fn policy_from_spec() {
        assert_eq!(
            HostKeyPolicy::from_spec(Some(FP), true),
            Ok(HostKeyPolicy::Pinned(FP.into()))
        );
        assert_eq!(
            HostKeyPolicy::from_spec(None, true),
            Ok(HostKeyPolicy::InsecureAcceptAny)
        );
        assert_eq!(
            HostKeyPolicy::from_spec(Some("  "), false),
            Ok(HostKeyPolicy::NotPinned)
        );
        assert!(HostKeyPolicy::from_spec(Some("nope"), false).is_err());
        let pinned = HostKeyPolicy::Pinned(FP.into());
        assert_eq!(pinned.check(FP), HostKeyVerdict::Accepted);
        assert_eq!(
            pinned.check("SHA256:other"),
            HostKeyVerdict::Mismatch { expected: FP.into() }
        );
        assert_eq!(HostKeyPolicy::NotPinned.check(FP), HostKeyVerdict::NotPinned);
        assert_eq!(HostKeyPolicy::InsecureAcceptAny.check(FP), HostKeyVerdict::Accepted);
    }
}

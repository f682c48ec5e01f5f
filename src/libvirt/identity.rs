//! A LibvirtMachine's identity, decided before anything exists on the host so that it is known
//! before boot (CAPI needs the provider ID up front) and stable across retries.
//!
//! - **Node name** = hostname = libvirt domain name: the LibvirtMachine's name when it is a valid
//!   DNS-1123 label (lower-case alphanumerics and `-`, at most 63 characters, starting and ending
//!   alphanumeric). Otherwise it is lower-cased, every other character becomes `-`, and when that
//!   still does not fit it is cut to 52 characters and suffixed with `-` and 10 hex digits of a
//!   hash of `namespace/name`, which keeps it unique. A CAPI cluster's Machines share one
//!   namespace, so names are unique per cluster.
//! - **Domain UUID** = the LibvirtMachine's `metadata.uid` (already a UUID, unique, stable).
//! - **Provider ID** = `libvirt:///<domain UUID>`.
//! - **MAC address** of interface `i` = `52:54:00` (QEMU's prefix) followed by three bytes of a
//!   hash of the domain UUID (and `i` for `i > 0`, so the first interface keeps the MAC a
//!   single-NIC machine always had), unless the spec gives one. Interfaces of one machine never
//!   share a derived MAC.

use uuid::Uuid;

/// Longest DNS-1123 label.
const MAX_LABEL: usize = 63;
/// Characters kept before the hash suffix when a name must be shortened.
const KEPT: usize = 52;

/// Namespace for UUIDs derived from names (a fixed random UUID, so derivations are stable).
const NAME_NAMESPACE: Uuid = Uuid::from_u128(0x6c1b_6f3e_4f0e_4a55_9a6e_0c8d_3b51_7e21);

/// The node name for a LibvirtMachine `name` in `namespace`.
#[must_use]
pub fn node_name(namespace: &str, name: &str) -> String {
    if is_dns1123_label(name) {
        return name.to_owned();
    }
    let cleaned: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .collect();
    let cleaned = cleaned.trim_matches('-').to_owned();
    if is_dns1123_label(&cleaned) {
        return cleaned;
    }
    let hash = Uuid::new_v5(&NAME_NAMESPACE, format!("{namespace}/{name}").as_bytes())
        .simple()
        .to_string();
    let kept: String = cleaned.chars().take(KEPT).collect();
    let kept = kept.trim_end_matches('-');
    if kept.is_empty() {
        format!("vm-{}", &hash[..10])
    } else {
        format!("{kept}-{}", &hash[..10])
    }
}

/// Whether `s` is a DNS-1123 label.
#[must_use]
pub fn is_dns1123_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= MAX_LABEL
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// The domain UUID: the object's uid when it is a UUID.
#[must_use]
pub fn domain_uuid(uid: &str) -> Option<Uuid> {
    Uuid::parse_str(uid).ok()
}

/// A stable stand-in UUID for a manifest that has no `metadata.uid` yet (a file on disk).
#[must_use]
pub fn placeholder_uuid(namespace: &str, name: &str) -> Uuid {
    Uuid::new_v5(&NAME_NAMESPACE, format!("placeholder:{namespace}/{name}").as_bytes())
}

/// The provider ID for a domain UUID.
#[must_use]
pub fn provider_id(domain: Uuid) -> String {
    format!("libvirt:///{}", domain.hyphenated())
}

/// The domain UUID a provider ID (`libvirt:///<uuid>`) names.
#[must_use]
pub fn provider_id_uuid(provider_id: &str) -> Option<Uuid> {
    Uuid::parse_str(provider_id.strip_prefix("libvirt:///")?).ok()
}

/// The MAC address derived from a domain UUID.
#[must_use]
pub fn mac_address(domain: Uuid) -> String {
    let hash = Uuid::new_v5(&NAME_NAMESPACE, format!("mac:{}", domain.hyphenated()).as_bytes());
    let b = hash.as_bytes();
    format!("52:54:00:{:02x}:{:02x}:{:02x}", b[0], b[1], b[2])
}

/// The MAC address of interface `index` of a domain, distinct from every MAC in `taken`.
#[must_use]
pub fn interface_mac(domain: Uuid, index: usize, taken: &[String]) -> String {
    let mut salt = 0u32;
    loop {
        let mac = if index == 0 && salt == 0 {
            mac_address(domain)
        } else {
            let key = format!("mac:{}:{index}:{salt}", domain.hyphenated());
            let b = *Uuid::new_v5(&NAME_NAMESPACE, key.as_bytes()).as_bytes();
            format!("52:54:00:{:02x}:{:02x}:{:02x}", b[0], b[1], b[2])
        };
        if !taken.iter().any(|t| t.eq_ignore_ascii_case(&mac)) {
            return mac;
        }
        salt += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn valid_names_are_kept() {
        assert_eq!(node_name("default", "spot-worker-01"), "spot-worker-01");
    }

    #[test]
    fn invalid_names_are_cleaned() {
        assert_eq!(node_name("default", "Spot_Worker.01"), "spot-worker-01");
    }

    #[test]
    fn long_names_are_shortened_uniquely_and_stably() {
        let long = "w".repeat(80);
        let a = node_name("a", &long);
        let b = node_name("b", &long);
        assert!(is_dns1123_label(&a) && is_dns1123_label(&b), "{a} {b}");
        assert_ne!(a, b, "the namespace keeps shortened names apart");
        assert_eq!(a, node_name("a", &long), "stable");
        assert_eq!(a.len(), 63);
        assert!(is_dns1123_label(&node_name("x", "___")));
    }

    #[test]
    fn provider_id_uses_the_uid() {
        let uid = "3f1c9a6e-1b2d-4e5f-8a9b-0c1d2e3f4a5b";
        assert_eq!(
            provider_id(domain_uuid(uid).unwrap()),
            "libvirt:///3f1c9a6e-1b2d-4e5f-8a9b-0c1d2e3f4a5b"
        );
        assert!(domain_uuid("not-a-uuid").is_none());
        assert_eq!(
            provider_id_uuid(&provider_id(domain_uuid(uid).unwrap())),
            domain_uuid(uid)
        );
        assert!(provider_id_uuid("aws:///3f1c9a6e-1b2d-4e5f-8a9b-0c1d2e3f4a5b").is_none());
        assert!(provider_id_uuid("libvirt:///not-a-uuid").is_none());
        assert_eq!(placeholder_uuid("default", "w"), placeholder_uuid("default", "w"));
        assert_ne!(placeholder_uuid("default", "w"), placeholder_uuid("other", "w"));
    }

    #[test]
    fn mac_is_stable_local_and_differs_per_domain() {
        let a = domain_uuid("3f1c9a6e-1b2d-4e5f-8a9b-0c1d2e3f4a5b").unwrap();
        let b = domain_uuid("3f1c9a6e-1b2d-4e5f-8a9b-0c1d2e3f4a5c").unwrap();
        let mac = mac_address(a);
        assert_eq!(mac, mac_address(a));
        assert_ne!(mac, mac_address(b));
        assert!(mac.starts_with("52:54:00:") && mac.len() == 17, "{mac}");
    }

    #[test]
    fn interface_macs_are_stable_distinct_and_keep_the_first() {
        let a = domain_uuid("3f1c9a6e-1b2d-4e5f-8a9b-0c1d2e3f4a5b").unwrap();
        assert_eq!(interface_mac(a, 0, &[]), mac_address(a));
        let second = interface_mac(a, 1, &[mac_address(a)]);
        assert_eq!(second, interface_mac(a, 1, &[mac_address(a)]), "stable");
        assert_ne!(second, mac_address(a));
        assert!(second.starts_with("52:54:00:"));
        let forced = interface_mac(a, 1, std::slice::from_ref(&second));
        assert_ne!(forced, second, "a taken MAC is never handed out again");
    }
}

//! The `format`s kube-openapi checks, loosely: enough to reject values that
//! are clearly not of the format. Unknown formats pass, as in apiextensions.

/// Whether `s` is acceptable for string format `f`.
pub(crate) fn string_ok(f: &str, s: &str) -> bool {
    match f {
        "date-time" => date_time(s),
        "date" => chrono::NaiveDate::parse_from_str(s, "%Y-%m-%d").is_ok(),
        "byte" => base64(s),
        "uuid" => uuid(s),
        "ipv4" => s.parse::<std::net::Ipv4Addr>().is_ok(),
        "ipv6" => s.parse::<std::net::Ipv6Addr>().is_ok(),
        "cidr" => cidr(s),
        _ => true,
    }
}

/// Bounds implied by an integer format (kube-openapi checks int32 overflow).
pub(crate) fn int_range(f: Option<&str>) -> Option<(f64, f64)> {
    match f {
        Some("int32") => Some((f64::from(i32::MIN), f64::from(i32::MAX))),
        _ => None,
    }
}

/// RFC 3339, also without the `:` in the offset, as go-openapi's strfmt.
fn date_time(s: &str) -> bool {
    chrono::DateTime::parse_from_rfc3339(s).is_ok()
        || chrono::DateTime::parse_from_str(s, "%Y-%m-%dT%H:%M:%S%.f%z").is_ok()
}

fn base64(s: &str) -> bool {
    let t = s.trim_end_matches('=');
    s.len().is_multiple_of(4)
        && s.len() - t.len() <= 2
        && t.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'+' || b == b'/')
}

fn uuid(s: &str) -> bool {
    let groups: Vec<&str> = s.split('-').collect();
    groups.len() == 5
        && groups
            .iter()
            .zip([8, 4, 4, 4, 12])
            .all(|(g, n)| g.len() == n && g.bytes().all(|b| b.is_ascii_hexdigit()))
}

fn cidr(s: &str) -> bool {
    let Some((ip, bits)) = s.split_once('/') else {
        return false;
    };
    let Ok(bits) = bits.parse::<u8>() else { return false };
    match ip.parse::<std::net::IpAddr>() {
        Ok(std::net::IpAddr::V4(_)) => bits <= 32,
        Ok(std::net::IpAddr::V6(_)) => bits <= 128,
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats() {
        assert!(string_ok("date-time", "2024-01-02T03:04:05Z"));
        assert!(string_ok("date-time", "2024-01-02T03:04:05.123+02:00"));
        assert!(!string_ok("date-time", "yesterday"));
        assert!(string_ok("date", "2024-01-02"));
        assert!(string_ok("byte", "aGVsbG8="));
        assert!(!string_ok("byte", "not base64!"));
        assert!(string_ok("uuid", "123e4567-e89b-12d3-a456-426614174000"));
        assert!(!string_ok("uuid", "123"));
        assert!(string_ok("cidr", "10.0.0.0/8"));
        assert!(!string_ok("cidr", "10.0.0.0/33"));
        assert!(string_ok("ipv4", "1.2.3.4"));
        assert!(string_ok("something-else", "whatever"));
        assert_eq!(int_range(Some("int32")).map(|r| r.1), Some(2147483647.0));
        assert_eq!(int_range(Some("int64")), None);
    }
}

//! The syntax Kubernetes requires of label keys, label values and annotation keys, checked
//! before the objects that carry them are created: an API server refuses a Machine whose labels
//! break it, so a ScheduledMachine with such a label would fail at every window instead of
//! saying once which entry is wrong.

/// Longest name part of a qualified name, and longest label value.
const MAX_NAME: usize = 63;
/// Longest prefix (a DNS subdomain).
const MAX_PREFIX: usize = 253;

/// What is wrong with `key` as a label or annotation key (a qualified name), if anything.
#[must_use]
pub fn key_problem(key: &str) -> Option<&'static str> {
    let (prefix, name) = match key.split_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    if let Some(prefix) = prefix {
        if prefix.is_empty() || prefix.len() > MAX_PREFIX {
            return Some("the prefix must be 1-253 characters");
        }
        if !prefix.split('.').all(is_dns_label) {
            return Some("the prefix must be a DNS subdomain: lowercase letters, digits, '-' and '.'");
        }
    }
    if name.is_empty() {
        return Some("the name part is empty");
    }
    name_problem(name)
}

/// What is wrong with `value` as a label value, if anything (it may be empty).
#[must_use]
pub fn value_problem(value: &str) -> Option<&'static str> {
    if value.is_empty() { None } else { name_problem(value) }
}

/// The name part of a key and a non-empty value share one syntax.
fn name_problem(name: &str) -> Option<&'static str> {
    let bytes = name.as_bytes();
    if bytes.len() > MAX_NAME {
        return Some("at most 63 characters");
    }
    if !bytes
        .iter()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
    {
        return Some("only ASCII letters, digits, '-', '_' and '.'");
    }
    let ends_alphanumeric =
        bytes.first().is_some_and(u8::is_ascii_alphanumeric) && bytes.last().is_some_and(u8::is_ascii_alphanumeric);
    (!ends_alphanumeric).then_some("must begin and end with a letter or digit")
}

fn is_dns_label(label: &str) -> bool {
    let bytes = label.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= MAX_NAME
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
        && bytes.first().is_some_and(|b| *b != b'-')
        && bytes.last().is_some_and(|b| *b != b'-')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubernetes_keys_pass() {
        for key in [
            "node-role.kubernetes.io/worker",
            "team",
            "a",
            "spot.example.com/Ephemeral_1.x",
            &"k".repeat(63),
            &format!("{}/n", ["a"; 127].join(".")),
        ] {
            assert_eq!(key_problem(key), None, "{key}");
        }
    }

    #[test]
    fn bad_keys_say_what_is_wrong() {
        for (key, problem) in [
            ("", "the name part is empty"),
            ("example.com/", "the name part is empty"),
            ("/name", "the prefix must be 1-253 characters"),
            ("équipe", "only ASCII letters, digits, '-', '_' and '.'"),
            ("team/équipe", "only ASCII letters, digits, '-', '_' and '.'"),
            (
                "Example.com/x",
                "the prefix must be a DNS subdomain: lowercase letters, digits, '-' and '.'",
            ),
            (
                "exa..mple/x",
                "the prefix must be a DNS subdomain: lowercase letters, digits, '-' and '.'",
            ),
            ("a/b/c", "only ASCII letters, digits, '-', '_' and '.'"),
            ("-team", "must begin and end with a letter or digit"),
            ("team_", "must begin and end with a letter or digit"),
            (&"k".repeat(64), "at most 63 characters"),
            (&format!("{}/n", "a".repeat(254)), "the prefix must be 1-253 characters"),
        ] {
            assert_eq!(key_problem(key), Some(problem), "{key:?}");
        }
    }

    #[test]
    fn values_may_be_empty_but_not_unicode_or_long() {
        assert_eq!(value_problem(""), None);
        assert_eq!(value_problem("v1.2_rc-3"), None);
        assert_eq!(
            value_problem("🚀"),
            Some("only ASCII letters, digits, '-', '_' and '.'")
        );
        assert_eq!(value_problem("ﬁ"), Some("only ASCII letters, digits, '-', '_' and '.'"));
        assert_eq!(value_problem(&"v".repeat(64)), Some("at most 63 characters"));
        assert_eq!(
            value_problem(".hidden"),
            Some("must begin and end with a letter or digit")
        );
    }
}

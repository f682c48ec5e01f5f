//! Tiny XML helpers shared by the domain and volume builders: escaping of text and attribute
//! values, validation of the names and paths that end up in libvirt XML, and a minimal reader
//! for the few fields the backend needs from libvirt's own (regular, machine-written) output.
//!
//! The builders never emit XML from input that failed validation: a name with a quote, a path
//! with a newline or a relative path is a typed [`XmlInputError`], not a surprising document.

/// Input that cannot be put into libvirt XML.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum XmlInputError {
    /// A libvirt object name (pool, volume, network, bridge, domain) with characters outside
    /// `[A-Za-z0-9_.:-]`, empty, or longer than 255 bytes.
    #[error("{field} {value:?} is not a valid name: use 1-255 characters from [A-Za-z0-9_.:-]")]
    InvalidName {
        /// Which input.
        field: &'static str,
        /// The rejected value.
        value: String,
    },
    /// A host path that is not absolute, contains control characters (or characters XML cannot
    /// carry, such as U+FFFF) or `..` components.
    #[error("{field} {value:?} is not a usable path: it must be absolute, without control characters or '..'")]
    InvalidPath {
        /// Which input.
        field: &'static str,
        /// The rejected value.
        value: String,
    },
    /// Any other out-of-range or malformed value.
    #[error("{field}: {reason}")]
    InvalidValue {
        /// Which input.
        field: &'static str,
        /// Why it was rejected.
        reason: String,
    },
}

/// Escapes `s` for use as XML character data.
#[must_use]
pub fn escape_text(s: &str) -> String {
    escape(s)
}

/// Escapes `s` for use inside a single- or double-quoted XML attribute value.
#[must_use]
pub fn escape_attr(s: &str) -> String {
    escape(s)
}

fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            other => out.push(other),
        }
    }
    out
}

/// Reverses [`escape`] for the five predefined entities (all libvirt emits for names and paths).
#[must_use]
pub fn unescape(s: &str) -> String {
    s.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&apos;", "'")
        .replace("&amp;", "&")
}

/// Checks a libvirt object name against `^[A-Za-z0-9_.:-]{1,255}$` (the CRDs' pattern).
pub fn validate_name(field: &'static str, value: &str) -> Result<(), XmlInputError> {
    let ok = !value.is_empty()
        && value.len() <= 255
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b':' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(XmlInputError::InvalidName {
            field,
            value: value.to_owned(),
        })
    }
}

/// Whether `c` may stand in XML 1.0 text as itself and is not a control character. XML's
/// `Char` production leaves out the noncharacters U+FFFE and U+FFFF, so escaping alone
/// cannot make them safe; surrogates never occur in a Rust `str`.
#[must_use]
pub fn is_printable_xml_char(c: char) -> bool {
    !c.is_control() && !matches!(c, '\u{FFFE}' | '\u{FFFF}')
}

/// Checks that a host path is absolute, at most 4096 bytes, has no control (or XML-forbidden)
/// characters and no `..` component.
pub fn validate_path(field: &'static str, value: &str) -> Result<(), XmlInputError> {
    let ok = value.starts_with('/')
        && value.len() <= 4096
        && value.chars().all(is_printable_xml_char)
        && !value.split('/').any(|c| c == "..");
    if ok {
        Ok(())
    } else {
        Err(XmlInputError::InvalidPath {
            field,
            value: value.to_owned(),
        })
    }
}

/// The text of the first element reached by following `path` (element names, outermost first,
/// each searched after the previous one's opening tag), unescaped. Meant for libvirt's own
/// output, which has no comments, CDATA or namespaces in the parts read here.
#[must_use]
pub fn element_text(xml: &str, path: &[&str]) -> Option<String> {
    let mut rest = xml;
    let (last, parents) = path.split_last()?;
    for name in parents {
        let start = find_open_tag(rest, name)?;
        rest = &rest[start..];
    }
    let start = find_open_tag(rest, last)?;
    let body = &rest[start..];
    let end = body.find(&format!("</{last}>"))?;
    Some(unescape(body[..end].trim()))
}

/// Byte offset just past the opening tag `<name ...>` or `<name>` (not `<name/>`).
fn find_open_tag(xml: &str, name: &str) -> Option<usize> {
    let needle = format!("<{name}");
    let mut from = 0;
    while let Some(i) = xml[from..].find(&needle) {
        let at = from + i + needle.len();
        let next = xml[at..].chars().next()?;
        if next == '>' || next.is_whitespace() {
            let close = xml[at..].find('>')? + at;
            if xml[..close].ends_with('/') {
                from = close;
                continue;
            }
            return Some(close + 1);
        }
        from = at;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_all_five_entities() {
        assert_eq!(escape_attr(r#"a&b<c>d"e'f"#), "a&amp;b&lt;c&gt;d&quot;e&apos;f");
        assert_eq!(escape_text("plain"), "plain");
        assert_eq!(unescape(&escape_text(r#"&lt; <'">"#)), r#"&lt; <'">"#);
    }

    #[test]
    fn names_follow_the_crd_pattern() {
        for ok in ["default", "pool_1", "a.b:c-d", "X"] {
            assert!(validate_name("n", ok).is_ok(), "{ok}");
        }
        for bad in ["", "a b", "a'b", "a/b", "a\"", "é", &"x".repeat(256)] {
            assert!(
                matches!(validate_name("n", bad), Err(XmlInputError::InvalidName { .. })),
                "{bad}"
            );
        }
    }

    #[test]
    fn paths_are_absolute_and_clean() {
        assert!(validate_path("p", "/var/lib/libvirt/images/a b.ign").is_ok());
        for bad in [
            "relative",
            "",
            "/a/../etc/shadow",
            "/a\nb",
            "/a\0b",
            "/a\u{FFFF}",
            "/a\u{FFFE}",
        ] {
            assert!(
                matches!(validate_path("p", bad), Err(XmlInputError::InvalidPath { .. })),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn reads_nested_element_text() {
        let xml = "<pool type='dir'><source/><target>\n <path>/a&amp;b</path></target></pool>";
        assert_eq!(element_text(xml, &["target", "path"]).as_deref(), Some("/a&b"));
        assert_eq!(
            element_text(xml, &["source", "path"]),
            None,
            "self-closing tags are skipped"
        );
        assert_eq!(element_text(xml, &["nothing"]), None);
        assert_eq!(
            element_text("<targets><path>x</path></targets>", &["target", "path"]),
            None
        );
    }
}

//! Field-path building in apimachinery's `field.Path` style
//! (`spec.a.b`, `spec.list[2].x`, `spec.map[key]`); the empty string is
//! the root (printed `<nil>` by [`super::FieldError`]).

/// `parent.name` (or `name` at the root).
pub(crate) fn child(parent: &str, name: &str) -> String {
    if parent.is_empty() {
        name.to_string()
    } else {
        format!("{parent}.{name}")
    }
}

/// `parent[i]`.
pub(crate) fn index(parent: &str, i: usize) -> String {
    format!("{parent}[{i}]")
}

/// `parent[key]`: map keys are not quoted, as apimachinery prints them.
pub(crate) fn key(parent: &str, k: &str) -> String {
    format!("{parent}[{k}]")
}

/// How a path reads inside go-openapi's messages (`spec.x in body ...`);
/// the root is `body` alone.
pub(crate) fn in_body(path: &str) -> String {
    if path.is_empty() {
        "body".to_string()
    } else {
        format!("{path} in body")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builds_apimachinery_paths() {
        assert_eq!(child("", "spec"), "spec");
        assert_eq!(child("spec", "a"), "spec.a");
        assert_eq!(index("spec.list", 2), "spec.list[2]");
        assert_eq!(key("spec.map", "k"), "spec.map[k]");
        assert_eq!(in_body("spec.x"), "spec.x in body");
        assert_eq!(in_body(""), "body");
    }
}

//! The house rules that keep the source tree easy to find one's way in: what the shipped build
//! links, how many files sit loose in `src/`, and how long product files and controller
//! functions may grow.

use std::{
    path::{Path, PathBuf},
    process::Command,
};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// The `.rs` files below `dir`, recursively.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(rust_files(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
    out.sort();
    out
}

/// Test-only sources: a `tests.rs`/`proptests.rs` module, anything under a `tests/` folder,
/// and the test sshd.
fn is_test_source(path: &Path) -> bool {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
    matches!(name, "tests.rs" | "proptests.rs" | "testsshd.rs" | "fake.rs")
        || path.components().any(|c| c.as_os_str() == "tests")
}

fn relative(path: &Path) -> String {
    path.strip_prefix(ROOT).unwrap_or(path).display().to_string()
}

#[test]
fn the_shipped_build_links_no_test_stand_in() {
    let tree = normal_dependencies("caplv,ignition,fivespot");
    for stand_in in ["memkube ", "capi-sim ", "tempfile ", "rcgen "] {
        assert!(
            !tree.iter().any(|l| l.starts_with(stand_in)),
            "{stand_in}is linked into the build without the sandbox feature"
        );
    }
}

#[test]
fn a_build_without_the_caplv_family_links_no_libvirt_ssh_or_x509() {
    for features in ["fivespot", "ignition"] {
        let tree = normal_dependencies(features);
        for crate_ in ["virt ", "virt-sys ", "russh ", "x509-parser "] {
            assert!(
                !tree.iter().any(|l| l.starts_with(crate_)),
                "{crate_}is linked into a build with only --features {features}"
            );
        }
    }
}

/// The crates a build of `caplv` with only `features` links, one `name version` per line.
fn normal_dependencies(features: &str) -> Vec<String> {
    let out = Command::new(env!("CARGO"))
        .args([
            "tree",
            "--offline",
            "--locked",
            "-e",
            "normal",
            "--prefix",
            "none",
            "-p",
            "caplv",
        ])
        .args(["--no-default-features", "--features", features])
        .current_dir(ROOT)
        .output()
        .unwrap();
    let tree = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "cargo tree failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        tree.lines().any(|l| l.starts_with("kube ")),
        "the tree lists the product's crates:\n{tree}"
    );
    tree.lines().map(str::to_owned).collect()
}

#[test]
fn at_most_eight_files_sit_loose_in_src() {
    let loose: Vec<String> = std::fs::read_dir(Path::new(ROOT).join("src"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file() && p.extension().is_some_and(|e| e == "rs"))
        .map(|p| relative(&p))
        .collect();
    assert!(loose.len() <= 8, "{} loose files in src/: {loose:?}", loose.len());
}

/// `unsafe` is denied workspace-wide; only the libvirt node statistics and the heap trimmer
/// call C directly.
#[test]
fn unsafe_code_lives_in_two_modules() {
    const ALLOWED: [&str; 2] = ["src/app/memory.rs", "src/libvirt/virt_backend/node_stats.rs"];
    let mut files = rust_files(&Path::new(ROOT).join("src"));
    for krate in ["crates/memkube/src", "crates/capi-sim/src"] {
        files.extend(rust_files(&Path::new(ROOT).join(krate)));
    }
    let mut unsafe_files: Vec<String> = files
        .into_iter()
        .filter(|p| {
            std::fs::read_to_string(p).unwrap().lines().any(|l| {
                !l.trim_start().starts_with("//")
                    && (l.contains("unsafe {") || l.contains("unsafe fn") || l.contains("allow(unsafe_code"))
            })
        })
        .map(|p| relative(&p))
        .collect();
    unsafe_files.sort();
    assert_eq!(unsafe_files, ALLOWED, "unsafe outside its modules");
}

#[test]
fn no_product_file_is_over_600_lines() {
    let long: Vec<String> = rust_files(&Path::new(ROOT).join("src"))
        .into_iter()
        .filter(|p| !is_test_source(p))
        .filter_map(|p| {
            let lines = std::fs::read_to_string(&p).unwrap().lines().count();
            (lines > 600).then(|| format!("{} ({lines} lines)", relative(&p)))
        })
        .collect();
    assert!(long.is_empty(), "product files over 600 lines: {long:?}");
}

/// `(name, first line, length)` of every function in `source` outside its `mod tests { … }`,
/// found by indentation (rustfmt puts a function's closing brace at the indentation of `fn`).
fn functions(source: &str) -> Vec<(String, usize, usize)> {
    let lines: Vec<&str> = source.lines().collect();
    let mut found = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        if line.trim_start().starts_with("mod tests {") {
            break;
        }
        let indent = line.len() - line.trim_start().len();
        let head = line.trim_start();
        let head = head
            .strip_prefix("pub(super) ")
            .or(head.strip_prefix("pub(crate) "))
            .unwrap_or(head);
        let head = head.strip_prefix("pub ").unwrap_or(head);
        let head = head.strip_prefix("const ").unwrap_or(head);
        let head = head.strip_prefix("async ").unwrap_or(head);
        if let Some(rest) = head.strip_prefix("fn ")
            && !line.trim_end().ends_with(';')
        {
            let name: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
            let close = " ".repeat(indent) + "}";
            let end = (i..lines.len()).find(|&j| lines[j].trim_end() == close).unwrap_or(i);
            found.push((name, i + 1, end - i + 1));
            i = end;
        }
        i += 1;
    }
    found
}

#[test]
fn no_controller_function_is_over_80_lines() {
    let mut long = Vec::new();
    for path in rust_files(&Path::new(ROOT).join("src/controllers")) {
        if is_test_source(&path) {
            continue;
        }
        for (name, line, length) in functions(&std::fs::read_to_string(&path).unwrap()) {
            if length > 80 {
                long.push(format!("{}:{line} {name} ({length} lines)", relative(&path)));
            }
        }
    }
    assert!(long.is_empty(), "controller functions over 80 lines: {long:?}");
}

#[test]
fn the_function_finder_sees_long_functions() {
    let body = "    x();\n".repeat(3);
    let source = format!("pub async fn short() {{\n{body}}}\n\nimpl A {{\n    fn inner(&self) {{\n{body}    }}\n}}\n");
    let found = functions(&source);
    assert_eq!(found, [("short".to_owned(), 1, 5), ("inner".to_owned(), 8, 5)]);
}

//! `scripts/control-plane.sh` refuses what it cannot do with one line naming it, and leaves no
//! process behind. These cases need no Go build: a busy port is found before anything is built,
//! and a component that cannot start is played by a stand-in binary in a private cache.

use std::{
    net::TcpListener,
    path::{Path, PathBuf},
    process::{Command, Output},
    sync::{Mutex, MutexGuard, PoisonError},
};

fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scripts/control-plane.sh")
}

fn up(dir: &Path, env: &[(&str, &str)]) -> Output {
    Command::new("bash")
        .arg(script())
        .arg("up")
        .arg(dir)
        .envs(env.iter().copied())
        .output()
        .unwrap()
}

fn stderr_line(out: &Output) -> String {
    let text = String::from_utf8_lossy(&out.stderr).into_owned();
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "one line of error, got: {text}");
    lines[0].to_owned()
}

/// Held by each test that runs the script on a port base: tests run in parallel, and two that
/// found the same free base would see each other's ports busy.
static PORTS: Mutex<()> = Mutex::new(());

/// A port base whose API port is free now (an ephemeral-range-free base, as the script wants),
/// with the guard that keeps the other tests off it until the test ends.
fn free_base() -> (u16, MutexGuard<'static, ()>) {
    let guard = PORTS.lock().unwrap_or_else(PoisonError::into_inner);
    let base = (20_000..30_000)
        .step_by(97)
        .find(|b| {
            TcpListener::bind(("127.0.0.1", b + 443)).is_ok() && TcpListener::bind(("127.0.0.1", b + 379)).is_ok()
        })
        .unwrap();
    (base, guard)
}

#[test]
fn a_port_in_use_is_named_and_nothing_starts() {
    let (base, _ports) = free_base();
    let _busy = TcpListener::bind(("127.0.0.1", base + 443)).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let cp = dir.path().join("cp");
    let out = up(&cp, &[("CAPLV_CP_PORT_BASE", &base.to_string())]);
    assert_eq!(out.status.code(), Some(1));
    // The script waits for the port (a control plane going down may still hold it), then names
    // the holder: this test process.
    let line = stderr_line(&out);
    let expected = format!(
        "control-plane: port {} (kube-apiserver) is already in use, held by ",
        base + 443
    );
    assert!(line.starts_with(&expected), "{line}");
    assert!(line.contains(&format!("pid={},", std::process::id())), "{line}");
    assert!(!cp.join("pids").exists(), "nothing was started");
}

#[test]
fn a_wrong_capi_version_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let out = up(&dir.path().join("cp"), &[("CAPLV_CAPI_VERSION", "v1alpha3")]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        stderr_line(&out),
        "control-plane: CAPLV_CAPI_VERSION must be v1beta1 or v1beta2, not 'v1alpha3'"
    );
}

#[test]
fn a_component_that_cannot_start_is_named_and_stopped() {
    // A private cache whose "etcd" prints one line and exits, marked as a complete build.
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let version = |module: &str, path: &str| {
        let out = Command::new("go")
            .args(["list", "-m", "-f", "{{.Version}}", path])
            .current_dir(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("testbed").join(module))
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    };
    let fake = |dir: PathBuf, names: &[&str], body: &str| {
        std::fs::create_dir_all(&dir).unwrap();
        for name in names {
            let path = dir.join(name);
            std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
            Command::new("chmod").arg("+x").arg(&path).status().unwrap();
        }
        std::fs::write(dir.join(".complete"), "").unwrap();
    };
    fake(
        cache.join(format!("etcd-{}", version("etcd", "go.etcd.io/etcd/server/v3"))),
        &["etcd"],
        "echo 'etcd: data dir is not writable' >&2; exit 1",
    );
    fake(
        cache.join(format!("kubernetes-{}", version("kube", "k8s.io/kubernetes"))),
        &["kube-apiserver", "kube-controller-manager", "kubectl"],
        "exit 1",
    );
    fake(
        cache.join(format!(
            "cluster-api-{}",
            version("capi-v1beta1", "sigs.k8s.io/cluster-api")
        )),
        &["manager"],
        "exit 1",
    );
    fake(
        cache.join(format!(
            "ipam-in-cluster-{}",
            version("ipam-in-cluster", "sigs.k8s.io/cluster-api-ipam-provider-in-cluster")
        )),
        &["manager"],
        "exit 1",
    );
    let cp = dir.path().join("cp");
    let (base, _ports) = free_base();
    let base = base.to_string();
    let out = up(
        &cp,
        &[
            ("CAPLV_CP_CACHE", cache.to_str().unwrap()),
            ("CAPLV_CP_PORT_BASE", &base),
        ],
    );
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(
        stderr_line(&out),
        "control-plane: etcd exited before it became ready; last log line: etcd: data dir is not writable"
    );
    let pids: Vec<_> = std::fs::read_dir(cp.join("pids")).unwrap().collect();
    assert!(
        pids.is_empty(),
        "every started process was stopped and forgotten: {pids:?}"
    );
}

#[test]
fn restarting_a_component_the_control_plane_does_not_run_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new("bash")
        .arg(script())
        .args(["restart", dir.path().to_str().unwrap(), "kube-apisrver"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        stderr_line(&out),
        format!(
            "control-plane: {} runs no component named 'kube-apisrver'",
            dir.path().display()
        )
    );
}

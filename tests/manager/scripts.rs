//! The seed's quick commands, `./demo-create-worker.sh` and `./deploy.sh`, against the sandbox.

use std::{
    path::{Path, PathBuf},
    process::{Command, Stdio},
};

use crate::{
    cli::manager,
    support::{kubectl, wait_until},
};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn script(name: &str, args: &[&str], kubeconfig: &Path, env: &[(&str, &str)]) -> std::process::Output {
    Command::new("bash")
        .arg(repo().join(name))
        .args(args)
        .env("KUBECONFIG", kubeconfig)
        .envs(env.iter().copied())
        .output()
        .unwrap()
}

fn text(out: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[tokio::test]
async fn the_quick_commands_create_a_worker_and_show_the_stack() {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("sandbox.kubeconfig");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut child = manager()
        .args([
            "sandbox",
            "--metrics-addr",
            &format!("127.0.0.1:{port}"),
            "--kubeconfig-out",
        ])
        .arg(&kubeconfig)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_until("sandbox kubeconfig", || async { kubeconfig.exists() }).await;
    let seed = repo().join("examples/seed");
    for file in [
        "01-libvirtcluster.yaml",
        "02-libvirthost.yaml",
        "03-cluster.yaml",
        "04-secret-worker-ignition.yaml",
    ] {
        let out = kubectl(&kubeconfig, &["apply", "-f", seed.join(file).to_str().unwrap()]);
        assert!(out.status.success(), "{}", text(&out));
    }

    // Bad input is refused naming the variable, and nothing is created.
    let bad = script("demo-create-worker.sh", &[], &kubeconfig, &[("IP", "192.168.122.100")]);
    assert_eq!(bad.status.code(), Some(2), "{}", text(&bad));
    assert!(
        text(&bad).contains("IP=192.168.122.100 is not an IPv4 address with prefix"),
        "{}",
        text(&bad)
    );

    let env = [
        ("WORKER", "quick-worker"),
        ("VCPUS", "4"),
        ("MEMORY_MB", "4096"),
        ("IP", "192.168.122.120/24"),
        ("DAYS", "mon-sun"),
        ("HOURS", "0-23"),
        ("TIMEZONE", "UTC"),
    ];
    let created = script("demo-create-worker.sh", &[], &kubeconfig, &env);
    assert!(created.status.success(), "{}", text(&created));
    wait_until("quick-worker's VM runs", || async {
        let out = kubectl(
            &kubeconfig,
            &[
                "get",
                "libvirtmachine",
                "quick-worker",
                "-o",
                "jsonpath={.status.domainState} {.spec.domain.vcpus}",
            ],
        );
        out.stdout == b"running 4"
    })
    .await;

    let metrics = format!("http://127.0.0.1:{port}/metrics");
    let status = script(
        "deploy.sh",
        &["status"],
        &kubeconfig,
        &[("CAPLV_METRICS_URL", &metrics)],
    );
    assert!(status.status.success(), "{}", text(&status));
    let shown = text(&status);
    // Each row: the words that must appear together on one line.
    for row in [
        &["==", "Controllers"][..],
        &["libvirtmachine", "ready"],
        &["scheduledmachine", "ready"],
        &["scheduledcapacity", "ready"],
        &["==", "Capacities"],
        &["csrapprover", "ready"],
        &["libvirtmachines.infrastructure.cluster.x-k8s.io", "True"],
        &["laptop", "true", "Connected", "16", "31560"],
        &["quick-worker", "Running", "libvirt:///"],
        &["quick-worker", "laptop", "DomainRunning", "running"],
        &["quick-worker", "Active", "true"],
    ] {
        assert!(
            shown.lines().any(|l| {
                let words: Vec<&str> = l.split_whitespace().collect();
                row.iter()
                    .all(|w| words.contains(w) || (w.ends_with('/') && words.iter().any(|x| x.starts_with(w))))
            }),
            "no line with {row:?} in:\n{shown}"
        );
    }

    // install needs Helm, and says so.
    let install = script(
        "deploy.sh",
        &["install"],
        &kubeconfig,
        &[("HELM", "/nonexistent/helm"), ("PATH", "/usr/bin:/bin")],
    );
    assert!(!install.status.success());
    assert!(
        text(&install).contains("/nonexistent/helm is required"),
        "{}",
        text(&install)
    );
    let _ = child.kill();
    let _ = child.wait();
}

//! The `caplv-manager` binary as a user runs it.

use std::{
    io::Read,
    path::PathBuf,
    process::{Child, Command, Output, Stdio},
    time::{Duration, Instant},
};

use crate::support::DEADLINE;

pub fn manager() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_caplv-manager"));
    cmd.env_remove("KUBECONFIG").env("CAPLV_LOG", "info");
    cmd
}

/// Wait for `child` to exit within [`DEADLINE`], killing it otherwise.
pub fn wait_with_deadline(mut child: Child) -> Output {
    let start = Instant::now();
    loop {
        if child.try_wait().unwrap().is_some() {
            return child.wait_with_output().unwrap();
        }
        if start.elapsed() > DEADLINE {
            child.kill().unwrap();
            let mut stderr = String::new();
            child.stderr.take().unwrap().read_to_string(&mut stderr).unwrap();
            panic!("process did not exit within {DEADLINE:?}; stderr:\n{stderr}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Send SIGTERM (or another signal) to `child`.
pub fn signal(child: &Child, sig: &str) {
    let status = Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(child.id().to_string())
        .status()
        .unwrap();
    assert!(status.success());
}

/// A loopback port nothing listens on.
fn closed_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn kubeconfig_for(dir: &tempfile::TempDir, addr: std::net::SocketAddr) -> PathBuf {
    let path = dir.path().join("kubeconfig");
    std::fs::write(&path, memkube::kubeconfig_yaml(addr)).unwrap();
    path
}

#[test]
fn crds_prints_every_crd_as_yaml() {
    let out = manager().arg("crds").output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let docs: Vec<serde_yaml::Value> = serde_yaml::Deserializer::from_str(&text)
        .map(|d| serde::Deserialize::deserialize(d).unwrap())
        .collect();
    assert_eq!(docs.len(), 10);
    assert!(docs.iter().all(|d| d["kind"] == "CustomResourceDefinition"));
    assert!(out.stderr.is_empty(), "crds prints nothing but YAML");
}

#[test]
fn unknown_controller_family_is_a_usage_error_naming_the_choices() {
    let out = manager()
        .args(["run", "--controllers", "caplv,bogus"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("\"bogus\"") && stderr.contains("caplv, ignition, fivespot"),
        "{stderr}"
    );
}

#[test]
fn unreachable_api_server_fails_fast_with_the_address() {
    let dir = tempfile::tempdir().unwrap();
    let port = closed_port();
    let kubeconfig = kubeconfig_for(&dir, format!("127.0.0.1:{port}").parse().unwrap());
    let child = manager()
        .env("KUBECONFIG", &kubeconfig)
        .args(["--api-timeout-seconds", "5", "--metrics-addr", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = wait_with_deadline(child);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!(
            "cannot reach the Kubernetes API server at http://127.0.0.1:{port}"
        )),
        "{stderr}"
    );
}

#[test]
fn a_hosts_dir_without_simulated_hosts_is_refused_naming_the_flag() {
    let dir = tempfile::tempdir().unwrap();
    let out = manager()
        .args(["sandbox", "--libvirt", "real", "--hosts-dir"])
        .arg(dir.path())
        .arg("--kubeconfig-out")
        .arg(dir.path().join("k"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("--hosts-dir applies to --libvirt test only"),
        "{stderr}"
    );
}

#[test]
fn missing_configuration_is_explained() {
    let home = tempfile::tempdir().unwrap();
    let out = manager()
        .env("HOME", home.path())
        .env_remove("KUBERNETES_SERVICE_HOST")
        .args(["--metrics-addr", "127.0.0.1:0"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("no Kubernetes configuration found"), "{stderr}");
}

#[tokio::test]
async fn runs_against_a_cluster_serves_health_and_exits_zero_on_sigterm() {
    let server = memkube::Server::new();
    server.install_crds(&caplv::api::crds()).unwrap();
    capi_sim::install(&server.client(), capi_sim::CapiVersions::V1beta2)
        .await
        .unwrap();
    let addr = server.serve("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = kubeconfig_for(&dir, addr);
    let metrics_port = closed_port();
    let child = manager()
        .env("KUBECONFIG", &kubeconfig)
        .env("CAPLV_METRICS_ADDR", format!("127.0.0.1:{metrics_port}"))
        .env("CAPLV_LOG_FORMAT", "json")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();

    let url = |path: &str| format!("http://127.0.0.1:{metrics_port}{path}");
    let mut child = child;
    let deadline = Instant::now() + DEADLINE;
    loop {
        let last = http_get(&url("/readyz")).await;
        if last.as_ref().is_some_and(|(code, _)| *code == 200) {
            break;
        }
        if child.try_wait().unwrap().is_some() || Instant::now() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "manager never became ready ({last:?}):\n{}",
                String::from_utf8_lossy(&out.stderr)
                    .lines()
                    .filter(|l| !l.contains("DEBUG"))
                    .collect::<Vec<_>>()
                    .join("\n")
            );
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let (code, body) = http_get(&url("/healthz")).await.unwrap();
    assert_eq!((code, body.as_str()), (200, "ok"));
    let (_, metrics) = http_get(&url("/metrics")).await.unwrap();
    assert!(
        metrics.contains("caplv_controller_ready{controller=\"libvirtcluster\"} 1"),
        "{metrics}"
    );

    signal(&child, "TERM");
    let out = tokio::task::spawn_blocking(move || wait_with_deadline(child))
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr
            .lines()
            .all(|l| serde_json::from_str::<serde_json::Value>(l).is_ok()),
        "JSON logs:\n{stderr}"
    );
    assert!(
        stderr.contains("\"version\":\"v1beta2\""),
        "discovered CAPI v1beta2:\n{stderr}"
    );
    server.shutdown();
}

/// A minimal HTTP/1.1 GET on loopback: status code and body, or `None` when nothing answers.
pub async fn http_get(url: &str) -> Option<(u16, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let rest = url.strip_prefix("http://")?;
    let (host, path) = rest
        .split_once('/')
        .map_or((rest, "/".to_owned()), |(h, p)| (h, format!("/{p}")));
    let mut stream = tokio::net::TcpStream::connect(host).await.ok()?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await.ok()?;
    let code = response.split(' ').nth(1)?.parse().ok()?;
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    Some((code, body))
}

#[test]
fn schedule_answers_when_a_worker_runs() {
    let out = manager()
        .args([
            "schedule",
            "--days",
            "mon-fri",
            "--hours",
            "9-17",
            "--timezone",
            "America/New_York",
        ])
        .args(["--at", "2026-04-27T12:00:00Z"])
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8(out.stdout).unwrap(),
        "{\"active\":false,\"nextTransition\":\"2026-04-27T13:00:00Z\"}\n"
    );

    let out = manager()
        .args([
            "schedule",
            "--cron",
            "0 22 * * fri",
            "--duration",
            "8h",
            "--at",
            "2026-05-01T23:00:00Z",
        ])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8(out.stdout).unwrap(),
        "{\"active\":true,\"nextTransition\":\"2026-05-02T06:00:00Z\"}\n"
    );
}

#[test]
fn an_invalid_schedule_exits_2_naming_field_and_token() {
    for (args, needle) in [
        (vec!["--days", "mon-fri", "--hours", "+9"], "schedule.hoursOfDay[0]"),
        (vec!["--days", "mon-wed-fri", "--hours", "9"], "mon-wed-fri"),
        (
            vec!["--days", "mon", "--hours", "9", "--timezone", "america/new_york"],
            "america/new_york",
        ),
        (vec!["--cron", "61 * * * *", "--duration", "1h"], "schedule.cron"),
        (vec!["--cron", "0 * * * *", "--duration", "0s"], "schedule.duration"),
        (
            vec!["--days", "mon", "--hours", "9", "--exclude", "2026-12-25/2026-12-24"],
            "schedule.exclusions[0].end",
        ),
        (vec!["-f", "/nonexistent/sm.yaml"], "/nonexistent/sm.yaml"),
    ] {
        let out = manager().arg("schedule").args(&args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(needle), "{args:?}: {stderr}");
        assert!(out.stdout.is_empty());
    }
}

fn machine_manifest(dir: &tempfile::TempDir, uid: Option<&str>) -> PathBuf {
    let sm: serde_yaml::Value =
        serde_yaml::from_str(include_str!("../../examples/seed/05-scheduledmachine.yaml")).unwrap();
    let mut metadata = serde_yaml::Mapping::new();
    metadata.insert("name".into(), "spot-worker-01".into());
    if let Some(uid) = uid {
        metadata.insert("uid".into(), uid.into());
    }
    let mut doc = serde_yaml::Mapping::new();
    doc.insert("apiVersion".into(), "infrastructure.cluster.x-k8s.io/v1alpha1".into());
    doc.insert("kind".into(), "LibvirtMachine".into());
    doc.insert("metadata".into(), metadata.into());
    doc.insert("spec".into(), sm["spec"]["infrastructureSpec"]["spec"].clone());
    let path = dir.path().join("machine.yaml");
    std::fs::write(&path, serde_yaml::to_string(&doc).unwrap()).unwrap();
    path
}

#[test]
fn ignition_render_shows_what_the_vm_receives() {
    let dir = tempfile::tempdir().unwrap();
    let bootstrap = dir.path().join("worker.ign");
    std::fs::write(
        &bootstrap,
        r#"{"ignition":{"version":"3.2.0"},"passwd":{"users":[{"name":"core"}]}}"#,
    )
    .unwrap();
    let uid = "3f1c9a6e-1b2d-4e5f-8a9b-0c1d2e3f4a5b";
    let machine = machine_manifest(&dir, Some(uid));
    let out = manager()
        .args(["ignition", "render", "--bootstrap"])
        .arg(&bootstrap)
        .arg("--machine")
        .arg(&machine)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let config: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(config["ignition"]["version"], "3.2.0", "version kept");
    assert_eq!(
        config["passwd"]["users"][0]["name"], "core",
        "the bootstrap's content kept"
    );
    let paths: Vec<&str> = config["storage"]["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["path"].as_str().unwrap())
        .collect();
    assert!(
        paths.contains(&"/etc/hostname")
            && paths.contains(&"/etc/NetworkManager/system-connections/enp1s0.nmconnection")
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains(&format!("libvirt:///{uid}")), "provider ID from the uid");
    assert!(text.contains("192.168.122.100/24"), "static address");
    assert!(String::from_utf8_lossy(&out.stderr).contains("for node spot-worker-01"));

    // A hand-written manifest without a uid still works, and says what it assumed.
    let machine = machine_manifest(&dir, None);
    let out = manager()
        .args(["ignition", "render", "--bootstrap"])
        .arg(&bootstrap)
        .arg("--machine")
        .arg(&machine)
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("has no metadata.uid; using the stand-in provider ID"));
}

#[test]
fn ignition_render_refuses_bad_input_without_echoing_it() {
    let dir = tempfile::tempdir().unwrap();
    let machine = machine_manifest(&dir, None);
    let bootstrap = dir.path().join("bad.ign");
    std::fs::write(&bootstrap, "{not json ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIsecret").unwrap();
    let out = manager()
        .args(["ignition", "render", "--bootstrap"])
        .arg(&bootstrap)
        .arg("--machine")
        .arg(&machine)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("not valid JSON") && !stderr.contains("AAAAC3Nza"),
        "{stderr}"
    );

    std::fs::write(&bootstrap, r#"{"ignition":{"version":"2.2.0"}}"#).unwrap();
    let out = manager()
        .args(["ignition", "render", "--bootstrap"])
        .arg(&bootstrap)
        .arg("--machine")
        .arg(&machine)
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("Accept: application/vnd.coreos.ignition+json"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let out = manager()
        .args(["ignition", "render", "--bootstrap", "/nonexistent.ign", "--machine"])
        .arg(&machine)
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot read /nonexistent.ign"));
}

#[test]
fn a_workload_api_server_that_is_no_https_url_is_refused_naming_the_flag() {
    for bad in ["http://kubernetes.default.svc", "kubernetes.default.svc", "https://"] {
        let out = manager().args(["run", "--workload-api-server", bad]).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{bad}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("--workload-api-server"), "{bad}: {stderr}");
    }
}

//! System test on real components: libvirtd + QEMU (TCG) + OVMF in the test's own network
//! namespace, a private sshd on 127.0.0.1 with a least-privilege account, and the manager as a
//! real process (`caplv-manager sandbox --libvirt real`) driven with kubectl.
//!
//! `scripts/system-test.sh` brings the environment up with `scripts/libvirt-env.sh`, runs this
//! test with the `CAPLV_SYS_*` variables it writes, and tears everything down; `cargo test`
//! alone skips it (ignored), because it needs root and that environment.

use std::{
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::Duration,
};

use chrono::Timelike;

use crate::cli::manager;

/// Real libvirt is slower than the test driver: first define probes QEMU, TCG boots slowly.
const DEADLINE: Duration = Duration::from_secs(180);

fn var(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("{name} is not set; run scripts/system-test.sh"))
}

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn virsh(args: &[&str]) -> std::process::Output {
    Command::new("virsh")
        .args(["-c", "qemu:///system"])
        .args(args)
        .output()
        .unwrap()
}

struct Sandbox {
    child: Child,
    kubeconfig: PathBuf,
    _dir: tempfile::TempDir,
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Sandbox {
    fn kubectl(&self, args: &[&str]) -> std::process::Output {
        crate::support::kubectl(&self.kubeconfig, args)
    }

    fn get(&self, args: &[&str]) -> String {
        String::from_utf8_lossy(&self.kubectl(args).stdout).into_owned()
    }

    fn apply(&self, yaml: &str) {
        let file = self._dir.path().join("apply.yaml");
        std::fs::write(&file, yaml).unwrap();
        let out = self.kubectl(&["apply", "-f", file.to_str().unwrap()]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }
}

async fn wait(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + DEADLINE;
    while !check() {
        assert!(tokio::time::Instant::now() < deadline, "timed out waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

fn start_sandbox() -> Sandbox {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("sandbox.kubeconfig");
    let log = std::fs::File::create(dir.path().join("manager.log")).unwrap();
    let child = manager()
        .args([
            "sandbox",
            "--libvirt",
            "real",
            "--metrics-addr",
            "127.0.0.1:0",
            "--kubeconfig-out",
        ])
        .arg(&kubeconfig)
        .env("CAPLV_DOMAIN_CHECK_INTERVAL_SECONDS", "5")
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap();
    Sandbox {
        child,
        kubeconfig,
        _dir: dir,
    }
}

/// The API server's port from the sandbox kubeconfig (a loopback control plane endpoint).
fn api_port(kubeconfig: &Path) -> u16 {
    let text = std::fs::read_to_string(kubeconfig).unwrap();
    let server = text.lines().find_map(|l| l.trim().strip_prefix("server: ")).unwrap();
    server
        .rsplit(':')
        .next()
        .unwrap()
        .trim_end_matches('/')
        .parse()
        .unwrap()
}

fn indent(text: &str, by: usize) -> String {
    text.lines().map(|l| format!("{}{l}\n", " ".repeat(by))).collect()
}

fn manifests(port: u16, key: &str) -> String {
    let (uri, pin, pool, base, code, vars) = (
        var("CAPLV_SYS_URI"),
        var("CAPLV_SYS_FINGERPRINT"),
        var("CAPLV_SYS_POOL"),
        var("CAPLV_SYS_BASE_IMAGE"),
        var("CAPLV_SYS_OVMF_CODE"),
        var("CAPLV_SYS_OVMF_VARS"),
    );
    let wrong = format!("SHA256:{}", "A".repeat(43));
    format!(
        r#"apiVersion: v1
kind: Secret
metadata: {{name: sys-ssh, namespace: default}}
stringData:
  ssh-privatekey: |
{key}---
apiVersion: infrastructure.cluster.x-k8s.io/v1alpha1
kind: LibvirtHost
metadata: {{name: sys, namespace: default}}
spec:
  uri: "{uri}"
  secretRef: {{name: sys-ssh}}
  hostKeyFingerprint: "{pin}"
  firmwarePath: {code}
  nvramTemplatePath: {vars}
  reservedResources: {{vcpus: 0, memoryMB: 0}}
  healthCheckIntervalSeconds: 30
---
apiVersion: infrastructure.cluster.x-k8s.io/v1alpha1
kind: LibvirtHost
metadata: {{name: impostor, namespace: default}}
spec:
  uri: "{uri}"
  secretRef: {{name: sys-ssh}}
  hostKeyFingerprint: "{wrong}"
---
apiVersion: infrastructure.cluster.x-k8s.io/v1alpha1
kind: LibvirtCluster
metadata: {{name: spot, namespace: default}}
spec:
  controlPlaneEndpoint: {{host: 127.0.0.1, port: {port}}}
---
apiVersion: cluster.x-k8s.io/v1beta1
kind: Cluster
metadata: {{name: spot, namespace: default}}
spec:
  infrastructureRef: {{apiVersion: infrastructure.cluster.x-k8s.io/v1alpha1, kind: LibvirtCluster, name: spot}}
---
apiVersion: v1
kind: Secret
metadata: {{name: worker-ignition, namespace: default}}
stringData:
  value: '{{"ignition":{{"version":"3.4.0"}}}}'
---
apiVersion: 5spot.finos.org/v1alpha1
kind: ScheduledMachine
metadata: {{name: sys-worker, namespace: default}}
spec:
  clusterName: spot
  schedule: {{daysOfWeek: [mon-sun], hoursOfDay: ["0-23"], timezone: UTC}}
  infrastructureSpec:
    apiVersion: infrastructure.cluster.x-k8s.io/v1alpha1
    kind: LibvirtMachine
    spec:
      hostRef: {{name: sys}}
      domain: {{firmware: uefi, vcpus: 1, memoryMB: 512, type: qemu}}
      rootDisk: {{baseImage: {base}, storagePool: {pool}, size: 128Mi}}
      network:
        type: network
        name: default
        addresses: [192.168.122.50/24]
        gateway: 192.168.122.1
  bootstrapSpec:
    apiVersion: bootstrap.cluster.x-k8s.io/v1alpha1
    kind: IgnitionConfig
    spec: {{secretRef: {{name: worker-ignition}}}}
  machineTemplate:
    labels: {{node-role.kubernetes.io/worker: ""}}
  killSwitch: false
"#,
        key = indent(key, 4),
    )
}

#[tokio::test]
#[ignore = "needs root and the real libvirt environment: scripts/system-test.sh runs it"]
async fn a_scheduled_machine_boots_a_real_uefi_vm_and_the_kill_switch_leaves_nothing() {
    let key = std::fs::read_to_string(var("CAPLV_SYS_CLIENT_KEY")).unwrap();
    let pool_dir = PathBuf::from(var("CAPLV_SYS_POOL_DIR"));
    let nvram_dir = PathBuf::from(var("CAPLV_SYS_NVRAM_DIR"));
    let sandbox = start_sandbox();
    wait("sandbox kubeconfig", || sandbox.kubeconfig.exists()).await;
    sandbox.apply(&manifests(api_port(&sandbox.kubeconfig), &key));

    // The pinned host connects over SSH; the impostor pin is refused before authenticating.
    wait("host sys ready", || {
        sandbox.get(&["get", "libvirthost", "sys", "-o", "jsonpath={.status.ready}"]) == "true"
    })
    .await;
    let pin = var("CAPLV_SYS_FINGERPRINT");
    wait("impostor refused with HostKeyMismatch", || {
        sandbox.get(&[
            "get",
            "libvirthost",
            "impostor",
            "-o",
            "jsonpath={.status.conditions[?(@.type==\"Reachable\")].reason} {.status.observedHostKeyFingerprint}",
        ]) == format!("HostKeyMismatch {pin}")
    })
    .await;

    // The worker's VM runs: UEFI, the fw_cfg entry, this VM's Ignition in the named file.
    wait("LibvirtMachine sys-worker ready", || {
        sandbox.get(&[
            "get",
            "libvirtmachine",
            "sys-worker",
            "-o",
            "jsonpath={.status.domainState}",
        ]) == "running"
    })
    .await;
    let uid = sandbox.get(&["get", "libvirtmachine", "sys-worker", "-o", "jsonpath={.metadata.uid}"]);
    let state = run(Command::new("virsh").args(["-c", "qemu:///system", "domstate", "sys-worker"]));
    assert_eq!(state.trim(), "running");
    let xml = run(Command::new("virsh").args(["-c", "qemu:///system", "dumpxml", "sys-worker"]));
    assert!(xml.contains(&format!("<uuid>{uid}</uuid>")), "{xml}");
    assert!(xml.contains("type='pflash'") && xml.contains("<nvram"), "UEFI: {xml}");
    assert!(xml.contains("<domain type='qemu'"), "TCG: {xml}");
    let ignition_file = pool_dir.join("sys-worker-ignition.ign");
    assert!(
        xml.contains(&format!(
            "<entry name='opt/com.coreos/config' file='{}'/>",
            ignition_file.display()
        )),
        "fw_cfg entry: {xml}"
    );
    let cmdline = run(Command::new("pgrep").args(["-a", "-f", "guest=sys-worker"]));
    assert!(cmdline.contains("name=opt/com.coreos/config,file="), "{cmdline}");
    let ignition = std::fs::read_to_string(&ignition_file).unwrap();
    assert!(
        ignition.contains("/etc/hostname") && ignition.contains("data:,sys-worker"),
        "{ignition}"
    );
    assert!(ignition.contains(&format!("libvirt:///{uid}")), "provider ID injected");
    let nvram = nvram_dir.join("sys-worker_VARS.fd");
    assert!(nvram.exists(), "per-VM NVRAM at {}", nvram.display());

    // Kill switch: the Machine goes, and with it every trace on the host.
    let out = sandbox.kubectl(&[
        "patch",
        "scheduledmachine",
        "sys-worker",
        "--type",
        "merge",
        "-p",
        r#"{"spec":{"killSwitch":true}}"#,
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    wait("LibvirtMachine sys-worker gone", || {
        !sandbox
            .get(&["get", "libvirtmachines", "-o", "name"])
            .contains("sys-worker")
    })
    .await;
    let domains = virsh(&["list", "--all", "--name"]);
    assert!(
        !String::from_utf8_lossy(&domains.stdout).contains("sys-worker"),
        "domain gone"
    );
    let volumes = run(Command::new("virsh").args(["-c", "qemu:///system", "vol-list", &var("CAPLV_SYS_POOL")]));
    assert!(!volumes.contains("sys-worker"), "volumes gone: {volumes}");
    let leftovers: Vec<String> = std::fs::read_dir(&pool_dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains("sys-worker"))
        .collect();
    assert!(leftovers.is_empty(), "files left in the pool: {leftovers:?}");
    assert!(!nvram.exists(), "NVRAM removed");
    assert!(!ignition_file.exists(), "Ignition file removed");
}

/// The seed's manifests, unchanged except what ties them to the seed's own lab: the host (URI,
/// pinned key, firmware paths, a reservation that fits this 2-core machine), the control plane
/// endpoint, the storage pool and base image, TCG instead of KVM (nested KVM cannot run guests
/// here), and an always-open window.
fn seed_rewritten(dir: &Path, api_port: u16) -> PathBuf {
    let seed = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/seed");
    let out = dir.join("seed");
    std::fs::create_dir_all(&out).unwrap();
    for entry in std::fs::read_dir(&seed).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "yaml") {
            continue;
        }
        let mut doc: serde_json::Value = serde_yaml::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        match doc["kind"].as_str().unwrap() {
            "LibvirtCluster" => {
                doc["spec"]["controlPlaneEndpoint"] = serde_json::json!({"host": "127.0.0.1", "port": api_port});
            }
            "LibvirtHost" => {
                let spec = &mut doc["spec"];
                spec["uri"] = var("CAPLV_SYS_URI").into();
                spec["hostKeyFingerprint"] = var("CAPLV_SYS_FINGERPRINT").into();
                spec["firmwarePath"] = var("CAPLV_SYS_OVMF_CODE").into();
                spec["nvramTemplatePath"] = var("CAPLV_SYS_OVMF_VARS").into();
                spec["reservedResources"] = serde_json::json!({"vcpus": 0, "memoryMB": 1024});
            }
            "ScheduledMachine" => {
                let spec = &mut doc["spec"];
                spec["schedule"] =
                    serde_json::json!({"daysOfWeek": ["mon-sun"], "hoursOfDay": ["0-23"], "timezone": "UTC"});
                let infra = &mut spec["infrastructureSpec"]["spec"];
                infra["rootDisk"]["baseImage"] = var("CAPLV_SYS_TEST_IMAGE").into();
                infra["rootDisk"]["storagePool"] = var("CAPLV_SYS_POOL").into();
                infra["domain"]["type"] = "qemu".into();
            }
            _ => {}
        }
        let name = path.file_name().unwrap();
        std::fs::write(out.join(name), serde_yaml::to_string(&doc).unwrap()).unwrap();
    }
    out
}

#[tokio::test]
#[ignore = "needs root and the real libvirt environment: scripts/system-test.sh runs it"]
async fn the_seed_runs_end_to_end_and_the_guest_reads_its_own_ignition() {
    let key = std::fs::read_to_string(var("CAPLV_SYS_CLIENT_KEY")).unwrap();
    let pool_dir = PathBuf::from(var("CAPLV_SYS_POOL_DIR"));
    let nvram = PathBuf::from(var("CAPLV_SYS_NVRAM_DIR")).join("spot-worker-01_VARS.fd");
    let sandbox = start_sandbox();
    wait("sandbox kubeconfig", || sandbox.kubeconfig.exists()).await;
    let watch_log = sandbox._dir.path().join("watch.log");
    let mut watcher = Command::new("kubectl")
        .env("KUBECONFIG", &sandbox.kubeconfig)
        .args([
            "get",
            "scheduledmachines",
            "-w",
            "--no-headers",
            "-o",
            "custom-columns=NAME:.metadata.name,PHASE:.status.phase",
        ])
        .stdout(std::fs::File::create(&watch_log).unwrap())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // The SSH key Secret the seed's LibvirtHost names (the seed leaves creating it to the user).
    sandbox.apply(&format!(
        "apiVersion: v1\nkind: Secret\nmetadata: {{name: laptop-ssh-key, namespace: default}}\nstringData:\n  ssh-privatekey: |\n{}",
        indent(&key, 4)
    ));
    let seed = seed_rewritten(sandbox._dir.path(), api_port(&sandbox.kubeconfig));
    let out = sandbox.kubectl(&["apply", "-f", seed.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));

    // ScheduledMachine -> IgnitionConfig, LibvirtMachine, Machine -> bootstrap Secret -> domain.
    wait("domain running", || {
        sandbox.get(&[
            "get",
            "libvirtmachine",
            "spot-worker-01",
            "-o",
            "jsonpath={.status.domainState}",
        ]) == "running"
    })
    .await;
    assert_eq!(
        sandbox.get(&[
            "get",
            "ignitionconfig",
            "spot-worker-01",
            "-o",
            "jsonpath={.status.dataSecretName}"
        ]),
        "spot-worker-01"
    );
    // The guest itself read this VM's Ignition from fw_cfg: its own hostname and static address.
    let console = pool_dir.join("spot-worker-01-console.log");
    wait("the guest reports what it read from fw_cfg", || {
        std::fs::read_to_string(&console).is_ok_and(|t| t.contains("CAPLV-PROBE: done"))
    })
    .await;
    let serial = std::fs::read_to_string(&console).unwrap();
    assert!(serial.contains("CAPLV-PROBE: hostname=spot-worker-01\n"), "{serial}");
    assert!(
        serial.contains("CAPLV-PROBE: | address1=192.168.122.100/24,192.168.122.1"),
        "{serial}"
    );
    assert!(!serial.contains("CAPLV-PROBE: error"), "{serial}");

    // The (emulated) kubelet's Node joins through approved CSRs and carries the worker label.
    wait("Machine Running with its Node", || {
        sandbox.get(&[
            "get",
            "machine",
            "spot-worker-01",
            "-o",
            "jsonpath={.status.phase} {.status.nodeRef.name}",
        ]) == "Running spot-worker-01"
    })
    .await;
    let labels = sandbox.get(&["get", "node", "spot-worker-01", "-o", "jsonpath={.metadata.labels}"]);
    assert!(labels.contains("node-role.kubernetes.io/worker"), "{labels}");
    let uid = sandbox.get(&[
        "get",
        "libvirtmachine",
        "spot-worker-01",
        "-o",
        "jsonpath={.metadata.uid}",
    ]);
    assert_eq!(
        sandbox.get(&["get", "node", "spot-worker-01", "-o", "jsonpath={.spec.providerID}"]),
        format!("libvirt:///{uid}")
    );

    // The window closes (schedule edited): drain, then everything goes.
    let closed = (chrono::Utc::now().hour() + 12) % 24;
    let out = sandbox.kubectl(&[
        "patch",
        "scheduledmachine",
        "spot-worker-01",
        "--type",
        "merge",
        "-p",
        &format!(r#"{{"spec":{{"schedule":{{"hoursOfDay":["{closed}"]}}}}}}"#),
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    wait("ScheduledMachine Inactive", || {
        sandbox.get(&[
            "get",
            "scheduledmachine",
            "spot-worker-01",
            "-o",
            "jsonpath={.status.phase}",
        ]) == "Inactive"
    })
    .await;
    for kind in ["machine", "libvirtmachine", "ignitionconfig"] {
        wait(&format!("{kind} gone"), || {
            !sandbox.get(&["get", kind, "-o", "name"]).contains("spot-worker-01")
        })
        .await;
    }
    let domains = virsh(&["list", "--all", "--name"]);
    assert!(
        !String::from_utf8_lossy(&domains.stdout).contains("spot-worker-01"),
        "domain gone"
    );
    let leftovers: Vec<String> = std::fs::read_dir(&pool_dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains("spot-worker-01"))
        .collect();
    assert!(
        leftovers.is_empty(),
        "root, Ignition and console volumes removed: {leftovers:?}"
    );
    assert!(!nvram.exists(), "NVRAM removed");

    // `kubectl get scheduledmachines -w` saw the phases in order.
    let _ = watcher.kill();
    let _ = watcher.wait();
    let watched = std::fs::read_to_string(&watch_log).unwrap();
    let phases: Vec<&str> = watched
        .lines()
        .filter_map(|l| l.split_whitespace().nth(1))
        .filter(|p| *p != "<none>")
        .collect();
    let mut dedup = phases.clone();
    dedup.dedup();
    let order = ["Active", "ShuttingDown", "Inactive"];
    let mut at = 0;
    for phase in &dedup {
        if at < order.len() && *phase == order[at] {
            at += 1;
        }
    }
    assert_eq!(at, order.len(), "phases in order {order:?}, watched: {watched}");
}

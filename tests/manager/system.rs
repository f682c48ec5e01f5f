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
        Command::new("kubectl")
            .env("KUBECONFIG", &self.kubeconfig)
            .args(args)
            .output()
            .unwrap()
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

//! A ScheduledMachine boots a real UEFI VM over the pinned SSH tunnel, and the kill switch
//! leaves nothing on the host; a host with a wrong key pin is refused before authenticating.

use std::{path::PathBuf, process::Command};

use super::{Genuine, host_and_cluster, pool_files, run, var, virsh, wait};

/// Everything lives in its own namespace, away from the seed's `default`.
pub(super) const NS: &str = "sys";

/// The host, cluster and Ignition Secret in namespace [`NS`], and a ScheduledMachine `name`
/// with `schedule` (a YAML flow mapping) whose VM gets the static `address`. Its disk is blank
/// (the firmware finds nothing to boot), so its guest ignores ACPI: it is deleted `Hard`, as a
/// `Graceful` deletion would wait out its timeout (`power_off.rs` covers that).
pub(super) fn manifests(api_port: &str, name: &str, schedule: &str, address: &str) -> String {
    let worker = Worker {
        name,
        schedule,
        address,
        base_image: &var("CAPLV_SYS_BASE_IMAGE"),
        pool: &var("CAPLV_SYS_POOL"),
        shutdown: "{mode: Hard}",
    };
    worker_manifests(api_port, &worker)
}

/// A ScheduledMachine's worker: its VM's static address, the base image it boots, the pool its
/// root disk goes in and its `spec.shutdown` (YAML flow mappings where it says so).
pub(super) struct Worker<'a> {
    /// The ScheduledMachine's (and so the Machine's and LibvirtMachine's) name.
    pub name: &'a str,
    /// `spec.schedule`.
    pub schedule: &'a str,
    /// The VM's address with its prefix length.
    pub address: &'a str,
    /// A volume in `pool`.
    pub base_image: &'a str,
    /// The storage pool of the base image and the root disk.
    pub pool: &'a str,
    /// The LibvirtMachine's `spec.shutdown`.
    pub shutdown: &'a str,
}

/// [`manifests`] for any [`Worker`].
pub(super) fn worker_manifests(api_port: &str, worker: &Worker<'_>) -> String {
    let Worker {
        name,
        schedule,
        address,
        base_image: base,
        pool,
        shutdown,
    } = worker;
    let uri = var("CAPLV_SYS_URI");
    let wrong = format!("SHA256:{}", "A".repeat(43));
    let base_objects = host_and_cluster(NS, "sys", "{}", "sys", api_port);
    format!(
        r#"{base_objects}---
apiVersion: infrastructure.cluster.x-k8s.io/v1alpha1
kind: LibvirtHost
metadata: {{name: impostor, namespace: {NS}}}
spec:
  uri: "{uri}"
  secretRef: {{name: sys-ssh}}
  hostKeyFingerprint: "{wrong}"
---
apiVersion: v1
kind: Secret
metadata: {{name: worker-ignition, namespace: {NS}}}
stringData:
  value: '{{"ignition":{{"version":"3.4.0"}}}}'
---
apiVersion: 5spot.finos.org/v1alpha1
kind: ScheduledMachine
metadata: {{name: {name}, namespace: {NS}}}
spec:
  clusterName: sys
  schedule: {schedule}
  infrastructureSpec:
    apiVersion: infrastructure.cluster.x-k8s.io/v1alpha1
    kind: LibvirtMachine
    spec:
      hostRef: {{name: sys}}
      domain: {{firmware: uefi, vcpus: 1, memoryMB: 512, type: qemu}}
      rootDisk: {{baseImage: {base}, storagePool: {pool}, size: 128Mi}}
      shutdown: {shutdown}
      network:
        type: network
        name: default
        addresses: [{address}]
        gateway: 192.168.122.1
  bootstrapSpec:
    apiVersion: bootstrap.cluster.x-k8s.io/v1alpha1
    kind: IgnitionConfig
    spec: {{secretRef: {{name: worker-ignition}}}}
  machineTemplate:
    labels: {{node-role.kubernetes.io/worker: ""}}
  killSwitch: false
"#
    )
}

#[tokio::test]
#[ignore = "needs root, real libvirt and the genuine control plane: scripts/system-test.sh runs it"]
async fn a_scheduled_machine_boots_a_real_uefi_vm_and_the_kill_switch_leaves_nothing() {
    let pool_dir = PathBuf::from(var("CAPLV_SYS_POOL_DIR"));
    let nvram_dir = PathBuf::from(var("CAPLV_SYS_NVRAM_DIR"));
    let env = Genuine::start().await;
    let always = r#"{daysOfWeek: [mon-sun], hoursOfDay: ["0-23"], timezone: UTC}"#;
    env.apply(&manifests(
        &var("CAPLV_CP_API_PORT"),
        "sys-worker",
        always,
        "192.168.122.50/24",
    ));
    let get = |args: &[&str]| get(&env, args);

    // The pinned host connects over SSH; the impostor pin is refused before authenticating.
    wait("host sys ready", || {
        get(&["libvirthost", "sys", "-o", "jsonpath={.status.ready}"]) == "true"
    })
    .await;
    let pin = var("CAPLV_SYS_FINGERPRINT");
    wait("impostor refused with HostKeyMismatch", || {
        get(&[
            "libvirthost",
            "impostor",
            "-o",
            "jsonpath={.status.conditions[?(@.type==\"Reachable\")].reason} {.status.observedHostKeyFingerprint}",
        ]) == format!("HostKeyMismatch {pin}")
    })
    .await;

    // The worker's VM runs: UEFI, the fw_cfg entry, this VM's Ignition in the named file.
    wait("LibvirtMachine sys-worker running", || {
        get(&["libvirtmachine", "sys-worker", "-o", "jsonpath={.status.domainState}"]) == "running"
    })
    .await;
    let uid = get(&["libvirtmachine", "sys-worker", "-o", "jsonpath={.metadata.uid}"]);
    assert_eq!(virsh(&["domstate", "sys-worker"]).trim(), "running");
    let xml = virsh(&["dumpxml", "sys-worker"]);
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
    // Genuine Cluster API core took the provider ID from the LibvirtMachine.
    wait("Machine has the provider ID", || {
        get(&["machine", "sys-worker", "-o", "jsonpath={.spec.providerID}"]) == format!("libvirt:///{uid}")
    })
    .await;

    // Kill switch: the Machine goes, and with it every trace on the host.
    env.patch(
        &["-n", NS, "scheduledmachine", "sys-worker"],
        r#"{"spec":{"killSwitch":true}}"#,
    );
    // Core deletes the Node too: the Cluster got a SelfManagedControlPlane and its kubeconfig.
    for kind in ["machine", "libvirtmachine", "node"] {
        wait(&format!("{kind} sys-worker gone"), || {
            let out = env.kubectl(&["-n", NS, "get", kind, "-o", "name"]);
            out.status.success() && !String::from_utf8_lossy(&out.stdout).contains("sys-worker")
        })
        .await;
    }
    assert!(
        !virsh(&["list", "--all", "--name"]).contains("sys-worker"),
        "domain gone"
    );
    let volumes = virsh(&["vol-list", &var("CAPLV_SYS_POOL")]);
    assert!(!volumes.contains("sys-worker"), "volumes gone: {volumes}");
    let leftovers = pool_files("sys-worker");
    assert!(leftovers.is_empty(), "files left in the pool: {leftovers:?}");
    assert!(!nvram.exists(), "NVRAM removed");
    assert!(!ignition_file.exists(), "Ignition file removed");
    env.stop().await;
}

/// Sets the kill switch on the ScheduledMachines `names` (all starting with `prefix`), waits
/// for their LibvirtMachines to go, proves no domain or volume of theirs is left in either pool,
/// then deletes them.
pub(super) async fn remove_cleanly(env: &Genuine, names: &[&str], prefix: &str) {
    for name in names {
        env.patch(&["-n", NS, "scheduledmachine", name], r#"{"spec":{"killSwitch":true}}"#);
    }
    wait("the machines gone", || {
        let left = get(env, &["libvirtmachine", "-o", "name"]);
        names.iter().all(|name| !left.contains(name))
    })
    .await;
    let domains = virsh(&["list", "--all", "--name"]);
    assert!(!domains.contains(prefix), "domains left: {domains}");
    for pool in [var("CAPLV_SYS_POOL"), var("CAPLV_SYS_SMALL_POOL")] {
        let volumes = virsh(&["vol-list", &pool]);
        assert!(!volumes.contains(prefix), "volumes left in {pool}: {volumes}");
    }
    for name in names {
        let out = env.kubectl(&["-n", NS, "delete", "scheduledmachine", name]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }
}

/// The manifests of a ScheduledMachine `name` whose window is always open.
pub(super) fn always_on(name: &str, address: &str) -> String {
    let schedule = r#"{daysOfWeek: [mon-sun], hoursOfDay: ["0-23"], timezone: UTC}"#;
    manifests(&var("CAPLV_CP_API_PORT"), name, schedule, address)
}

/// Four vCPUs per logical CPU on the host `sys` (applied with [`always_on`]'s manifests): three
/// one-vCPU machines fit on any machine of this kind, two cores.
pub(super) fn room_for_three(env: &Genuine) {
    env.patch(
        &["-n", NS, "libvirthost", "sys"],
        r#"{"spec":{"overcommit":{"cpuRatio":4}}}"#,
    );
}

/// `kubectl get ARGS` in the test namespace.
pub(super) fn get(env: &Genuine, args: &[&str]) -> String {
    let mut all = vec!["-n", NS, "get"];
    all.extend_from_slice(args);
    env.get(&all)
}

/// Whether the LibvirtMachine `name` reports its domain running.
pub(super) fn domain_running(env: &Genuine, name: &str) -> bool {
    get(env, &["libvirtmachine", name, "-o", "jsonpath={.status.domainState}"]) == "running"
}

//! The seed's own manifests on the genuine control plane: ScheduledMachine → IgnitionConfig,
//! LibvirtMachine and Machine → genuine Cluster API core sets `dataSecretName` and `providerID`
//! and moves the Machine through Provisioning, Provisioned and Running (with the Node) → the
//! window closes → core drains and deletes → nothing is left on the host. The manager logs at
//! trace level, and no SSH key, Ignition content or token may show in its log, Events, metrics
//! or the objects' statuses.

use std::{
    path::{Path, PathBuf},
    process::{Command, Stdio},
};

use chrono::Timelike;

use super::{Genuine, pool_files, secrets, ssh_key_secret, var, virsh, wait};

/// The seed's manifests, unchanged except what ties them to the seed's own lab: the host (URI,
/// pinned key, firmware paths, no reservation), the control plane endpoint (the Cluster's and the
/// LibvirtCluster's: the API server on 127.0.0.1), the storage pool and base image, the VM's size
/// (1 vCPU and 512 MiB, so the test never depends on this machine's cores or memory), TCG instead
/// of KVM (nested KVM cannot run guests here), and an always-open window. The worker Ignition
/// also gets an authorized key holding `marker`, so that its content can be looked for where it
/// must never show.
fn seed_rewritten(dir: &Path, api_port: &str, marker: &str) -> PathBuf {
    let seed = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/seed");
    let out = dir.join("seed");
    std::fs::create_dir_all(&out).unwrap();
    let endpoint = serde_json::json!({"host": "127.0.0.1", "port": api_port.parse::<u16>().unwrap()});
    for entry in std::fs::read_dir(&seed).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "yaml") {
            continue;
        }
        let mut doc: serde_json::Value = serde_yaml::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        match doc["kind"].as_str().unwrap() {
            "LibvirtCluster" | "Cluster" => doc["spec"]["controlPlaneEndpoint"] = endpoint.clone(),
            "LibvirtHost" => {
                let spec = &mut doc["spec"];
                spec["uri"] = var("CAPLV_SYS_URI").into();
                spec["hostKeyFingerprint"] = var("CAPLV_SYS_FINGERPRINT").into();
                spec["firmwarePath"] = var("CAPLV_SYS_OVMF_CODE").into();
                spec["nvramTemplatePath"] = var("CAPLV_SYS_OVMF_VARS").into();
                spec["reservedResources"] = serde_json::json!({"vcpus": 0, "memoryMB": 0});
            }
            "Secret" => {
                use base64::Engine;
                let engine = base64::engine::general_purpose::STANDARD;
                let value = engine.decode(doc["data"]["value"].as_str().unwrap()).unwrap();
                let mut ignition: serde_json::Value = serde_json::from_slice(&value).unwrap();
                ignition["passwd"]["users"][0]["sshAuthorizedKeys"] =
                    serde_json::json!([format!("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAI{marker} test")]);
                doc["data"]["value"] = engine.encode(ignition.to_string()).into();
            }
            "ScheduledMachine" => {
                let spec = &mut doc["spec"];
                spec["schedule"] =
                    serde_json::json!({"daysOfWeek": ["mon-sun"], "hoursOfDay": ["0-23"], "timezone": "UTC"});
                let infra = &mut spec["infrastructureSpec"]["spec"];
                infra["rootDisk"]["baseImage"] = var("CAPLV_SYS_TEST_IMAGE").into();
                infra["rootDisk"]["storagePool"] = var("CAPLV_SYS_POOL").into();
                infra["domain"]["type"] = "qemu".into();
                infra["domain"]["vcpus"] = 1.into();
                infra["domain"]["memoryMB"] = 512.into();
            }
            _ => {}
        }
        let name = path.file_name().unwrap();
        std::fs::write(out.join(name), serde_yaml::to_string(&doc).unwrap()).unwrap();
    }
    out
}

/// `kubectl get KIND -w` printing `NAME PHASE`, into a file read at the end.
struct PhaseWatch {
    child: std::process::Child,
    log: PathBuf,
}

impl PhaseWatch {
    fn start(env: &Genuine, kind: &str) -> Self {
        let log = env.dir.path().join(format!("{kind}.watch"));
        let child = Command::new("kubectl")
            .env("KUBECONFIG", &env.admin)
            .args([
                "get",
                kind,
                "-w",
                "--no-headers",
                "-o",
                "custom-columns=NAME:.metadata.name,PHASE:.status.phase",
            ])
            .stdout(std::fs::File::create(&log).unwrap())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        Self { child, log }
    }

    /// Stop watching; every phase in `required` must appear, and all phases seen must
    /// follow `lifecycle`'s order (no phase seen again after a later one).
    fn assert_saw(mut self, required: &[&str], lifecycle: &[&str]) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let watched = std::fs::read_to_string(&self.log).unwrap();
        let mut phases: Vec<&str> = watched
            .lines()
            .filter_map(|l| l.split_whitespace().nth(1))
            .filter(|p| *p != "<none>")
            .collect();
        phases.dedup();
        let ranks: Vec<Option<usize>> = phases.iter().map(|p| lifecycle.iter().position(|l| l == p)).collect();
        assert!(
            ranks.iter().all(Option::is_some) && ranks.windows(2).all(|w| w[0] < w[1]),
            "phases follow {lifecycle:?}, watched: {watched}"
        );
        for phase in required {
            assert!(phases.contains(phase), "phase {phase} seen, watched: {watched}");
        }
    }
}

#[tokio::test]
#[ignore = "needs root, real libvirt and the genuine control plane: scripts/system-test.sh runs it"]
async fn the_seed_runs_end_to_end_on_genuine_cluster_api() {
    let pool_dir = PathBuf::from(var("CAPLV_SYS_POOL_DIR"));
    let nvram = PathBuf::from(var("CAPLV_SYS_NVRAM_DIR")).join("spot-worker-01_VARS.fd");
    // Once at trace level, with every secret looked for where it must never show.
    let env = Genuine::start_logging("trace").await;
    let schedules = PhaseWatch::start(&env, "scheduledmachines");
    let machines = PhaseWatch::start(&env, "machines");
    // The SSH key Secret the seed's LibvirtHost names (the seed leaves creating it to the user).
    env.apply(&ssh_key_secret("laptop-ssh-key"));
    let marker = format!("caplvIgnitionMarker{}", uuid::Uuid::new_v4().simple());
    env.apply_path(&seed_rewritten(env.dir.path(), &var("CAPLV_CP_API_PORT"), &marker));
    let mut secrets = secrets::key_lines(
        "the host's SSH private key",
        &std::fs::read_to_string(var("CAPLV_SYS_CLIENT_KEY")).unwrap(),
    );
    secrets.push(secrets::Secret {
        what: "the worker Ignition's content",
        value: marker,
    });

    // ScheduledMachine -> IgnitionConfig, LibvirtMachine, Machine -> bootstrap Secret -> domain.
    wait("domain running", || {
        env.get(&[
            "get",
            "libvirtmachine",
            "spot-worker-01",
            "-o",
            "jsonpath={.status.domainState}",
        ]) == "running"
    })
    .await;
    assert_eq!(
        env.get(&[
            "get",
            "ignitionconfig",
            "spot-worker-01",
            "-o",
            "jsonpath={.status.dataSecretName}"
        ]),
        "spot-worker-01"
    );
    // Genuine core copied the bootstrap data Secret's name and the provider ID.
    let uid = env.get(&[
        "get",
        "libvirtmachine",
        "spot-worker-01",
        "-o",
        "jsonpath={.metadata.uid}",
    ]);
    wait("Machine has dataSecretName and providerID", || {
        env.get(&[
            "get",
            "machine",
            "spot-worker-01",
            "-o",
            "jsonpath={.spec.bootstrap.dataSecretName} {.spec.providerID}",
        ]) == format!("spot-worker-01 libvirt:///{uid}")
    })
    .await;

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

    // The kubelet's Node joins with the certificate kube-controller-manager signed after the
    // manager approved its CSR; core links it and syncs the worker label.
    wait("Machine Running with its Node", || {
        env.get(&[
            "get",
            "machine",
            "spot-worker-01",
            "-o",
            "jsonpath={.status.phase} {.status.nodeRef.name}",
        ]) == "Running spot-worker-01"
    })
    .await;
    secrets.push(secrets::kubeconfig_token(&env, "spot-kubeconfig"));
    secrets::assert_not_in_statuses(&env, &secrets);
    let labels = env.get(&["get", "node", "spot-worker-01", "-o", "jsonpath={.metadata.labels}"]);
    assert!(labels.contains("node-role.kubernetes.io/worker"), "{labels}");
    assert_eq!(
        env.get(&["get", "node", "spot-worker-01", "-o", "jsonpath={.spec.providerID}"]),
        format!("libvirt:///{uid}")
    );
    let signed = env.get(&[
        "get",
        "csr",
        "-o",
        "jsonpath={range .items[*]}{.spec.signerName} {.spec.username} {.status.conditions[0].type}{\"\\n\"}{end}",
    ]);
    assert!(
        signed.contains(
            "kubernetes.io/kube-apiserver-client-kubelet system:serviceaccount:openshift-machine-config-operator:node-bootstrapper Approved"
        ),
        "client CSR filed by the bootstrapper and approved: {signed}"
    );
    assert!(
        signed.contains("kubernetes.io/kubelet-serving system:node:spot-worker-01 Approved"),
        "serving CSR filed by the node and approved: {signed}"
    );

    // The window closes (schedule edited): core cordons and drains the Node, then deletes it.
    let closed = (chrono::Utc::now().hour() + 12) % 24;
    env.patch(
        &["scheduledmachine", "spot-worker-01"],
        &format!(r#"{{"spec":{{"schedule":{{"hoursOfDay":["{closed}"]}}}}}}"#),
    );
    wait("ScheduledMachine Inactive", || {
        env.get(&[
            "get",
            "scheduledmachine",
            "spot-worker-01",
            "-o",
            "jsonpath={.status.phase}",
        ]) == "Inactive"
    })
    .await;
    for kind in ["machine", "libvirtmachine", "ignitionconfig", "node"] {
        wait(&format!("{kind} gone"), || {
            let out = env.kubectl(&["get", kind, "-o", "name"]);
            out.status.success() && !String::from_utf8_lossy(&out.stdout).contains("spot-worker-01")
        })
        .await;
    }
    assert!(
        !virsh(&["list", "--all", "--name"]).contains("spot-worker-01"),
        "domain gone"
    );
    let leftovers = pool_files("spot-worker-01");
    assert!(
        leftovers.is_empty(),
        "root, Ignition and console volumes removed: {leftovers:?}"
    );
    assert!(!nvram.exists(), "NVRAM removed");

    schedules.assert_saw(
        &["Active", "ShuttingDown", "Inactive"],
        &["Pending", "Active", "ShuttingDown", "Inactive"],
    );
    // Cluster API skips Provisioned when the Node has joined by the reconcile that sees the
    // infrastructure ready, so it is allowed but not required.
    machines.assert_saw(
        &["Provisioning", "Running", "Deleting"],
        &["Pending", "Provisioning", "Provisioned", "Running", "Deleting"],
    );
    secrets::assert_not_in_log_events_or_metrics(&env, &secrets);
    env.stop().await;
}

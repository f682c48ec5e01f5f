//! The sandbox as a user drives it: the seed's manifests applied unchanged with kubectl.

use std::{path::Path, process::Stdio};

use crate::{
    cli::{manager, signal, wait_with_deadline},
    support::{kubectl, wait_until},
};

#[tokio::test]
async fn the_seed_applies_unchanged_and_the_seed_query_works() {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("sandbox.kubeconfig");
    // Debug logs go to a file (a pipe could fill up): the kubeconfig token must not be in them.
    let log = dir.path().join("sandbox.log");
    let hosts_dir = dir.path().join("hosts");
    let child = manager()
        .args(["sandbox", "--metrics-addr", "127.0.0.1:0", "--kubeconfig-out"])
        .arg(&kubeconfig)
        .arg("--hosts-dir")
        .arg(&hosts_dir)
        .env("CAPLV_LOG", "debug")
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    wait_until("sandbox writes its kubeconfig", || async { kubeconfig.exists() }).await;

    let seed = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/seed/");
    let out = kubectl(&kubeconfig, &["apply", "-f", seed]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let applied = String::from_utf8_lossy(&out.stdout);
    for created in [
        "libvirtcluster.infrastructure.cluster.x-k8s.io/spot created",
        "scheduledmachine.5spot.finos.org/spot-worker-01 created",
    ] {
        assert!(applied.contains(created), "{applied}");
    }

    // The LibvirtCluster becomes ready without dialling api.spot.labdroid.net: the sandbox answers locally.
    wait_until("LibvirtCluster spot Ready", || async {
        let out = kubectl(
            &kubeconfig,
            &["get", "libvirtcluster", "spot", "-o", "jsonpath={.status.ready}"],
        );
        out.stdout == b"true"
    })
    .await;

    // The seed's laptop is served by a private libvirt test driver shaped like it: nothing dials
    // 192.168.122.1, and the host reports the seed's 16 vCPUs and 31560 MB.
    wait_until("LibvirtHost laptop Ready", || async {
        let out = kubectl(
            &kubeconfig,
            &[
                "get",
                "libvirthost",
                "laptop",
                "-o",
                "jsonpath={.status.ready} {.status.capacity.totalVCPUs} {.status.capacity.totalMemoryMB}",
            ],
        );
        out.stdout == b"true 16 31560"
    })
    .await;

    // The seed's Cluster got its control plane and the kubeconfig Secret Cluster API core reads,
    // carrying a token minted for the ServiceAccount the sandbox created.
    let token = {
        let value = || {
            let out = kubectl(
                &kubeconfig,
                &["get", "secret", "spot-kubeconfig", "-o", "jsonpath={.data.value}"],
            );
            String::from_utf8_lossy(&out.stdout).into_owned()
        };
        wait_until("spot-kubeconfig written", || async { !value().is_empty() }).await;
        let value = value();
        let yaml = base64::Engine::decode(&base64::engine::general_purpose::STANDARD, value.trim()).unwrap();
        let config: serde_yaml::Value = serde_yaml::from_slice(&yaml).unwrap();
        assert_eq!(
            config["clusters"][0]["cluster"]["server"],
            "https://api.spot.labdroid.net:6443"
        );
        config["users"][0]["user"]["token"].as_str().unwrap().to_owned()
    };
    let out = kubectl(
        &kubeconfig,
        &[
            "get",
            "cluster",
            "spot",
            "-o",
            "jsonpath={.spec.controlPlaneRef.kind}/{.spec.controlPlaneRef.name}",
        ],
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "SelfManagedControlPlane/spot");

    let query = "cluster,libvirtcluster,libvirthost,libvirtmachine,machine,ignitionconfig,scheduledmachine";
    let out = kubectl(&kubeconfig, &["get", query]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let table = String::from_utf8_lossy(&out.stdout);
    for row in [
        "cluster.cluster.x-k8s.io/spot",
        "libvirtcluster.infrastructure.cluster.x-k8s.io/spot",
        "libvirthost.infrastructure.cluster.x-k8s.io/laptop",
        "scheduledmachine.5spot.finos.org/spot-worker-01",
    ] {
        assert!(table.contains(row), "{row} missing from:\n{table}");
    }
    assert!(
        table.contains("api.spot.labdroid.net"),
        "printer columns shown:\n{table}"
    );

    // The seed's Secret plus an IgnitionConfig give ready bootstrap data equal to the source ...
    let manifests = dir.path().join("ignition.yaml");
    std::fs::write(
        &manifests,
        "apiVersion: bootstrap.cluster.x-k8s.io/v1alpha1\nkind: IgnitionConfig\nmetadata: {name: seed-ignition, namespace: default}\n\
         spec:\n  secretRef: {name: worker-ignition}\n---\n\
         apiVersion: v1\nkind: Secret\nmetadata: {name: broken-source, namespace: default}\nstringData: {value: '{not json'}\n---\n\
         apiVersion: bootstrap.cluster.x-k8s.io/v1alpha1\nkind: IgnitionConfig\nmetadata: {name: broken, namespace: default}\n\
         spec:\n  secretRef: {name: broken-source}\n",
    )
    .unwrap();
    let out = kubectl(&kubeconfig, &["apply", "-f", manifests.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let jsonpath =
        |kubeconfig: &Path, args: &[&str]| String::from_utf8_lossy(&kubectl(kubeconfig, args).stdout).into_owned();
    wait_until("seed-ignition ready", || async {
        jsonpath(
            &kubeconfig,
            &[
                "get",
                "ignitionconfig",
                "seed-ignition",
                "-o",
                "jsonpath={.status.ready}",
            ],
        ) == "true"
    })
    .await;
    let data = jsonpath(
        &kubeconfig,
        &["get", "secret", "seed-ignition", "-o", "jsonpath={.data.value}"],
    );
    let source = jsonpath(
        &kubeconfig,
        &["get", "secret", "worker-ignition", "-o", "jsonpath={.data.value}"],
    );
    assert!(
        !data.is_empty() && data == source,
        "the data Secret carries the source Ignition unchanged"
    );
    // ... and a Secret holding `{not json` a False condition with a reason, and no data Secret.
    wait_until("broken reports InvalidJSON", || async {
        jsonpath(
            &kubeconfig,
            &[
                "get",
                "ignitionconfig",
                "broken",
                "-o",
                "jsonpath={.status.conditions[?(@.type==\"Ready\")].reason}",
            ],
        ) == "InvalidJSON"
    })
    .await;
    let data_secrets = jsonpath(
        &kubeconfig,
        &[
            "get",
            "secrets",
            "-o",
            "jsonpath={range .items[?(@.type==\"cluster.x-k8s.io/secret\")]}{.metadata.name} {end}",
        ],
    );
    assert!(
        !data_secrets.split_whitespace().any(|n| n == "broken"),
        "no data Secret for broken: {data_secrets}"
    );

    // The always-on variant of the seed's ScheduledMachine brings its objects up ...
    let always = r#"{"spec":{"schedule":{"daysOfWeek":["mon-sun"],"hoursOfDay":["0-23"]}}}"#;
    let out = kubectl(
        &kubeconfig,
        &[
            "patch",
            "scheduledmachine",
            "spot-worker-01",
            "--type",
            "merge",
            "-p",
            always,
        ],
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let phase = |kubeconfig: &Path| {
        let out = kubectl(
            kubeconfig,
            &["get", "sm", "spot-worker-01", "-o", "jsonpath={.status.phase}"],
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    wait_until("spot-worker-01 Active", || async { phase(&kubeconfig) == "Active" }).await;
    for kind in ["machine", "ignitionconfig", "libvirtmachine"] {
        let out = kubectl(&kubeconfig, &["get", kind, "spot-worker-01", "-o", "name"]);
        assert!(out.status.success(), "{kind}: {}", String::from_utf8_lossy(&out.stderr));
    }
    // The laptop's owner needs memory: faked beside the simulated host's node file, a lasting
    // shortage reclaims the worker, and `kubectl get lvh` shows the pressure.
    std::fs::write(
        hosts_dir.join("default-laptop.xml.stats.json"),
        r#"{"availableMemoryMib": 1024}"#,
    )
    .unwrap();
    let reclaim = r#"{"spec":{"reclaim":{"minFreeMemoryMB":4096,"for":"1s","coolDown":"1h"}}}"#;
    let out = kubectl(
        &kubeconfig,
        &["patch", "libvirthost", "laptop", "--type", "merge", "-p", reclaim],
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    wait_until("spot-worker-01 Reclaimed", || async {
        phase(&kubeconfig) == "Reclaimed"
    })
    .await;
    let row =
        String::from_utf8_lossy(&kubectl(&kubeconfig, &["get", "lvh", "laptop", "--no-headers"]).stdout).into_owned();
    assert!(row.contains("MemoryPressure"), "the Pressure column: {row}");
    wait_until("the reclaimed Machine removed", || async {
        kubectl(&kubeconfig, &["get", "machine", "-o", "name"])
            .stdout
            .is_empty()
    })
    .await;
    // ... and the kill switch, which outranks a reclaim, takes it to Terminated.
    let kill = r#"{"spec":{"killSwitch":true}}"#;
    let out = kubectl(
        &kubeconfig,
        &[
            "patch",
            "scheduledmachine",
            "spot-worker-01",
            "--type",
            "merge",
            "-p",
            kill,
        ],
    );
    assert!(out.status.success());
    wait_until("spot-worker-01 Terminated", || async {
        phase(&kubeconfig) == "Terminated"
    })
    .await;
    wait_until("Machine removed", || async {
        kubectl(&kubeconfig, &["get", "machine", "-o", "name"])
            .stdout
            .is_empty()
    })
    .await;

    signal(&child, "INT");
    let out = tokio::task::spawn_blocking(move || wait_with_deadline(child))
        .await
        .unwrap();
    let logs = std::fs::read_to_string(&log).unwrap();
    assert_eq!(out.status.code(), Some(0), "{logs}");
    assert!(logs.contains("kubeconfig Secret written"), "debug logs were captured");
    assert!(!logs.contains(&token), "the kubeconfig token is in the logs");
    assert!(!kubeconfig.exists(), "the kubeconfig of a stopped sandbox is removed");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("caplv sandbox is ready") && stdout.contains("export KUBECONFIG="),
        "{stdout}"
    );
}

/// Run `caplv-manager sandbox --demo` with `extra` arguments; (exit success, stdout, stderr).
async fn demo(extra: &[&str]) -> (bool, String, String) {
    let dir = tempfile::tempdir().unwrap();
    let child = manager()
        .args(["sandbox", "--demo", "--metrics-addr", "127.0.0.1:0", "--kubeconfig-out"])
        .arg(dir.path().join("demo.kubeconfig"))
        .args(extra)
        // As a newcomer runs it: no log settings.
        .env_remove("CAPLV_LOG")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = tokio::task::spawn_blocking(move || child.wait_with_output().unwrap())
        .await
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test]
async fn the_demo_tells_the_whole_story_and_exits_zero() {
    let (ok, stdout, stderr) = tokio::time::timeout(std::time::Duration::from_secs(120), demo(&[]))
        .await
        .expect("the demo finishes within two minutes");
    assert!(ok, "demo failed:\n{stdout}\n{stderr}");
    let steps = [
        "applied 05-scheduledmachine.yaml: ScheduledMachine spot-worker-01",
        "✓ the host is connected",
        "✓ 5-Spot created the IgnitionConfig, LibvirtMachine and Machine",
        "✓ the VM runs on the host",
        "✓ the kubelet's CSRs were approved and the Node joined",
        "✓ the Node carries the worker role label",
        "✓ the Node waits for the window, tainted window-closed",
        "The window opens at",
        "✓ the Node is schedulable at the window's edge",
        "✓ the ScheduledMachine is Active",
        "Closing the window",
        "✓ the workload was evicted by the drain",
        "✓ the Machine, LibvirtMachine and VM are gone",
        "✓ the ScheduledMachine is Inactive",
        "Done in",
    ];
    let mut from = 0;
    for step in steps {
        let at = stdout[from..]
            .find(step)
            .unwrap_or_else(|| panic!("{step:?} missing or out of order in:\n{stdout}"));
        from += at + step.len();
    }
    // Phase changes are narrated as they happen: Active while open, the Node cordoned and the
    // ScheduledMachine Inactive only after the window closed.
    // Provisioned ahead of the window: the objects exist while the phase is Preparing, and
    // the lag from the edge to a schedulable Node is narrated.
    let edge = stdout.find("The window opens at").unwrap();
    assert!(
        stdout[..edge].contains("ScheduledMachine spot-worker-01: phase Preparing"),
        "{stdout}"
    );
    assert!(stdout[edge..].contains("Node schedulable "), "{stdout}");
    let closing = stdout.find("Closing the window").unwrap();
    assert!(
        stdout[..closing].contains("ScheduledMachine spot-worker-01: phase Active"),
        "{stdout}"
    );
    assert!(stdout[closing..].contains("cordoned"), "{stdout}");
    assert!(
        stdout[closing..].contains("ScheduledMachine spot-worker-01: phase Inactive"),
        "{stdout}"
    );
    let approved = stdout.find("approved (CAPLVApproved)").expect("CSR approvals narrated");
    assert!(approved < stdout.find("✓ the kubelet's CSRs").unwrap(), "{stdout}");
    assert!(
        !stderr.contains(" INFO "),
        "the demo keeps controller logs quiet:\n{stderr}"
    );
}

#[tokio::test]
async fn a_demo_step_that_does_not_happen_fails_naming_it() {
    // Without 5-Spot nothing creates the worker.
    let (ok, stdout, stderr) = demo(&["--controllers", "caplv,ignition", "--demo-step-timeout-seconds", "2"]).await;
    assert!(!ok, "{stdout}");
    assert!(
        stderr.contains("demo step failed: 5-Spot created the IgnitionConfig, LibvirtMachine and Machine"),
        "{stderr}"
    );
}

//! The sandbox as a user drives it: the seed's manifests applied unchanged with kubectl.

use std::{
    path::Path,
    process::{Command, Stdio},
};

use crate::{
    cli::{manager, signal, wait_with_deadline},
    support::wait_until,
};

fn kubectl(kubeconfig: &Path, args: &[&str]) -> std::process::Output {
    Command::new("kubectl")
        .env("KUBECONFIG", kubeconfig)
        .args(args)
        .output()
        .unwrap()
}

#[tokio::test]
async fn the_seed_applies_unchanged_and_the_seed_query_works() {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("sandbox.kubeconfig");
    let child = manager()
        .args(["sandbox", "--metrics-addr", "127.0.0.1:0", "--kubeconfig-out"])
        .arg(&kubeconfig)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
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
    // ... and the kill switch takes it to Terminated, removing them.
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
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(!kubeconfig.exists(), "the kubeconfig of a stopped sandbox is removed");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("caplv sandbox is ready") && stdout.contains("export KUBECONFIG="),
        "{stdout}"
    );
}

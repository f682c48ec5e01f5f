//! Lead time on real libvirt: a window that opens a minute and a half from now gets its VM
//! booted and its Node joined ahead of the edge, held with the window-closed taint, and released
//! by the controller at the edge; the measured lag is printed for the record.

use chrono::{SecondsFormat, Timelike, Utc};

use super::{
    Genuine,
    kill_switch::{NS, manifests},
    var, virsh, wait,
};

/// Long enough for a TCG boot and the kubelet's join here, with room to spare.
const LEAD_SECONDS: i64 = 80;

#[tokio::test]
#[ignore = "needs root, real libvirt and the genuine control plane: scripts/system-test.sh runs it"]
async fn a_real_vm_is_ready_ahead_of_its_window_and_schedulable_at_the_edge() {
    let env = Genuine::start().await;
    let edge = (Utc::now() + chrono::Duration::seconds(LEAD_SECONDS + 10))
        .with_nanosecond(0)
        .unwrap();
    let instant = |t: chrono::DateTime<Utc>| t.to_rfc3339_opts(SecondsFormat::Secs, true);
    // A daily hour twelve hours away never opens during the test; the inclusion is the window.
    let closed = (Utc::now().hour() + 12) % 24;
    let schedule = format!(
        r#"{{daysOfWeek: [mon-sun], hoursOfDay: ["{closed}"], timezone: UTC, leadTime: {LEAD_SECONDS}s, inclusions: [{{start: "{}", end: "{}"}}]}}"#,
        instant(edge),
        instant(edge + chrono::Duration::hours(1)),
    );
    env.apply(&manifests(
        &var("CAPLV_CP_API_PORT"),
        "sys-lead",
        &schedule,
        "192.168.122.51/24",
    ));
    let get = |args: &[&str]| {
        let mut all = vec!["-n", NS, "get"];
        all.extend_from_slice(args);
        env.get(&all)
    };
    let jsonpath = |path: &str| get(&["scheduledmachine", "sys-lead", "-o", &format!("jsonpath={path}")]);

    // Ahead of the window: the VM runs and the Node joins, held by the taint.
    wait("Preparing", || jsonpath("{.status.phase}") == "Preparing").await;
    wait("the domain runs", || {
        get(&["libvirtmachine", "sys-lead", "-o", "jsonpath={.status.domainState}"]) == "running"
    })
    .await;
    wait("the Node joined, tainted window-closed", || {
        env.get(&["get", "node", "sys-lead", "-o", "jsonpath={.spec.taints[*].key}"])
            .contains("5spot.finos.org/window-closed")
    })
    .await;
    wait("the Node's readiness recorded", || {
        !jsonpath("{.status.window.nodeReadyAt}").is_empty()
    })
    .await;
    assert!(
        Utc::now() < edge,
        "the lead time was not enough here: the Node was Ready after the edge"
    );
    assert_eq!(jsonpath("{.status.phase}"), "Preparing", "still before the window");

    // The edge: the taint comes off by itself.
    wait("Active", || jsonpath("{.status.phase}") == "Active").await;
    wait("the taint gone", || {
        !env.get(&["get", "node", "sys-lead", "-o", "jsonpath={.spec.taints[*].key}"])
            .contains("5spot.finos.org/window-closed")
    })
    .await;
    wait("the lag recorded", || {
        !jsonpath("{.status.window.schedulableLag}").is_empty()
    })
    .await;
    let opens: chrono::DateTime<Utc> = jsonpath("{.status.window.opensAt}").parse().unwrap();
    let schedulable: chrono::DateTime<Utc> = jsonpath("{.status.window.schedulableAt}").parse().unwrap();
    assert_eq!(opens, edge);
    assert!(schedulable >= opens, "not released before the edge");
    let lag = jsonpath("{.status.window.schedulableLag}");
    let took = jsonpath("{.status.provisioningDurations[0]}");
    eprintln!("real libvirt: provisioning took {took}, edge -> schedulable lag {lag}");

    // Done: the kill switch removes it without waiting for the window to end.
    env.patch(
        &["-n", NS, "scheduledmachine", "sys-lead"],
        r#"{"spec":{"killSwitch":true}}"#,
    );
    wait("Terminated", || jsonpath("{.status.phase}") == "Terminated").await;
    for kind in ["machine", "libvirtmachine"] {
        wait(&format!("{kind} sys-lead gone"), || {
            let out = env.kubectl(&["-n", NS, "get", kind, "-o", "name"]);
            out.status.success() && !String::from_utf8_lossy(&out.stdout).contains("sys-lead")
        })
        .await;
    }
    assert!(!virsh(&["list", "--all", "--name"]).contains("sys-lead"), "domain gone");
    env.stop().await;
}

//! Graceful power-off and the domain watch on real libvirt + QEMU: the test image's guest
//! powers off when its ACPI power button is pressed, as a real OS does, and a blank disk's
//! firmware ignores the button. So, on one real guest: a guest shutdown (`virsh shutdown`) is
//! restarted and announced as `DomainShutDown`, a QEMU crash (killed) as `DomainCrashed`; a guest
//! shutdown while its Machine is being deleted (held by a pre-drain hook) is left off; and
//! deletion presses the power button and the guest powers off in time. The firmware-only guest is
//! destroyed once its 5s timeout has passed since the request.

use std::process::Command;

use super::{
    Genuine,
    kill_switch::{NS, Worker, worker_manifests},
    pool_files, run, var, virsh, wait,
};

const HOOK: &str = "pre-drain.delete.hook.machine.cluster.x-k8s.io/caplv-system-test";

/// An Event about a LibvirtMachine: its reason, note and time (ms since the epoch).
struct Seen {
    reason: String,
    note: String,
    at_ms: i64,
}

/// The Events about LibvirtMachine `name`, oldest first.
fn events(env: &Genuine, name: &str) -> Vec<Seen> {
    let out = env.get(&["-n", NS, "get", "events.events.k8s.io", "-o", "json"]);
    let list: serde_json::Value = serde_json::from_str(&out).unwrap();
    let mut seen: Vec<Seen> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["regarding"]["kind"] == "LibvirtMachine" && e["regarding"]["name"] == name)
        .map(|e| Seen {
            reason: e["reason"].as_str().unwrap_or_default().to_owned(),
            note: e["note"].as_str().unwrap_or_default().to_owned(),
            at_ms: e["eventTime"]
                .as_str()
                .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
                .map_or(0, |t| t.timestamp_millis()),
        })
        .collect();
    seen.sort_by_key(|e| e.at_ms);
    seen
}

fn has_event(env: &Genuine, name: &str, reason: &str, note_part: &str) -> bool {
    events(env, name)
        .iter()
        .any(|e| e.reason == reason && e.note.contains(note_part))
}

/// How many times the guest of `name` has finished its boot probe (once per boot).
fn boots(name: &str) -> usize {
    let console = std::path::Path::new(&var("CAPLV_SYS_POOL_DIR")).join(format!("{name}-console.log"));
    std::fs::read_to_string(console).map_or(0, |t| t.matches("CAPLV-PROBE: done").count())
}

/// `kubectl annotate machine sys-polite <change>` (`key=` sets, `key-` removes).
fn annotate_machine(env: &Genuine, change: &str) {
    let out = env.kubectl(&["-n", NS, "annotate", "machine", "sys-polite", change]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

fn domstate(name: &str) -> String {
    virsh(&["domstate", name, "--reason"]).trim().to_owned()
}

#[tokio::test]
#[ignore = "needs root, real libvirt and the genuine control plane: scripts/system-test.sh runs it"]
async fn a_real_guest_powers_off_when_asked_and_a_deaf_one_is_destroyed_after_its_timeout() {
    let env = Genuine::start().await;
    let port = var("CAPLV_CP_API_PORT");
    let always = r#"{daysOfWeek: [mon-sun], hoursOfDay: ["0-23"], timezone: UTC}"#;
    let (image, blank) = (var("CAPLV_SYS_TEST_IMAGE"), var("CAPLV_SYS_BASE_IMAGE"));
    let pool = var("CAPLV_SYS_POOL");
    for worker in [
        Worker {
            name: "sys-polite",
            schedule: always,
            address: "192.168.122.55/24",
            base_image: &image,
            pool: &pool,
            shutdown: "{}",
        },
        Worker {
            name: "sys-deaf",
            schedule: always,
            address: "192.168.122.56/24",
            base_image: &blank,
            pool: &pool,
            shutdown: "{timeout: 5s}",
        },
    ] {
        env.apply(&worker_manifests(&port, &worker));
    }
    let get = |args: &[&str]| {
        let mut all = vec!["-n", NS, "get"];
        all.extend_from_slice(args);
        env.get(&all)
    };
    let lvm = |name: &str, path: &str| get(&["libvirtmachine", name, "-o", &format!("jsonpath={path}")]);
    let ready_reason = |name: &str| lvm(name, "{.status.conditions[?(@.type==\"Ready\")].reason}");
    let gone = |kind: &str, name: &str| {
        let out = env.kubectl(&["-n", NS, "get", kind, "-o", "name"]);
        out.status.success() && !String::from_utf8_lossy(&out.stdout).contains(name)
    };
    for name in ["sys-polite", "sys-deaf"] {
        wait(&format!("{name} running"), || {
            lvm(name, "{.status.domainState}") == "running"
        })
        .await;
    }
    assert_eq!(
        lvm("sys-polite", "{.spec.shutdown.mode} {.spec.shutdown.timeout}"),
        "Graceful 60s",
        "the defaults"
    );
    wait("sys-polite booted", || boots("sys-polite") >= 1).await;

    // The guest powers off on the ACPI request: libvirt says why, and the watch restarts it.
    virsh(&["shutdown", "sys-polite"]);
    wait("DomainShutDown, started again", || {
        has_event(&env, "sys-polite", "DomainShutDown", "started again")
    })
    .await;
    wait("sys-polite booted again", || boots("sys-polite") >= 2).await;

    // QEMU dies under the guest: libvirt calls that a crash.
    let pid = run(Command::new("pgrep").args(["-f", "guest=sys-polite"]));
    run(Command::new("kill").args(["-KILL", pid.trim()]));
    wait("DomainCrashed, started again", || {
        has_event(&env, "sys-polite", "DomainCrashed", "started again")
    })
    .await;
    wait("sys-polite booted a third time", || boots("sys-polite") >= 3).await;

    // The Machine is being deleted (a pre-drain hook holds it): a guest shutdown stays off.
    annotate_machine(&env, &format!("{HOOK}="));
    env.patch(
        &["-n", NS, "scheduledmachine", "sys-polite"],
        r#"{"spec":{"killSwitch":true}}"#,
    );
    wait("Machine sys-polite deleting", || {
        !get(&["machine", "sys-polite", "-o", "jsonpath={.metadata.deletionTimestamp}"]).is_empty()
    })
    .await;
    virsh(&["shutdown", "sys-polite"]);
    wait("sys-polite left off", || ready_reason("sys-polite") == "DomainShutDown").await;
    assert_eq!(domstate("sys-polite"), "shut off (shutdown)");
    assert!(
        lvm("sys-polite", "{.metadata.deletionTimestamp}").is_empty(),
        "the hook holds the LibvirtMachine"
    );

    // Running again when the hook goes: deletion presses the button and the guest obeys.
    virsh(&["start", "sys-polite"]);
    wait("sys-polite booted a fourth time", || boots("sys-polite") >= 4).await;
    annotate_machine(&env, &format!("{HOOK}-"));
    wait("LibvirtMachine sys-polite gone", || {
        gone("libvirtmachine", "sys-polite")
    })
    .await;
    let polite: Vec<String> = events(&env, "sys-polite").into_iter().map(|e| e.reason).collect();
    assert!(polite.iter().any(|r| r == "ShutdownRequested"), "{polite:?}");
    assert!(
        !polite.iter().any(|r| r == "ShutdownTimedOut"),
        "it powered off: {polite:?}"
    );
    assert!(
        !virsh(&["list", "--all", "--name"]).contains("sys-polite"),
        "domain gone"
    );
    assert!(pool_files("sys-polite").is_empty(), "{:?}", pool_files("sys-polite"));

    // The firmware ignores the button: destroyed once 5s have passed since the request.
    env.patch(
        &["-n", NS, "scheduledmachine", "sys-deaf"],
        r#"{"spec":{"killSwitch":true}}"#,
    );
    wait("sys-deaf shutting down", || ready_reason("sys-deaf") == "ShuttingDown").await;
    let requested = lvm("sys-deaf", "{.status.shutdownRequestedAt}");
    let requested_ms = chrono::DateTime::parse_from_rfc3339(&requested)
        .unwrap_or_else(|e| panic!("shutdownRequestedAt {requested:?}: {e}"))
        .timestamp_millis();
    assert!(domstate("sys-deaf").starts_with("running"), "{}", domstate("sys-deaf"));
    wait("LibvirtMachine sys-deaf gone", || gone("libvirtmachine", "sys-deaf")).await;
    let deaf = events(&env, "sys-deaf");
    let timed_out = deaf.iter().find(|e| e.reason == "ShutdownTimedOut").unwrap_or_else(|| {
        panic!(
            "no ShutdownTimedOut: {:?}",
            deaf.iter().map(|e| &e.reason).collect::<Vec<_>>()
        )
    });
    let waited = timed_out.at_ms - requested_ms;
    assert!(
        waited >= 5000,
        "destroyed {waited} ms after the request, before its 5s timeout"
    );
    assert!(!virsh(&["list", "--all", "--name"]).contains("sys-deaf"), "domain gone");
    assert!(pool_files("sys-deaf").is_empty(), "{:?}", pool_files("sys-deaf"));
    env.stop().await;
}

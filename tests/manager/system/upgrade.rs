//! Upgrade in place on real libvirt: the previous release (`testbed/previous-release`, built by
//! `scripts/previous-release.sh`) runs two machines from its own CRDs, and has begun a third,
//! whose Ignition source Secret does not exist yet. Then the rollout: the current CRDs applied,
//! the old manager sent SIGTERM, the current one started in its place, and the missing Secret
//! created. Every machine is adopted: the same objects (UIDs), the same domains (UUIDs) and QEMU
//! processes, the third machine's one domain its own; the new manager writes each adopted object
//! at most once, and once it has settled nothing of the machines is written at all (no field
//! flaps back and forth).

use std::{
    collections::{BTreeMap, BTreeSet},
    path::Path,
    process::Command,
    time::{Duration, Instant},
};

use super::{Genuine, kill_switch, run, runs_on, var, virsh, wait};
use crate::{cli::manager, support::genuine::manager_writes};

const PREFIX: &str = "sys-upgrade";
const RUNNING: [&str; 2] = ["sys-upgrade-a", "sys-upgrade-b"];
/// Begun by the old manager, finished by the new one.
const IN_FLIGHT: &str = "sys-upgrade-c";
/// The new manager has settled once it has written nothing of the machines for this long.
const SETTLED: Duration = Duration::from_secs(15);
/// How long nothing of the machines may change after that.
const HOLD: Duration = Duration::from_secs(30);

/// The previous release's binary, as `cli::manager` prepares the current one.
fn previous_manager() -> Command {
    let mut cmd = Command::new(var("CAPLV_SYS_PREVIOUS_MANAGER"));
    cmd.env_remove("KUBECONFIG");
    cmd
}

/// `binary crds`, applied as `kubectl apply --server-side` applies an upgrade's CRDs.
fn apply_crds(mut binary: Command, file: &Path) {
    std::fs::write(file, run(binary.arg("crds"))).unwrap();
    let path = file.to_str().unwrap();
    let admin = std::path::PathBuf::from(var("KUBECONFIG"));
    for args in [
        &["apply", "--server-side", "--force-conflicts", "-f", path][..],
        &["wait", "--for", "condition=established", "--timeout", "60s", "-f", path],
    ] {
        let out = crate::support::kubectl(&admin, args);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }
}

/// `kind/name -> uid` of every object of the machines (ScheduledMachines, Machines,
/// LibvirtMachines, IgnitionConfigs, bootstrap data Secrets).
fn object_uids(env: &Genuine) -> BTreeMap<String, String> {
    let listing = kill_switch::get(
        env,
        &[
            "scheduledmachine,machine,libvirtmachine,ignitionconfig,secret",
            "-o",
            r#"jsonpath={range .items[*]}{.kind}/{.metadata.name} {.metadata.uid}{"\n"}{end}"#,
        ],
    );
    listing
        .lines()
        .filter(|l| l.contains(PREFIX))
        .filter_map(|l| l.split_once(' '))
        .map(|(object, uid)| (object.to_owned(), uid.to_owned()))
        .collect()
}

/// What the host has of the machine `name`: its domain's UUID and its QEMU process.
fn domain_of(name: &str) -> (String, String) {
    let uuid = virsh(&["domuuid", name]).trim().to_owned();
    let pid = run(Command::new("pgrep").args(["-f", &format!("guest={name},")]));
    (uuid, pid.trim().to_owned())
}

/// The fields of a LibvirtMachine that the rollout must leave as they were.
fn machine_fields(name: &str, env: &Genuine) -> String {
    kill_switch::get(
        env,
        &[
            "libvirtmachine",
            name,
            "-o",
            "jsonpath={.spec} {.status.ready} {.status.domainState} {.status.addresses}",
        ],
    )
}

/// The new manager's writes of the machines' objects from audit position `from` on (Events
/// left out: a recorder may add to a series).
fn machine_writes(from: usize) -> Vec<String> {
    manager_writes(Path::new(&var("CAPLV_CP_AUDIT_LOG")), from)
        .into_iter()
        .filter(|w| w.contains(PREFIX) && !w.contains(" events/"))
        .collect()
}

fn audit_position() -> usize {
    crate::support::genuine::audit_position(Path::new(&var("CAPLV_CP_AUDIT_LOG")))
}

fn ready(env: &Genuine, name: &str) -> bool {
    kill_switch::domain_running(env, name)
        && kill_switch::get(env, &["libvirtmachine", name, "-o", "jsonpath={.status.ready}"]) == "true"
}

/// Ready, and its Node joined: the ScheduledMachine names it.
fn joined(env: &Genuine, name: &str) -> bool {
    ready(env, name)
        && kill_switch::get(
            env,
            &["scheduledmachine", name, "-o", "jsonpath={.status.nodeRef.name}"],
        ) == name
}

/// Waits until the manager has written nothing of the machines for [`SETTLED`]; returns its
/// writes from audit position `from` on.
async fn settle(what: &str, from: usize) -> Vec<String> {
    let (mut seen, mut since) = (usize::MAX, Instant::now());
    wait(what, || {
        let now = machine_writes(from).len();
        if now != seen {
            (seen, since) = (now, Instant::now());
        }
        since.elapsed() >= SETTLED
    })
    .await;
    machine_writes(from)
}

/// The in-flight machine's manifests, its IgnitionConfig naming a source Secret that does not
/// exist yet: the old manager creates its objects, then waits for that Secret.
fn in_flight_manifests() -> (String, String) {
    let shared = "spec: {secretRef: {name: worker-ignition}}";
    let late = format!("{IN_FLIGHT}-ignition");
    let manifests = kill_switch::always_on(IN_FLIGHT, "192.168.122.65/24");
    assert!(manifests.contains(shared), "{manifests}");
    let secret = format!(
        "apiVersion: v1\nkind: Secret\nmetadata: {{name: {late}, namespace: {}}}\nstringData:\n  value: '{{\"ignition\":{{\"version\":\"3.4.0\"}}}}'\n",
        kill_switch::NS
    );
    (
        manifests.replace(shared, &format!("spec: {{secretRef: {{name: {late}}}}}")),
        secret,
    )
}

#[tokio::test]
#[ignore = "needs root, real libvirt and the genuine control plane: scripts/system-test.sh runs it"]
async fn the_current_manager_adopts_the_previous_releases_machines_without_recreating_or_flapping() {
    // Once, on the Cluster API OpenShift ships (v1.10).
    if !runs_on("v1beta1", "upgrade") {
        return;
    }
    let scratch = tempfile::tempdir().unwrap();
    let crds = scratch.path().join("crds.yaml");
    apply_crds(previous_manager(), &crds);
    let mut env = Genuine::start_from(previous_manager(), "info", &["--leader-elect"]).await;
    let start = audit_position();
    for (name, address) in RUNNING.iter().zip(["192.168.122.63/24", "192.168.122.64/24"]) {
        env.apply(&kill_switch::always_on(name, address));
    }
    kill_switch::room_for_three(&env);
    for name in RUNNING {
        wait(&format!("{name} joined under the previous release"), || {
            joined(&env, name)
        })
        .await;
    }
    settle("the previous release settled", start).await;
    let (in_flight, late_secret) = in_flight_manifests();
    env.apply(&in_flight);
    wait("the in-flight machine waiting for its Ignition source", || {
        !kill_switch::get(&env, &["libvirtmachine", IN_FLIGHT, "-o", "jsonpath={.metadata.uid}"]).is_empty()
            && !kill_switch::get(
                &env,
                &[
                    "ignitionconfig",
                    IN_FLIGHT,
                    "-o",
                    r#"jsonpath={.status.conditions[?(@.reason=="SourceSecretNotFound")].reason}"#,
                ],
            )
            .is_empty()
    })
    .await;
    let uids = object_uids(&env);
    let domains: Vec<_> = RUNNING.iter().map(|name| domain_of(name)).collect();
    let fields: Vec<_> = RUNNING.iter().map(|name| machine_fields(name, &env)).collect();

    // The rollout: new CRDs, then the old manager replaced by the current one.
    apply_crds(manager(), &crds);
    let rollout = Instant::now();
    env.replace_manager(manager(), "info", &["--leader-elect"]);
    // The old manager has exited, so every request of its is in the log before this point.
    let takeover = audit_position();
    env.apply(&late_secret);
    wait("the in-flight machine joined under the current manager", || {
        joined(&env, IN_FLIGHT)
    })
    .await;
    eprintln!(
        "upgrade: the in-flight machine joined {:?} after the rollout",
        rollout.elapsed()
    );
    let writes = settle("the current manager settled", takeover).await;
    eprintln!("upgrade: the current manager's writes of the machines: {writes:#?}");

    // Adopted: the same objects and domains, the in-flight machine's one domain its own.
    let after = object_uids(&env);
    for (object, uid) in &uids {
        assert_eq!(after.get(object), Some(uid), "{object} was replaced or lost");
    }
    let lvm_uid = &uids[&format!("LibvirtMachine/{IN_FLIGHT}")];
    assert_eq!(
        &domain_of(IN_FLIGHT).0,
        lvm_uid,
        "the in-flight machine's domain is its own"
    );
    let domain_names = virsh(&["list", "--all", "--name"]);
    assert_eq!(
        domain_names.lines().filter(|d| d.contains(PREFIX)).count(),
        3,
        "{domain_names}"
    );
    for (i, name) in RUNNING.iter().enumerate() {
        assert_eq!(domain_of(name), domains[i], "{name}: the same domain and QEMU process");
        assert_eq!(machine_fields(name, &env), fields[i], "{name}: its fields as they were");
        let of_it: Vec<_> = writes.iter().filter(|w| w.ends_with(&format!(" {name}"))).collect();
        let distinct: BTreeSet<_> = of_it.iter().collect();
        assert_eq!(
            of_it.len(),
            distinct.len(),
            "{name}: an object written twice: {of_it:#?}"
        );
    }

    // No flaps: once settled, nothing of the machines is written at all.
    let quiet_from = audit_position();
    tokio::time::sleep(HOLD).await;
    let late = machine_writes(quiet_from);
    assert!(late.is_empty(), "written after settling: {late:#?}");

    kill_switch::remove_cleanly(&env, &[RUNNING[0], RUNNING[1], IN_FLIGHT], PREFIX).await;
    env.stop().await;
}

//! Crash consistency on real libvirt: the CAPLV family runs as its own process
//! (`caplv-manager run --controllers caplv`) and is killed with SIGKILL at random points, at
//! least [`KILLS`] times while machines provision and as many while they are torn down; a second
//! process runs the Ignition family, undisturbed. The machines are a MachineDeployment's replicas
//! (addresses from the genuine in-cluster IPAM provider) and a Machine of its own with a DHCP
//! reservation. After every kill there is at most one domain per machine, every LibvirtMachine
//! converges once a manager runs long enough, and after teardown no domain, volume, NVRAM file,
//! Ignition file, DHCP reservation or IP address claim is left.

use std::{
    collections::BTreeSet,
    path::{Path, PathBuf},
    process::Child,
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use super::{
    Genuine,
    machine_deployment::{Deployment, deployment_manifests},
    pool_files, runs_on, spawn_manager, var, virsh, wait,
};
use crate::cli::manager;

const NS: &str = "sys-crash";
/// Kills each phase (provisioning, teardown) must take, at least.
const KILLS: u32 = 20;
/// Rounds of provisioning and teardown at most: a round takes one to four kills of each.
const MAX_ROUNDS: u32 = 40;
/// How long a killed manager may run at most: long enough to get somewhere, short enough to be
/// killed in the middle of it.
const MAX_LIFE_MS: u64 = 2000;
/// The Machine of its own, with a DHCP reservation.
const SINGLE: &str = "crash-single";
const RESERVED: &str = "192.168.122.90";

/// The host, Cluster and a MachineDeployment of no replicas yet (its names begin `crash-`).
fn manifests() -> String {
    deployment_manifests(&Deployment {
        ns: NS,
        cluster: "crash",
        host_pool: "crash",
        addresses: "192.168.122.80-192.168.122.89",
        name: "crash-workers",
        replicas: 0,
    })
}

/// The Machine of its own and its LibvirtMachine, with its bootstrap data given directly.
fn single_machine() -> String {
    let (pool, base) = (var("CAPLV_SYS_POOL"), var("CAPLV_SYS_BASE_IMAGE"));
    format!(
        r#"apiVersion: v1
kind: Secret
metadata: {{name: {SINGLE}-bootstrap, namespace: {NS}}}
type: cluster.x-k8s.io/secret
stringData:
  value: '{{"ignition":{{"version":"3.4.0"}}}}'
  format: ignition
---
apiVersion: infrastructure.cluster.x-k8s.io/v1alpha1
kind: LibvirtMachine
metadata: {{name: {SINGLE}, namespace: {NS}}}
spec:
  hostRef: {{name: hv}}
  domain: {{firmware: uefi, vcpus: 1, memoryMB: 512, type: qemu}}
  rootDisk: {{baseImage: {base}, storagePool: {pool}, size: 128Mi}}
  shutdown: {{mode: Hard}}
  network: {{type: network, name: default, dhcp: true, addresses: [{RESERVED}/24]}}
---
apiVersion: cluster.x-k8s.io/v1beta1
kind: Machine
metadata: {{name: {SINGLE}, namespace: {NS}}}
spec:
  clusterName: crash
  bootstrap: {{dataSecretName: {SINGLE}-bootstrap}}
  infrastructureRef: {{apiVersion: infrastructure.cluster.x-k8s.io/v1alpha1, kind: LibvirtMachine, name: {SINGLE}}}
"#
    )
}

/// A small deterministic generator (xorshift64), seeded per run and printed, so a failing run's
/// kill points can be replayed with `CAPLV_CRASH_SEED`.
struct Draws(u64);

impl Draws {
    fn seeded() -> Self {
        let seed = std::env::var("CAPLV_CRASH_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map_or(1, |d| d.as_secs() ^ u64::from(d.subsec_nanos()) << 20)
            })
            .max(1);
        eprintln!("crash suite: CAPLV_CRASH_SEED={seed}");
        Self(seed)
    }

    /// A draw in `0..bound`.
    fn below(&mut self, bound: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % bound
    }
}

/// The CAPLV family's own process, killed and started again at will.
struct CaplvProcess {
    log: PathBuf,
    child: Option<Child>,
}

impl CaplvProcess {
    fn start(log: &Path) -> Self {
        let mut process = Self {
            log: log.to_owned(),
            child: None,
        };
        process.launch();
        process
    }

    fn launch(&mut self) {
        self.child = Some(spawn_manager(manager(), &self.log, "info", &["--controllers", "caplv"]));
    }

    /// SIGKILL it and reap it: nothing is flushed, whatever it was doing stops there.
    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            crate::cli::signal(&child, "KILL");
            child.wait().unwrap();
        }
    }

    /// How many times a manager logged that its controllers started.
    fn starts(&self) -> usize {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .matches("controller families enabled")
            .count()
    }

    /// Start it and wait until its controllers run, then stop it with SIGTERM; it must exit
    /// cleanly.
    async fn start_and_stop(&mut self) {
        let before = self.starts();
        self.launch();
        wait("the caplv manager started", || self.starts() > before).await;
        self.stop();
    }

    /// Stop it with SIGTERM; it must exit cleanly.
    fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            crate::cli::signal(&child, "TERM");
            let status = child.wait().unwrap();
            let log = std::fs::read_to_string(&self.log).unwrap_or_default();
            assert!(status.success(), "the caplv manager exited with {status}; log:\n{log}");
        }
    }
}

impl Drop for CaplvProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// What the namespace and the host hold of the test's machines.
struct Seen {
    /// LibvirtMachine name → UID.
    machines: Vec<(String, String)>,
    /// Names of the LibvirtMachines that report their domain running.
    running: BTreeSet<String>,
    /// Domains on the host of this test's machines: (name, UUID).
    domains: Vec<(String, String)>,
}

impl Seen {
    fn now(env: &Genuine, names: &BTreeSet<String>) -> Self {
        let out = env.get(&[
            "-n",
            NS,
            "get",
            "libvirtmachine",
            "-o",
            r#"jsonpath={range .items[*]}{.metadata.name} {.metadata.uid} {.status.domainState}{"\n"}{end}"#,
        ]);
        let mut machines = Vec::new();
        let mut running = BTreeSet::new();
        for line in out.lines() {
            let mut parts = line.split_whitespace();
            let (Some(name), Some(uid)) = (parts.next(), parts.next()) else {
                continue;
            };
            if parts.next() == Some("running") {
                running.insert(name.to_owned());
            }
            machines.push((name.to_owned(), uid.to_owned()));
        }
        let domains = virsh(&["list", "--all", "--name"])
            .lines()
            .map(str::trim)
            .filter(|d| d.starts_with("crash-") || names.contains(*d))
            .filter_map(|d| domain_uuid(d).map(|uuid| (d.to_owned(), uuid)))
            .collect();
        Self {
            machines,
            running,
            domains,
        }
    }
}

/// The UUID of domain `name`, unless it went between the listing and this question.
fn domain_uuid(name: &str) -> Option<String> {
    let out = std::process::Command::new("virsh")
        .args(["-c", "qemu:///system", "domuuid", name])
        .output()
        .unwrap();
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// At most one domain per machine: every domain of the test carries the UID of one
/// LibvirtMachine seen in this round (the one whose name it has), and no two carry the same.
fn assert_one_domain_per_machine(seen: &Seen, uids: &[(String, String)], after: &str) {
    let mut carried = BTreeSet::new();
    for (domain, uuid) in &seen.domains {
        let owner = uids.iter().find(|(_, uid)| uid == uuid);
        assert!(
            owner.is_some_and(|(name, _)| name == domain),
            "{after}: domain {domain} ({uuid}) is no machine's: {uids:?}"
        );
        assert!(carried.insert(uuid.clone()), "{after}: two domains of machine {uuid}");
    }
}

/// Nothing of `names` is left on the host or in the namespace.
fn assert_nothing_left(env: &Genuine, names: &BTreeSet<String>, macs: &[String]) {
    let (pool_dir, nvram_dir) = (PathBuf::from(var("CAPLV_SYS_POOL_DIR")), var("CAPLV_SYS_NVRAM_DIR"));
    let domains = virsh(&["list", "--all", "--name"]);
    let volumes = virsh(&["vol-list", &var("CAPLV_SYS_POOL")]);
    let network = virsh(&["net-dumpxml", "default", "--inactive"]) + &virsh(&["net-dumpxml", "default"]);
    for name in names {
        assert!(
            !domains.lines().any(|d| d.trim() == name),
            "domain {name} left: {domains}"
        );
        assert!(!volumes.contains(name.as_str()), "volumes of {name} left: {volumes}");
        let files = pool_files(name);
        assert!(files.is_empty(), "files of {name} left in the pool: {files:?}");
        let nvram = Path::new(&nvram_dir).join(format!("{name}_VARS.fd"));
        assert!(!nvram.exists(), "NVRAM of {name} left: {}", nvram.display());
        let ignition = pool_dir.join(format!("{name}-ignition.ign"));
        assert!(!ignition.exists(), "Ignition of {name} left");
    }
    for mac in macs {
        assert!(
            !network.contains(mac.as_str()),
            "DHCP reservation of {mac} left:\n{network}"
        );
    }
    assert!(
        !network.contains(RESERVED),
        "the reservation of {RESERVED} left:\n{network}"
    );
    let claims = env.get(&["-n", NS, "get", "ipaddressclaims.ipam.cluster.x-k8s.io", "-o", "name"]);
    assert!(claims.trim().is_empty(), "IP address claims left: {claims}");
}

/// One phase of a round: start the manager, kill it after a random while, until `done` holds
/// with a manager that was left running; every kill made while `done` did not hold yet counts.
async fn kill_until(
    env: &Genuine,
    caplv: &mut CaplvProcess,
    draws: &mut Draws,
    names: &mut BTreeSet<String>,
    uids: &mut Vec<(String, String)>,
    done: impl Fn(&Seen) -> bool,
) -> u32 {
    let mut kills = 0;
    let deadline = Instant::now() + super::DEADLINE;
    loop {
        let seen = Seen::now(env, names);
        remember(&seen, names, uids);
        if done(&seen) {
            return kills;
        }
        assert!(
            Instant::now() < deadline,
            "no convergence under kills; seen: {:?}",
            seen.machines
        );
        caplv.launch();
        tokio::time::sleep(Duration::from_millis(150 + draws.below(MAX_LIFE_MS))).await;
        let before = Seen::now(env, names);
        remember(&before, names, uids);
        caplv.kill();
        kills += u32::from(!done(&before));
        let after = Seen::now(env, names);
        remember(&after, names, uids);
        assert_one_domain_per_machine(&after, uids, &format!("after kill {kills}"));
    }
}

/// Keep every LibvirtMachine's name and UID seen in the round: a domain may outlive its object.
fn remember(seen: &Seen, names: &mut BTreeSet<String>, uids: &mut Vec<(String, String)>) {
    for (name, uid) in &seen.machines {
        names.insert(name.clone());
        if !uids.iter().any(|(_, u)| u == uid) {
            uids.push((name.clone(), uid.clone()));
        }
    }
}

#[tokio::test]
#[ignore = "needs root, real libvirt and the genuine control plane: scripts/system-test.sh runs it"]
async fn the_caplv_process_killed_at_random_points_leaves_one_domain_per_machine_and_nothing_after() {
    // Once, on the contract OpenShift ships (Cluster API v1.10): each run takes minutes.
    if !runs_on("v1beta1", "crash suite") {
        return;
    }
    let env = Genuine::start_with("info", &["--controllers", "ignition"]).await;
    env.apply(&manifests());
    // Four vCPUs per logical CPU: three one-vCPU machines fit on any machine of this kind.
    env.patch(
        &["-n", NS, "libvirthost", "hv"],
        r#"{"spec":{"overcommit":{"cpuRatio":4}}}"#,
    );
    let mut caplv = CaplvProcess::start(&env.dir.path().join("caplv.log"));
    wait("host hv ready", || {
        env.get(&["-n", NS, "get", "libvirthost", "hv", "-o", "jsonpath={.status.ready}"]) == "true"
    })
    .await;
    caplv.kill();

    let mut draws = Draws::seeded();
    let (mut provisioning, mut teardown, mut rounds) = (0, 0, 0);
    while provisioning < KILLS || teardown < KILLS {
        rounds += 1;
        assert!(
            rounds <= MAX_ROUNDS,
            "{provisioning} and {teardown} kills in {MAX_ROUNDS} rounds"
        );
        let (mut names, mut uids) = (BTreeSet::new(), Vec::new());
        env.apply(&single_machine());
        env.scale(NS, "machinedeployment/crash-workers", 2);
        provisioning += kill_until(&env, &mut caplv, &mut draws, &mut names, &mut uids, |s| {
            s.machines.len() == 3 && s.running.len() == 3
        })
        .await;
        let macs = reserved_macs(&env);
        assert_eq!(macs.len(), 1, "the single machine's reservation: {macs:?}");
        let out = env.kubectl(&["-n", NS, "delete", "machine", SINGLE, "--wait=false"]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        env.scale(NS, "machinedeployment/crash-workers", 0);
        teardown += kill_until(&env, &mut caplv, &mut draws, &mut names, &mut uids, |s| {
            s.machines.is_empty() && s.domains.is_empty()
        })
        .await;
        wait("claims released", || {
            env.get(&["-n", NS, "get", "ipaddressclaims.ipam.cluster.x-k8s.io", "-o", "name"])
                .trim()
                .is_empty()
        })
        .await;
        assert_nothing_left(&env, &names, &macs);
        eprintln!(
            "crash suite: round {rounds}: {} machines, {provisioning} kills provisioning and {teardown} tearing down so far",
            names.len()
        );
    }
    let figures = format!("{provisioning} kills while provisioning, {teardown} while tearing down, {rounds} rounds\n");
    eprint!("crash suite: {figures}");
    // The figures outlive a passing run's captured output (the README reports them).
    std::fs::write(std::env::temp_dir().join("caplv-crash-figures.txt"), figures).unwrap();
    caplv.start_and_stop().await;
    env.stop().await;
}

/// The MACs of the single machine's DHCP reservations, from its status.
fn reserved_macs(env: &Genuine) -> Vec<String> {
    env.get(&[
        "-n",
        NS,
        "get",
        "libvirtmachine",
        SINGLE,
        "-o",
        r#"jsonpath={range .status.managedArtifacts.dhcpReservations[*]}{.mac}{"\n"}{end}"#,
    ])
    .lines()
    .map(str::to_owned)
    .collect()
}

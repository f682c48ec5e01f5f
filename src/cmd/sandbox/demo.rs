//! `caplv-manager sandbox --demo`: the seed's whole story, narrated, in about fifteen seconds.
//!
//! It starts the sandbox, applies the seed's manifests (embedded in the binary; the
//! ScheduledMachine's window made to open a few seconds later, with a lead time), and prints
//! every change it sees: phases, objects created ahead of the window, the VM on the (simulated)
//! host, CSRs approved, the Node joining and waiting tainted until the edge, then schedulable at
//! it. Then it closes the window by editing the schedule and narrates the drain and teardown. Each step has a deadline;
//! the demo exits non-zero naming the first step that did not happen.

use std::{
    collections::BTreeMap,
    time::{Duration, Instant},
};

use anyhow::Context as _;
use chrono::Timelike;
use serde_json::{Value, json};

use crate::{
    cli::{ControlPlaneMode, SandboxArgs},
    cmd::sandbox::Sandbox,
    controllers::Family,
};

const NS: &str = "default";
const NAME: &str = "spot-worker-01";
const HOST: &str = "laptop";
/// A Pod the demo places on the worker, so the drain has something to evict.
const WORKLOAD: &str = "web";
/// Short enough to catch brief phases such as ShuttingDown.
const POLL: Duration = Duration::from_millis(20);
/// Each look at a genuine API server is a dozen requests: look less often there.
const GENUINE_POLL: Duration = Duration::from_millis(250);

const fn poll(sb: &Sandbox) -> Duration {
    if sb.is_genuine() { GENUINE_POLL } else { POLL }
}
/// A breath after each completed step, so a person can follow along.
const PACE: Duration = Duration::from_millis(400);

/// The seed's manifests, in the order a user applies them.
const SEED: [(&str, &str); 5] = [
    (
        "01-libvirtcluster.yaml",
        include_str!("../../../examples/seed/01-libvirtcluster.yaml"),
    ),
    (
        "02-libvirthost.yaml",
        include_str!("../../../examples/seed/02-libvirthost.yaml"),
    ),
    (
        "03-cluster.yaml",
        include_str!("../../../examples/seed/03-cluster.yaml"),
    ),
    (
        "04-secret-worker-ignition.yaml",
        include_str!("../../../examples/seed/04-secret-worker-ignition.yaml"),
    ),
    (
        "05-scheduledmachine.yaml",
        include_str!("../../../examples/seed/05-scheduledmachine.yaml"),
    ),
];

/// Prints what happens, with the time since the demo started.
struct Narrator {
    start: Instant,
    seen: BTreeMap<String, String>,
    /// How long any one step may take.
    step_deadline: Duration,
}

impl Narrator {
    fn say(&self, text: impl AsRef<str>) {
        println!("[{:>5.1}s] {}", self.start.elapsed().as_secs_f64(), text.as_ref());
    }

    fn heading(&self, text: &str) {
        println!("\n== {text}");
    }

    /// Print every fact that changed since the last look.
    fn update(&mut self, facts: BTreeMap<String, String>) {
        for (subject, state) in &facts {
            if self.seen.get(subject) != Some(state) {
                self.say(format!("{subject}: {state}"));
            }
        }
        for gone in self.seen.keys().filter(|k| !facts.contains_key(*k)) {
            self.say(format!("{gone}: gone"));
        }
        self.seen = facts;
    }
}

async fn get(sb: &Sandbox, api_version: &str, kind: &str, name: &str) -> Option<Value> {
    sb.get_object(api_version, kind, NS, name).await
}

fn text(v: &Value, path: &str) -> String {
    v.pointer(path).and_then(Value::as_str).unwrap_or_default().to_owned()
}

fn ready_reason(v: &Value) -> String {
    v.pointer("/status/conditions")
        .and_then(Value::as_array)
        .and_then(|cs| cs.iter().find(|c| c["type"] == "Ready"))
        .map(|c| format!("{} ({})", text(c, "/reason"), text(c, "/status")))
        .unwrap_or_default()
}

/// Everything the demo narrates, as "subject: state" lines.
async fn facts(sb: &Sandbox) -> BTreeMap<String, String> {
    let mut f = BTreeMap::new();
    let infra = "infrastructure.cluster.x-k8s.io/v1alpha1";
    if let Some(h) = get(sb, infra, "LibvirtHost", HOST).await {
        let c = &h["status"]["capacity"];
        f.insert(
            format!("LibvirtHost {HOST}"),
            format!(
                "{}; {} of {} vCPUs and {} of {} MiB available",
                ready_reason(&h),
                c["availableVCPUs"],
                c["totalVCPUs"],
                c["availableMemoryMB"],
                c["totalMemoryMB"]
            ),
        );
    }
    if let Some(c) = get(sb, infra, "LibvirtCluster", "spot").await {
        f.insert("LibvirtCluster spot".into(), ready_reason(&c));
    }
    if let Some(sm) = get(sb, "5spot.finos.org/v1alpha1", "ScheduledMachine", NAME).await {
        let phase = text(&sm, "/status/phase");
        let lag = text(&sm, "/status/window/schedulableLag");
        f.insert(
            format!("ScheduledMachine {NAME}"),
            match (phase.is_empty(), lag.is_empty()) {
                (true, _) => "created, no phase yet".to_owned(),
                (false, true) => format!("phase {phase}"),
                (false, false) => format!("phase {phase}; Node schedulable {lag} after the window opened"),
            },
        );
    }
    if let Some(ic) = get(sb, "bootstrap.cluster.x-k8s.io/v1alpha1", "IgnitionConfig", NAME).await {
        let secret = text(&ic, "/status/dataSecretName");
        let state = if secret.is_empty() {
            "created".to_owned()
        } else {
            format!("bootstrap data Secret {secret} written")
        };
        f.insert(format!("IgnitionConfig {NAME}"), state);
    }
    if let Some(lm) = get(sb, infra, "LibvirtMachine", NAME).await {
        let state = text(&lm, "/status/domainState");
        f.insert(
            format!("LibvirtMachine {NAME}"),
            if state.is_empty() {
                ready_reason(&lm)
            } else {
                format!("{}, domain {state}", ready_reason(&lm))
            },
        );
    }
    if let Some(m) = get(sb, "cluster.x-k8s.io/v1beta1", "Machine", NAME).await {
        let node = text(&m, "/status/nodeRef/name");
        let phase = text(&m, "/status/phase");
        f.insert(
            format!("Machine {NAME}"),
            if phase.is_empty() {
                "created".to_owned()
            } else if node.is_empty() {
                format!("phase {phase}")
            } else {
                format!("phase {phase}, node {node}")
            },
        );
    }
    for csr in sb
        .list_objects("certificates.k8s.io/v1", "CertificateSigningRequest")
        .await
    {
        let approved = csr["status"]["conditions"]
            .as_array()
            .and_then(|cs| cs.iter().find(|c| c["type"] == "Approved"))
            .map(|c| format!("approved ({})", text(c, "/reason")))
            .unwrap_or_else(|| "pending".into());
        let signer = text(&csr, "/spec/signerName");
        f.insert(
            format!(
                "CSR {} ({})",
                text(&csr, "/metadata/name"),
                signer.rsplit('/').next().unwrap_or_default()
            ),
            approved,
        );
    }
    if let Some(n) = sb.get_object("v1", "Node", "", NAME).await {
        let worker = n.pointer("/metadata/labels/node-role.kubernetes.io~1worker").is_some();
        let cordoned = n.pointer("/spec/unschedulable") == Some(&Value::Bool(true));
        let held = n
            .pointer("/spec/taints")
            .and_then(Value::as_array)
            .is_some_and(|ts| ts.iter().any(|t| t["key"] == "5spot.finos.org/window-closed"));
        f.insert(
            format!("Node {NAME}"),
            format!(
                "registered, providerID {}{}{}{}",
                text(&n, "/spec/providerID"),
                if worker { ", labelled worker" } else { "" },
                if held { ", tainted window-closed" } else { "" },
                if cordoned { ", cordoned" } else { "" }
            ),
        );
    }
    if let Some(p) = get(sb, "v1", "Pod", WORKLOAD).await {
        f.insert(
            format!("Pod {WORKLOAD}"),
            format!("running on Node {}", text(&p, "/spec/nodeName")),
        );
    }
    if let Some(vm) = vm_state(sb).await {
        f.insert(format!("VM {NAME} on {HOST}"), vm);
    }
    f
}

/// The domain's state as the host itself reports it.
#[cfg(feature = "caplv")]
async fn vm_state(sb: &Sandbox) -> Option<String> {
    let client = sb.client.clone();
    let host: crate::api::LibvirtHost = kube::Api::namespaced(client.clone(), NS).get(HOST).await.ok()?;
    let called = sb.shared.hosts.call(&client, &host, |hv| hv.domain(NAME)).await.ok()?;
    let crate::reconcile::host_connections::HostCall::Ran {
        result: Ok(Some(domain)),
        ..
    } = called
    else {
        return None;
    };
    Some(format!("{} (libvirt domain {})", domain.state.as_str(), domain.uuid))
}

#[cfg(not(feature = "caplv"))]
async fn vm_state(_sb: &Sandbox) -> Option<String> {
    None
}

/// Narrate until `done` holds, or fail naming `step`.
async fn step(
    n: &mut Narrator,
    sb: &Sandbox,
    step: &str,
    done: impl Fn(&BTreeMap<String, String>) -> bool,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + n.step_deadline;
    loop {
        let f = facts(sb).await;
        n.update(f.clone());
        if done(&f) {
            n.say(format!("✓ {step}"));
            // Keep narrating through the pause, so changes still print as they happen.
            let resume = Instant::now() + PACE;
            while Instant::now() < resume {
                tokio::time::sleep(poll(sb)).await;
                n.update(facts(sb).await);
            }
            return Ok(());
        }
        if Instant::now() > deadline {
            anyhow::bail!("demo step failed: {step} (not seen within {:?})", n.step_deadline);
        }
        tokio::time::sleep(poll(sb)).await;
    }
}

fn has(f: &BTreeMap<String, String>, subject: &str, needle: &str) -> bool {
    f.get(subject).is_some_and(|s| s.contains(needle))
}

/// The seed's ScheduledMachine with a window that opens at `edge` (an inclusion, for an hour,
/// over a daily hour twelve hours away) and a lead time of `lead`, so the worker is provisioned
/// ahead of the edge.
fn opening_at(yaml: &str, edge: chrono::DateTime<chrono::Utc>, lead: Duration) -> anyhow::Result<Value> {
    let mut sm: Value = serde_yaml::from_str(yaml).context("the seed ScheduledMachine does not parse")?;
    let instant = |t: chrono::DateTime<chrono::Utc>| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    sm["spec"]["schedule"] = json!({
        "enabled": true, "daysOfWeek": ["mon-sun"], "hoursOfDay": [closed_hour().to_string()], "timezone": "UTC",
        "inclusions": [{"start": instant(edge), "end": instant(edge + chrono::Duration::hours(1))}],
        "leadTime": crate::schedule::format_duration(lead),
    });
    Ok(sm)
}

/// An hour of the day twelve hours from now: a window there stays closed through the demo.
fn closed_hour() -> u32 {
    (chrono::Utc::now().hour() + 12) % 24
}

/// How far ahead of the edge the demo provisions: the genuine control plane is slower.
const fn demo_lead(sb: &Sandbox) -> Duration {
    if sb.is_genuine() {
        Duration::from_secs(30)
    } else {
        Duration::from_secs(10)
    }
}

async fn apply(client: &kube::Client, doc: Value) -> anyhow::Result<String> {
    let obj: kube::api::DynamicObject = serde_json::from_value(doc.clone())?;
    let types = obj.types.clone().context("manifest without apiVersion/kind")?;
    let gvk = kube::core::GroupVersionKind::try_from(&types)?;
    let (ar, _) = kube::discovery::pinned_kind(client, &gvk).await?;
    let name = obj.metadata.name.clone().context("manifest without a name")?;
    let api: kube::Api<kube::api::DynamicObject> = kube::Api::namespaced_with(client.clone(), NS, &ar);
    api.patch(
        &name,
        &kube::api::PatchParams::apply("caplv-demo").force(),
        &kube::api::Patch::Apply(doc),
    )
    .await
    .with_context(|| format!("applying {} {name}", types.kind))?;
    Ok(format!("{} {name}", types.kind))
}

/// Run the demo.
///
/// # Errors
/// When the sandbox cannot start or a step does not happen in time.
pub async fn run(args: SandboxArgs) -> anyhow::Result<()> {
    let missing: Vec<&str> = Family::ALL
        .iter()
        .filter(|f| !f.is_compiled())
        .map(|f| f.as_str())
        .collect();
    anyhow::ensure!(
        missing.is_empty(),
        "the demo needs every controller family; this build lacks {missing:?}"
    );
    let mut n = Narrator {
        start: Instant::now(),
        seen: BTreeMap::new(),
        step_deadline: Duration::from_secs(args.demo_step_timeout_seconds),
    };
    n.heading(match args.control_plane {
        ControlPlaneMode::Memkube => {
            "Starting the sandbox: in-memory Kubernetes API server, Cluster API simulator, caplv-manager"
        }
        ControlPlaneMode::Real => {
            "Starting the sandbox on the genuine kube-apiserver and Cluster API core: caplv-manager and an emulated kubelet"
        }
    });
    let sb = Sandbox::start(&args).await?;
    crate::cmd::sandbox::write_atomically(&args.kubeconfig_out, &sb.kubeconfig())?;
    n.say(format!(
        "ready: API server {}, kubeconfig {} (kubectl works while the demo runs)",
        sb.api_url(),
        args.kubeconfig_out.display()
    ));
    n.say("libvirt hosts are private test drivers shaped like the seed's laptop; nothing is dialled");
    let result = story(&mut n, &sb).await;
    let _ = std::fs::remove_file(&args.kubeconfig_out);
    sb.stop().await?;
    match result {
        Ok(()) => {
            n.heading(&format!(
                "Done in {:.1}s: the worker came, joined and went, leaving nothing behind",
                n.start.elapsed().as_secs_f64()
            ));
            Ok(())
        }
        Err(e) => Err(e),
    }
}

async fn story(n: &mut Narrator, sb: &Sandbox) -> anyhow::Result<()> {
    let client = sb.client.clone();
    let lead = demo_lead(sb);
    let edge = (chrono::Utc::now() + lead + Duration::from_secs(1))
        .with_nanosecond(0)
        .context("the window's edge")?;
    n.heading(&format!(
        "Applying the seed's manifests (examples/seed/; the ScheduledMachine's window opens at {} with leadTime {})",
        edge.format("%H:%M:%S UTC"),
        crate::schedule::format_duration(lead)
    ));
    for (file, yaml) in SEED {
        let doc = if file.starts_with("05") {
            opening_at(yaml, edge, lead)?
        } else {
            serde_yaml::from_str(yaml).with_context(|| format!("{file} does not parse"))?
        };
        let what = apply(&client, doc).await?;
        n.say(format!("applied {file}: {what}"));
    }

    n.heading("The lead time began: 5-Spot creates the worker ahead of the window, CAPLV boots it, the Node joins");
    let sm = format!("ScheduledMachine {NAME}");
    step(n, sb, "the host is connected and reports its capacity", |f| {
        has(f, &format!("LibvirtHost {HOST}"), "Connected (True)")
    })
    .await?;
    step(
        n,
        sb,
        "5-Spot created the IgnitionConfig, LibvirtMachine and Machine",
        |f| f.contains_key(&format!("Machine {NAME}")) && f.contains_key(&format!("LibvirtMachine {NAME}")),
    )
    .await?;
    step(n, sb, "the VM runs on the host with its Ignition in fw_cfg", |f| {
        has(f, &format!("VM {NAME} on {HOST}"), "running")
    })
    .await?;
    step(n, sb, "the kubelet's CSRs were approved and the Node joined", |f| {
        has(f, &format!("Machine {NAME}"), "phase Running, node")
    })
    .await?;
    step(n, sb, "the Node carries the worker role label", |f| {
        has(f, &format!("Node {NAME}"), "labelled worker")
    })
    .await?;
    step(n, sb, "the Node waits for the window, tainted window-closed", |f| {
        has(f, &format!("Node {NAME}"), "tainted window-closed") && has(f, &sm, "phase Preparing")
    })
    .await?;
    n.heading(&format!(
        "The window opens at {}: the taint comes off at the edge",
        edge.format("%H:%M:%S UTC")
    ));
    step(n, sb, "the Node is schedulable at the window's edge", |f| {
        has(f, &sm, "schedulable") && !has(f, &format!("Node {NAME}"), "tainted")
    })
    .await?;
    step(n, sb, "the ScheduledMachine is Active", |f| has(f, &sm, "phase Active")).await?;
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": WORKLOAD, "namespace": NS},
        "spec": {"nodeName": NAME, "containers": [{"name": "web", "image": "registry.example/web:1"}]}});
    n.say(format!(
        "placing Pod {WORKLOAD} on the worker, as a scheduler would: {}",
        apply(&client, pod).await?
    ));
    step(n, sb, "the worker runs a workload", |f| {
        f.contains_key(&format!("Pod {WORKLOAD}"))
    })
    .await?;

    n.heading("Closing the window (its inclusion removed from the schedule): drain, then remove everything");
    let patch = json!({"spec": {"schedule": {"inclusions": null}}});
    let sms: kube::Api<crate::api::ScheduledMachine> = kube::Api::namespaced(client.clone(), NS);
    sms.patch(
        NAME,
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(&patch),
    )
    .await
    .context("editing the schedule")?;
    step(n, sb, "the workload was evicted by the drain", |f| {
        !f.contains_key(&format!("Pod {WORKLOAD}"))
    })
    .await?;
    step(n, sb, "the Machine, LibvirtMachine and VM are gone", |f| {
        !f.contains_key(&format!("Machine {NAME}"))
            && !f.contains_key(&format!("LibvirtMachine {NAME}"))
            && !f.contains_key(&format!("VM {NAME} on {HOST}"))
    })
    .await?;
    step(n, sb, "the ScheduledMachine is Inactive until its next window", |f| {
        has(f, &sm, "phase Inactive")
    })
    .await?;
    let left = facts(sb).await;
    n.say(format!(
        "host capacity back to: {}",
        left.get(&format!("LibvirtHost {HOST}")).cloned().unwrap_or_default()
    ));
    Ok(())
}

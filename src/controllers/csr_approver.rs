//! Approves the kubelet CSRs of nodes that belong to this manager's LibvirtMachines; the policy
//! is [`crate::kubelet_csr`]. CSRs it does not approve are left as they are, never denied.
//!
//! Triggers: every CSR, plus a LibvirtMachine or Node change for the CSRs naming that node (a
//! machine finishing provisioning, or its Node getting linked, can make a waiting CSR eligible).
//! Approvals are Events on the LibvirtMachine and counted in `caplv_csr_decisions_total`.

use std::{net::IpAddr, sync::Arc};

use k8s_openapi::{api::certificates::v1::CertificateSigningRequest, jiff::SignedDuration};
use kube::{
    Api, Resource, ResourceExt,
    api::{Patch, PatchParams},
    runtime::{
        controller::{Action, Controller},
        events::EventType,
        reflector::{ObjectRef, Store},
        watcher,
    },
};
use tokio_util::sync::CancellationToken;

use crate::reconcile::{ApiError, Context, drive_cached, publish_event, refs_where};
use crate::{
    api::{common::MachineAddressType, libvirt_machine::LibvirtMachine},
    app::health::Readiness,
    kubelet_csr::{self, Request, Verdict},
};

/// Controller name in metrics and logs.
pub const NAME: &str = "csrapprover";
/// Reason on the `Approved` condition this manager writes.
pub const APPROVAL_REASON: &str = "CAPLVApproved";

/// Failures of one reconcile: reading the Node or approving.
pub type Error = ApiError;

struct State {
    ctx: Arc<Context>,
    machines: Store<LibvirtMachine>,
}

fn decided(csr: &CertificateSigningRequest) -> bool {
    csr.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Approved" || c.type_ == "Denied"))
}

fn request(csr: &CertificateSigningRequest) -> Request {
    Request {
        signer: csr.spec.signer_name.clone(),
        username: csr.spec.username.clone().unwrap_or_default(),
        groups: csr.spec.groups.clone().unwrap_or_default(),
        usages: csr.spec.usages.clone().unwrap_or_default(),
        pem: csr.spec.request.0.clone(),
        created: csr.metadata.creation_timestamp.as_ref().map(|t| t.0),
    }
}

/// The provisioned LibvirtMachine whose node is `node`.
fn machine_of(machines: &Store<LibvirtMachine>, node: &str) -> Option<Arc<LibvirtMachine>> {
    machines.state().into_iter().find(|m| {
        m.metadata.deletion_timestamp.is_none()
            && m.status
                .as_ref()
                .is_some_and(|s| s.ready && s.node_name.as_deref() == Some(node))
    })
}

fn facts(machine: &LibvirtMachine, node_provider_id: Option<String>) -> kubelet_csr::Machine {
    let status = machine.status.clone().unwrap_or_default();
    let mut ips: Vec<IpAddr> = Vec::new();
    let mut dns = Vec::new();
    for a in &status.addresses {
        match a.type_ {
            MachineAddressType::InternalIP | MachineAddressType::ExternalIP => {
                if let Ok(ip) = a.address.parse() {
                    ips.push(ip);
                }
            }
            _ => dns.push(a.address.clone()),
        }
    }
    kubelet_csr::Machine {
        id: format!("{}/{}", machine.namespace().unwrap_or_default(), machine.name_any()),
        provider_id: machine.spec.provider_id.clone().unwrap_or_default(),
        ips,
        dns,
        provisioned_at: status.provisioned_at.map(|t| t.0),
        node_provider_id,
    }
}

async fn reconcile(csr: Arc<CertificateSigningRequest>, state: Arc<State>) -> Result<Action, Error> {
    apply(&csr, &state).await
}

async fn apply(csr: &CertificateSigningRequest, state: &State) -> Result<Action, Error> {
    if decided(csr) {
        return Ok(Action::await_change());
    }
    let req = request(csr);
    let Some(node) = kubelet_csr::node_name(&req) else {
        return Ok(Action::await_change());
    };
    let kind = if req.signer == kubelet_csr::SERVING_SIGNER {
        "serving"
    } else {
        "client"
    };
    let machine = machine_of(&state.machines, &node);
    let node_provider_id = match &machine {
        Some(_) => state
            .ctx
            .caches
            .nodes
            .get_cluster_scoped(&node)
            .await
            .map(|n| n.spec.as_ref().and_then(|s| s.provider_id.clone()).unwrap_or_default()),
        None => None,
    };
    let facts = machine.as_deref().map(|m| facts(m, node_provider_id));
    let window = SignedDuration::try_from(state.ctx.settings.csr_approval_window).unwrap_or(SignedDuration::MAX);
    match kubelet_csr::decide(&req, facts.as_ref(), state.ctx.wall_time().0, window) {
        Verdict::Approve(message) => {
            let patch = serde_json::json!({"status": {"conditions": [{
                "type": "Approved", "status": "True", "reason": APPROVAL_REASON, "message": message,
            }]}});
            let api: Api<CertificateSigningRequest> = Api::all(state.ctx.client.clone());
            api.patch_approval(&csr.name_any(), &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map_err(ApiError::write(format!("the approval of CSR {}", csr.name_any())))?;
            state
                .ctx
                .metrics
                .csr_decisions
                .with_label_values(&[kind, "approved", APPROVAL_REASON])
                .inc();
            tracing::info!(csr = %csr.name_any(), %node, kind, "approved kubelet CSR");
            if let Some(m) = &machine {
                publish_event(
                    &state.ctx.recorder,
                    &m.object_ref(&()),
                    EventType::Normal,
                    "CSRApproved",
                    "ApproveCSR",
                    format!("approved CSR {}: {message}", csr.name_any()),
                )
                .await;
            }
            Ok(Action::await_change())
        }
        Verdict::Ignore(reason) => {
            state
                .ctx
                .metrics
                .csr_decisions
                .with_label_values(&[kind, "ignored", reason])
                .inc();
            tracing::debug!(csr = %csr.name_any(), %node, kind, reason, "left kubelet CSR alone");
            Ok(Action::await_change())
        }
    }
}

/// The undecided CSRs naming `node`.
fn csrs_for(csrs: &Store<CertificateSigningRequest>, node: &str) -> Vec<ObjectRef<CertificateSigningRequest>> {
    refs_where(csrs, |c| {
        !decided(c) && kubelet_csr::node_name(&request(c)).as_deref() == Some(node)
    })
}

/// Run the approver until `shutdown` is cancelled. `machines` is the LibvirtMachine cache.
pub async fn run(
    ctx: Arc<Context>,
    machines: Store<LibvirtMachine>,
    readiness: Readiness,
    shutdown: CancellationToken,
) {
    let controller = Controller::new(
        Api::<CertificateSigningRequest>::all(ctx.client.clone()),
        watcher::Config::default(),
    );
    let csrs = controller.store();
    let (by_machine, by_node) = (csrs.clone(), csrs.clone());
    let controller = controller
        .watches(
            ctx.watched_api::<LibvirtMachine>(),
            watcher::Config::default(),
            move |m| {
                m.status
                    .and_then(|s| s.node_name)
                    .map(|n| csrs_for(&by_machine, &n))
                    .unwrap_or_default()
            },
        )
        .watches_shared_stream(ctx.caches.nodes.subscribe(), move |n| csrs_for(&by_node, &n.name_any()))
        .graceful_shutdown_on(shutdown.clone().cancelled_owned());
    let state = Arc::new(State {
        ctx: ctx.clone(),
        machines,
    });
    drive_cached(controller, NAME, readiness, reconcile, state, &ctx).await;
}

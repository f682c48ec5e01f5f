//! Machine status: phase, readiness fields in the spoken API version, addresses, nodeRef and
//! conditions, written as one merge patch to `/status` and only when something changed.

use kube::api::{Api, DynamicObject};
use serde_json::{Value, json};

use crate::conditions::{Cond, merge};
use crate::error::Result;
use crate::patch::patch_status;
use crate::sim::Ctx;
use crate::view::{MachineView, str_at};

/// The Node a Machine is linked to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct NodeLink {
    pub name: String,
    pub uid: String,
}

/// What one reconcile of a live Machine observed.
pub(crate) struct Observed {
    pub bootstrap_ready: bool,
    pub bootstrap_cond: Option<Cond>,
    pub infra_ready: bool,
    pub infra_cond: Option<Cond>,
    pub addresses: Option<Value>,
    pub node: Option<NodeLink>,
    pub node_info: Option<Value>,
    pub node_cond: Option<Cond>,
    pub deleting_cond: Option<Cond>,
}

impl Observed {
    /// Nothing ready yet; one condition explains why.
    pub fn waiting(cond: Cond) -> Self {
        Observed {
            bootstrap_ready: false,
            bootstrap_cond: None,
            infra_ready: false,
            infra_cond: Some(cond),
            addresses: None,
            node: None,
            node_info: None,
            node_cond: None,
            deleting_cond: None,
        }
    }
}

/// Core's phase rules (`setPhase`), deletion aside.
pub(crate) fn phase(bootstrap_ready: bool, infra_ready: bool, has_node: bool) -> &'static str {
    match (bootstrap_ready, infra_ready, has_node) {
        (_, true, true) => "Running",
        (_, true, false) => "Provisioned",
        (true, false, _) => "Provisioning",
        _ => "Pending",
    }
}

fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

fn node_ref_json(ctx: &Ctx, node: &NodeLink) -> Value {
    if ctx.cfg.versions.is_v1beta2() {
        json!({ "name": node.name })
    } else {
        json!({ "apiVersion": "v1", "kind": "Node", "name": node.name, "uid": node.uid })
    }
}

fn finish(ctx: &Ctx, obj: &DynamicObject, m: &MachineView, mut status: Value, phase: &str, conds: &[Cond]) -> Value {
    let ts = now();
    status["phase"] = json!(phase);
    status["observedGeneration"] = json!(obj.metadata.generation);
    status["conditions"] = merge(
        m.status.get("conditions"),
        conds,
        ctx.cfg.versions,
        obj.metadata.generation,
        &ts,
    );
    if str_at(&m.status, &["phase"]).as_deref() != Some(phase) {
        status["lastUpdated"] = json!(ts);
    }
    status
}

/// Writes the status of a live Machine.
pub(crate) async fn write_status(
    ctx: &Ctx,
    api: &Api<DynamicObject>,
    obj: &DynamicObject,
    m: &MachineView,
    o: Observed,
) -> Result<()> {
    let mut status = json!({});
    if ctx.cfg.versions.is_v1beta2() {
        // Like core, only `true` is written (the fields are optional pointers).
        let mut init = json!({});
        if o.bootstrap_ready {
            init["bootstrapDataSecretCreated"] = json!(true);
        }
        if o.infra_ready {
            init["infrastructureProvisioned"] = json!(true);
        }
        // An empty `initialization` breaks the CRD's `minProperties: 1`.
        if init.as_object().is_some_and(|m| !m.is_empty()) {
            status["initialization"] = init;
        }
    } else {
        // v1beta1's booleans are `omitempty`: core never writes `false`.
        if o.bootstrap_ready {
            status["bootstrapReady"] = json!(true);
        }
        if o.infra_ready {
            status["infrastructureReady"] = json!(true);
        }
    }
    if let Some(a) = &o.addresses {
        status["addresses"] = a.clone();
    }
    if let Some(n) = &o.node {
        status["nodeRef"] = node_ref_json(ctx, n);
    }
    if let Some(info) = &o.node_info {
        status["nodeInfo"] = info.clone();
    }
    let conds: Vec<Cond> = [o.bootstrap_cond, o.infra_cond, o.node_cond, o.deleting_cond]
        .into_iter()
        .flatten()
        .collect();
    let p = phase(o.bootstrap_ready, o.infra_ready, o.node.is_some());
    let status = finish(ctx, obj, m, status, p, &conds);
    patch_status(api, obj, status).await?;
    Ok(())
}

/// Writes the status of a Machine being deleted: phase `Deleting`, the `Deleting` condition
/// saying which step it waits on, and the drain start time once draining began.
pub(crate) async fn write_deleting(
    ctx: &Ctx,
    api: &Api<DynamicObject>,
    obj: &DynamicObject,
    m: &MachineView,
    cond: Cond,
    drain_started: Option<&str>,
) -> Result<()> {
    let mut status = json!({});
    if let Some(t) = drain_started {
        status["deletion"] = json!({ "nodeDrainStartTime": t });
    }
    let status = finish(ctx, obj, m, status, "Deleting", &[cond]);
    patch_status(api, obj, status).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::phase;

    #[test]
    fn phases_follow_core() {
        assert_eq!(phase(false, false, false), "Pending");
        assert_eq!(phase(true, false, false), "Provisioning");
        assert_eq!(phase(true, true, false), "Provisioned");
        assert_eq!(phase(true, true, true), "Running");
        assert_eq!(phase(false, true, true), "Running");
    }
}

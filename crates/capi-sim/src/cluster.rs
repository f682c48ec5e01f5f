//! What core's Cluster controller does for a provider: own and label the InfraCluster and the
//! control plane object, mirror the InfraCluster's readiness, copy the control-plane
//! endpoint, and walk the Cluster's phases.
//!
//! Not simulated: Cluster deletion (no `cluster.cluster.x-k8s.io` finalizer; garbage collection
//! through the ownerRefs removes the InfraCluster), control-plane readiness and topology.

use kube::api::DynamicObject;
use kube::runtime::controller::Action;
use serde_json::{Value, json};

use crate::conditions::{Cond, merge};
use crate::dynamic::Contract;
use crate::error::Result;
use crate::patch::{Ownership, ensure_owned, owner_ref, patch_guarded, patch_status};
use crate::sim::Ctx;
use crate::view::{ObjRef, at, bool_at, str_at};

/// Is a provider object ready under `contract`? v1beta1 reads `status.ready`, v1beta2
/// `status.initialization.<field>`, exactly as core does: writing only one of them is a bug
/// this simulator should expose.
pub(crate) fn provider_ready(obj: &DynamicObject, contract: Contract, v1b2_field: &str) -> bool {
    let status = obj.data.get("status").cloned().unwrap_or(Value::Null);
    match contract {
        Contract::V1beta1 => bool_at(&status, &["ready"]),
        Contract::V1beta2 => bool_at(&status, &["initialization", v1b2_field]),
    }
}

fn endpoint_valid(spec: &Value) -> bool {
    let host = str_at(spec, &["controlPlaneEndpoint", "host"]).unwrap_or_default();
    let port = at(spec, &["controlPlaneEndpoint", "port"])
        .and_then(Value::as_i64)
        .unwrap_or(0);
    !host.is_empty() && port != 0
}

/// `spec.paused` or the `cluster.x-k8s.io/paused` annotation (core pauses on either).
pub(crate) fn paused(obj: &DynamicObject) -> bool {
    let spec_paused = obj.data.get("spec").is_some_and(|s| bool_at(s, &["paused"]));
    annotated_paused(obj) || spec_paused
}

/// The `cluster.x-k8s.io/paused` annotation, which pauses any CAPI object.
pub(crate) fn annotated_paused(obj: &DynamicObject) -> bool {
    obj.metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key("cluster.x-k8s.io/paused"))
}

pub(crate) async fn reconcile(obj: &DynamicObject, ctx: &Ctx) -> Result<Action> {
    if obj.metadata.deletion_timestamp.is_some() || paused(obj) {
        return Ok(Action::await_change());
    }
    let ns = obj.metadata.namespace.clone().unwrap_or_default();
    let name = obj.metadata.name.clone().unwrap_or_default();
    let api = ctx.clusters(&ns);
    let spec = obj.data.get("spec").cloned().unwrap_or(Value::Null);
    let mut spec_endpoint_valid = endpoint_valid(&spec);
    let infra_ref = at(&spec, &["infrastructureRef"]).and_then(ObjRef::parse);

    let infra_cond;
    // Core copies the InfraCluster's failure domains to the Cluster, in the shape it wrote them.
    let mut failure_domains = None;
    let infra_ready = match &infra_ref {
        None => {
            infra_cond = Cond::new("InfrastructureReady", true, "NoInfrastructureRef", "");
            true
        }
        Some(r) => {
            let kind = ctx.resolve(r).await?;
            match ctx.resolver.get(&kind, &ns, &r.name).await? {
                None => {
                    infra_cond = Cond::new(
                        "InfrastructureReady",
                        false,
                        "InfrastructureDoesNotExist",
                        format!("{} {} does not exist", r.kind, r.name),
                    );
                    false
                }
                Some(infra) => {
                    let owner = owner_ref(obj, &ctx.cluster_ar, cluster_controls(ctx));
                    let infra_api = ctx.resolver.api(&kind, &ns);
                    match ensure_owned(&infra_api, &infra, owner, &name).await? {
                        Ownership::OtherController(other) => {
                            infra_cond = Cond::new(
                                "InfrastructureReady",
                                false,
                                "OwnershipFailed",
                                format!("{} {} is controlled by {other}", r.kind, r.name),
                            );
                            false
                        }
                        Ownership::Owned => {
                            let ready = provider_ready(&infra, kind.contract, "provisioned");
                            failure_domains = infra.data["status"].get("failureDomains").cloned();
                            let infra_spec = infra.data.get("spec").cloned().unwrap_or(Value::Null);
                            if ready && !spec_endpoint_valid && endpoint_valid(&infra_spec) {
                                let ep = infra_spec["controlPlaneEndpoint"].clone();
                                patch_guarded(
                                    &api,
                                    obj,
                                    json!({"spec": {"controlPlaneEndpoint": ep}}),
                                    "copying controlPlaneEndpoint to Cluster",
                                )
                                .await?;
                                spec_endpoint_valid = true;
                            }
                            infra_cond = if ready {
                                Cond::new("InfrastructureReady", true, "Ready", "")
                            } else {
                                Cond::new(
                                    "InfrastructureReady",
                                    false,
                                    "WaitingForInfrastructure",
                                    format!("{} {} is not ready", r.kind, r.name),
                                )
                            };
                            ready
                        }
                    }
                }
            }
        }
    };

    if let Some(r) = at(&spec, &["controlPlaneRef"]).and_then(ObjRef::parse) {
        own_control_plane(obj, ctx, &r, &ns, &name).await?;
    }
    let cp = ctx.cfg.control_plane_initialized;
    let phase = if infra_ready && spec_endpoint_valid {
        "Provisioned"
    } else if infra_ref.is_some() || at(&spec, &["controlPlaneRef"]).is_some() {
        "Provisioning"
    } else {
        "Pending"
    };
    let status_now = obj.data.get("status").cloned().unwrap_or(Value::Null);
    let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let cp_cond = Cond::new(
        "ControlPlaneInitialized",
        cp,
        if cp { "Initialized" } else { "NotInitialized" },
        "",
    );
    let conditions = merge(
        status_now.get("conditions"),
        &[infra_cond, cp_cond],
        ctx.cfg.versions,
        obj.metadata.generation,
        &now,
    );
    let mut status = json!({
        "phase": phase,
        "conditions": conditions,
        "observedGeneration": obj.metadata.generation,
    });
    if let Some(domains) = failure_domains {
        status["failureDomains"] = replacing(status_now.get("failureDomains"), domains);
    }
    if ctx.cfg.versions.is_v1beta2() {
        status["initialization"] = json!({
            "infrastructureProvisioned": infra_ready,
            "controlPlaneInitialized": cp,
        });
    } else {
        status["infrastructureReady"] = json!(infra_ready);
        status["controlPlaneReady"] = json!(cp);
    }
    patch_status(&api, obj, status).await?;
    Ok(Action::await_change())
}

/// A merge patch that replaces the map `current` by `new` (core sets the field whole): the keys
/// `new` lacks are nulled. Lists, and anything else, are replaced by a merge patch anyway.
fn replacing(current: Option<&Value>, mut new: Value) -> Value {
    if let (Some(Value::Object(old)), Value::Object(map)) = (current, &mut new) {
        for key in old.keys() {
            map.entry(key.clone()).or_insert(Value::Null);
        }
    }
    new
}

/// Whether the Cluster's ownerRefs on its InfraCluster and control plane are controller refs
/// (with blockOwnerDeletion): v1beta1 core (≤1.10) sets them, v1beta2 core (≥1.11) a plain
/// ownerRef.
fn cluster_controls(ctx: &Ctx) -> bool {
    !ctx.cfg.versions.is_v1beta2()
}

/// Core owns the control plane object as it owns the InfraCluster (controller ownerRef and
/// cluster-name label). Its readiness is not read: the simulated control plane is initialized
/// as configured ([`crate::SimulatorBuilder::control_plane_initialized`]).
async fn own_control_plane(obj: &DynamicObject, ctx: &Ctx, r: &ObjRef, ns: &str, name: &str) -> Result<()> {
    let kind = ctx.resolve(r).await?;
    if let Some(cp) = ctx.resolver.get(&kind, ns, &r.name).await? {
        let owner = owner_ref(obj, &ctx.cluster_ar, cluster_controls(ctx));
        ensure_owned(&ctx.resolver.api(&kind, ns), &cp, owner, name).await?;
    }
    Ok(())
}

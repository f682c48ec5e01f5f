//! The Machine's two provider refs: own them, read their readiness, and pick up what core
//! copies onto the Machine (`dataSecretName`, `providerID`, addresses, failure domain).

use kube::api::DynamicObject;
use serde_json::Value;

use crate::cluster::provider_ready;
use crate::conditions::Cond;
use crate::error::Result;
use crate::patch::{Ownership, ensure_owned, owner_ref};
use crate::sim::Ctx;
use crate::view::{MachineView, ObjRef, at, status_bool, str_at};

/// What the bootstrap side contributes to a Machine reconcile.
pub(super) struct BootState {
    pub ready: bool,
    pub cond: Cond,
    pub copy_data_secret_name: Option<String>,
}

/// What the infrastructure side contributes to a Machine reconcile.
pub(super) struct InfraState {
    pub ready: bool,
    pub cond: Cond,
    pub copy_provider_id: Option<String>,
    pub copy_failure_domain: Option<String>,
    pub addresses: Option<Value>,
    pub object: Option<DynamicObject>,
    pub provider_id: Option<String>,
    /// The ref's kind resolved (so a missing object really is gone).
    pub resolved: bool,
}

fn bootstrap_cond_type(ctx: &Ctx) -> &'static str {
    if ctx.cfg.versions.is_v1beta2() {
        "BootstrapConfigReady"
    } else {
        "BootstrapReady"
    }
}

/// A ref whose namespace differs from the Machine's is refused, as core's webhook does.
fn foreign_namespace(r: &ObjRef, m: &MachineView) -> Option<String> {
    r.namespace.as_ref().filter(|ns| **ns != m.namespace).map(|ns| {
        format!(
            "{} {} is in namespace {ns}, not the Machine's {}",
            r.kind, r.name, m.namespace
        )
    })
}

pub(super) async fn bootstrap(ctx: &Ctx, obj: &DynamicObject, m: &MachineView) -> Result<BootState> {
    let ty = bootstrap_cond_type(ctx);
    let has_secret = m.data_secret_name.is_some();
    let done = |cond: Cond| BootState {
        ready: has_secret,
        cond,
        copy_data_secret_name: None,
    };
    let Some(r) = &m.config_ref else {
        return Ok(done(if has_secret {
            Cond::new(ty, true, "DataSecretProvided", "")
        } else {
            Cond::new(ty, false, "InvalidSpec", "neither configRef nor dataSecretName is set")
        }));
    };
    if let Some(msg) = foreign_namespace(r, m) {
        return Ok(done(Cond::new(ty, false, "InvalidConfigRef", msg)));
    }
    let kind = ctx.resolve(r).await?;
    let Some(config) = ctx.provider(&kind, &m.namespace, &r.name).await? else {
        return Ok(done(Cond::new(
            ty,
            has_secret,
            if has_secret {
                "DataSecretProvided"
            } else {
                "BootstrapConfigDoesNotExist"
            },
            format!("{} {} does not exist", r.kind, r.name),
        )));
    };
    let api = ctx.resolver.api(&kind, &m.namespace);
    let owner = owner_ref(obj, &ctx.machine_ar, true);
    if let Ownership::OtherController(other) = ensure_owned(&api, &config, owner, &m.cluster_name).await? {
        return Ok(done(Cond::new(
            ty,
            false,
            "OwnershipFailed",
            format!("{} {} is already controlled by {other}", r.kind, r.name),
        )));
    }
    if has_secret {
        return Ok(done(Cond::new(ty, true, "DataSecretAvailable", "")));
    }
    if !provider_ready(&config, kind.contract, "dataSecretCreated") {
        return Ok(done(Cond::new(
            ty,
            false,
            "WaitingForDataSecret",
            format!("{} {} is not ready", r.kind, r.name),
        )));
    }
    let status = config.data.get("status").cloned().unwrap_or(Value::Null);
    match str_at(&status, &["dataSecretName"]).filter(|s| !s.is_empty()) {
        Some(name) => Ok(BootState {
            ready: true,
            cond: Cond::new(ty, true, "DataSecretAvailable", ""),
            copy_data_secret_name: Some(name),
        }),
        None => Ok(done(Cond::new(
            ty,
            false,
            "DataSecretNameMissingFailed",
            format!("{} {} is ready but status.dataSecretName is empty", r.kind, r.name),
        ))),
    }
}

pub(super) async fn infrastructure(ctx: &Ctx, obj: &DynamicObject, m: &MachineView) -> Result<InfraState> {
    let ty = "InfrastructureReady";
    let was_ready = status_bool(
        &m.status,
        ctx.cfg.versions,
        "infrastructureReady",
        "infrastructureProvisioned",
    );
    let not_ready = |cond: Cond| InfraState {
        ready: false,
        cond,
        copy_provider_id: None,
        copy_failure_domain: None,
        addresses: None,
        object: None,
        provider_id: None,
        resolved: false,
    };
    let Some(r) = &m.infra_ref else {
        return Ok(not_ready(Cond::new(
            ty,
            false,
            "InvalidSpec",
            "infrastructureRef is not set",
        )));
    };
    if let Some(msg) = foreign_namespace(r, m) {
        return Ok(not_ready(Cond::new(ty, false, "InvalidInfrastructureRef", msg)));
    }
    let kind = ctx.resolve(r).await?;
    let Some(infra) = ctx.provider(&kind, &m.namespace, &r.name).await? else {
        let (reason, msg) = if was_ready {
            (
                "InfrastructureMachineDeletedFailed",
                format!("{} {} was deleted", r.kind, r.name),
            )
        } else {
            (
                "InfrastructureDoesNotExist",
                format!("{} {} does not exist", r.kind, r.name),
            )
        };
        let mut st = not_ready(Cond::new(ty, false, reason, msg));
        st.resolved = true;
        return Ok(st);
    };
    let api = ctx.resolver.api(&kind, &m.namespace);
    let owner = owner_ref(obj, &ctx.machine_ar, true);
    if let Ownership::OtherController(other) = ensure_owned(&api, &infra, owner, &m.cluster_name).await? {
        return Ok(not_ready(Cond::new(
            ty,
            false,
            "OwnershipFailed",
            format!("{} {} is already controlled by {other}", r.kind, r.name),
        )));
    }
    let spec = infra.data.get("spec").cloned().unwrap_or(Value::Null);
    let status = infra.data.get("status").cloned().unwrap_or(Value::Null);
    let mut st = InfraState {
        resolved: true,
        ..not_ready(Cond::new(
            ty,
            false,
            "WaitingForInfrastructure",
            format!("{} {} is not ready", r.kind, r.name),
        ))
    };
    let ready = provider_ready(&infra, kind.contract, "provisioned");
    st.object = Some(infra);
    if !ready {
        return Ok(st);
    }
    let Some(pid) = str_at(&spec, &["providerID"]).filter(|s| !s.is_empty()) else {
        st.cond = Cond::new(
            ty,
            false,
            "ProviderIDMissingFailed",
            format!("{} {} is ready but spec.providerID is empty", r.kind, r.name),
        );
        return Ok(st);
    };
    if m.provider_id.as_deref() != Some(pid.as_str()) {
        st.copy_provider_id = Some(pid.clone());
    }
    let fd = str_at(&spec, &["failureDomain"]).filter(|s| !s.is_empty());
    if fd.is_some() && str_at(&m.spec, &["failureDomain"]) != fd {
        st.copy_failure_domain = fd;
    }
    st.addresses = at(&status, &["addresses"]).filter(|a| a.is_array()).cloned();
    st.provider_id = Some(pid);
    st.ready = true;
    st.cond = Cond::new(ty, true, "Ready", "");
    Ok(st)
}

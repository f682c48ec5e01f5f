//! The bootstrap data a machine boots with: the Machine's data Secret plus this VM's identity.

use k8s_openapi::api::core::v1::Secret;
use kube::{Api, ResourceExt, runtime::controller::Action};

use super::{BOOTSTRAP_DATA_KEY, Error, HOST_RETRY, Outcome, get_err, plan, waiting};
use crate::{api::libvirt_machine::LibvirtMachine, controllers::Context};

/// This machine's Ignition: the bootstrap Secret's `value` with its identity injected.
pub(super) async fn payload(
    machine: &LibvirtMachine,
    ctx: &Context,
    secret_name: &str,
    id: &plan::Identity,
) -> Result<Result<Vec<u8>, Outcome>, Error> {
    let namespace = machine.namespace().unwrap_or_default();
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), &namespace);
    let Some(secret) = secrets
        .get_opt(secret_name)
        .await
        .map_err(get_err(format!("Secret {secret_name}")))?
    else {
        return Ok(Err(waiting(
            machine,
            "BootstrapDataNotFound",
            format!("bootstrap data Secret {secret_name:?} does not exist"),
            Action::requeue(HOST_RETRY),
        )));
    };
    let data = secret.data.unwrap_or_default();
    if let Some(format) = data.get("format")
        && format.0 != b"ignition"
    {
        return Ok(Err(waiting(
            machine,
            "InvalidBootstrapData",
            format!("bootstrap data Secret {secret_name:?} has a format other than \"ignition\""),
            Action::requeue(HOST_RETRY),
        )));
    }
    let Some(value) = data.get(BOOTSTRAP_DATA_KEY) else {
        return Ok(Err(waiting(
            machine,
            "InvalidBootstrapData",
            format!("bootstrap data Secret {secret_name:?} has no {BOOTSTRAP_DATA_KEY:?} key"),
            Action::requeue(HOST_RETRY),
        )));
    };
    match crate::ignition::render(&value.0, &plan::facts(id, &machine.spec)) {
        Ok(rendered) => Ok(Ok(rendered.json)),
        Err(e) => Ok(Err(waiting(
            machine,
            e.reason(),
            e.to_string(),
            Action::requeue(HOST_RETRY),
        ))),
    }
}

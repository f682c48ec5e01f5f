//! LibvirtMachineTemplate controller: publishes `status.capacity` (`cpu`, `memory`) and
//! `status.nodeInfo` from the template's domain, which the cluster autoscaler reads to scale a
//! MachineDeployment up from zero, when it has no machine to measure. Status is written only
//! when it changes; nothing else is read or written.

use std::{collections::BTreeMap, sync::Arc};

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::{Api, ResourceExt, runtime::controller::Action};
use tokio_util::sync::CancellationToken;

use crate::{
    api::libvirt_machine::{
        LibvirtMachineSpec, LibvirtMachineTemplate, LibvirtMachineTemplateStatus, TemplateNodeInfo,
    },
    app::health::Readiness,
    reconcile::{ApiError, Context, apply_status, drive_cached},
};

/// Controller name in metrics and logs.
pub const NAME: &str = "libvirtmachinetemplate";
const FIELD_MANAGER: &str = "caplv-manager/libvirtmachinetemplate";

/// The status a template's clones imply. Pure.
#[must_use]
pub fn status(spec: &LibvirtMachineSpec) -> LibvirtMachineTemplateStatus {
    let mut capacity = BTreeMap::new();
    if spec.domain.vcpus > 0 {
        capacity.insert("cpu".to_owned(), Quantity(spec.domain.vcpus.to_string()));
    }
    if spec.domain.memory_mb > 0 {
        capacity.insert("memory".to_owned(), Quantity(format!("{}Mi", spec.domain.memory_mb)));
    }
    LibvirtMachineTemplateStatus {
        capacity,
        node_info: Some(TemplateNodeInfo {
            architecture: "amd64".to_owned(),
            operating_system: "linux".to_owned(),
        }),
    }
}

async fn reconcile(template: Arc<LibvirtMachineTemplate>, ctx: Arc<Context>) -> Result<Action, ApiError> {
    let wanted = status(&template.spec.template.spec);
    if template.status.as_ref() != Some(&wanted) {
        let api: Api<LibvirtMachineTemplate> =
            Api::namespaced(ctx.client.clone(), &template.namespace().unwrap_or_default());
        apply_status(&api, &template.name_any(), FIELD_MANAGER, &wanted)
            .await
            .map_err(ApiError::write("status"))?;
    }
    Ok(Action::await_change())
}

/// Run the controller until `shutdown` is cancelled.
pub async fn run(ctx: Arc<Context>, readiness: Readiness, shutdown: CancellationToken) {
    let controller = ctx
        .controller::<LibvirtMachineTemplate>()
        .graceful_shutdown_on(shutdown.clone().cancelled_owned());
    drive_cached(controller, NAME, readiness, reconcile, ctx.clone(), &ctx).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(domain: serde_json::Value) -> LibvirtMachineSpec {
        serde_json::from_value(serde_json::json!({
            "hostSelector": {"matchLabels": {"pool": "lab"}},
            "domain": domain,
            "rootDisk": {"baseImage": "b", "storagePool": "p", "size": "20Gi"},
            "network": {"type": "network", "name": "default", "addresses": ["10.0.0.2/24"]}
        }))
        .unwrap()
    }

    #[test]
    fn the_capacity_is_the_domains_and_auto_sizes_are_left_out() {
        let sized = status(&spec(serde_json::json!({"vcpus": 4, "memoryMB": 8192})));
        assert_eq!(sized.capacity["cpu"].0, "4");
        assert_eq!(sized.capacity["memory"].0, "8192Mi");
        assert_eq!(sized.node_info.unwrap().architecture, "amd64");
        let auto = status(&spec(serde_json::json!({"vcpus": 2})));
        assert_eq!(auto.capacity.keys().collect::<Vec<_>>(), ["cpu"]);
    }
}

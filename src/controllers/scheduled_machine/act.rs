//! The writes a ScheduledMachine reconcile makes. Every one is idempotent: creating adopts
//! what already exists with our label, deleting tolerates what is already gone.

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::{
    Api, ResourceExt,
    api::{DeleteParams, DynamicObject, EvictParams, Patch, PatchParams, PostParams},
};
use serde_json::{Value, json};

use super::{
    CORDONED_BY_ANNOTATION, Error, objects, observe,
    taints::{self, TaintUpdate},
};
use crate::{
    api::{ScheduledMachine, scheduled_machine::CreatedObjectReference},
    reconcile::{ApiError, Context},
    schedule::parse_duration,
};

/// CAPI skips draining a Machine's Node when this annotation is present.
const EXCLUDE_DRAIN_ANNOTATION: &str = "machine.cluster.x-k8s.io/exclude-node-draining";

fn is_status(err: &kube::Error, code: u16) -> bool {
    matches!(err, kube::Error::Api(status) if status.code == code)
}

async fn api_for(ctx: &Context, namespace: &str, r: &CreatedObjectReference) -> Result<Api<DynamicObject>, Error> {
    let resource = ctx.kinds.resolve(&r.api_version, &r.kind).await?;
    Ok(Api::namespaced_with(ctx.client.clone(), namespace, &resource))
}

/// Create `body` unless an object of ours with its name exists; one that is not ours is a conflict.
async fn create_or_adopt(api: &Api<DynamicObject>, body: Value, owner: &str) -> Result<(), Error> {
    let object: DynamicObject = serde_json::from_value(body).map_err(Error::Build)?;
    let name = object.name_any();
    match api.create(&PostParams::default(), &object).await {
        Ok(_) => Ok(()),
        Err(err) if is_status(&err, 409) => {
            let existing = api.get(&name).await.map_err(ApiError::read(&name))?;
            if observe::is_ours(&existing, owner) {
                Ok(())
            } else {
                Err(Error::NameConflict(name))
            }
        }
        Err(source) => Err(Error::Create { what: name, source }),
    }
}

/// Create whatever of bootstrap config, infrastructure object and Machine is missing. The first
/// two go together (neither refers to the other); the Machine goes last, so it never points at
/// something that does not exist.
pub async fn create(sm: &ScheduledMachine, ctx: &Context) -> Result<(), Error> {
    let name = sm.name_any();
    let namespace = sm.namespace().unwrap_or_default();
    let refs = objects::references(&name, &sm.spec, ctx.capi);
    let bootstrap = async {
        if let (Some(body), Some(r)) = (objects::bootstrap(&name, &namespace, &sm.spec), &refs.bootstrap) {
            create_or_adopt(&api_for(ctx, &namespace, r).await?, body, &name).await?;
        }
        Ok(())
    };
    let infrastructure = async {
        let body = objects::infrastructure(&name, &namespace, &sm.spec);
        create_or_adopt(&api_for(ctx, &namespace, &refs.infrastructure).await?, body, &name).await
    };
    futures::try_join!(bootstrap, infrastructure)?;
    let drain_timeout = parse_duration("spec.nodeDrainTimeout", &sm.spec.node_drain_timeout)?;
    let machine = objects::machine(&name, &namespace, &sm.spec, drain_timeout, ctx.capi);
    let machines: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), &namespace, &ctx.capi.machine());
    create_or_adopt(&machines, machine, &name).await
}

/// Delete our Machine; with `skip_drain`, first tell CAPI not to drain its Node.
pub async fn delete_machine(sm: &ScheduledMachine, ctx: &Context, skip_drain: bool) -> Result<(), Error> {
    let namespace = sm.namespace().unwrap_or_default();
    let name = sm.name_any();
    let machines: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), &namespace, &ctx.capi.machine());
    if skip_drain {
        let patch = json!({"metadata": {"annotations": {EXCLUDE_DRAIN_ANNOTATION: ""}}});
        match machines
            .patch(&name, &PatchParams::default(), &Patch::Merge(patch))
            .await
        {
            Ok(_) => {}
            Err(err) if is_status(&err, 404) => return Ok(()),
            Err(source) => {
                return Err(ApiError::write("Machine")(source).into());
            }
        }
    }
    delete_ignoring_missing(&machines, &name, "Machine").await
}

/// Delete the bootstrap config and infrastructure object of a window whose Machine is gone.
pub async fn delete_leftovers(sm: &ScheduledMachine, ctx: &Context) -> Result<(), Error> {
    let namespace = sm.namespace().unwrap_or_default();
    let name = sm.name_any();
    let refs = objects::references(&name, &sm.spec, ctx.capi);
    for r in refs.bootstrap.iter().chain(std::iter::once(&refs.infrastructure)) {
        let api = api_for(ctx, &namespace, r).await?;
        if api
            .get_opt(&r.name)
            .await
            .map_err(ApiError::read(&r.kind))?
            .is_some_and(|o| observe::is_ours(&o, &name))
        {
            delete_ignoring_missing(&api, &r.name, &r.kind).await?;
        }
    }
    Ok(())
}

async fn delete_ignoring_missing(api: &Api<DynamicObject>, name: &str, what: &str) -> Result<(), Error> {
    match api.delete(name, &DeleteParams::background()).await {
        Ok(_) => Ok(()),
        Err(err) if is_status(&err, 404) => Ok(()),
        Err(source) => Err(ApiError::write(what)(source).into()),
    }
}

/// Mark the Node unschedulable and remember that we did, so only we undo it.
async fn cordon(ctx: &Context, node: &str, owner: &str, unschedulable: bool) -> Result<(), Error> {
    let nodes: Api<Node> = Api::all(ctx.client.clone());
    let annotation = if unschedulable { json!(owner) } else { Value::Null };
    let patch = json!({
        "metadata": {"annotations": {CORDONED_BY_ANNOTATION: annotation}},
        "spec": {"unschedulable": unschedulable},
    });
    match nodes.patch(node, &PatchParams::default(), &Patch::Merge(patch)).await {
        Ok(_) => Ok(()),
        Err(err) if is_status(&err, 404) => Ok(()),
        Err(source) => Err(ApiError::write("Node")(source).into()),
    }
}

/// Write the Node's taints and the list of those we own, guarded by the `resourceVersion` read
/// (the kubelet and the node lifecycle controller change taints too: a conflict is retried).
pub async fn set_taints(
    ctx: &Context,
    node: &str,
    resource_version: Option<&str>,
    update: &TaintUpdate,
) -> Result<(), Error> {
    let nodes: Api<Node> = Api::all(ctx.client.clone());
    let owned = taints::format_owned(&update.owned);
    let annotation = if owned.is_empty() { Value::Null } else { json!(owned) };
    let patch = json!({
        "metadata": {
            "annotations": {taints::OWNED_TAINTS_ANNOTATION: annotation},
            "resourceVersion": resource_version,
        },
        "spec": {"taints": update.taints},
    });
    match nodes.patch(node, &PatchParams::default(), &Patch::Merge(patch)).await {
        Ok(_) => Ok(()),
        Err(err) if is_status(&err, 404) => Ok(()),
        Err(source) => Err(ApiError::write(format!("the taints of Node {node}"))(source).into()),
    }
}

/// Make the Node schedulable again (the window reopened during shutdown).
pub async fn uncordon(sm: &ScheduledMachine, ctx: &Context, node: &str) -> Result<(), Error> {
    cordon(ctx, node, &owner_key(sm), false).await
}

/// Cordon the Node, then try once to evict every pod a drain must move. Evictions refused by a
/// PodDisruptionBudget (429) are retried by the next reconcile.
pub async fn drain(sm: &ScheduledMachine, ctx: &Context, node: &str) -> Result<(), Error> {
    cordon(ctx, node, &owner_key(sm), true).await?;
    for pod in observe::evictable_pods(ctx, node).await? {
        let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &pod.namespace().unwrap_or_default());
        let result = match pods.evict(&pod.name_any(), &EvictParams::default()).await {
            Ok(_) => "evicted",
            Err(err) if is_status(&err, 429) => "blocked",
            Err(err) if is_status(&err, 404) => "gone",
            Err(err) => {
                tracing::warn!(pod = pod.name_any(), error = %err, "eviction failed");
                "failed"
            }
        };
        ctx.metrics.evictions.with_label_values(&[result]).inc();
    }
    Ok(())
}

fn owner_key(sm: &ScheduledMachine) -> String {
    format!("{}/{}", sm.namespace().unwrap_or_default(), sm.name_any())
}

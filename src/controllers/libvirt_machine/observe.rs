//! Everything one provisioning pass reads, in the order the contract needs it. Reading stops at
//! the first missing piece, and at a pause, so that a machine waiting early costs few requests.

use std::{collections::BTreeMap, sync::Arc};

use k8s_openapi::{ByteString, api::core::v1::Secret};
use kube::{Api, ResourceExt, api::DynamicObject};

use super::{
    Error,
    ipam::{self, Ipam},
};
use crate::{
    api::{
        capi::{ClusterView, MachineView},
        libvirt_host::LibvirtHost,
        libvirt_machine::LibvirtMachine,
    },
    reconcile::{Context, error::get_opt, host_pool, owner},
};

/// What exists around a machine that is not being deleted.
#[derive(Debug)]
pub(super) enum Observed {
    /// Cluster API has not set a Machine as owner.
    NoOwner,
    /// The owner Machine does not exist.
    MachineMissing(String),
    /// The Machine's Cluster does not exist.
    ClusterMissing(String),
    /// The Cluster or the machine is paused; nothing more was read.
    Paused,
    /// The Machine and its Cluster, and what was read after them.
    Owned(Box<Owned>),
}

/// A machine's surroundings once its owner is known.
#[derive(Debug)]
pub(super) struct Owned {
    /// The owner Machine.
    pub machine: MachineView,
    /// The LibvirtHost the machine is bound to (by admission or `hostRef`), if it exists.
    pub host: Option<LibvirtHost>,
    /// A machine with a `hostSelector` and no host yet: the hosts of its pool (matching, in the
    /// Machine's failure domain), or why the selector cannot be used.
    pub pool: Option<Result<Vec<LibvirtHost>, String>>,
    /// The bootstrap data Secret's contents, read only while provisioning can use them.
    pub bootstrap: Bootstrap,
    /// The machine's IPAM claims, read only while provisioning.
    pub ipam: Ipam,
}

/// The bootstrap data Secret, as far as it was read.
#[derive(Debug)]
pub(super) enum Bootstrap {
    /// Not needed (the machine is provisioned, or an earlier step waits).
    NotRead,
    /// The Secret the Machine names does not exist.
    Missing,
    /// The Secret's data.
    Found(BTreeMap<String, ByteString>),
}

/// The LibvirtHost `machine` is bound to, if it has one and it exists.
pub(super) async fn host_of(machine: &LibvirtMachine, ctx: &Context) -> Result<Option<LibvirtHost>, Error> {
    let Some(name) = machine.host_name() else {
        return Ok(None);
    };
    let namespace = machine.namespace().unwrap_or_default();
    Ok(ctx
        .caches
        .libvirt_hosts
        .get(&namespace, name)
        .await
        .map(Arc::unwrap_or_clone))
}

/// The pool of a machine that has a `hostSelector` and no host yet, from the host cache.
async fn pool_of(
    machine: &LibvirtMachine,
    failure_domain: Option<&str>,
    ctx: &Context,
) -> Result<Option<Result<Vec<LibvirtHost>, String>>, Error> {
    let selector = match host_pool::unbound_selector(machine) {
        Ok(Some(selector)) => selector,
        Ok(None) => return Ok(None),
        Err(message) => return Ok(Some(Err(message))),
    };
    let namespace = machine.namespace();
    let hosts = ctx.caches.libvirt_hosts.synced_store().await;
    Ok(Some(Ok(hosts
        .state()
        .into_iter()
        .filter(|h| h.namespace() == namespace && host_pool::in_pool(h, &selector, failure_domain))
        .map(Arc::unwrap_or_clone)
        .collect())))
}

/// Read what provisioning or watching `machine` needs.
pub(super) async fn observe(machine: &LibvirtMachine, ctx: &Context) -> Result<Observed, Error> {
    let namespace = machine.namespace().unwrap_or_default();
    let Some(owner) = owner::capi_owner(&machine.metadata, "Machine") else {
        return Ok(Observed::NoOwner);
    };
    let Some(found) = ctx.caches.machines.get(&namespace, &owner.name).await else {
        return Ok(Observed::MachineMissing(owner.name.clone()));
    };
    let capi_machine = MachineView::decode(&found, ctx.capi)?;
    let Some(cluster) = ctx.caches.clusters.get(&namespace, &capi_machine.cluster_name).await else {
        return Ok(Observed::ClusterMissing(capi_machine.cluster_name));
    };
    if owner::is_paused(ClusterView::decode(&cluster, ctx.capi)?.paused, &machine.metadata) {
        return Ok(Observed::Paused);
    }
    let host = host_of(machine, ctx).await?;
    let pool = pool_of(machine, capi_machine.failure_domain.as_deref(), ctx).await?;
    let provisioning = !machine.status.as_ref().is_some_and(|s| s.ready);
    let host_ready = match (&host, &pool) {
        (Some(h), _) => h.status.as_ref().is_some_and(|s| s.ready),
        (None, Some(Ok(hosts))) => hosts.iter().any(|h| host_pool::unusable(h).is_none()),
        _ => false,
    };
    let bootstrap = match &capi_machine.data_secret_name {
        Some(name) if provisioning && host_ready => {
            let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), &namespace);
            match get_opt(&secrets, name, "Secret").await? {
                Some(secret) => Bootstrap::Found(secret.data.unwrap_or_default()),
                None => Bootstrap::Missing,
            }
        }
        _ => Bootstrap::NotRead,
    };
    let ipam = if provisioning {
        ipam::observe(machine, ctx).await?
    } else {
        Ipam::Unused
    };
    Ok(Observed::Owned(Box::new(Owned {
        machine: capi_machine,
        host,
        pool,
        bootstrap,
        ipam,
    })))
}

/// Whether the owner Machine is being deleted (or is gone), read from the API server rather
/// than the cache: for the one decision a lagging cache would get wrong, undoing the shutdown
/// Cluster API's drain has just brought about.
pub(super) async fn owner_deleting_now(machine: &LibvirtMachine, ctx: &Context) -> Result<bool, Error> {
    let Some(owner) = owner::capi_owner(&machine.metadata, "Machine") else {
        return Ok(false);
    };
    let namespace = machine.namespace().unwrap_or_default();
    let machines: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), &namespace, &ctx.capi.machine());
    let found = get_opt(&machines, &owner.name, "Machine").await?;
    Ok(found.is_none_or(|m| m.metadata.deletion_timestamp.is_some()))
}

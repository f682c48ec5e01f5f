//! The CAPLV family: LibvirtCluster, LibvirtHost and LibvirtMachine controllers, wired to share
//! one connection per host and one view of what is committed on each host, the
//! SelfManagedControlPlane controller for the clusters they serve, plus the kubelet CSR approver
//! and the Node linker for the machines' Nodes.

use std::sync::Arc;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::{
    csr_approver, libvirt_cluster, libvirt_host, libvirt_machine, libvirt_machine_template, node_link,
    self_managed_control_plane,
};
use crate::app::health::Readiness;
use crate::reconcile::{Context, placement::Placement};

/// The family's controllers, by their names in readiness and metrics.
pub const CONTROLLERS: &[&str] = &[
    libvirt_cluster::NAME,
    libvirt_host::NAME,
    libvirt_machine::NAME,
    libvirt_machine_template::NAME,
    self_managed_control_plane::NAME,
    csr_approver::NAME,
    node_link::NAME,
];

/// Spawn the family's controllers; each task ends after `shutdown`.
pub fn spawn(ctx: &Arc<Context>, readiness: &Readiness, shutdown: &CancellationToken) -> Vec<JoinHandle<()>> {
    let hosts = ctx.hosts.clone();
    hosts.use_secret_index(ctx.caches.secrets.store());
    hosts.count_in(ctx.metrics.clone());
    // The machine controller's cache is also what the host controller sums allocations from.
    let machines = Context::shared_controller(&ctx.caches.libvirt_machines);
    let machine_cache = machines.store();
    let placement = Arc::new(Placement::new(machine_cache.clone()));
    let host_deps = libvirt_host::Shared {
        hosts: hosts.clone(),
        placement: placement.clone(),
    };
    let machine_deps = libvirt_machine::Shared { hosts, placement };
    vec![
        tokio::spawn(libvirt_cluster::run(ctx.clone(), readiness.clone(), shutdown.clone())),
        tokio::spawn(libvirt_host::run(
            ctx.clone(),
            host_deps,
            readiness.clone(),
            shutdown.clone(),
        )),
        tokio::spawn(libvirt_machine::run(
            ctx.clone(),
            machines,
            machine_deps,
            readiness.clone(),
            shutdown.clone(),
        )),
        tokio::spawn(libvirt_machine_template::run(
            ctx.clone(),
            readiness.clone(),
            shutdown.clone(),
        )),
        tokio::spawn(self_managed_control_plane::run(
            ctx.clone(),
            readiness.clone(),
            shutdown.clone(),
        )),
        tokio::spawn(csr_approver::run(
            ctx.clone(),
            machine_cache,
            readiness.clone(),
            shutdown.clone(),
        )),
        tokio::spawn(node_link::run(ctx.clone(), readiness.clone(), shutdown.clone())),
    ]
}

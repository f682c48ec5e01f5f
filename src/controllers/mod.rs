//! Controllers: the only code that talks to both Kubernetes and the domain modules.
//!
//! Each controller module exposes `run(ctx, readiness, shutdown)`; [`run_families`] starts the
//! ones that belong to the enabled families and returns when all have stopped.
#[cfg(feature = "caplv")]
mod caplv;
#[cfg(feature = "caplv")]
pub mod csr_approver;
#[cfg(feature = "ignition")]
pub mod ignition_config;
#[cfg(feature = "caplv")]
pub mod libvirt_cluster;
#[cfg(feature = "caplv")]
pub mod libvirt_host;
#[cfg(feature = "caplv")]
pub mod libvirt_inventory;
#[cfg(feature = "caplv")]
pub mod libvirt_machine;
#[cfg(feature = "caplv")]
pub mod libvirt_machine_template;
#[cfg(feature = "caplv")]
pub mod node_link;
#[cfg(feature = "fivespot")]
pub mod scheduled_capacity;
#[cfg(feature = "fivespot")]
pub mod scheduled_machine;
#[cfg(feature = "caplv")]
pub mod self_managed_control_plane;

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::{app::health::Readiness, reconcile::Context};

/// The controller families, each switchable at build time (Cargo feature) and at run time (`--controllers`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Family {
    /// CAPLV infrastructure provider: LibvirtCluster, LibvirtHost, LibvirtMachine, and the
    /// SelfManagedControlPlane of clusters that manage themselves.
    Caplv,
    /// Ignition bootstrap provider: IgnitionConfig.
    Ignition,
    /// 5-Spot: ScheduledMachine and ScheduledCapacity.
    Fivespot,
}

impl Family {
    /// Every family, compiled in or not.
    pub const ALL: [Self; 3] = [Self::Caplv, Self::Ignition, Self::Fivespot];

    /// The family's name on the command line and as its Cargo feature.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Caplv => "caplv",
            Self::Ignition => "ignition",
            Self::Fivespot => "fivespot",
        }
    }

    /// The family named `name`, if any.
    #[must_use]
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|f| f.as_str() == name)
    }

    /// Whether this binary was built with the family's Cargo feature.
    #[must_use]
    pub const fn is_compiled(self) -> bool {
        match self {
            Self::Caplv => cfg!(feature = "caplv"),
            Self::Ignition => cfg!(feature = "ignition"),
            Self::Fivespot => cfg!(feature = "fivespot"),
        }
    }

    /// The families compiled into this binary: the default for `--controllers`.
    #[must_use]
    pub fn compiled() -> Vec<Self> {
        Self::ALL.into_iter().filter(|f| f.is_compiled()).collect()
    }

    /// The controllers of this family that this build runs (none when its feature is off).
    #[must_use]
    pub fn controllers(self) -> &'static [&'static str] {
        match self {
            #[cfg(feature = "caplv")]
            Self::Caplv => caplv::CONTROLLERS,
            #[cfg(feature = "ignition")]
            Self::Ignition => &[ignition_config::NAME],
            #[cfg(feature = "fivespot")]
            Self::Fivespot => &[scheduled_machine::NAME, scheduled_capacity::NAME],
            #[allow(unreachable_patterns, reason = "reachable when a family's feature is off")]
            _ => &[],
        }
    }
}

/// Run every controller of `families` until `shutdown` is cancelled, then let in-flight
/// reconciles finish.
pub async fn run_families(ctx: Arc<Context>, families: &[Family], readiness: Readiness, shutdown: CancellationToken) {
    let mut tasks = Vec::new();
    for family in families {
        for controller in family.controllers() {
            readiness.expect(controller);
            tracing::info!(family = family.as_str(), controller, "starting controller");
        }
        match family {
            #[cfg(feature = "caplv")]
            Family::Caplv => tasks.extend(caplv::spawn(&ctx, &readiness, &shutdown)),
            #[cfg(feature = "ignition")]
            Family::Ignition => tasks.push(tokio::spawn(ignition_config::run(
                ctx.clone(),
                readiness.clone(),
                shutdown.clone(),
            ))),
            #[cfg(feature = "fivespot")]
            Family::Fivespot => {
                tasks.push(tokio::spawn(scheduled_machine::run(
                    ctx.clone(),
                    readiness.clone(),
                    shutdown.clone(),
                )));
                tasks.push(tokio::spawn(scheduled_capacity::run(
                    ctx.clone(),
                    readiness.clone(),
                    shutdown.clone(),
                )));
            }
            #[allow(unreachable_patterns, reason = "reachable when a family's feature is off")]
            _ => {}
        }
    }
    readiness.settle();
    for task in tasks {
        if let Err(err) = task.await {
            tracing::error!(error = %err, "controller task ended abnormally");
        }
    }
}

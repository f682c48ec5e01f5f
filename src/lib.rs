//! caplv: one manager for ephemeral libvirt workers in Cluster API clusters.
//!
//! Three controller families share one runtime, one client and one metrics server:
//! the CAPLV infrastructure provider (`LibvirtCluster`, `LibvirtHost`, `LibvirtMachine`), the
//! Ignition bootstrap provider (`IgnitionConfig`) and 5-Spot (`ScheduledMachine`).
//!
//! Where things live:
//! - `api`: the CRD types, with each kind's conditions and reasons;
//! - pure domain logic, no Kubernetes client: `schedule`, `ignition`, `kubelet_csr`, `libvirt`;
//! - `reconcile`: the machinery every controller shares; `controllers`: one module per kind,
//!   the only code that joins the API and the domain modules;
//! - `app`: the long-running manager (client, leader election, health and metrics server);
//! - `cmd`: the other subcommands (`crds`, `rbac`, `schedule`, `ignition render`, `sandbox`).

pub mod api;
pub mod app;
pub mod cli;
pub mod clock;
pub mod cmd;
pub mod controllers;
pub mod endpoint;
pub mod ignition;
#[cfg(feature = "caplv")]
pub mod kubelet_csr;
pub mod libvirt;
pub mod metrics;
pub mod reconcile;
pub mod schedule;
pub mod telemetry;

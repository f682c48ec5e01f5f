//! caplv: one manager for ephemeral libvirt workers in Cluster API clusters.
//!
//! Three controller families share one runtime, one client and one metrics server:
//! the CAPLV infrastructure provider (`LibvirtCluster`, `LibvirtHost`, `LibvirtMachine`), the
//! Ignition bootstrap provider (`IgnitionConfig`) and 5-Spot (`ScheduledMachine`).

pub mod api;
pub mod app;
pub mod cli;
pub mod clock;
pub mod controllers;
pub mod crds;
pub mod demo;
pub mod endpoint;
pub mod health;
pub mod http;
pub mod ignition;
pub mod ignition_render;
pub mod kubelet_csr;
pub mod leader;
pub mod libvirt;
pub mod metrics;
pub mod rbac;
pub mod sandbox;
pub mod schedule;
pub mod schedule_query;
pub mod telemetry;

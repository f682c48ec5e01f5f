//! Integration tests of the manager against the in-memory API server and the CAPI simulator,
//! plus process-level tests of the `caplv-manager` binary. One test binary keeps links few.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test helpers fail the test on any error"
)]

mod api_faults;
mod cli;
mod clusterctl_move;
mod control_plane_script;
mod crash;
mod host_pool;
mod house;
mod ignition_config;
mod lead_time;
mod leader;
mod libvirt_cluster;
mod libvirt_host;
mod libvirt_machine;
mod machine_ipam;
mod machine_networking;
mod maintenance;
mod many_scheduled_machines;
mod node_join;
mod reclaim;
mod sandbox;
mod scheduled_capacity;
mod scheduled_machine;
mod scripts;
mod self_managed_control_plane;
mod support;
mod system;
mod window_cycle;

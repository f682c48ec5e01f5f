//! The subcommands besides `run`: one-shot generators and queries, and the sandbox.

pub mod crds;
pub mod ignition_render;
pub mod rbac;
pub mod sandbox;
pub mod schedule_query;

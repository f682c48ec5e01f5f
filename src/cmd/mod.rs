//! The subcommands besides `run`: one-shot generators and queries, and the sandbox.

pub mod crds;
pub mod ignition_render;
pub mod rbac;
#[cfg(feature = "sandbox")]
pub mod sandbox;
pub mod schedule_calendar;
pub mod schedule_query;

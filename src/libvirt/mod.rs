//! Hypervisor access: a machine's identity, domain and volume XML (pure builders), the
//! `Hypervisor` trait with its `virt`-backed implementation, and the SSH transport that carries
//! libvirt RPC from the manager to a host with its host key pinned.

pub mod domain_xml;
#[cfg(test)]
pub mod fake;
pub mod hypervisor;
pub mod identity;
pub mod pressure;
#[cfg(feature = "sandbox")]
pub mod simulated;
#[cfg(feature = "caplv")]
pub mod ssh;
#[cfg(feature = "caplv")]
pub mod virt_backend;
pub mod volume_xml;
pub mod xml;

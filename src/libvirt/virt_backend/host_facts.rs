//! What a connection's host is: read on its first probe and kept, since versions, CPUs, memory
//! and the capabilities XML do not change under a connection (a restarted daemon is a new
//! connection). On a remote host that saves five round trips, one of them kilobytes of XML, on
//! every probe; free memory is still read each time.

use std::sync::Mutex;

use virt::connect::Connect;
use virt::error::Error as VirtError;

use super::convert::version_string;
use crate::libvirt::hypervisor::{HostInfo, HvResult, HypervisorError};

/// The parts of [`HostInfo`] fixed for a connection's lifetime.
#[derive(Clone)]
struct HostFacts {
    libvirt_version: String,
    driver: String,
    hypervisor_version: String,
    kvm_available: bool,
    cpus: u32,
    memory_mib: u64,
}

/// One connection's facts, once read. A failed read is not kept: the next probe tries again.
#[derive(Default)]
pub(super) struct FactsCache(Mutex<Option<HostFacts>>);

impl FactsCache {
    /// The host's [`HostInfo`]: its facts (read once) and its free memory (read now). `err`
    /// names a failed call as the connection reports its errors.
    pub(super) fn host_info(
        &self,
        c: &Connect,
        err: impl Fn(&'static str, &VirtError) -> HypervisorError,
    ) -> HvResult<HostInfo> {
        let cached = self.0.lock().ok().and_then(|f| f.clone());
        let facts = match cached {
            Some(facts) => facts,
            None => {
                let facts = read(c, &err)?;
                if let Ok(mut f) = self.0.lock() {
                    *f = Some(facts.clone());
                }
                facts
            }
        };
        let free_memory_mib = c.free_memory().ok().filter(|b| *b > 0).map(|b| b / (1024 * 1024));
        Ok(HostInfo {
            libvirt_version: facts.libvirt_version,
            driver: facts.driver,
            hypervisor_version: facts.hypervisor_version,
            kvm_available: facts.kvm_available,
            cpus: facts.cpus,
            memory_mib: facts.memory_mib,
            free_memory_mib,
        })
    }
}

/// A daemon without a usable QEMU answers but fails `virConnectGetVersion`: that is
/// `HypervisorUnavailable`. KVM availability comes from the capabilities XML.
fn read(c: &Connect, err: &impl Fn(&'static str, &VirtError) -> HypervisorError) -> HvResult<HostFacts> {
    let lib = c.lib_version().map_err(|e| err("libvirt version", &e))?;
    let hyp = c.hyp_version().map_err(|e| match err("hypervisor version", &e) {
        HypervisorError::Libvirt { message, .. } => HypervisorError::HypervisorUnavailable { message },
        other => other,
    })?;
    let driver = c.driver_type().map_err(|e| err("driver type", &e))?;
    let node = c.node_info().map_err(|e| err("node info", &e))?;
    let caps = c.capabilities().map_err(|e| err("capabilities", &e))?;
    Ok(HostFacts {
        libvirt_version: version_string(lib),
        driver,
        hypervisor_version: version_string(hyp),
        kvm_available: caps.contains("<domain type='kvm'") || caps.contains("<domain type=\"kvm\""),
        cpus: node.cpus,
        memory_mib: node.memory / 1024,
    })
}

//! Private libvirt test-driver hosts for the sandbox: every LibvirtHost is answered by its own
//! `test:///<node file>` instance, shaped like the seed's laptop (16 vCPUs, 31560 MiB, a `default`
//! pool holding the seed's base image and a `default` network, 192.168.122.0/24 with DHCP), so nothing a manifest names is
//! ever contacted.

use std::{
    io,
    path::{Path, PathBuf},
};

use uuid::Uuid;

use super::xml::escape_text;

/// vCPUs of a simulated host (the seed's laptop).
pub const VCPUS: u32 = 16;
/// Memory of a simulated host in MiB (the seed's laptop).
pub const MEMORY_MIB: u64 = 31_560;
/// Base image every simulated `default` pool holds (the seed's).
pub const BASE_IMAGE: &str = "rhcos-qemu.x86_64.qcow2";

/// Write (once) the node file for host `namespace/name` under `dir` and return its `test://` URI.
///
/// # Errors
/// When the directory or file cannot be written.
pub fn host_uri(dir: &Path, namespace: &str, name: &str) -> io::Result<String> {
    let stem = format!("{namespace}-{name}");
    let file = dir.join(format!("{stem}.xml"));
    if !file.exists() {
        let pool: PathBuf = dir.join(format!("{stem}-pool"));
        std::fs::create_dir_all(&pool)?;
        let id = |what: &str| Uuid::new_v5(&Uuid::NAMESPACE_OID, format!("{stem}/{what}").as_bytes());
        let node = format!(
            "<node>\n  <cpu><nodes>1</nodes><sockets>1</sockets><cores>{VCPUS}</cores><threads>1</threads>\
             <active>{VCPUS}</active><mhz>2000</mhz><model>x86_64</model></cpu>\n  <memory>{memory_kib}</memory>\n  \
             <pool type='dir'><name>default</name><uuid>{pool_id}</uuid><source/><target><path>{pool_path}</path></target>\n    \
             <volume type='file'><name>{BASE_IMAGE}</name><capacity unit='GiB'>16</capacity>\
             <target><format type='qcow2'/></target></volume>\n  </pool>\n  \
             <network><name>default</name><uuid>{net_id}</uuid><bridge name='virbr0'/>\
             <ip address='192.168.122.1' netmask='255.255.255.0'><dhcp><range start='192.168.122.2' end='192.168.122.254'/></dhcp></ip></network>\n</node>\n",
            memory_kib = MEMORY_MIB * 1024,
            pool_id = id("pool"),
            pool_path = escape_text(&pool.display().to_string()),
            net_id = id("network"),
        );
        std::fs::write(&file, node)?;
    }
    Ok(format!("test://{}", file.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::libvirt::{hypervisor::Hypervisor, virt_backend::VirtHypervisor};

    #[test]
    fn a_simulated_host_looks_like_the_seed_laptop() {
        let dir = tempfile::tempdir().unwrap();
        let uri = host_uri(dir.path(), "default", "laptop").unwrap();
        assert_eq!(uri, host_uri(dir.path(), "default", "laptop").unwrap(), "stable");
        let hv = VirtHypervisor::connect(&uri).unwrap();
        let info = hv.capabilities().unwrap();
        assert_eq!((info.cpus, info.memory_mib), (VCPUS, MEMORY_MIB));
        assert!(hv.pool("default").unwrap().is_some());
        assert!(hv.volume("default", BASE_IMAGE).unwrap().is_some());
    }
}

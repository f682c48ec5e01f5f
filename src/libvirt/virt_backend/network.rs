//! DHCP host entries and interface addresses over the `virt` crate.
//!
//! - Entries are read from the network's XML (`<ip><dhcp><host mac=… ip=… name=…/>`; the `<dns>`
//!   section's `<host>` elements carry no `mac` and are skipped).
//! - `virNetworkUpdate` with section `ip-dhcp-host` always affects the persistent config, and the
//!   live network only when it runs (libvirt refuses `AFFECT_LIVE` on a stopped network).
//!   libvirt reports a clashing entry on add, and a missing one on delete, as
//!   `VIR_ERR_OPERATION_INVALID`; they map to `AlreadyExists` and `NotFound`.
//! - Addresses come from `virDomainInterfaceAddresses`, first with the lease source (libvirt reads
//!   the DHCP leases of the interface's network, `virNetworkGetDHCPLeases`), then with the guest
//!   agent source; an agent that is absent or not answering only means "nothing known yet". The
//!   `virt` crate wraps no lease call of its own, and unsafe code stays in `node_stats`.
//! - libvirt's test driver implements network updates (per connection) and answers the lease
//!   and agent sources with made-up addresses in 192.168.122.0/24.

use virt::{domain::Interface, error::ErrorNumber, network::Network, sys};

use super::{VirtHypervisor, convert::is_code};
use crate::libvirt::{
    hypervisor::{DhcpHost, HvResult, HypervisorError, InterfaceAddress, ObjectKind},
    xml::{escape_attr, unescape, validate_name},
};

impl VirtHypervisor {
    fn lookup_network(&self, name: &str) -> HvResult<Network> {
        match self.conn()?.lookup_network_by_name(name) {
            Ok(n) => Ok(n),
            Err(e) if is_code(&e, ErrorNumber::NoNetwork) => Err(HypervisorError::NotFound {
                kind: ObjectKind::Network,
                name: name.to_owned(),
            }),
            Err(e) => Err(self.err("lookup network", &e)),
        }
    }

    pub(super) fn network_dhcp_hosts(&self, network: &str) -> HvResult<Vec<DhcpHost>> {
        let n = self.lookup_network(network)?;
        let xml = n.xml_desc(0).map_err(|e| self.err("network XML", &e))?;
        Ok(parse_dhcp_hosts(&xml))
    }

    pub(super) fn update_dhcp_host(&self, network: &str, host: &DhcpHost, add: bool) -> HvResult<()> {
        validate_name("network name", network)?;
        let n = self.lookup_network(network)?;
        let live = n.is_active().map_err(|e| self.err("network state", &e))?;
        let mut flags = sys::VIR_NETWORK_UPDATE_AFFECT_CONFIG;
        if live {
            flags |= sys::VIR_NETWORK_UPDATE_AFFECT_LIVE;
        }
        let command = if add {
            sys::VIR_NETWORK_UPDATE_COMMAND_ADD_LAST
        } else {
            sys::VIR_NETWORK_UPDATE_COMMAND_DELETE
        };
        let name = format!("{network}/{}", host.mac);
        match n.update(
            command,
            sys::VIR_NETWORK_SECTION_IP_DHCP_HOST,
            -1,
            &host_xml(host),
            flags,
        ) {
            Ok(()) => Ok(()),
            Err(e) if add && is_code(&e, ErrorNumber::OperationInvalid) && e.message().contains("existing") => {
                Err(HypervisorError::AlreadyExists {
                    kind: ObjectKind::DhcpHost,
                    name,
                })
            }
            Err(e) if !add && is_code(&e, ErrorNumber::OperationInvalid) && e.message().contains("locate") => {
                Err(HypervisorError::NotFound {
                    kind: ObjectKind::DhcpHost,
                    name,
                })
            }
            Err(e) => Err(self.err(if add { "add DHCP host" } else { "remove DHCP host" }, &e)),
        }
    }

    pub(super) fn domain_addresses(&self, domain: &str) -> HvResult<Vec<InterfaceAddress>> {
        let d = self.require_domain(domain)?;
        let leases = d
            .interface_addresses(sys::VIR_DOMAIN_INTERFACE_ADDRESSES_SRC_LEASE, 0)
            .map_err(|e| self.err("interface addresses from leases", &e))?;
        let mut found = flatten(&leases);
        if found.is_empty() {
            // No agent, or one that does not answer yet: nothing known.
            found = d
                .interface_addresses(sys::VIR_DOMAIN_INTERFACE_ADDRESSES_SRC_AGENT, 0)
                .map(|agent| flatten(&agent))
                .unwrap_or_default();
        }
        Ok(found)
    }
}

fn flatten(interfaces: &[Interface]) -> Vec<InterfaceAddress> {
    let mut out = Vec::new();
    for i in interfaces {
        let Some(mac) = &i.hwaddr else { continue };
        for a in &i.addrs {
            out.push(InterfaceAddress {
                mac: mac.to_ascii_lowercase(),
                ip: a.addr.clone(),
            });
        }
    }
    out
}

fn host_xml(h: &DhcpHost) -> String {
    let name = h
        .name
        .as_deref()
        .map(|n| format!(" name='{}'", escape_attr(n)))
        .unwrap_or_default();
    format!(
        "<host mac='{}'{name} ip='{}'/>",
        escape_attr(&h.mac.to_ascii_lowercase()),
        escape_attr(&h.ip)
    )
}

/// The value of attribute `name` in one start tag's text.
fn attr(tag: &str, name: &str) -> Option<String> {
    let mut rest = tag;
    while let Some(at) = rest.find(name) {
        let before = rest[..at].chars().last();
        let after = &rest[at + name.len()..];
        if before.is_some_and(char::is_whitespace)
            && let Some(v) = after.strip_prefix('=')
            && let Some(q) = v.chars().next().filter(|c| *c == '\'' || *c == '"')
        {
            let v = &v[1..];
            return v.find(q).map(|end| unescape(&v[..end]));
        }
        rest = after;
    }
    None
}

/// The `<host>` entries with a MAC in a network's XML.
pub(super) fn parse_dhcp_hosts(xml: &str) -> Vec<DhcpHost> {
    let mut out = Vec::new();
    for piece in xml.split("<host").skip(1) {
        if !piece.starts_with(char::is_whitespace) {
            continue;
        }
        let tag = piece.split('>').next().unwrap_or_default();
        if let (Some(mac), Some(ip)) = (attr(tag, "mac"), attr(tag, "ip")) {
            out.push(DhcpHost {
                mac: mac.to_ascii_lowercase(),
                ip,
                name: attr(tag, "name"),
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dhcp_hosts_are_read_and_dns_hosts_skipped() {
        let xml = "<network><ip address='192.168.122.1'><dhcp><range start='192.168.122.2' end='192.168.122.254'/>\n\
                   <host mac='52:54:00:AA:bb:cc' name='w&apos;1' ip='192.168.122.50'/>\n\
                   <host mac=\"52:54:00:00:00:02\" ip=\"192.168.122.51\"/></dhcp></ip>\
                   <dns><host ip='192.168.122.9'><hostname>x</hostname></host></dns><hostdev/></network>";
        let hosts = parse_dhcp_hosts(xml);
        assert_eq!(
            hosts,
            [
                DhcpHost {
                    mac: "52:54:00:aa:bb:cc".into(),
                    ip: "192.168.122.50".into(),
                    name: Some("w'1".into())
                },
                DhcpHost {
                    mac: "52:54:00:00:00:02".into(),
                    ip: "192.168.122.51".into(),
                    name: None
                },
            ]
        );
        assert_eq!(
            host_xml(&hosts[0]),
            "<host mac='52:54:00:aa:bb:cc' name='w&apos;1' ip='192.168.122.50'/>"
        );
    }
}

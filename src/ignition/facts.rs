//! Machine facts: what the per-VM injection needs to know about one VM, and their validation.
//!
//! [`MachineFacts`] holds raw strings, as they come from the `LibvirtMachine` spec;
//! [`MachineFacts::check`] turns them into [`CheckedFacts`] (parsed addresses) or an
//! [`Error::InvalidMachineFacts`] naming the field with its spec name (`network.gateway`,
//! `network.addresses[1]`, …). The node name is derived by the controller, not here.
//!
//! Rules:
//! - the node name (also the hostname) is a DNS-1123 label: 1–63 of `[a-z0-9-]`, alphanumeric at
//!   both ends;
//! - the provider ID is 1–256 printable ASCII characters without space, `"`, `'`, `\` or `%` (it is
//!   written inside a systemd `Environment="…"` line, where `%` starts a specifier);
//! - the interface name is 1–15 of `[A-Za-z0-9_.-]` and not `.`/`..` (the kernel's rule);
//! - addresses are `ip/prefix`, IPv4 prefix 1–32, IPv6 prefix 1–128, no duplicates, at least one;
//! - the IPv4 gateway is IPv4 and inside the subnet of some IPv4 address; the IPv6 gateway is IPv6
//!   and inside the subnet of some IPv6 address or link-local (`fe80::/10`, the usual router
//!   address on IPv6 LANs);
//! - a nameserver is an IP of a family the VM has an address in (NetworkManager only uses IPv4
//!   servers on an IPv4-configured profile, and IPv6 servers on an IPv6 one);
//! - search domains are DNS names (labels of `[A-Za-z0-9_-]`, at most 253 characters);
//! - the MAC is six `:`-separated hex octets;
//! - a DHCP interface (`dhcp`) needs no address, may list one IPv4 address (the reservation,
//!   not written into the guest) and has no gateway; its name servers may be of either family.
//!
//! Fields are named `network.…` for a machine with one interface and `networks[i].…` when it
//! has several.

use std::net::{IpAddr, Ipv6Addr};

use super::error::Error;
use crate::api::libvirt_machine::NetworkSpec;

/// What the injection writes into one VM's Ignition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MachineFacts {
    /// Node name, also written as the hostname.
    pub node_name: String,
    /// Cluster API provider ID, e.g. `libvirt:///<domain-uuid>`.
    pub provider_id: String,
    /// Network configuration of the VM's first NIC.
    pub network: NetworkFacts,
    /// The further NICs, in guest order (each gets its own keyfile).
    pub additional_networks: Vec<NetworkFacts>,
}

/// The static network configuration of one NIC.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NetworkFacts {
    /// Guest interface name, e.g. `enp1s0`.
    pub interface_name: String,
    /// Addresses with prefix length, IPv4 and/or IPv6, e.g. `192.168.122.10/24`.
    pub addresses: Vec<String>,
    /// IPv4 default gateway.
    pub gateway: Option<String>,
    /// IPv6 default gateway.
    pub ipv6_gateway: Option<String>,
    /// DNS servers.
    pub nameservers: Vec<String>,
    /// DNS search domains.
    pub search_domains: Vec<String>,
    /// MAC address the profile is bound to, if any.
    pub mac_address: Option<String>,
    /// Configure the interface by DHCP instead of the static addresses.
    pub dhcp: bool,
}

impl NetworkFacts {
    /// Facts from one interface of a `LibvirtMachine` spec.
    #[must_use]
    pub fn from_spec(network: &NetworkSpec) -> Self {
        let dns = network.dns.clone().unwrap_or_default();
        Self {
            interface_name: network.interface_name.clone(),
            addresses: network.addresses.clone(),
            gateway: network.gateway.clone(),
            ipv6_gateway: network.ipv6_gateway.clone(),
            nameservers: dns.nameservers,
            search_domains: dns.search_domains,
            mac_address: network.mac_address.clone(),
            dhcp: network.dhcp,
        }
    }
}

impl MachineFacts {
    /// Facts from a `LibvirtMachine`'s interfaces (at least one; see
    /// [`LibvirtMachineSpec::interfaces`](crate::api::libvirt_machine::LibvirtMachineSpec::interfaces))
    /// plus the controller-derived node name and provider ID.
    #[must_use]
    pub fn from_spec(node_name: impl Into<String>, provider_id: impl Into<String>, networks: &[&NetworkSpec]) -> Self {
        let mut all = networks.iter().map(|n| NetworkFacts::from_spec(n));
        let network = all.next().unwrap_or_else(|| NetworkFacts {
            interface_name: "enp1s0".into(),
            addresses: vec![],
            gateway: None,
            ipv6_gateway: None,
            nameservers: vec![],
            search_domains: vec![],
            mac_address: None,
            dhcp: false,
        });
        Self {
            node_name: node_name.into(),
            provider_id: provider_id.into(),
            network,
            additional_networks: all.collect(),
        }
    }

    /// Validates every interface: one [`CheckedFacts`] per NIC, in guest order, each with the
    /// machine's node name and provider ID.
    pub fn check_all(&self) -> Result<Vec<CheckedFacts>, Error> {
        check_dns_label(&self.node_name)?;
        check_provider_id(&self.provider_id)?;
        let several = !self.additional_networks.is_empty();
        let mut out = Vec::new();
        for (i, n) in std::iter::once(&self.network)
            .chain(&self.additional_networks)
            .enumerate()
        {
            let prefix = if several {
                format!("networks[{i}]")
            } else {
                "network".to_owned()
            };
            if out.iter().any(|c: &CheckedFacts| c.interface_name == n.interface_name) {
                return Err(Error::facts(format!("{prefix}.interfaceName"), "is used twice"));
            }
            out.push(self.check_nic(n, &prefix)?);
        }
        Ok(out)
    }

    /// Validates the facts of the first NIC (see the module docs); [`Self::check_all`] checks
    /// every NIC.
    pub fn check(&self) -> Result<CheckedFacts, Error> {
        Ok(self.check_all()?.swap_remove(0))
    }

    fn check_nic(&self, n: &NetworkFacts, prefix: &str) -> Result<CheckedFacts, Error> {
        check_interface(&n.interface_name).map_err(|p| Error::facts(format!("{prefix}.interfaceName"), p))?;
        let mut v4 = Vec::new();
        let mut v6 = Vec::new();
        if n.addresses.is_empty() && !n.dhcp {
            return Err(Error::facts(
                format!("{prefix}.addresses"),
                "at least one address is required",
            ));
        }
        if n.dhcp && (n.gateway.is_some() || n.ipv6_gateway.is_some()) {
            return Err(Error::facts(
                format!("{prefix}.gateway"),
                "with dhcp the gateway comes from the DHCP server",
            ));
        }
        for (i, raw) in n.addresses.iter().enumerate() {
            let field = format!("{prefix}.addresses[{i}]");
            let (ip, prefix) = parse_cidr(raw).map_err(|p| Error::facts(&field, p))?;
            if v4.iter().chain(v6.iter()).any(|(seen, _): &(IpAddr, u8)| *seen == ip) {
                return Err(Error::facts(field, format!("{ip} is listed twice")));
            }
            if n.dhcp && (i > 0 || !ip.is_ipv4()) {
                return Err(Error::facts(
                    field,
                    "with dhcp, only one IPv4 address (the reservation)",
                ));
            }
            if ip.is_ipv4() {
                v4.push((ip, prefix))
            } else {
                v6.push((ip, prefix))
            }
        }
        let gateway = n
            .gateway
            .as_deref()
            .map(|g| check_gateway(&format!("{prefix}.gateway"), g, false, &v4))
            .transpose()?;
        let ipv6_gateway = n
            .ipv6_gateway
            .as_deref()
            .map(|g| check_gateway(&format!("{prefix}.ipv6Gateway"), g, true, &v6))
            .transpose()?;
        let mut nameservers = Vec::new();
        for (i, raw) in n.nameservers.iter().enumerate() {
            let field = format!("{prefix}.dns.nameservers[{i}]");
            let ip: IpAddr = raw
                .trim()
                .parse()
                .map_err(|_| Error::facts(&field, "not an IPv4 or IPv6 address"))?;
            let has_family = if ip.is_ipv4() { !v4.is_empty() } else { !v6.is_empty() };
            if !has_family && !n.dhcp {
                let fam = if ip.is_ipv4() { "IPv4" } else { "IPv6" };
                return Err(Error::facts(
                    field,
                    format!("{ip} is {fam} but the VM has no {fam} address"),
                ));
            }
            nameservers.push(ip);
        }
        for (i, d) in n.search_domains.iter().enumerate() {
            check_domain(d).map_err(|p| Error::facts(format!("{prefix}.dns.searchDomains[{i}]"), p))?;
        }
        let mac_address = n.mac_address.as_deref().map(|m| check_mac(m, prefix)).transpose()?;
        Ok(CheckedFacts {
            node_name: self.node_name.clone(),
            provider_id: self.provider_id.clone(),
            interface_name: n.interface_name.clone(),
            ipv4: v4,
            ipv6: v6,
            gateway,
            ipv6_gateway,
            nameservers,
            search_domains: n.search_domains.clone(),
            mac_address,
            dhcp: n.dhcp,
        })
    }
}

/// Validated facts, addresses parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckedFacts {
    /// DNS-1123 label.
    pub node_name: String,
    /// Provider ID safe for a systemd `Environment=` line.
    pub provider_id: String,
    /// Interface name.
    pub interface_name: String,
    /// IPv4 addresses with prefixes, in spec order.
    pub ipv4: Vec<(IpAddr, u8)>,
    /// IPv6 addresses with prefixes, in spec order.
    pub ipv6: Vec<(IpAddr, u8)>,
    /// IPv4 gateway.
    pub gateway: Option<IpAddr>,
    /// IPv6 gateway.
    pub ipv6_gateway: Option<IpAddr>,
    /// Name servers, in spec order.
    pub nameservers: Vec<IpAddr>,
    /// Search domains, in spec order.
    pub search_domains: Vec<String>,
    /// MAC address, upper-case.
    pub mac_address: Option<String>,
    /// DHCP instead of the static addresses (`ipv4` holds at most the reservation).
    pub dhcp: bool,
}

fn check_dns_label(name: &str) -> Result<(), Error> {
    let ok_chars = name
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    let ends = !name.starts_with('-') && !name.ends_with('-');
    if name.is_empty() || name.len() > 63 || !ok_chars || !ends {
        return Err(Error::facts(
            "nodeName",
            "must be a DNS-1123 label: 1-63 lower-case letters, digits or '-', starting and ending alphanumeric",
        ));
    }
    Ok(())
}

fn check_provider_id(id: &str) -> Result<(), Error> {
    let ok = !id.is_empty() && id.len() <= 256 && id.bytes().all(|b| b.is_ascii_graphic() && !b"\"'\\%".contains(&b));
    if !ok {
        return Err(Error::facts(
            "providerID",
            "must be 1-256 printable ASCII characters without space, quotes, backslash or '%'",
        ));
    }
    Ok(())
}

fn check_interface(name: &str) -> Result<(), &'static str> {
    let ok_chars = name.bytes().all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b));
    if name.is_empty() || name.len() > 15 || !ok_chars || name == "." || name == ".." {
        return Err("must be 1-15 characters of [A-Za-z0-9_.-]");
    }
    Ok(())
}

fn parse_cidr(raw: &str) -> Result<(IpAddr, u8), String> {
    let (ip, prefix) = raw
        .trim()
        .split_once('/')
        .ok_or("must be an address with a prefix length, like 10.0.0.5/24")?;
    let ip: IpAddr = ip.parse().map_err(|_| "not an IPv4 or IPv6 address".to_owned())?;
    let max = if ip.is_ipv4() { 32 } else { 128 };
    let prefix: u8 = prefix
        .parse()
        .map_err(|_| "the prefix length is not a number".to_owned())?;
    if prefix == 0 || prefix > max {
        return Err(format!("the prefix length must be 1-{max}"));
    }
    if ip.is_unspecified() || ip.is_multicast() {
        return Err(format!("{ip} cannot be a host address"));
    }
    Ok((ip, prefix))
}

/// Whether `a` and `b` share the first `prefix` bits.
pub(crate) fn same_subnet(a: IpAddr, b: IpAddr, prefix: u8) -> bool {
    match (a, b) {
        (IpAddr::V4(a), IpAddr::V4(b)) => {
            let mask = u32::MAX.checked_shl(32 - u32::from(prefix.min(32))).unwrap_or(0);
            u32::from(a) & mask == u32::from(b) & mask
        }
        (IpAddr::V6(a), IpAddr::V6(b)) => {
            let mask = u128::MAX.checked_shl(128 - u32::from(prefix.min(128))).unwrap_or(0);
            u128::from(a) & mask == u128::from(b) & mask
        }
        _ => false,
    }
}

fn check_gateway(field: &str, raw: &str, v6: bool, addrs: &[(IpAddr, u8)]) -> Result<IpAddr, Error> {
    let fam = if v6 { "IPv6" } else { "IPv4" };
    let ip: IpAddr = raw
        .trim()
        .parse()
        .map_err(|_| Error::facts(field, format!("not an {fam} address")))?;
    if ip.is_ipv6() != v6 {
        return Err(Error::facts(field, format!("{ip} is not an {fam} address")));
    }
    if addrs.is_empty() {
        return Err(Error::facts(
            field,
            format!("a gateway needs an {fam} address in network.addresses"),
        ));
    }
    if addrs.iter().any(|(a, _)| *a == ip) {
        return Err(Error::facts(field, format!("{ip} is one of the VM's own addresses")));
    }
    let link_local = matches!(ip, IpAddr::V6(g) if is_link_local_v6(g));
    if !link_local && !addrs.iter().any(|(a, p)| same_subnet(*a, ip, *p)) {
        let nets: Vec<String> = addrs.iter().map(|(a, p)| format!("{a}/{p}")).collect();
        return Err(Error::facts(
            field,
            format!("{ip} is outside every {fam} address's subnet ({})", nets.join(", ")),
        ));
    }
    Ok(ip)
}

fn is_link_local_v6(ip: Ipv6Addr) -> bool {
    ip.segments()[0] & 0xffc0 == 0xfe80
}

fn check_domain(d: &str) -> Result<(), String> {
    let d = d.strip_suffix('.').unwrap_or(d);
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    if d.is_empty() || d.len() > 253 || !d.split('.').all(label_ok) {
        return Err("must be a DNS name: dot-separated labels of letters, digits, '-' or '_'".to_owned());
    }
    Ok(())
}

fn check_mac(raw: &str, prefix: &str) -> Result<String, Error> {
    let parts: Vec<&str> = raw.split(':').collect();
    let ok = parts.len() == 6
        && parts
            .iter()
            .all(|p| p.len() == 2 && p.bytes().all(|b| b.is_ascii_hexdigit()));
    if !ok {
        return Err(Error::facts(
            format!("{prefix}.macAddress"),
            "must be six ':'-separated hex octets",
        ));
    }
    Ok(raw.to_ascii_uppercase())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::libvirt_machine::{DnsSpec, NetworkType};

    fn facts(addresses: &[&str]) -> MachineFacts {
        MachineFacts {
            node_name: "worker-1".into(),
            provider_id: "libvirt:///0b9e7f6a-1111-2222-3333-444455556666".into(),
            network: NetworkFacts {
                interface_name: "enp1s0".into(),
                addresses: addresses.iter().map(|s| (*s).to_owned()).collect(),
                gateway: None,
                ipv6_gateway: None,
                nameservers: vec![],
                search_domains: vec![],
                mac_address: None,
                dhcp: false,
            },
            additional_networks: vec![],
        }
    }

    fn field_of(e: Error) -> String {
        match e {
            Error::InvalidMachineFacts { field, .. } => field,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn from_spec_copies_everything() {
        let spec = NetworkSpec {
            type_: NetworkType::Bridge,
            name: "br0".into(),
            model: "virtio".into(),
            interface_name: "ens3".into(),
            addresses: vec!["10.0.0.5/24".into()],
            gateway: Some("10.0.0.1".into()),
            ipv6_gateway: None,
            dns: Some(DnsSpec {
                nameservers: vec!["10.0.0.53".into()],
                search_domains: vec!["lab".into()],
            }),
            mac_address: Some("52:54:00:aa:bb:cc".into()),
            mode: None,
            dhcp: false,
            addresses_from_pools: Vec::new(),
        };
        let f = MachineFacts::from_spec("n1", "libvirt:///x", &[&spec]);
        assert_eq!(f.network.interface_name, "ens3");
        assert_eq!(f.network.nameservers, vec!["10.0.0.53"]);
        assert_eq!(f.network.search_domains, vec!["lab"]);
        let c = f.check().unwrap();
        assert_eq!(c.mac_address.as_deref(), Some("52:54:00:AA:BB:CC"));
        assert_eq!(c.gateway, Some("10.0.0.1".parse().unwrap()));
    }

    #[test]
    fn node_name_rules() {
        for bad in ["", "Worker", "-a", "a-", "a.b", &"a".repeat(64)] {
            let mut f = facts(&["10.0.0.5/24"]);
            f.node_name = bad.to_owned();
            assert_eq!(field_of(f.check().unwrap_err()), "nodeName", "{bad}");
        }
        let mut f = facts(&["10.0.0.5/24"]);
        f.node_name = "a".repeat(63);
        assert!(f.check().is_ok());
    }

    #[test]
    fn provider_id_rules() {
        for bad in ["", "libvirt:///a b", "x\"y", "a%b", "a\nb"] {
            let mut f = facts(&["10.0.0.5/24"]);
            f.provider_id = bad.to_owned();
            assert_eq!(field_of(f.check().unwrap_err()), "providerID", "{bad:?}");
        }
    }

    #[test]
    fn interface_and_mac_rules() {
        for bad in ["", "..", "a/b", "abcdefghijklmnop"] {
            let mut f = facts(&["10.0.0.5/24"]);
            f.network.interface_name = bad.to_owned();
            assert_eq!(field_of(f.check().unwrap_err()), "network.interfaceName", "{bad}");
        }
        for bad in ["52:54:00:aa:bb", "52-54-00-aa-bb-cc", "zz:54:00:aa:bb:cc"] {
            let mut f = facts(&["10.0.0.5/24"]);
            f.network.mac_address = Some(bad.to_owned());
            assert_eq!(field_of(f.check().unwrap_err()), "network.macAddress", "{bad}");
        }
    }

    #[test]
    fn address_rules() {
        assert_eq!(field_of(facts(&[]).check().unwrap_err()), "network.addresses");
        for (addrs, field) in [
            (&["10.0.0.5"][..], "network.addresses[0]"),
            (&["10.0.0.5/24", "10.0.0.300/24"][..], "network.addresses[1]"),
            (&["10.0.0.5/33"][..], "network.addresses[0]"),
            (&["10.0.0.5/0"][..], "network.addresses[0]"),
            (&["fd00::5/129"][..], "network.addresses[0]"),
            (&["10.0.0.5/24", "10.0.0.5/16"][..], "network.addresses[1]"),
            (&["0.0.0.0/8"][..], "network.addresses[0]"),
            (&["10.0.0.5/x"][..], "network.addresses[0]"),
        ] {
            assert_eq!(field_of(facts(addrs).check().unwrap_err()), field, "{addrs:?}");
        }
    }

    #[test]
    fn gateway_rules() {
        let mut f = facts(&["10.0.0.5/24", "fd00:1::5/64"]);
        f.network.gateway = Some("10.0.1.1".into());
        let e = f.check().unwrap_err();
        assert!(
            e.to_string()
                .contains("outside every IPv4 address's subnet (10.0.0.5/24)"),
            "{e}"
        );
        assert_eq!(field_of(e), "network.gateway");

        f.network.gateway = Some("fd00:1::1".into());
        assert_eq!(field_of(f.check().unwrap_err()), "network.gateway");
        f.network.gateway = Some("10.0.0.5".into());
        assert_eq!(field_of(f.check().unwrap_err()), "network.gateway");
        f.network.gateway = Some("10.0.0.1".into());
        assert!(f.check().is_ok());

        f.network.ipv6_gateway = Some("fd00:2::1".into());
        assert_eq!(field_of(f.check().unwrap_err()), "network.ipv6Gateway");
        f.network.ipv6_gateway = Some("fe80::1".into());
        assert!(f.check().is_ok());
        f.network.ipv6_gateway = Some("fd00:1::ffff".into());
        assert!(f.check().is_ok());

        let mut f = facts(&["fd00::5/64"]);
        f.network.gateway = Some("10.0.0.1".into());
        let e = f.check().unwrap_err();
        assert!(e.to_string().contains("needs an IPv4 address"), "{e}");
    }

    #[test]
    fn dns_rules() {
        let mut f = facts(&["10.0.0.5/24"]);
        f.network.nameservers = vec!["10.0.0.53".into(), "fd00::53".into()];
        assert_eq!(field_of(f.check().unwrap_err()), "network.dns.nameservers[1]");
        f.network.nameservers = vec!["dns.example".into()];
        assert_eq!(field_of(f.check().unwrap_err()), "network.dns.nameservers[0]");
        f.network.nameservers = vec![];
        f.network.search_domains = vec!["ok.example".into(), "bad domain".into()];
        assert_eq!(field_of(f.check().unwrap_err()), "network.dns.searchDomains[1]");
        f.network.search_domains = vec!["ok.example.".into(), "a;b".into()];
        assert_eq!(field_of(f.check().unwrap_err()), "network.dns.searchDomains[1]");
    }

    #[test]
    fn subnet_math() {
        let a: IpAddr = "10.1.2.3".parse().unwrap();
        assert!(same_subnet(a, "10.1.255.1".parse().unwrap(), 16));
        assert!(!same_subnet(a, "10.2.0.1".parse().unwrap(), 16));
        assert!(same_subnet(a, "10.1.2.3".parse().unwrap(), 32));
        assert!(!same_subnet(a, "10.1.2.4".parse().unwrap(), 32));
        let b: IpAddr = "fd00::1".parse().unwrap();
        assert!(same_subnet(b, "fd00::ffff".parse().unwrap(), 64));
        assert!(!same_subnet(b, "fd01::1".parse().unwrap(), 64));
        assert!(!same_subnet(a, b, 8));
    }
}

//! NetworkManager keyfiles: the static profile written for the VM's NIC, and a small parser.
//!
//! The profile binds to the interface name (and to the MAC when one is given), and uses
//! `method=manual` for each family the VM has addresses in and `method=disabled` for the other,
//! so NetworkManager never runs DHCP or SLAAC on the real root. The gateway rides on `address1`
//! of its family (`address1=ip/prefix,gateway`). IPv4 name servers go to `[ipv4] dns`, IPv6 ones to
//! `[ipv6] dns` (NetworkManager's rule); search domains go to the first configured family.
//! `may-fail=false` makes NetworkManager wait for each configured family before declaring the
//! device up, so `nodeip-configuration` sees the static address.
//!
//! A DHCP interface gets `method=auto` in both families instead (IPv4 with `may-fail=false`,
//! IPv6 left optional), with any configured name servers and search domains; a reserved
//! address is the DHCP server's business and is not written.
//!
//! Values are not escaped: [`MachineFacts::check`](super::MachineFacts::check) only admits
//! characters that need none.
//!
//! The parser reads the GKeyFile subset NetworkManager writes: `[group]` headers, `key=value`
//! lines, `#`/`;` comments and blank lines, no escapes, no line continuations. It rejects keys
//! outside a group, lines without `=`, and duplicated groups or keys, since the generated file
//! should never have any.

use std::fmt::Write;
use std::net::IpAddr;

use super::facts::CheckedFacts;

/// The keyfile's path for an interface.
#[must_use]
pub fn keyfile_path(interface_name: &str) -> String {
    format!("/etc/NetworkManager/system-connections/{interface_name}.nmconnection")
}

/// Renders the NetworkManager profile for validated facts.
#[must_use]
pub fn render(f: &CheckedFacts) -> String {
    let mut out = String::new();
    let iface = &f.interface_name;
    let _ = write!(
        out,
        "[connection]\nid={iface}\ntype=ethernet\ninterface-name={iface}\nautoconnect=true\n"
    );
    if let Some(mac) = &f.mac_address {
        let _ = write!(out, "\n[ethernet]\nmac-address={mac}\n");
    }
    if f.dhcp {
        dhcp(&mut out, f);
        return out;
    }
    let search_on_v4 = !f.ipv4.is_empty();
    family(
        &mut out,
        "ipv4",
        &f.ipv4,
        f.gateway,
        &f.nameservers,
        search_on_v4.then_some(&f.search_domains[..]),
    );
    family(
        &mut out,
        "ipv6",
        &f.ipv6,
        f.ipv6_gateway,
        &f.nameservers,
        (!search_on_v4).then_some(&f.search_domains[..]),
    );
    out
}

fn dhcp(out: &mut String, f: &CheckedFacts) {
    for (name, v6) in [("ipv4", false), ("ipv6", true)] {
        let _ = write!(out, "\n[{name}]\nmethod=auto\n");
        let servers: String = f
            .nameservers
            .iter()
            .filter(|ip| ip.is_ipv6() == v6)
            .map(|ip| format!("{ip};"))
            .collect();
        if !servers.is_empty() {
            let _ = writeln!(out, "dns={servers}");
        }
        if !v6 && !f.search_domains.is_empty() {
            let search: String = f.search_domains.iter().map(|d| format!("{d};")).collect();
            let _ = writeln!(out, "dns-search={search}");
        }
        if !v6 {
            out.push_str("may-fail=false\n");
        }
    }
}

fn family(
    out: &mut String,
    name: &str,
    addrs: &[(IpAddr, u8)],
    gateway: Option<IpAddr>,
    nameservers: &[IpAddr],
    search: Option<&[String]>,
) {
    let _ = write!(out, "\n[{name}]\n");
    if addrs.is_empty() {
        out.push_str("method=disabled\n");
        return;
    }
    out.push_str("method=manual\n");
    for (i, (ip, prefix)) in addrs.iter().enumerate() {
        let _ = write!(out, "address{}={ip}/{prefix}", i + 1);
        if let (0, Some(gw)) = (i, gateway) {
            let _ = write!(out, ",{gw}");
        }
        out.push('\n');
    }
    let is_v6 = addrs.first().is_some_and(|(ip, _)| ip.is_ipv6());
    let servers: Vec<String> = nameservers
        .iter()
        .filter(|ip| ip.is_ipv6() == is_v6)
        .map(|ip| format!("{ip};"))
        .collect();
    if !servers.is_empty() {
        let _ = writeln!(out, "dns={}", servers.concat());
    }
    if let Some(search) = search.filter(|s| !s.is_empty()) {
        let _ = writeln!(
            out,
            "dns-search={}",
            search.iter().map(|d| format!("{d};")).collect::<String>()
        );
    }
    out.push_str("may-fail=false\n");
}

/// A parsed keyfile: groups in file order, each with its keys in file order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Keyfile {
    /// `(group, [(key, value)])`.
    pub groups: Vec<(String, Vec<(String, String)>)>,
}

impl Keyfile {
    /// The value of `key` in `group`.
    #[must_use]
    pub fn get(&self, group: &str, key: &str) -> Option<&str> {
        self.keys(group)?
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// All keys of `group`, in file order.
    #[must_use]
    pub fn keys(&self, group: &str) -> Option<&[(String, String)]> {
        self.groups
            .iter()
            .find(|(g, _)| g == group)
            .map(|(_, keys)| keys.as_slice())
    }

    /// Group names, in file order.
    #[must_use]
    pub fn group_names(&self) -> Vec<&str> {
        self.groups.iter().map(|(g, _)| g.as_str()).collect()
    }
}

/// A keyfile syntax error at a 1-based line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("keyfile line {line}: {problem}")]
pub struct KeyfileError {
    /// 1-based line.
    pub line: usize,
    /// What is wrong.
    pub problem: &'static str,
}

/// Parses a keyfile (see the module docs for the subset).
pub fn parse(text: &str) -> Result<Keyfile, KeyfileError> {
    let mut kf = Keyfile::default();
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        let l = raw.trim();
        if l.is_empty() || l.starts_with('#') || l.starts_with(';') {
            continue;
        }
        if let Some(name) = l.strip_prefix('[') {
            let name = name.strip_suffix(']').ok_or(KeyfileError {
                line,
                problem: "unterminated group header",
            })?;
            if name.is_empty() || name.contains(['[', ']']) {
                return Err(KeyfileError {
                    line,
                    problem: "bad group name",
                });
            }
            if kf.groups.iter().any(|(g, _)| g == name) {
                return Err(KeyfileError {
                    line,
                    problem: "duplicate group",
                });
            }
            kf.groups.push((name.to_owned(), Vec::new()));
            continue;
        }
        let (key, value) = l.split_once('=').ok_or(KeyfileError {
            line,
            problem: "line without '='",
        })?;
        let key = key.trim_end();
        if key.is_empty() {
            return Err(KeyfileError {
                line,
                problem: "empty key",
            });
        }
        let (_, keys) = kf.groups.last_mut().ok_or(KeyfileError {
            line,
            problem: "key outside a group",
        })?;
        if keys.iter().any(|(k, _)| k == key) {
            return Err(KeyfileError {
                line,
                problem: "duplicate key",
            });
        }
        keys.push((key.to_owned(), value.trim_start().to_owned()));
    }
    Ok(kf)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ignition::facts::{MachineFacts, NetworkFacts};
    use proptest::prelude::*;

    fn checked(addrs: &[&str], gw: Option<&str>, gw6: Option<&str>, ns: &[&str], search: &[&str]) -> CheckedFacts {
        MachineFacts {
            node_name: "n".into(),
            provider_id: "libvirt:///u".into(),
            network: NetworkFacts {
                interface_name: "enp1s0".into(),
                addresses: addrs.iter().map(|s| (*s).to_owned()).collect(),
                gateway: gw.map(str::to_owned),
                ipv6_gateway: gw6.map(str::to_owned),
                nameservers: ns.iter().map(|s| (*s).to_owned()).collect(),
                search_domains: search.iter().map(|s| (*s).to_owned()).collect(),
                mac_address: None,
                dhcp: false,
            },
            additional_networks: vec![],
        }
        .check()
        .unwrap()
    }

    #[test]
    fn ipv4_only_exact_text() {
        let f = checked(
            &["10.0.0.5/24", "10.0.1.5/24"],
            Some("10.0.0.1"),
            None,
            &["10.0.0.53", "1.1.1.1"],
            &["lab.example"],
        );
        assert_eq!(
            render(&f),
            "[connection]\nid=enp1s0\ntype=ethernet\ninterface-name=enp1s0\nautoconnect=true\n\n\
             [ipv4]\nmethod=manual\naddress1=10.0.0.5/24,10.0.0.1\naddress2=10.0.1.5/24\ndns=10.0.0.53;1.1.1.1;\n\
             dns-search=lab.example;\nmay-fail=false\n\n[ipv6]\nmethod=disabled\n"
        );
    }

    #[test]
    fn ipv6_only_gets_search_domains_and_v4_disabled() {
        let f = checked(
            &["fd00::5/64"],
            None,
            Some("fe80::1"),
            &["fd00::53"],
            &["a.example", "b.example"],
        );
        let kf = parse(&render(&f)).unwrap();
        assert_eq!(kf.get("ipv4", "method"), Some("disabled"));
        assert_eq!(kf.keys("ipv4").unwrap().len(), 1);
        assert_eq!(kf.get("ipv6", "method"), Some("manual"));
        assert_eq!(kf.get("ipv6", "address1"), Some("fd00::5/64,fe80::1"));
        assert_eq!(kf.get("ipv6", "dns"), Some("fd00::53;"));
        assert_eq!(kf.get("ipv6", "dns-search"), Some("a.example;b.example;"));
        assert_eq!(kf.get("ipv6", "may-fail"), Some("false"));
        assert_eq!(kf.get("ethernet", "mac-address"), None);
    }

    #[test]
    fn dhcp_profile_is_auto_and_never_writes_the_reserved_address() {
        let mut f = checked(&["10.0.0.5/24"], None, None, &["10.0.0.53"], &["lab.example"]);
        f.dhcp = true;
        f.mac_address = Some("52:54:00:AA:BB:CC".into());
        let text = render(&f);
        let kf = parse(&text).unwrap();
        assert_eq!(kf.get("ipv4", "method"), Some("auto"));
        assert_eq!(kf.get("ipv4", "dns"), Some("10.0.0.53;"));
        assert_eq!(kf.get("ipv4", "dns-search"), Some("lab.example;"));
        assert_eq!(kf.get("ipv4", "may-fail"), Some("false"));
        assert_eq!(kf.get("ipv6", "method"), Some("auto"));
        assert_eq!(kf.get("ipv6", "may-fail"), None);
        assert_eq!(kf.get("ethernet", "mac-address"), Some("52:54:00:AA:BB:CC"));
        assert!(!text.contains("10.0.0.5/"), "{text}");
    }

    #[test]
    fn parser_rules() {
        let kf = parse("# c\n[a]\nk = v=w\n; c\n\n[b]\nx=\n").unwrap();
        assert_eq!(kf.group_names(), vec!["a", "b"]);
        assert_eq!(kf.get("a", "k"), Some("v=w"));
        assert_eq!(kf.get("b", "x"), Some(""));
        assert_eq!(kf.get("c", "x"), None);
        assert_eq!(parse("k=v").unwrap_err().problem, "key outside a group");
        assert_eq!(
            parse("[a]\nk").unwrap_err(),
            KeyfileError {
                line: 2,
                problem: "line without '='"
            }
        );
        assert_eq!(parse("[a]\nk=1\nk=2").unwrap_err().problem, "duplicate key");
        assert_eq!(parse("[a]\n[a]").unwrap_err().problem, "duplicate group");
        assert_eq!(parse("[a").unwrap_err().problem, "unterminated group header");
        assert_eq!(parse("[a]\n=1").unwrap_err().problem, "empty key");
    }

    proptest! {
        #[test]
        fn parser_never_panics(s in "(?s).{0,200}") {
            let _ = parse(&s);
        }
    }
}

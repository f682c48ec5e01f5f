//! The NetworkManager keyfile generator with any interface facts: facts that pass the checks
//! render a keyfile that parses, with only the groups the generator writes, so no value can
//! inject a line or a group.
#![no_main]

use arbitrary::Arbitrary;
use caplv::ignition::{MachineFacts, NetworkFacts, keyfile};
use libfuzzer_sys::fuzz_target;

/// The groups a keyfile of ours may hold.
const GROUPS: [&str; 4] = ["connection", "ethernet", "ipv4", "ipv6"];

#[derive(Arbitrary, Debug)]
struct Input {
    interface_name: String,
    addresses: Vec<String>,
    gateway: Option<String>,
    ipv6_gateway: Option<String>,
    nameservers: Vec<String>,
    search_domains: Vec<String>,
    mac_address: Option<String>,
    dhcp: bool,
}

fuzz_target!(|input: Input| {
    let facts = MachineFacts {
        node_name: "worker-0".to_owned(),
        provider_id: "libvirt:///00000000-0000-0000-0000-000000000000".to_owned(),
        network: NetworkFacts {
            interface_name: input.interface_name,
            addresses: input.addresses,
            gateway: input.gateway,
            ipv6_gateway: input.ipv6_gateway,
            nameservers: input.nameservers,
            search_domains: input.search_domains,
            mac_address: input.mac_address,
            dhcp: input.dhcp,
        },
        additional_networks: Vec::new(),
    };
    let Ok(checked) = facts.check_all() else {
        return;
    };
    for nic in &checked {
        let text = keyfile::render(nic);
        let parsed = match keyfile::parse(&text) {
            Ok(parsed) => parsed,
            Err(e) => panic!("the keyfile does not parse (line {}: {}):\n{text}", e.line, e.problem),
        };
        for group in parsed.group_names() {
            assert!(GROUPS.contains(&group), "an injected group [{group}]:\n{text}");
        }
        assert_eq!(
            parsed.get("connection", "interface-name"),
            Some(nic.interface_name.as_str())
        );
    }
});

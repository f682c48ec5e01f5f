//! The per-VM injection (hostname, provider ID, keyfiles) into any bootstrap document with any
//! machine facts: what it renders is itself valid Ignition.
#![no_main]

use arbitrary::Arbitrary;
use caplv::ignition::{MachineFacts, NetworkFacts, render, validate};
use libfuzzer_sys::fuzz_target;

#[derive(Arbitrary, Debug)]
struct Input<'a> {
    node_name: String,
    provider_id: String,
    interface_name: String,
    addresses: Vec<String>,
    gateway: Option<String>,
    nameservers: Vec<String>,
    search_domains: Vec<String>,
    mac_address: Option<String>,
    dhcp: bool,
    /// Last, so it takes the rest of the input: a seed's tail is its bootstrap document.
    bootstrap: &'a [u8],
}

fuzz_target!(|input: Input<'_>| {
    let facts = MachineFacts {
        node_name: input.node_name,
        provider_id: input.provider_id,
        network: NetworkFacts {
            interface_name: input.interface_name,
            addresses: input.addresses,
            gateway: input.gateway,
            ipv6_gateway: None,
            nameservers: input.nameservers,
            search_domains: input.search_domains,
            mac_address: input.mac_address,
            dhcp: input.dhcp,
        },
        additional_networks: Vec::new(),
    };
    match render(input.bootstrap, &facts) {
        Ok(rendered) => {
            if let Err(e) = validate(&rendered.json) {
                panic!("the rendered document is not valid Ignition: {e}");
            }
        }
        Err(e) => assert!(!e.to_string().is_empty(), "an empty error"),
    }
});

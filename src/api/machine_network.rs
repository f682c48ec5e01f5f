//! The network interfaces of a LibvirtMachine: libvirt attachment, guest addressing (static,
//! DHCP, or claimed from an IPAM pool) and DNS.

use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// One network interface of the VM.
#[derive(KubeSchema, Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[x_kube(validation = Rule::new("self.dhcp || (has(self.addresses) && size(self.addresses) > 0) || (has(self.addressesFromPools) && size(self.addressesFromPools) > 0)").message("give static addresses, addressesFromPools, or set dhcp: true"))]
#[x_kube(validation = Rule::new("!self.dhcp || !has(self.addressesFromPools)").message("addressesFromPools and dhcp exclude each other"))]
#[x_kube(validation = Rule::new("(self.type == 'direct') == has(self.mode)").message("mode is required for type direct and allowed only there"))]
#[x_kube(validation = Rule::new("!self.dhcp || !has(self.addresses) || (self.type == 'network' && size(self.addresses) == 1)").message("with dhcp, addresses may hold one IPv4 address to reserve, on type network only"))]
#[x_kube(validation = Rule::new("!self.dhcp || (!has(self.gateway) && !has(self.ipv6Gateway))").message("with dhcp the gateway comes from the DHCP server"))]
#[serde(rename_all = "camelCase")]
pub struct NetworkSpec {
    /// `network`: a libvirt network; `bridge`: an existing host bridge; `direct`: macvtap on a
    /// host NIC (needs `mode`).
    #[serde(rename = "type")]
    pub type_: NetworkType,
    /// libvirt network name, host bridge name, or (for `direct`) host NIC name.
    #[schemars(regex(pattern = r"^[A-Za-z0-9_.:-]+$"), length(min = 1, max = 255))]
    pub name: String,
    /// NIC model.
    #[serde(default = "default_nic_model")]
    #[schemars(regex(pattern = r"^[a-z0-9-]+$"))]
    pub model: String,
    /// Guest interface name the static configuration is written for.
    #[serde(default = "default_interface_name")]
    #[schemars(regex(pattern = r"^[A-Za-z0-9_.-]{1,15}$"), length(min = 1, max = 15))]
    pub interface_name: String,
    /// macvtap mode for `type: direct`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<DirectMode>,
    /// Static addresses with prefix length, IPv4 or IPv6, e.g. `192.168.122.100/24`. With
    /// `dhcp: true` on a `network` interface, one IPv4 address here is reserved for this VM's
    /// MAC in the libvirt network's DHCP server; leave it out to take any address of the
    /// network's DHCP range.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub addresses: Vec<String>,
    /// IP pools to claim one address each from, through the Cluster API IPAM contract: an
    /// `IPAddressClaim` per pool, whose `IPAddress` (address, prefix, gateway) is written into
    /// the static keyfile with the addresses above. This is how a LibvirtMachineTemplate gives
    /// every replica its own static address.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 4))]
    pub addresses_from_pools: Vec<IpPoolReference>,
    /// Configure the guest interface by DHCP (NetworkManager `method=auto`) instead of static
    /// addresses; `status.addresses` then comes from the network's DHCP leases or the guest
    /// agent.
    #[serde(default)]
    pub dhcp: bool,
    /// IPv4 default gateway.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateway: Option<String>,
    /// IPv6 default gateway.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ipv6_gateway: Option<String>,
    /// DNS settings written into the guest's connection profile.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dns: Option<DnsSpec>,
    /// MAC address; derived from the LibvirtMachine's UID when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[0-9a-fA-F]{2}(:[0-9a-fA-F]{2}){5}$"))]
    pub mac_address: Option<String>,
}

fn default_nic_model() -> String {
    "virtio".to_owned()
}

fn default_interface_name() -> String {
    "enp1s0".to_owned()
}

/// Kinds of network attachment.
#[derive(Clone, Copy, Debug, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum NetworkType {
    /// A libvirt-managed network.
    Network,
    /// An existing host bridge.
    Bridge,
    /// macvtap directly on a host NIC.
    Direct,
}

/// macvtap modes of a `direct` interface.
#[derive(Clone, Copy, Debug, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum DirectMode {
    /// Traffic goes out to the external switch, even between guests (needs a VEPA switch).
    Vepa,
    /// Guests on the same NIC talk directly; the host itself is not reachable.
    Bridge,
    /// Like `vepa`, but guests on the NIC never reach each other.
    Private,
    /// The NIC is given to this one guest.
    Passthrough,
}

/// DNS settings for the guest.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct DnsSpec {
    /// Name server addresses.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nameservers: Vec<String>,
    /// Search domains.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub search_domains: Vec<String>,
}

/// An IP pool of an IPAM provider, e.g. `ipam.cluster.x-k8s.io` `InClusterIPPool`, in the
/// machine's namespace (or cluster-scoped, as the provider's kind is).
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct IpPoolReference {
    /// API group of the pool kind.
    #[schemars(
        regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"),
        length(min = 1, max = 253)
    )]
    pub api_group: String,
    /// Pool kind.
    #[schemars(regex(pattern = r"^[A-Z][A-Za-z0-9]*$"), length(min = 1, max = 63))]
    pub kind: String,
    /// Pool name.
    #[schemars(regex(pattern = r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"), length(min = 1, max = 253))]
    pub name: String,
}

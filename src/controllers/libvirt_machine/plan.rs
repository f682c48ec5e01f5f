//! What one LibvirtMachine becomes on its host: names, sizes and the domain definition. Pure.

use uuid::Uuid;

use crate::{
    api::{
        common::{MachineAddress, MachineAddressType},
        libvirt_host::LibvirtHost,
        libvirt_machine::{
            AllocatedResources, CloneStrategy, DhcpReservation, DomainType, Firmware, LibvirtMachine,
            LibvirtMachineSpec, ManagedArtifacts, NetworkType,
        },
    },
    ignition::MachineFacts,
    libvirt::{
        domain_xml::{ConsolePlan, DiskPlan, DomainPlan, FirmwarePlan, InterfacePlan, default_system_nvram_path},
        hypervisor::InterfaceAddress,
        identity,
        volume_xml::{VolumeFormat, ignition_volume_name, parse_quantity_bytes, root_volume_name},
        xml::XmlInputError,
    },
};

/// Who the machine is, decided before anything exists on the host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Identity {
    /// Node name = hostname = domain name.
    pub node_name: String,
    /// Domain UUID: the one `spec.providerID` names once set, else the object's uid.
    pub uuid: Uuid,
    /// `libvirt:///<uuid>`.
    pub provider_id: String,
    /// Each interface's MAC address, in guest order: the spec's, or derived from the uid.
    pub macs: Vec<String>,
}

/// The identity of `machine`; `None` when it has no uid yet (never the case for a stored object).
/// `spec.providerID` comes first: `clusterctl move` recreates the object with a new uid but the
/// same spec, and the domain it names must be adopted, not provisioned again.
#[must_use]
pub fn identity(machine: &LibvirtMachine) -> Option<Identity> {
    let uuid = match machine.spec.provider_id.as_deref().and_then(identity::provider_id_uuid) {
        Some(uuid) => uuid,
        None => identity::domain_uuid(machine.metadata.uid.as_deref()?)?,
    };
    let node_name = identity::node_name(
        machine.metadata.namespace.as_deref().unwrap_or_default(),
        machine.metadata.name.as_deref().unwrap_or_default(),
    );
    let interfaces = machine.spec.interfaces();
    let mut macs: Vec<String> = Vec::new();
    // Given MACs first, so a derived one never takes a MAC the spec names for a later NIC.
    let given: Vec<String> = interfaces
        .iter()
        .filter_map(|n| n.mac_address.as_deref().map(str::to_ascii_lowercase))
        .collect();
    for (i, n) in interfaces.iter().enumerate() {
        let mac = match &n.mac_address {
            Some(m) => m.to_ascii_lowercase(),
            None => identity::interface_mac(uuid, i, &[given.clone(), macs.clone()].concat()),
        };
        macs.push(mac);
    }
    Some(Identity {
        provider_id: identity::provider_id(uuid),
        macs,
        node_name,
        uuid,
    })
}

/// `pool/volume`, the form artifacts are recorded in.
#[must_use]
pub fn pool_volume(pool: &str, volume: &str) -> String {
    format!("{pool}/{volume}")
}

/// Split `pool/volume`.
#[must_use]
pub fn split_pool_volume(s: &str) -> Option<(&str, &str)> {
    s.split_once('/').filter(|(p, v)| !p.is_empty() && !v.is_empty())
}

/// Name of the serial console log volume.
#[must_use]
pub fn console_volume_name(node_name: &str) -> String {
    format!("{node_name}-console.log")
}

/// Name of data disk `name`'s volume.
#[must_use]
pub fn data_volume_name(node_name: &str, name: &str) -> String {
    format!("{node_name}-{name}.qcow2")
}

/// One `additionalDisks` volume.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DataDiskPlan {
    /// Pool.
    pub pool: String,
    /// Volume name.
    pub volume: String,
    /// Virtual size, bytes.
    pub size_bytes: u64,
}

/// The `additionalDisks` volumes, in spec order.
pub fn data_disks(id: &Identity, spec: &LibvirtMachineSpec) -> Result<Vec<DataDiskPlan>, XmlInputError> {
    spec.additional_disks
        .iter()
        .map(|d| {
            Ok(DataDiskPlan {
                pool: d
                    .storage_pool
                    .clone()
                    .unwrap_or_else(|| spec.root_disk.storage_pool.clone()),
                volume: data_volume_name(&id.node_name, &d.name),
                size_bytes: parse_quantity_bytes(&d.size.0)?,
            })
        })
        .collect()
}

/// The DHCP reservations this machine needs: one per `dhcp` interface on a libvirt network
/// that names an address to reserve (without one, the network's DHCP range assigns).
#[must_use]
pub fn reservations(id: &Identity, spec: &LibvirtMachineSpec) -> Vec<DhcpReservation> {
    spec.interfaces()
        .into_iter()
        .zip(&id.macs)
        .filter(|(n, _)| n.dhcp && n.type_ == NetworkType::Network)
        .filter_map(|(n, mac)| {
            let address = n.addresses.first()?;
            Some(DhcpReservation {
                network: n.name.clone(),
                mac: mac.clone(),
                ip: address.split('/').next().unwrap_or(address).to_owned(),
                hostname: Some(id.node_name.clone()),
            })
        })
        .collect()
}

/// Whether any interface takes its address from DHCP (so `status.addresses` needs the leases).
#[must_use]
pub fn wants_leases(spec: &LibvirtMachineSpec) -> bool {
    spec.interfaces().iter().any(|n| n.dhcp)
}

/// The host-side objects this machine owns, recorded before any is created so that deletion
/// after a crash at any step removes exactly these.
#[must_use]
pub fn artifacts(id: &Identity, spec: &LibvirtMachineSpec, host: &LibvirtHost) -> ManagedArtifacts {
    let pool = &spec.root_disk.storage_pool;
    let uefi_nvram = spec.domain.firmware == Firmware::Uefi && host.spec.uri.ends_with("/system");
    ManagedArtifacts {
        domain_name: Some(id.node_name.clone()),
        root_volume: Some(pool_volume(pool, &root_volume_name(&id.node_name))),
        ignition_volume: Some(pool_volume(pool, &ignition_volume_name(&id.node_name))),
        console_log: Some(pool_volume(pool, &console_volume_name(&id.node_name))),
        nvram_path: uefi_nvram.then(|| default_system_nvram_path(&id.node_name)),
        additional_volumes: spec
            .additional_disks
            .iter()
            .map(|d| {
                let pool = d.storage_pool.as_deref().unwrap_or(pool);
                pool_volume(pool, &data_volume_name(&id.node_name, &d.name))
            })
            .collect(),
        dhcp_reservations: reservations(id, spec),
    }
}

/// Status addresses: each static address without its prefix as InternalIP; for a DHCP
/// interface the addresses libvirt reports for its MAC (`found`: leases or guest agent), else
/// its reservation; then the node name as InternalDNS and Hostname (OpenShift's CSR approver
/// matches InternalDNS to the Node name).
#[must_use]
pub fn addresses(id: &Identity, spec: &LibvirtMachineSpec, found: &[InterfaceAddress]) -> Vec<MachineAddress> {
    let mut ips: Vec<String> = Vec::new();
    for (n, mac) in spec.interfaces().into_iter().zip(&id.macs) {
        let statics = n.addresses.iter().map(|a| a.split('/').next().unwrap_or(a).to_owned());
        if n.dhcp {
            let leased: Vec<String> = found
                .iter()
                .filter(|f| f.mac.eq_ignore_ascii_case(mac))
                .map(|f| f.ip.clone())
                .collect();
            if leased.is_empty() {
                ips.extend(statics);
            } else {
                ips.extend(leased);
            }
        } else {
            ips.extend(statics);
        }
    }
    ips.dedup();
    let mut out: Vec<MachineAddress> = ips
        .into_iter()
        .map(|address| MachineAddress {
            type_: MachineAddressType::InternalIP,
            address,
        })
        .collect();
    for type_ in [MachineAddressType::InternalDNS, MachineAddressType::Hostname] {
        out.push(MachineAddress {
            type_,
            address: id.node_name.clone(),
        });
    }
    out
}

/// The facts injected into this machine's Ignition (every interface bound to its MAC).
#[must_use]
pub fn facts(id: &Identity, spec: &LibvirtMachineSpec) -> MachineFacts {
    let mut facts = MachineFacts::from_spec(&id.node_name, &id.provider_id, &spec.interfaces());
    let nics = std::iter::once(&mut facts.network).chain(facts.additional_networks.iter_mut());
    for (nic, mac) in nics.zip(&id.macs) {
        nic.mac_address = Some(mac.clone());
    }
    facts
}

/// How the root volume is made.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RootDiskPlan {
    /// Pool the volume goes into.
    pub pool: String,
    /// Volume name.
    pub volume: String,
    /// Pool of the base image.
    pub base_pool: String,
    /// Base image volume.
    pub base_image: String,
    /// Virtual size, bytes.
    pub size_bytes: u64,
    /// Overlay or full copy.
    pub strategy: CloneStrategy,
}

/// The root disk plan, or why the spec cannot give one.
pub fn root_disk(id: &Identity, spec: &LibvirtMachineSpec) -> Result<RootDiskPlan, XmlInputError> {
    let size_bytes = parse_quantity_bytes(&spec.root_disk.size.0)?;
    Ok(RootDiskPlan {
        pool: spec.root_disk.storage_pool.clone(),
        volume: root_volume_name(&id.node_name),
        base_pool: spec
            .root_disk
            .base_image_pool
            .clone()
            .unwrap_or_else(|| spec.root_disk.storage_pool.clone()),
        base_image: spec.root_disk.base_image.clone(),
        size_bytes,
        strategy: spec.root_disk.clone_strategy,
    })
}

/// The domain definition, with the host paths of the Ignition file and console log still to be
/// filled in once the volumes exist (`ignition_path`, `console`).
pub fn domain(
    id: &Identity,
    machine: &LibvirtMachine,
    host: &LibvirtHost,
    size: AllocatedResources,
) -> Result<DomainPlan, XmlInputError> {
    let spec = &machine.spec;
    let kvm = host.status.as_ref().and_then(|s| s.kvm_available).unwrap_or(false);
    let domain_type = spec
        .domain
        .type_
        .unwrap_or(if kvm { DomainType::Kvm } else { DomainType::Qemu });
    let firmware = match (spec.domain.firmware, &host.spec.firmware_path) {
        (Firmware::Bios, _) => FirmwarePlan::Bios,
        (Firmware::Uefi, Some(loader)) => FirmwarePlan::UefiExplicit {
            loader_path: loader.clone(),
            nvram_template: host.spec.nvram_template_path.clone(),
            nvram_path: None,
            secure_boot: false,
        },
        (Firmware::Uefi, None) => FirmwarePlan::UefiAuto { secure_boot: false },
    };
    let plan = DomainPlan {
        name: id.node_name.clone(),
        uuid: id.uuid,
        vcpus: u32::try_from(size.vcpus).map_err(|_| XmlInputError::InvalidValue {
            field: "vcpus",
            reason: format!("{} is out of range", size.vcpus),
        })?,
        memory_mib: u64::try_from(size.memory_mb).map_err(|_| XmlInputError::InvalidValue {
            field: "memoryMB",
            reason: format!("{} is out of range", size.memory_mb),
        })?,
        domain_type,
        machine: spec.domain.machine.clone(),
        firmware,
        root_disk: DiskPlan {
            pool: spec.root_disk.storage_pool.clone(),
            volume: root_volume_name(&id.node_name),
            format: VolumeFormat::Qcow2,
            bus: spec.root_disk.bus,
        },
        additional_disks: spec
            .additional_disks
            .iter()
            .map(|d| DiskPlan {
                pool: d
                    .storage_pool
                    .clone()
                    .unwrap_or_else(|| spec.root_disk.storage_pool.clone()),
                volume: data_volume_name(&id.node_name, &d.name),
                format: VolumeFormat::Qcow2,
                bus: d.bus,
            })
            .collect(),
        interfaces: spec
            .interfaces()
            .into_iter()
            .zip(&id.macs)
            .map(|(n, mac)| InterfacePlan {
                kind: n.type_,
                source: n.name.clone(),
                model: n.model.clone(),
                mac: mac.clone(),
                mode: n.mode,
            })
            .collect(),
        console: ConsolePlan::PtyWithLog(String::new()),
        ignition_path: None,
        description: Some(format!(
            "LibvirtMachine {}/{} (caplv)",
            machine.metadata.namespace.as_deref().unwrap_or_default(),
            machine.metadata.name.as_deref().unwrap_or_default()
        )),
    };
    Ok(plan)
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// The seed's machine, with `extra` merged over it.
    pub(in crate::controllers::libvirt_machine) fn machine(extra: serde_json::Value) -> LibvirtMachine {
        let mut v = serde_json::json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1",
            "kind": "LibvirtMachine",
            "metadata": {"name": "spot-worker-01", "namespace": "default",
                         "uid": "3f1c9a6e-1b2d-4e5f-8a9b-0c1d2e3f4a5b"},
            "spec": {
                "hostRef": {"name": "laptop"},
                "domain": {"vcpus": 4, "memoryMB": 8192},
                "rootDisk": {"baseImage": "rhcos.qcow2", "storagePool": "default", "size": "20Gi"},
                "network": {"type": "network", "name": "default", "addresses": ["192.168.122.100/24"],
                            "gateway": "192.168.122.1"}
            }
        });
        json_patch::merge(&mut v, &extra);
        serde_json::from_value(v).unwrap()
    }

    fn host(extra: serde_json::Value) -> LibvirtHost {
        let mut v = serde_json::json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1",
            "kind": "LibvirtHost",
            "metadata": {"name": "laptop", "namespace": "default"},
            "spec": {"uri": "qemu+ssh://caplv@127.0.0.1/system", "hostKeyFingerprint": format!("SHA256:{}", "A".repeat(43)),
                     "secretRef": {"name": "k"}},
            "status": {"ready": true, "kvmAvailable": true}
        });
        json_patch::merge(&mut v, &extra);
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn identity_follows_the_uid_and_name() {
        let id = identity(&machine(serde_json::json!({}))).unwrap();
        assert_eq!(id.node_name, "spot-worker-01");
        assert_eq!(id.provider_id, "libvirt:///3f1c9a6e-1b2d-4e5f-8a9b-0c1d2e3f4a5b");
        assert!(id.macs[0].starts_with("52:54:00:"));
        let given = identity(&machine(
            serde_json::json!({"spec": {"network": {"macAddress": "52:54:00:AA:BB:CC"}}}),
        ))
        .unwrap();
        assert_eq!(given.macs, ["52:54:00:aa:bb:cc"]);
        let mut no_uid = machine(serde_json::json!({}));
        no_uid.metadata.uid = None;
        assert!(identity(&no_uid).is_none());
    }

    #[test]
    fn a_moved_machine_keeps_the_domain_its_provider_id_names() {
        // What `clusterctl move` leaves: the spec as it was, a new uid.
        let moved = serde_json::json!({
            "metadata": {"uid": "0b7e2c1a-9d8f-4e6a-b5c4-d3e2f1a0b9c8"},
            "spec": {"providerID": "libvirt:///3f1c9a6e-1b2d-4e5f-8a9b-0c1d2e3f4a5b"}
        });
        let before = identity(&machine(serde_json::json!({}))).unwrap();
        assert_eq!(identity(&machine(moved)).unwrap(), before);
        // A providerID that names no libvirt domain falls back to the uid.
        let foreign = identity(&machine(serde_json::json!({"spec": {"providerID": "aws:///x"}}))).unwrap();
        assert_eq!(foreign, before);
    }

    #[test]
    fn artifacts_name_everything_deletion_removes() {
        let m = machine(serde_json::json!({}));
        let id = identity(&m).unwrap();
        let a = artifacts(&id, &m.spec, &host(serde_json::json!({})));
        assert_eq!(a.domain_name.as_deref(), Some("spot-worker-01"));
        assert_eq!(a.root_volume.as_deref(), Some("default/spot-worker-01-root.qcow2"));
        assert_eq!(
            a.ignition_volume.as_deref(),
            Some("default/spot-worker-01-ignition.ign")
        );
        assert_eq!(a.console_log.as_deref(), Some("default/spot-worker-01-console.log"));
        assert_eq!(
            a.nvram_path.as_deref(),
            Some("/var/lib/libvirt/qemu/nvram/spot-worker-01_VARS.fd")
        );
        assert_eq!(split_pool_volume("p/v"), Some(("p", "v")));
        assert_eq!(split_pool_volume("pv"), None);
    }

    #[test]
    fn addresses_carry_ip_dns_and_hostname() {
        let m = machine(serde_json::json!({}));
        let id = identity(&m).unwrap();
        let a = addresses(&id, &m.spec, &[]);
        let pairs: Vec<(MachineAddressType, &str)> = a.iter().map(|x| (x.type_, x.address.as_str())).collect();
        assert_eq!(
            pairs,
            [
                (MachineAddressType::InternalIP, "192.168.122.100"),
                (MachineAddressType::InternalDNS, "spot-worker-01"),
                (MachineAddressType::Hostname, "spot-worker-01"),
            ]
        );
    }

    #[test]
    fn domain_type_follows_kvm_unless_overridden_and_firmware_follows_the_host() {
        let m = machine(serde_json::json!({}));
        let id = identity(&m).unwrap();
        let size = AllocatedResources {
            vcpus: 4,
            memory_mb: 8192,
        };
        let kvm = domain(&id, &m, &host(serde_json::json!({})), size).unwrap();
        assert_eq!(kvm.domain_type, DomainType::Kvm);
        assert_eq!(kvm.firmware, FirmwarePlan::UefiAuto { secure_boot: false });
        let tcg_host = host(serde_json::json!({"status": {"kvmAvailable": false},
            "spec": {"firmwarePath": "/usr/share/OVMF/OVMF_CODE_4M.fd", "nvramTemplatePath": "/usr/share/OVMF/OVMF_VARS_4M.fd"}}));
        let tcg = domain(&id, &m, &tcg_host, size).unwrap();
        assert_eq!(tcg.domain_type, DomainType::Qemu);
        assert!(
            matches!(tcg.firmware, FirmwarePlan::UefiExplicit { ref loader_path, .. } if loader_path.ends_with("CODE_4M.fd"))
        );
        let forced = machine(serde_json::json!({"spec": {"domain": {"type": "qemu"}}}));
        assert_eq!(
            domain(&id, &forced, &host(serde_json::json!({})), size)
                .unwrap()
                .domain_type,
            DomainType::Qemu
        );
        assert_eq!((kvm.vcpus, kvm.memory_mib), (4, 8192));
    }

    #[test]
    fn root_disk_size_errors_name_the_problem() {
        let m = machine(serde_json::json!({"spec": {"rootDisk": {"size": "1.5Gi"}}}));
        let id = identity(&m).unwrap();
        assert!(root_disk(&id, &m.spec).is_err());
        let ok = machine(serde_json::json!({"spec": {"rootDisk": {"baseImagePool": "images"}}}));
        let plan = root_disk(&id, &ok.spec).unwrap();
        assert_eq!((plan.base_pool.as_str(), plan.size_bytes), ("images", 20 << 30));
    }
}

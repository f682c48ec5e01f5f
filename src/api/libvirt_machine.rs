//! `LibvirtMachine`: one worker VM on a LibvirtHost, per the Cluster API InfraMachine contract.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::{api::resource::Quantity, apis::meta::v1::LabelSelector};
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{
    common::{DURATION_PATTERN, InfrastructureInitialization, LocalObjectReference, MachineAddress},
    condition::Condition,
};

/// Desired state of a LibvirtMachine.
#[derive(CustomResource, KubeSchema, Clone, Debug, Deserialize, Serialize, PartialEq)]
#[kube(
    group = "infrastructure.cluster.x-k8s.io",
    version = "v1alpha1",
    kind = "LibvirtMachine",
    namespaced,
    status = "LibvirtMachineStatus",
    shortname = "lvm",
    category = "cluster-api",
    category = "caplv",
    label("cluster.x-k8s.io/v1beta1", "v1alpha1"),
    label("cluster.x-k8s.io/v1beta2", "v1alpha1"),
    doc = "A worker VM on a libvirt host, provisioned for a Cluster API Machine.",
    printcolumn(
        name = "Host",
        type_ = "string",
        json_path = ".status.hostRef.name",
        description = "LibvirtHost the VM runs on (chosen at admission)"
    ),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status",
        description = "Whether the VM is provisioned and running"
    ),
    printcolumn(
        name = "State",
        type_ = "string",
        json_path = ".status.domainState",
        description = "libvirt domain state"
    ),
    printcolumn(
        name = "ProviderID",
        type_ = "string",
        json_path = ".spec.providerID",
        description = "Cluster API provider ID"
    ),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[x_kube(validation = Rule::new("has(self.hostRef) != has(self.hostSelector)").message("set exactly one of hostRef or hostSelector"))]
#[x_kube(validation = Rule::new("has(self.network) != has(self.networks)").message("set exactly one of network or networks"))]
#[x_kube(validation = Rule::new("!has(self.networks) || self.networks.all(n, self.networks.exists_one(m, m.interfaceName == n.interfaceName))").message("networks[].interfaceName must be unique"))]
#[x_kube(validation = Rule::new("!has(self.additionalDisks) || self.additionalDisks.all(d, self.additionalDisks.exists_one(e, e.name == d.name))").message("additionalDisks[].name must be unique"))]
#[serde(rename_all = "camelCase")]
pub struct LibvirtMachineSpec {
    /// The LibvirtHost (same namespace) that runs this VM. Set this or `hostSelector`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_ref: Option<LocalObjectReference>,
    /// A pool of LibvirtHosts (same namespace) by label: the VM goes to one that matches (and is
    /// in the Machine's failure domain, if it names one), the least allocated first. The choice
    /// is made at admission, recorded in `status.hostRef`, and kept for the machine's life. Set
    /// this or `hostRef`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_selector: Option<LabelSelector>,
    /// Set by the controller to `libvirt:///<domain-uuid>`; CAPI copies it to the Machine and
    /// matches the Node by it.
    #[serde(default, rename = "providerID", skip_serializing_if = "Option::is_none")]
    pub provider_id: Option<String>,
    /// Format of the bootstrap data the VM consumes. Only Ignition, delivered through QEMU fw_cfg.
    #[serde(default)]
    pub bootstrap_format: BootstrapFormat,
    /// The virtual hardware.
    #[serde(default)]
    pub domain: DomainSpec,
    /// The root disk, cloned from a base image.
    pub root_disk: RootDiskSpec,
    /// The VM's one network interface. Set this or `networks`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<NetworkSpec>,
    /// The VM's network interfaces, in guest PCI order (the first is `enp1s0` unless
    /// `interfaceName` says otherwise). Set this or `network`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(min = 1, max = 8))]
    pub networks: Vec<NetworkSpec>,
    /// Empty data disks created with the machine as `<node>-<name>.qcow2` and deleted with it,
    /// attached after the root disk in this order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 8))]
    pub additional_disks: Vec<AdditionalDiskSpec>,
    /// Labels applied to the Node once it joins; editable at any time.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_labels: BTreeMap<String, String>,
    /// Annotations applied to the Node once it joins; editable at any time.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_annotations: BTreeMap<String, String>,
    /// How deletion powers the VM off: by default the guest is asked (ACPI) and given 60s.
    #[serde(default)]
    pub shutdown: ShutdownSpec,
}

/// How deletion powers the VM off before removing it.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ShutdownSpec {
    /// `Graceful` presses the VM's ACPI power button, so the guest can stop its services and
    /// flush its disks, and destroys the domain only if it still runs after `timeout`; `Hard`
    /// destroys it at once, like pulling the plug.
    #[serde(default)]
    pub mode: ShutdownMode,
    /// How long a `Graceful` shutdown waits for the guest before destroying the domain, as a
    /// duration such as `60s`, `2m` or `1m30s`; `0s` destroys at once, like `Hard`. Editable
    /// while the machine is being deleted.
    #[serde(default = "default_shutdown_timeout")]
    #[schemars(regex(pattern = DURATION_PATTERN))]
    pub timeout: String,
}

impl Default for ShutdownSpec {
    fn default() -> Self {
        Self {
            mode: ShutdownMode::default(),
            timeout: default_shutdown_timeout(),
        }
    }
}

fn default_shutdown_timeout() -> String {
    "60s".to_owned()
}

/// How a VM is powered off on deletion.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
pub enum ShutdownMode {
    /// Ask the guest through ACPI, wait up to `timeout`, then destroy the domain.
    #[default]
    Graceful,
    /// Destroy the domain at once.
    Hard,
}

impl LibvirtMachineSpec {
    /// The interfaces, in guest order: `network`, or every entry of `networks`.
    #[must_use]
    pub fn interfaces(&self) -> Vec<&NetworkSpec> {
        self.network.iter().chain(&self.networks).collect()
    }
}

/// Bootstrap data formats a VM can consume.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum BootstrapFormat {
    /// Ignition JSON (Fedora CoreOS, RHCOS), injected through QEMU fw_cfg.
    #[default]
    Ignition,
}

/// Virtual hardware of the VM.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct DomainSpec {
    /// Boot firmware.
    #[serde(default)]
    pub firmware: Firmware,
    /// QEMU machine type.
    #[serde(default = "default_machine_type")]
    #[schemars(regex(pattern = r"^[a-z0-9][a-z0-9._-]*$"))]
    pub machine: String,
    /// Virtual CPUs; 0 sizes the VM from the host's free capacity.
    #[serde(default)]
    #[schemars(range(min = 0, max = 1024))]
    pub vcpus: i32,
    /// Memory in MiB; 0 sizes the VM from the host's free capacity.
    #[serde(default, rename = "memoryMB")]
    #[schemars(range(min = 0))]
    pub memory_mb: i64,
    /// Force the libvirt domain type; by default `kvm` when the host offers KVM, else `qemu` (TCG).
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub type_: Option<DomainType>,
}

impl Default for DomainSpec {
    fn default() -> Self {
        Self {
            firmware: Firmware::default(),
            machine: default_machine_type(),
            vcpus: 0,
            memory_mb: 0,
            type_: None,
        }
    }
}

fn default_machine_type() -> String {
    "q35".to_owned()
}

/// Boot firmware of the VM.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Firmware {
    /// UEFI (OVMF).
    #[default]
    Uefi,
    /// Legacy BIOS (SeaBIOS).
    Bios,
}

/// libvirt domain types the controller can request.
#[derive(Clone, Copy, Debug, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum DomainType {
    /// Hardware acceleration.
    Kvm,
    /// Software emulation (TCG).
    Qemu,
}

/// The VM's root disk.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RootDiskSpec {
    /// Volume name of the base image (qcow2) to clone.
    #[schemars(regex(pattern = r"^[A-Za-z0-9_.:-]+$"), length(min = 1, max = 255))]
    pub base_image: String,
    /// Pool holding the base image; defaults to `storagePool`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[A-Za-z0-9_.:-]+$"), length(min = 1, max = 255))]
    pub base_image_pool: Option<String>,
    /// Storage pool the root volume is created in.
    #[schemars(regex(pattern = r"^[A-Za-z0-9_.:-]+$"), length(min = 1, max = 255))]
    pub storage_pool: String,
    /// Virtual size of the root disk, e.g. `20Gi`.
    pub size: Quantity,
    /// How the root volume is made from the base image.
    #[serde(default)]
    pub clone_strategy: CloneStrategy,
    /// Disk bus.
    #[serde(default)]
    pub bus: DiskBus,
}

/// How a root volume is made from its base image.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum CloneStrategy {
    /// A qcow2 overlay backed by the base image: instant, shares unchanged blocks.
    #[default]
    CopyOnWrite,
    /// A full independent copy of the base image.
    FullClone,
}

/// Disk buses.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum DiskBus {
    /// virtio-blk.
    #[default]
    Virtio,
    /// SATA.
    Sata,
    /// SCSI.
    Scsi,
}

/// An empty data disk.
#[derive(KubeSchema, Clone, Debug, Deserialize, Serialize, PartialEq)]
#[x_kube(validation = Rule::new("self.name != 'root'").message("'root' is the root disk's volume name"))]
#[serde(rename_all = "camelCase")]
pub struct AdditionalDiskSpec {
    /// Short name; the volume is `<node>-<name>.qcow2`.
    #[schemars(regex(pattern = r"^[a-z0-9]([a-z0-9-]{0,30}[a-z0-9])?$"), length(min = 1, max = 32))]
    pub name: String,
    /// Virtual size, e.g. `50Gi` (thin: qcow2 allocates as the guest writes).
    pub size: Quantity,
    /// Storage pool the volume is created in; defaults to `rootDisk.storagePool`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[A-Za-z0-9_.:-]+$"), length(min = 1, max = 255))]
    pub storage_pool: Option<String>,
    /// Disk bus.
    #[serde(default)]
    pub bus: DiskBus,
}

/// Observed state of a LibvirtMachine.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct LibvirtMachineStatus {
    /// The LibvirtHost the machine was admitted to: `spec.hostRef`, or the one `hostSelector`
    /// chose. It never changes afterwards.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_ref: Option<LocalObjectReference>,
    /// Cluster API v1beta1 contract: true once the VM is provisioned.
    #[serde(default)]
    pub ready: bool,
    /// Cluster API v1beta2 contract: one-time provisioning flag.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initialization: Option<InfrastructureInitialization>,
    /// Addresses CAPI copies to the Machine: InternalIP, InternalDNS and Hostname (the node name).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub addresses: Vec<MachineAddress>,
    /// The addresses claimed from `networks[].addressesFromPools`, fixed before the VM is
    /// created: its keyfiles and `addresses` are built from them for the machine's life.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub claimed_addresses: Vec<ClaimedAddress>,
    /// When the VM was first provisioned; kubelet bootstrap CSRs are approved only for a while
    /// after this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provisioned_at: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
    /// The node name, which is also the hostname and the libvirt domain name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_name: Option<String>,
    /// UUID of the libvirt domain.
    #[serde(default, rename = "domainUUID", skip_serializing_if = "Option::is_none")]
    pub domain_uuid: Option<String>,
    /// Last observed libvirt domain state (e.g. `running`, `shutoff`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub domain_state: Option<String>,
    /// When deletion asked the guest to power off (ACPI); the domain is destroyed if it still
    /// runs once `spec.shutdown.timeout` has passed since then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shutdown_requested_at: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
    /// vCPUs and memory committed to this machine on its host at admission; the domain gets
    /// exactly these, and the host's available capacity excludes them until the machine is gone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allocated: Option<AllocatedResources>,
    /// What was created on the host for this machine, so deletion removes exactly that.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub managed_artifacts: Option<ManagedArtifacts>,
    /// `Ready` and the step conditions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

impl LibvirtMachine {
    /// The LibvirtHost this machine runs on, or is bound to: the one admission recorded, else
    /// the one the spec names; `None` while a `hostSelector` has not chosen.
    #[must_use]
    pub fn host_name(&self) -> Option<&str> {
        self.status
            .as_ref()
            .and_then(|s| s.host_ref.as_ref())
            .or(self.spec.host_ref.as_ref())
            .map(|r| r.name.as_str())
    }
}

/// One address an IPAM provider allocated for an interface.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ClaimedAddress {
    /// The guest interface (`networks[].interfaceName`) it configures.
    pub interface_name: String,
    /// The `IPAddressClaim` that holds it.
    pub claim: String,
    /// The address with its prefix length, e.g. `10.10.0.12/24`.
    pub address: String,
    /// The pool's gateway, used when the interface names none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateway: Option<String>,
}

/// Resources committed to one machine on its host.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct AllocatedResources {
    /// Virtual CPUs.
    pub vcpus: i32,
    /// Memory, MiB.
    #[serde(rename = "memoryMB")]
    pub memory_mb: i64,
}

/// Host-side artifacts owned by one machine.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ManagedArtifacts {
    /// libvirt domain name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub domain_name: Option<String>,
    /// Root volume, as `pool/volume`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root_volume: Option<String>,
    /// Ignition volume, as `pool/volume`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ignition_volume: Option<String>,
    /// Serial console log, as `pool/volume` (virtlogd writes it into the root disk's pool, so
    /// it is removed through libvirt like the disks).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub console_log: Option<String>,
    /// Per-VM UEFI NVRAM file (removed with the domain definition).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nvram_path: Option<String>,
    /// The `additionalDisks` volumes, as `pool/volume`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub additional_volumes: Vec<String>,
    /// DHCP host reservations made in libvirt networks for this machine's interfaces.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dhcp_reservations: Vec<DhcpReservation>,
}

/// A DHCP host entry (`<host mac ip name/>`) in a libvirt network.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct DhcpReservation {
    /// libvirt network name.
    pub network: String,
    /// The interface's MAC address, lower-case.
    pub mac: String,
    /// The reserved IPv4 address.
    pub ip: String,
    /// Host name handed out with the lease (the node name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hostname: Option<String>,
}

pub use super::machine_network::{DirectMode, DnsSpec, IpPoolReference, NetworkSpec, NetworkType};

pub use super::libvirt_machine_template::{
    LibvirtMachineTemplate, LibvirtMachineTemplateResource, LibvirtMachineTemplateSpec, LibvirtMachineTemplateStatus,
    TemplateMetadata, TemplateNodeInfo,
};

crate::condition_names! {
    /// Condition types of a LibvirtMachine.
    pub enum MachineCondition {
        /// The domain runs (the summary).
        Ready,
        /// Reconciliation is paused.
        Paused,
        /// Deletion cannot finish; the reason says why.
        CleanupStalled,
    }
}

crate::condition_names! {
    /// A LibvirtMachine's own reasons; [`Reason`] adds its host's and the Ignition library's.
    pub enum MachineReason {
        /// The domain runs.
        DomainRunning,
        /// Cluster API has not set a Machine as owner yet.
        WaitingForMachineOwner,
        /// The owner Machine does not exist.
        MachineNotFound,
        /// The Machine's Cluster does not exist.
        ClusterNotFound,
        /// The Machine names no bootstrap data Secret yet.
        WaitingForBootstrapData,
        /// The bootstrap data Secret does not exist.
        BootstrapDataNotFound,
        /// The bootstrap data Secret is not Ignition, or has no `value`.
        InvalidBootstrapData,
        /// An `IPAddressClaim` of `addressesFromPools` has no address yet.
        WaitingForIPAddress,
        /// The LibvirtHost does not exist.
        HostNotFound,
        /// The LibvirtHost is not ready.
        WaitingForHost,
        /// The host has no room yet.
        WaitingForCapacity,
        /// Admitted; the host-side steps run.
        Provisioning,
        /// The storage pool exists but is not started.
        StoragePoolInactive,
        /// The storage pool has no room for this machine's volumes.
        StoragePoolFull,
        /// `rootDisk.size` is smaller than the base image.
        RootDiskTooSmall,
        /// A domain with this machine's name belongs to someone else.
        DomainNameConflict,
        /// The domain exists but does not run.
        DomainNotRunning,
        /// The guest shut the domain down while its Machine is being deleted; it is left off.
        DomainShutDown,
        /// The domain vanished after provisioning.
        DomainMissing,
        /// The host cannot be reached after provisioning.
        HostUnreachable,
        /// Deletion is under way.
        Deleting,
        /// Deletion asked the guest to power off and waits for it, up to `spec.shutdown.timeout`.
        ShuttingDown,
        /// `spec.shutdown.timeout` is not a usable duration; deletion waits for a fix.
        InvalidShutdownTimeout,
        /// Teardown left something on the host.
        ArtifactsRemain,
        /// The Cluster or the machine is paused.
        Paused,
        /// Reconciliation is not paused.
        NotPaused,
    }
}

crate::condition_reasons! {
    /// The reason of a LibvirtMachine condition: its own, its host's, or why its Ignition is invalid.
    pub enum Reason {
        /// One of the machine's own.
        Machine(MachineReason),
        /// The host cannot be used (connection, libvirt).
        Host(super::libvirt_host::HostReason),
        /// The bootstrap data is not valid Ignition.
        Ignition(crate::ignition::Reason),
    }
}

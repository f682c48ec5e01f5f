//! `LibvirtHost`: a hypervisor the manager reaches over SSH and places VMs on.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{common::DURATION_PATTERN, condition::Condition};

/// Desired state of a LibvirtHost.
#[derive(CustomResource, KubeSchema, Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[kube(
    group = "infrastructure.cluster.x-k8s.io",
    version = "v1alpha1",
    kind = "LibvirtHost",
    namespaced,
    status = "LibvirtHostStatus",
    shortname = "lvh",
    // No Cluster owns a host: `clusterctl move` takes every LibvirtHost of the namespace along.
    label("clusterctl.cluster.x-k8s.io/move-hierarchy", ""),
    category = "caplv",
    doc = "A libvirt hypervisor that runs worker VMs, reached over SSH with a pinned host key.",
    printcolumn(
        name = "URI",
        type_ = "string",
        json_path = ".spec.uri",
        description = "libvirt connection URI"
    ),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status",
        description = "Whether the host is reachable and usable"
    ),
    printcolumn(
        name = "FreeVCPUs",
        type_ = "integer",
        json_path = ".status.capacity.availableVCPUs",
        description = "vCPUs free for new machines (after the reservation, overcommit and allocations)"
    ),
    printcolumn(
        name = "FreeMemoryMB",
        type_ = "integer",
        json_path = ".status.capacity.availableMemoryMB",
        description = "Memory (MiB) free for new machines (after the reservation, overcommit and allocations)"
    ),
    printcolumn(
        name = "Pressure",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"UnderPressure\")].reason",
        description = "What the reclaim policy sees: WithinLimits, PressureBuilding, MemoryPressure or CPUPressure"
    ),
    printcolumn(
        name = "Reclaiming",
        type_ = "string",
        json_path = ".status.reclaim.victim.scheduledMachine",
        description = "The ScheduledMachine being removed to give the host back to its owner"
    ),
    printcolumn(
        name = "Maintenance",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Maintenance\")].reason",
        description = "Draining or Drained while in maintenance",
        priority = 1
    ),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[x_kube(validation = Rule::new("!self.uri.startsWith('qemu+ssh://') || has(self.secretRef)").message("secretRef is required for qemu+ssh URIs").field_path(".secretRef"))]
#[x_kube(validation = Rule::new("!self.uri.startsWith('qemu+ssh://') || has(self.hostKeyFingerprint) || self.insecureSkipHostKeyVerification").message("hostKeyFingerprint is required for qemu+ssh URIs unless insecureSkipHostKeyVerification is true").field_path(".hostKeyFingerprint"))]
#[serde(rename_all = "camelCase")]
pub struct LibvirtHostSpec {
    /// libvirt connection URI: `qemu+ssh://user@host[:port]/system` (or `/session`),
    /// `qemu:///system` for the manager's own host, or `test:///...` for tests.
    #[schemars(
        length(min = 1, max = 2048),
        regex(pattern = r"^(qemu\+ssh://[^/?#\s]+/(system|session)?|qemu:///(system|session)|test:///\S*)$")
    )]
    pub uri: String,
    /// Secret holding the SSH private key (key `ssh-privatekey`), in the host's namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<SecretReference>,
    /// The SSH host key fingerprint the server must present, as printed by
    /// `ssh-keygen -lf`: `SHA256:` followed by 43 base64 characters. Checked before authenticating.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^SHA256:[A-Za-z0-9+/]{43}$"))]
    pub host_key_fingerprint: Option<String>,
    /// Accept any SSH host key. Only for throwaway labs: it lets anyone on the path impersonate the host.
    #[serde(default)]
    pub insecure_skip_host_key_verification: bool,
    /// UEFI firmware code image on the host. When unset, libvirt picks firmware automatically.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^/[^\s]*$"))]
    pub firmware_path: Option<String>,
    /// UEFI variable-store template on the host, copied for each VM's NVRAM.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^/[^\s]*$"))]
    pub nvram_template_path: Option<String>,
    /// Capacity kept back for the host itself; never given to machines.
    #[serde(default)]
    pub reserved_resources: ReservedResources,
    /// How much more than it has (after the reservation) the host may promise to machines.
    #[serde(default)]
    pub overcommit: Overcommit,
    /// The failure domain (rack, room, power feed) the host is in. Its LibvirtCluster publishes
    /// the domains of its hosts, and a Machine that names one is placed on a host in it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 256))]
    pub failure_domain: Option<String>,
    /// Seconds between health checks of the host.
    #[serde(default = "default_health_check_interval")]
    #[schemars(range(min = 30, max = 86400))]
    pub health_check_interval_seconds: i32,
    /// Give the host back to its owner: when the host's own memory or CPU use crosses a limit
    /// for a while, its spot machines (those a ScheduledMachine created) are removed, lowest
    /// priority first and one at a time, until the pressure is gone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reclaim: Option<ReclaimPolicy>,
    /// Take the host out of service: no machine is placed on it any more, and its machines are
    /// removed one at a time, lowest priority first (their Cluster API Machines are deleted, so
    /// Cluster API drains their Nodes and a MachineSet replaces them elsewhere). `Maintenance`
    /// reports the progress; setting it back to false makes the host usable again.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub maintenance: bool,
}

/// When and how a host takes its spot machines back. The host is checked every `for / 2`
/// (between 1 s and 15 s) while a policy is set.
#[derive(KubeSchema, Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[x_kube(validation = Rule::new("has(self.minFreeMemoryMB) || has(self.maxHostCPUPercent)").message("set minFreeMemoryMB, maxHostCPUPercent or both"))]
#[serde(rename_all = "camelCase")]
pub struct ReclaimPolicy {
    /// Reclaim while the memory the host could still hand out (free, buffers and page cache)
    /// stays below this many MiB.
    #[serde(default, rename = "minFreeMemoryMB", skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub min_free_memory_mb: Option<i64>,
    /// Reclaim while the CPU the host spends on anything but its guests stays above this
    /// percentage of all its CPUs.
    #[serde(default, rename = "maxHostCPUPercent", skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100))]
    pub max_host_cpu_percent: Option<i32>,
    /// How long a limit must stay crossed before a machine is removed; after each removal the
    /// host gets as long again to recover before the next one.
    #[serde(default = "default_reclaim_for", rename = "for")]
    #[schemars(regex(pattern = DURATION_PATTERN))]
    pub for_: String,
    /// Upper bound on draining a reclaimed machine's Node (the ScheduledMachine's own
    /// `nodeDrainTimeout` applies when shorter).
    #[serde(default = "default_reclaim_drain_timeout")]
    #[schemars(regex(pattern = DURATION_PATTERN))]
    pub drain_timeout: String,
    /// How long a reclaimed machine stays off once it is gone; then it returns if its window
    /// is still open.
    #[serde(default = "default_reclaim_cool_down")]
    #[schemars(regex(pattern = DURATION_PATTERN))]
    pub cool_down: String,
}

fn default_reclaim_for() -> String {
    "1m".to_owned()
}

fn default_reclaim_drain_timeout() -> String {
    "2m".to_owned()
}

fn default_reclaim_cool_down() -> String {
    "30m".to_owned()
}

fn default_health_check_interval() -> i32 {
    300
}

/// A Secret in the host's namespace (or another one, when `namespace` is set).
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
pub struct SecretReference {
    /// Secret name.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// Secret namespace; defaults to the LibvirtHost's namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
}

/// Capacity reserved for the hypervisor itself.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ReservedResources {
    /// vCPUs kept for the host.
    #[serde(default = "default_reserved_vcpus")]
    #[schemars(range(min = 0))]
    pub vcpus: i32,
    /// Memory in MiB kept for the host.
    #[serde(default = "default_reserved_memory")]
    #[serde(rename = "memoryMB")]
    #[schemars(range(min = 0))]
    pub memory_mb: i32,
}

impl Default for ReservedResources {
    fn default() -> Self {
        Self {
            vcpus: default_reserved_vcpus(),
            memory_mb: default_reserved_memory(),
        }
    }
}

/// Overcommit ratios: what machines may be promised, per unit the host has after its
/// reservation. `cpuRatio: 4` offers four vCPUs per logical CPU; `memoryRatio: 0.9` keeps a
/// tenth of the memory back on top of the reservation.
#[derive(KubeSchema, Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
// The API server checks `minimum` against a whole number truncated (0 passes `minimum: 0.1`);
// CEL compares the values as doubles.
#[x_kube(validation = Rule::new("self.cpuRatio >= 0.1 && self.memoryRatio >= 0.1").message("cpuRatio and memoryRatio must be at least 0.1"))]
#[serde(rename_all = "camelCase")]
pub struct Overcommit {
    /// vCPUs offered per logical CPU (0.1 to 64).
    #[serde(default)]
    #[schemars(range(min = 0.1, max = 64.0))]
    pub cpu_ratio: Ratio,
    /// MiB offered per MiB of memory (0.1 to 4).
    #[serde(default)]
    #[schemars(range(min = 0.1, max = 4.0))]
    pub memory_ratio: Ratio,
}

/// A finite positive ratio (the schema's bounds keep NaN and infinities out, so equality is
/// total).
#[derive(Clone, Copy, Debug, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(transparent)]
pub struct Ratio(pub f64);

impl Eq for Ratio {}

impl Default for Ratio {
    fn default() -> Self {
        Self(1.0)
    }
}

impl Ratio {
    /// `amount` scaled by the ratio, rounded down (a non-finite ratio counts as 1).
    #[must_use]
    pub fn scale(self, amount: i64) -> i64 {
        let ratio = if self.0.is_finite() && self.0 > 0.0 {
            self.0
        } else {
            1.0
        };
        #[allow(
            clippy::cast_possible_truncation,
            clippy::cast_precision_loss,
            reason = "host sizes are far below f64's exact integer range, and the result is clamped"
        )]
        let scaled = (amount as f64 * ratio).floor().clamp(0.0, i64::MAX as f64) as i64;
        scaled
    }
}

impl std::fmt::Display for Ratio {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

fn default_reserved_vcpus() -> i32 {
    2
}

fn default_reserved_memory() -> i32 {
    4096
}

/// Observed state of a LibvirtHost.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct LibvirtHostStatus {
    /// True when the host is reachable, authenticated and runs a usable hypervisor.
    #[serde(default)]
    pub ready: bool,
    /// What the host has, and what is left for new machines.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity: Option<HostCapacity>,
    /// The host's own load at the last check, from libvirt's node statistics. With a reclaim
    /// policy the host is sampled more often, but this is refreshed at the health-check pace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load: Option<HostLoad>,
    /// What the reclaim policy is doing (absent without `spec.reclaim`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reclaim: Option<ReclaimStatus>,
    /// What maintenance is doing (absent out of maintenance).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub maintenance: Option<MaintenanceStatus>,
    /// libvirt version the host reports.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub libvirt_version: Option<String>,
    /// Whether the host offers KVM acceleration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kvm_available: Option<bool>,
    /// The SSH host key fingerprint the host presented at the last attempt, so it can be pinned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_host_key_fingerprint: Option<String>,
    /// When the host was last checked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_checked: Option<Time>,
    /// `Ready`, `Reachable`, and `UnderPressure` with a reclaim policy.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

/// What the host's owner feels: memory the host could still hand out, and the CPU it spends on
/// everything but this manager's guests.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct HostLoad {
    /// Free memory plus buffers and page cache, MiB (absent when the driver does not say).
    #[serde(default, rename = "availableMemoryMB", skip_serializing_if = "Option::is_none")]
    pub available_memory_mb: Option<i64>,
    /// CPU used by anything but the guests since the previous check, percent of all CPUs
    /// (absent until two checks are far enough apart).
    #[serde(default, rename = "hostCPUPercent", skip_serializing_if = "Option::is_none")]
    pub host_cpu_percent: Option<i32>,
}

/// The reclaim policy's memory: since when the host has been under pressure, and which spot
/// machine it is giving up.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ReclaimStatus {
    /// When a limit was first seen crossed, or when the last reclaimed machine was gone (each
    /// removal gets `for` to take effect). Absent while the host is within its limits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pressure_since: Option<Time>,
    /// The spot machine being removed now; one at a time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub victim: Option<ReclaimVictim>,
}

/// Maintenance's progress.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct MaintenanceStatus {
    /// The LibvirtMachine being removed now; one at a time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub removing: Option<String>,
    /// LibvirtMachines still on the host.
    #[serde(default)]
    pub remaining: i32,
}

/// A spot machine the host reclaims.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ReclaimVictim {
    /// The LibvirtMachine, in the host's namespace.
    pub machine: String,
    /// The ScheduledMachine that created it, which removes it.
    pub scheduled_machine: String,
    /// `MemoryPressure` or `CPUPressure`.
    pub reason: String,
    /// The measurement and the limit it crossed.
    pub message: String,
    /// When it was chosen.
    pub since: Time,
}

/// Host capacity in vCPUs and MiB of memory.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct HostCapacity {
    /// Logical CPUs on the host.
    #[serde(rename = "totalVCPUs")]
    pub total_vcpus: i32,
    /// Memory on the host, MiB.
    #[serde(rename = "totalMemoryMB")]
    pub total_memory_mb: i64,
    /// vCPUs machines may be promised in all: total minus reserved, times `overcommit.cpuRatio`.
    #[serde(default, rename = "allocatableVCPUs")]
    pub allocatable_vcpus: i32,
    /// Memory machines may be promised in all, MiB: total minus reserved, times
    /// `overcommit.memoryRatio`.
    #[serde(default, rename = "allocatableMemoryMB")]
    pub allocatable_memory_mb: i64,
    /// vCPUs left for new machines: allocatable minus what this manager's machines use.
    #[serde(rename = "availableVCPUs")]
    pub available_vcpus: i32,
    /// Memory left for new machines, MiB.
    #[serde(rename = "availableMemoryMB")]
    pub available_memory_mb: i64,
}

crate::condition_names! {
    /// Condition types of a LibvirtHost.
    pub enum HostCondition {
        /// The host is connected and its capacity known.
        Ready,
        /// The manager reached libvirt on the host.
        Reachable,
        /// The host's owner needs it back: a `spec.reclaim` limit has been crossed for `for`.
        UnderPressure,
        /// `spec.maintenance`: the host is being emptied, or is empty.
        Maintenance,
    }
}

crate::condition_names! {
    /// Reasons of a LibvirtHost's `Maintenance`.
    pub enum MaintenanceReason {
        /// True: machines are being removed.
        Draining,
        /// True: no machine is left; the host can be taken down.
        Drained,
        /// False: maintenance is over; the host takes machines again.
        InService,
    }
}

crate::condition_names! {
    /// Reasons of a LibvirtHost's `UnderPressure`; a reclaimed ScheduledMachine reports the
    /// pressure's reason too.
    pub enum PressureReason {
        /// False: every limit holds.
        WithinLimits,
        /// False: a limit is crossed, not yet for `for`.
        PressureBuilding,
        /// True: available memory below `minFreeMemoryMB`.
        MemoryPressure,
        /// True: the host's own CPU use above `maxHostCPUPercent`.
        CpuPressure = "CPUPressure",
        /// False: a duration in `spec.reclaim` cannot be read.
        InvalidReclaim,
        /// Unknown: libvirt on this host gives no node statistics.
        Unmeasured,
    }
}

crate::condition_names! {
    /// Reasons of a LibvirtHost's `Reachable` and `Ready`. A LibvirtMachine reports the same
    /// reason when its host cannot be used.
    pub enum HostReason {
        /// libvirt answered.
        Connected,
        /// The SSH host key does not match `hostKeyFingerprint`.
        HostKeyMismatch,
        /// No `hostKeyFingerprint` and no insecure opt-out.
        HostKeyNotPinned,
        /// `hostKeyFingerprint` is malformed.
        InvalidHostKeyFingerprint,
        /// The host refused the key.
        AuthenticationFailed,
        /// The `ssh-privatekey` value cannot be decoded, or is missing from the Secret.
        InvalidPrivateKey,
        /// `secretRef` is missing or names no Secret.
        SecretNotFound,
        /// TCP, SSH or libvirt connection failure.
        ConnectionFailed,
        /// The tunnel to the libvirt socket could not be set up.
        TunnelFailed,
        /// `spec.uri` is not a supported libvirt URI.
        InvalidUri = "InvalidURI",
        /// libvirt answers but cannot run guests.
        HypervisorUnavailable,
        /// A libvirt object is missing.
        NotFound,
        /// A libvirt object of that name exists already.
        AlreadyExists,
        /// The storage pool does not exist.
        StoragePoolNotFound,
        /// The base image does not exist.
        BaseImageNotFound,
        /// The spec cannot be turned into libvirt XML.
        InvalidSpec,
        /// The libvirt driver does not implement an operation.
        Unsupported,
        /// Any other libvirt error.
        LibvirtError,
    }
}

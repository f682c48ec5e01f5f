//! The hypervisor operations the controllers need, as a synchronous trait.
//!
//! libvirt calls block (an RPC round trip each, sometimes seconds), so the controllers call a
//! [`Hypervisor`] from `spawn_blocking` or a per-host worker thread, never on the async reactor.
//! The one implementation is [`super::virt_backend::VirtHypervisor`] (the `virt` crate over any
//! libvirt URI: `test:///…` in tests, `qemu:///system`, or `qemu+unix:///system?socket=…` for the
//! SSH tunnel); tests of the controllers may supply their own.
//!
//! Semantics every implementation keeps, so reconcilers can observe before acting:
//! - lookups (`domain`, `pool`, `volume`) return `Ok(None)` for a missing object; a missing pool
//!   in `volume` is [`HypervisorError::StoragePoolNotFound`];
//! - creators (`define_and_start`, `create_volume`, `clone_volume`) never overwrite: an existing
//!   object with that name (or domain UUID) is [`HypervisorError::AlreadyExists`];
//! - `start` of a running domain, and `destroy` or `shutdown` of a stopped one, succeed;
//! - `destroy`, `shutdown`, `undefine_with_nvram`, `delete_volume` and `upload_volume` on a missing object are
//!   [`HypervisorError::NotFound`] ([`HypervisorError::is_not_found`] lets deletion treat that as
//!   done);
//! - `add_dhcp_host` of an entry whose MAC, IP or name is already in the network is
//!   `AlreadyExists`, `remove_dhcp_host` of an absent one (or in a missing network) `NotFound`.

use uuid::Uuid;

use super::domain_xml::DomainXml;
use super::volume_xml::VolumeXml;
use super::xml::XmlInputError;

/// What a host offers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostInfo {
    /// libvirt version of the daemon, e.g. `9.0.0`.
    pub libvirt_version: String,
    /// Driver name as libvirt reports it (`QEMU`, `TEST`).
    pub driver: String,
    /// Hypervisor version, e.g. `10.0.2` for QEMU.
    pub hypervisor_version: String,
    /// Whether `<domain type='kvm'>` guests are offered (from the capabilities XML).
    pub kvm_available: bool,
    /// Logical CPUs.
    pub cpus: u32,
    /// Total memory, MiB.
    pub memory_mib: u64,
    /// Free memory, MiB, when the driver reports it (the test driver does not).
    pub free_memory_mib: Option<u64>,
}

/// The host's own load, from libvirt's node statistics: what the person at the hypervisor
/// feels, as opposed to what the guests are given. CPU times are cumulative since the host
/// booted, so a load needs two samples ([`super::pressure`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NodeStats {
    /// Memory the host could hand out now (free, buffers and page cache), MiB; `None` when the
    /// driver does not report memory statistics (the test driver).
    pub available_memory_mib: Option<u64>,
    /// CPU time spent busy (user and system) over all CPUs, ns.
    pub cpu_busy_ns: u64,
    /// All CPU time (busy, idle and iowait) over all CPUs, ns.
    pub cpu_total_ns: u64,
    /// CPU time the running guests have used, ns (their own cumulative times, summed).
    pub guest_cpu_ns: u64,
}

/// libvirt domain states.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DomainState {
    /// No state.
    NoState,
    /// Running.
    Running,
    /// Blocked on a resource.
    Blocked,
    /// Paused.
    Paused,
    /// Being shut down.
    ShuttingDown,
    /// Shut off.
    Shutoff,
    /// Crashed.
    Crashed,
    /// Suspended by guest power management.
    PmSuspended,
    /// A state this client does not know.
    Unknown,
}

impl DomainState {
    /// The name `virsh domstate` prints (also used for `status.domainState`).
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::NoState => "nostate",
            Self::Running => "running",
            Self::Blocked => "blocked",
            Self::Paused => "paused",
            Self::ShuttingDown => "shutdown",
            Self::Shutoff => "shutoff",
            Self::Crashed => "crashed",
            Self::PmSuspended => "pmsuspended",
            Self::Unknown => "unknown",
        }
    }

    /// Whether the domain has a QEMU process (anything but shut off / crashed / no state).
    #[must_use]
    pub fn is_active(self) -> bool {
        !matches!(self, Self::Shutoff | Self::Crashed | Self::NoState | Self::Unknown)
    }
}

/// Why a domain stopped, from the reason libvirt gives with its state (`virDomainGetState`,
/// what `virsh domstate --reason` prints), so a guest that powered itself off is told from one
/// that crashed or was pulled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StopReason {
    /// The guest powered off, on its own or after an ACPI request (`shutoff (shutdown)`).
    ShutDown,
    /// The guest or its QEMU process crashed (`crashed`, `shutoff (crashed)`).
    Crashed,
    /// Hard-stopped from the host (`shutoff (destroyed)`: `virsh destroy`).
    Destroyed,
    /// Anything else: failed to start, saved, migrated, or no reason given.
    Other,
}

impl StopReason {
    /// How a message says it: "domain w1 {was shut down by its guest}".
    #[must_use]
    pub fn describe(self) -> &'static str {
        match self {
            Self::ShutDown => "was shut down by its guest",
            Self::Crashed => "crashed",
            Self::Destroyed => "was destroyed on the host",
            Self::Other => "stopped",
        }
    }
}

/// An existing domain.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DomainInfo {
    /// Domain name.
    pub name: String,
    /// Domain UUID.
    pub uuid: Uuid,
    /// Current state.
    pub state: DomainState,
    /// Why it stopped; `None` while it is active.
    pub stop_reason: Option<StopReason>,
    /// Whether the domain is defined (survives shutdown) rather than transient.
    pub persistent: bool,
}

/// An existing storage pool.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoolInfo {
    /// Target directory (for `dir` pools) or device path.
    pub path: Option<String>,
    /// Whether the pool is started.
    pub active: bool,
}

/// An existing storage volume.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VolumeInfo {
    /// Volume name.
    pub name: String,
    /// Path on the host.
    pub path: String,
    /// Virtual size, bytes.
    pub capacity: u64,
    /// Space allocated on the host, bytes.
    pub allocation: u64,
}

/// A DHCP host entry of a libvirt network (`<ip><dhcp><host mac ip name/>`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DhcpHost {
    /// MAC address, lower-case.
    pub mac: String,
    /// Reserved IPv4 address.
    pub ip: String,
    /// Host name, if any.
    pub name: Option<String>,
}

/// An address a domain's interface has, from the network's DHCP leases or the guest agent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InterfaceAddress {
    /// The interface's MAC address, lower-case.
    pub mac: String,
    /// The address, without prefix.
    pub ip: String,
}

/// A volume in a pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VolumeRef<'a> {
    /// Pool name.
    pub pool: &'a str,
    /// Volume name.
    pub name: &'a str,
}

/// Kinds of libvirt objects, for error messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ObjectKind {
    /// A domain.
    Domain,
    /// A storage pool.
    StoragePool,
    /// A storage volume.
    Volume,
    /// A virtual network.
    Network,
    /// A DHCP host entry of a network.
    DhcpHost,
}

impl std::fmt::Display for ObjectKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Domain => "domain",
            Self::StoragePool => "storage pool",
            Self::Volume => "volume",
            Self::Network => "network",
            Self::DhcpHost => "DHCP host entry",
        })
    }
}

/// Why a hypervisor operation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HypervisorError {
    /// The connection could not be opened or was lost (RPC/transport errors).
    #[error("cannot reach libvirt at {uri}: {message}")]
    ConnectionFailed {
        /// The URI.
        uri: String,
        /// libvirt's message.
        message: String,
    },
    /// The daemon refused our credentials.
    #[error("libvirt refused authentication: {message}")]
    AuthenticationFailed {
        /// libvirt's message.
        message: String,
    },
    /// libvirt answers but its hypervisor driver cannot run guests (e.g. no QEMU emulator).
    #[error("the hypervisor is unavailable: {message}")]
    HypervisorUnavailable {
        /// libvirt's message.
        message: String,
    },
    /// The object does not exist.
    #[error("{kind} {name:?} not found")]
    NotFound {
        /// What was looked up.
        kind: ObjectKind,
        /// Its name.
        name: String,
    },
    /// An object with this name (or domain UUID) already exists.
    #[error("{kind} {name:?} already exists")]
    AlreadyExists {
        /// What was to be created.
        kind: ObjectKind,
        /// Its name.
        name: String,
    },
    /// The storage pool does not exist.
    #[error("storage pool {pool:?} not found")]
    StoragePoolNotFound {
        /// Pool name.
        pool: String,
    },
    /// The base image volume does not exist.
    #[error("base image {volume:?} not found in storage pool {pool:?}")]
    BaseImageNotFound {
        /// Pool name.
        pool: String,
        /// Volume name.
        volume: String,
    },
    /// The input could not be turned into libvirt XML.
    #[error("invalid input: {0}")]
    InvalidInput(#[from] XmlInputError),
    /// The driver does not implement the operation.
    #[error("{operation} is not supported by this libvirt driver: {message}")]
    Unsupported {
        /// What was attempted.
        operation: &'static str,
        /// libvirt's message.
        message: String,
    },
    /// Any other libvirt error.
    #[error("{operation} failed: {message} (libvirt error {code})")]
    Libvirt {
        /// What was attempted.
        operation: &'static str,
        /// libvirt's error code name.
        code: String,
        /// libvirt's message.
        message: String,
    },
}

impl HypervisorError {
    /// A bounded CamelCase reason for conditions and metrics.
    #[must_use]
    pub fn reason(&self) -> &'static str {
        match self {
            Self::ConnectionFailed { .. } => "ConnectionFailed",
            Self::AuthenticationFailed { .. } => "AuthenticationFailed",
            Self::HypervisorUnavailable { .. } => "HypervisorUnavailable",
            Self::NotFound { .. } => "NotFound",
            Self::AlreadyExists { .. } => "AlreadyExists",
            Self::StoragePoolNotFound { .. } => "StoragePoolNotFound",
            Self::BaseImageNotFound { .. } => "BaseImageNotFound",
            Self::InvalidInput(_) => "InvalidSpec",
            Self::Unsupported { .. } => "Unsupported",
            Self::Libvirt { .. } => "LibvirtError",
        }
    }

    /// Whether the object is missing (deletion treats this as done).
    #[must_use]
    pub fn is_not_found(&self) -> bool {
        matches!(self, Self::NotFound { .. })
    }

    /// Whether retrying later may help (connection trouble and unclassified libvirt errors),
    /// as opposed to a problem only a spec or host change fixes.
    #[must_use]
    pub fn is_transient(&self) -> bool {
        matches!(self, Self::ConnectionFailed { .. } | Self::Libvirt { .. })
    }
}

/// Result of a hypervisor operation.
pub type HvResult<T> = Result<T, HypervisorError>;

/// The operations the LibvirtHost and LibvirtMachine controllers perform on a host.
pub trait Hypervisor: Send + Sync {
    /// Versions, KVM availability and capacity; `HypervisorUnavailable` when libvirt answers but
    /// cannot run guests.
    fn capabilities(&self) -> HvResult<HostInfo>;
    /// Names of all domains, running or not.
    fn list_domains(&self) -> HvResult<Vec<String>>;
    /// The domain called `name`, if any.
    fn domain(&self, name: &str) -> HvResult<Option<DomainInfo>>;
    /// Defines the domain and starts it. Fails with `AlreadyExists` (and changes nothing) when a
    /// domain with that name or UUID exists. If defining succeeds and starting fails, the domain
    /// stays defined (shut off) and the error is returned; a retry observes it and calls `start`.
    fn define_and_start(&self, def: &DomainXml) -> HvResult<DomainInfo>;
    /// Starts a defined domain; a running one is left alone.
    fn start(&self, name: &str) -> HvResult<()>;
    /// Hard-stops a domain; a stopped one is left alone.
    fn destroy(&self, name: &str) -> HvResult<()>;
    /// Presses the domain's ACPI power button (`virDomainShutdown`) and returns at once: the
    /// guest may power off in its own time, or ignore it. A stopped domain is left alone.
    fn shutdown(&self, name: &str) -> HvResult<()>;
    /// Removes the domain definition and its NVRAM file (stop it first).
    fn undefine_with_nvram(&self, name: &str) -> HvResult<()>;
    /// The pool called `name`, if any.
    fn pool(&self, name: &str) -> HvResult<Option<PoolInfo>>;
    /// Names of the volumes in `pool`.
    fn list_volumes(&self, pool: &str) -> HvResult<Vec<String>>;
    /// The volume `name` in `pool`, if any; also one copied into the pool behind libvirt's back
    /// (a base image), which may cost a pool refresh.
    fn volume(&self, pool: &str, name: &str) -> HvResult<Option<VolumeInfo>>;
    /// The volume `name` in `pool`, if any, for a volume this provider creates through libvirt:
    /// libvirt knows those without a pool refresh, which on a remote host costs round trips and
    /// a scan of the pool's directory.
    fn created_volume(&self, pool: &str, name: &str) -> HvResult<Option<VolumeInfo>> {
        self.volume(pool, name)
    }
    /// Creates a volume (e.g. a qcow2 overlay or the empty Ignition volume).
    fn create_volume(&self, pool: &str, vol: &VolumeXml) -> HvResult<VolumeInfo>;
    /// Creates a volume in `pool` as a full copy of `from` (missing `from` is `BaseImageNotFound`).
    fn clone_volume(&self, pool: &str, vol: &VolumeXml, from: VolumeRef<'_>) -> HvResult<VolumeInfo>;
    /// Writes `bytes` to the start of an existing volume through libvirt (no shell, no scp).
    /// Bytes past `bytes.len()` keep their old content (zeros for a fresh volume), so a payload
    /// that must be read whole, like Ignition, goes into a volume created for exactly its size
    /// ([`super::volume_xml::ignition_volume`]); a changed payload means delete and recreate.
    fn upload_volume(&self, pool: &str, name: &str, bytes: &[u8]) -> HvResult<()>;
    /// Reads up to `max_len` bytes from the start of a volume.
    fn download_volume(&self, pool: &str, name: &str, max_len: u64) -> HvResult<Vec<u8>>;
    /// Deletes a volume and its data.
    fn delete_volume(&self, pool: &str, name: &str) -> HvResult<()>;
    /// The host's memory and CPU statistics (`virNodeGetMemoryStats`, `virNodeGetCPUStats`) and
    /// the guests' CPU time, with no remote shell.
    fn node_stats(&self) -> HvResult<NodeStats>;
    /// The DHCP host entries of network `network` (`NotFound` for a missing network).
    fn dhcp_hosts(&self, network: &str) -> HvResult<Vec<DhcpHost>>;
    /// Adds a DHCP host entry (`virNetworkUpdate` add-last, section `ip-dhcp-host`) to the
    /// persistent definition and, when the network runs, to the live one.
    fn add_dhcp_host(&self, network: &str, host: &DhcpHost) -> HvResult<()>;
    /// Removes a DHCP host entry (`virNetworkUpdate` delete), config and live.
    fn remove_dhcp_host(&self, network: &str, host: &DhcpHost) -> HvResult<()>;
    /// The addresses of a running domain's interfaces: the networks' DHCP leases, else the guest
    /// agent's view; empty when neither knows any yet.
    fn interface_addresses(&self, domain: &str) -> HvResult<Vec<InterfaceAddress>>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_are_bounded_camel_case() {
        let all = [
            HypervisorError::ConnectionFailed {
                uri: "u".into(),
                message: "m".into(),
            },
            HypervisorError::AuthenticationFailed { message: "m".into() },
            HypervisorError::HypervisorUnavailable { message: "m".into() },
            HypervisorError::NotFound {
                kind: ObjectKind::Domain,
                name: "d".into(),
            },
            HypervisorError::AlreadyExists {
                kind: ObjectKind::Volume,
                name: "v".into(),
            },
            HypervisorError::StoragePoolNotFound { pool: "p".into() },
            HypervisorError::BaseImageNotFound {
                pool: "p".into(),
                volume: "v".into(),
            },
            HypervisorError::InvalidInput(XmlInputError::InvalidValue {
                field: "f",
                reason: "r".into(),
            }),
            HypervisorError::Unsupported {
                operation: "o",
                message: "m".into(),
            },
            HypervisorError::Libvirt {
                operation: "o",
                code: "c".into(),
                message: "m".into(),
            },
        ];
        for e in &all {
            let r = e.reason();
            assert!(r.chars().next().is_some_and(|c| c.is_ascii_uppercase()), "{r}");
            assert!(r.chars().all(|c| c.is_ascii_alphanumeric()), "{r}");
            assert!(!e.to_string().is_empty());
        }
        assert!(all[3].is_not_found() && !all[4].is_not_found());
        assert!(all[0].is_transient() && !all[5].is_transient());
        assert_eq!(DomainState::Shutoff.as_str(), "shutoff");
        assert!(DomainState::Paused.is_active() && !DomainState::Crashed.is_active());
        assert_eq!(StopReason::ShutDown.describe(), "was shut down by its guest");
    }
}

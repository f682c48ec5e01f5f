//! The host-side steps for one machine, as blocking calls on a [`Hypervisor`] (run them with
//! `spawn_blocking`). Every step looks before it acts, so a rerun after a crash at any point
//! finishes the job without duplicating anything:
//!
//! 1. the storage pool exists and is active; the base image exists;
//! 2. the root volume exists (a qcow2 overlay on the base image, or a full copy), and so does
//!    each `additionalDisks` volume (empty, thin qcow2);
//! 3. each DHCP reservation is in its libvirt network (an entry with our MAC and IP is ours;
//!    any other clash is `AlreadyExists` and stops provisioning);
//! 4. unless the domain is already defined, the Ignition volume holds exactly this machine's
//!    payload (a leftover from an interrupted upload is replaced);
//! 5. the domain is defined and running; a domain of that name with another UUID belongs to
//!    someone else and is never touched.
//!
//! [`teardown`] removes what [`super::plan::artifacts`] recorded, treating "not found" as done,
//! and [`leftovers`] proves nothing remains.

use uuid::Uuid;

use super::plan::{DataDiskPlan, RootDiskPlan, console_volume_name, split_pool_volume};
use crate::{
    api::libvirt_machine::{CloneStrategy, DhcpReservation, MachineReason, ManagedArtifacts, Reason},
    libvirt::{
        domain_xml::{ConsolePlan, DomainPlan, DomainXml},
        hypervisor::{
            DhcpHost, DomainInfo, DomainState, HvResult, Hypervisor, HypervisorError, InterfaceAddress, VolumeRef,
        },
        volume_xml::{VolumeFormat, empty_qcow2_volume, full_clone_volume, ignition_volume, overlay_volume},
        xml::XmlInputError,
    },
    reconcile::host_connections::{Transient, hypervisor_reason},
};

/// Why provisioning stopped.
#[derive(Debug, thiserror::Error)]
pub enum ProvisionError {
    /// A libvirt call failed.
    #[error(transparent)]
    Hypervisor(#[from] HypervisorError),
    /// The storage pool exists but is not started.
    #[error("storage pool {0:?} is not active")]
    PoolInactive(String),
    /// The pool's file system has no room for a new volume.
    #[error("storage pool {pool:?} is full: {message}")]
    PoolFull {
        /// Pool name.
        pool: String,
        /// libvirt's message.
        message: String,
    },
    /// The base image is larger than the requested root disk.
    #[error("rootDisk.size ({size} bytes) is smaller than base image {image:?} ({base} bytes)")]
    RootDiskTooSmall {
        /// Requested bytes.
        size: u64,
        /// Base image virtual size.
        base: u64,
        /// Base image name.
        image: String,
    },
    /// A domain with the machine's name exists with another UUID.
    #[error("a domain named {name:?} already exists with UUID {found}, not this machine's {ours}")]
    DomainNameConflict {
        /// Domain name.
        name: String,
        /// UUID found.
        found: Uuid,
        /// Our UUID.
        ours: Uuid,
    },
}

impl ProvisionError {
    /// The condition reason.
    #[must_use]
    pub const fn reason(&self) -> Reason {
        match self {
            Self::Hypervisor(e) => Reason::Host(hypervisor_reason(e)),
            Self::PoolInactive(_) => Reason::Machine(MachineReason::StoragePoolInactive),
            Self::PoolFull { .. } => Reason::Machine(MachineReason::StoragePoolFull),
            Self::RootDiskTooSmall { .. } => Reason::Machine(MachineReason::RootDiskTooSmall),
            Self::DomainNameConflict { .. } => Reason::Machine(MachineReason::DomainNameConflict),
        }
    }

    /// Whether a retry may succeed without a change to a spec or to the host.
    #[must_use]
    pub fn is_transient(&self) -> bool {
        matches!(self, Self::Hypervisor(e) if e.is_transient())
    }
}

impl Transient for ProvisionError {
    fn is_transient(&self) -> bool {
        Self::is_transient(self)
    }

    fn lost_connection(&self) -> bool {
        matches!(self, Self::Hypervisor(e) if e.lost_connection())
    }
}

impl From<XmlInputError> for ProvisionError {
    fn from(e: XmlInputError) -> Self {
        Self::Hypervisor(HypervisorError::InvalidInput(e))
    }
}

/// Maps a failed volume write in `pool`: out of space is [`ProvisionError::PoolFull`], which a
/// retry at once cannot mend and which says nothing against the connection.
fn in_pool(pool: &str) -> impl Fn(HypervisorError) -> ProvisionError + '_ {
    move |e| match &e {
        HypervisorError::Libvirt { message, .. } if is_out_of_space(message) => ProvisionError::PoolFull {
            pool: pool.to_owned(),
            message: message.clone(),
        },
        _ => e.into(),
    }
}

/// libvirt's words for a full pool: the file system's ENOSPC, or its own free-space check.
fn is_out_of_space(message: &str) -> bool {
    let lower = message.to_ascii_lowercase();
    lower.contains("no space left on device") || (lower.contains("not enough") && lower.contains("space"))
}

/// Everything provisioning needs.
pub struct Request<'a> {
    /// The root disk.
    pub root: &'a RootDiskPlan,
    /// The domain, without the Ignition and console paths.
    pub domain: &'a DomainPlan,
    /// This machine's rendered Ignition.
    pub ignition: &'a [u8],
    /// The `additionalDisks` volumes.
    pub data_disks: &'a [DataDiskPlan],
    /// The DHCP reservations (already recorded in `status.managedArtifacts`).
    pub reservations: &'a [DhcpReservation],
    /// Whether to read the interfaces' addresses once the domain runs (DHCP interfaces).
    pub read_addresses: bool,
}

/// What provisioning left running.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Provisioned {
    /// The domain.
    pub domain: DomainInfo,
    /// Whether this call defined it (first boot) rather than found it.
    pub defined_now: bool,
    /// Whether this call started a stopped domain.
    pub started_now: bool,
    /// The interfaces' addresses libvirt knows (only when the request asked for them).
    pub addresses: Vec<InterfaceAddress>,
}

/// The domain `name` if it is ours; a foreign one is a conflict.
fn our_domain(hv: &dyn Hypervisor, name: &str, uuid: Uuid) -> Result<Option<DomainInfo>, ProvisionError> {
    match hv.domain(name)? {
        Some(d) if d.uuid != uuid => Err(ProvisionError::DomainNameConflict {
            name: name.to_owned(),
            found: d.uuid,
            ours: uuid,
        }),
        other => Ok(other),
    }
}

fn ensure_root_volume(hv: &dyn Hypervisor, root: &RootDiskPlan) -> Result<(), ProvisionError> {
    let pool = hv
        .pool(&root.pool)?
        .ok_or_else(|| HypervisorError::StoragePoolNotFound {
            pool: root.pool.clone(),
        })?;
    if !pool.active {
        return Err(ProvisionError::PoolInactive(root.pool.clone()));
    }
    if hv.created_volume(&root.pool, &root.volume)?.is_some() {
        return Ok(());
    }
    let base = match hv.volume(&root.base_pool, &root.base_image) {
        Ok(Some(v)) => v,
        Ok(None) => {
            return Err(HypervisorError::BaseImageNotFound {
                pool: root.base_pool.clone(),
                volume: root.base_image.clone(),
            }
            .into());
        }
        Err(e) => return Err(e.into()),
    };
    if root.size_bytes < base.capacity {
        return Err(ProvisionError::RootDiskTooSmall {
            size: root.size_bytes,
            base: base.capacity,
            image: root.base_image.clone(),
        });
    }
    let created = match root.strategy {
        CloneStrategy::CopyOnWrite => hv.create_volume(
            &root.pool,
            &overlay_volume(&root.volume, root.size_bytes, &base.path, VolumeFormat::Qcow2)?,
        ),
        CloneStrategy::FullClone => hv.clone_volume(
            &root.pool,
            &full_clone_volume(&root.volume, root.size_bytes, VolumeFormat::Qcow2)?,
            VolumeRef {
                pool: &root.base_pool,
                name: &root.base_image,
            },
        ),
    };
    match created {
        Ok(_) => Ok(()),
        // Another attempt got there first: observe again on the next pass.
        Err(HypervisorError::AlreadyExists { .. }) => Ok(()),
        Err(e) => Err(in_pool(&root.pool)(e)),
    }
}

fn ensure_data_disks(hv: &dyn Hypervisor, disks: &[DataDiskPlan]) -> Result<(), ProvisionError> {
    for d in disks {
        if hv.created_volume(&d.pool, &d.volume)?.is_some() {
            continue;
        }
        match hv.create_volume(&d.pool, &empty_qcow2_volume(&d.volume, d.size_bytes)?) {
            Ok(_) | Err(HypervisorError::AlreadyExists { .. }) => {}
            Err(e) => return Err(in_pool(&d.pool)(e)),
        }
    }
    Ok(())
}

/// The libvirt entry of a recorded reservation.
#[must_use]
pub fn dhcp_host(r: &DhcpReservation) -> DhcpHost {
    DhcpHost {
        mac: r.mac.to_ascii_lowercase(),
        ip: r.ip.clone(),
        name: r.hostname.clone(),
    }
}

fn ensure_reservations(hv: &dyn Hypervisor, reservations: &[DhcpReservation]) -> Result<(), ProvisionError> {
    for r in reservations {
        let entry = dhcp_host(r);
        let present = hv.dhcp_hosts(&r.network)?;
        if present.iter().any(|h| h.mac == entry.mac && h.ip == entry.ip) {
            continue;
        }
        hv.add_dhcp_host(&r.network, &entry)?;
    }
    Ok(())
}

/// The Ignition volume's path, after making sure it holds exactly `payload`.
fn ensure_ignition(hv: &dyn Hypervisor, pool: &str, node_name: &str, payload: &[u8]) -> Result<String, ProvisionError> {
    let vol = ignition_volume(node_name, payload.len() as u64)?;
    if let Some(existing) = hv.created_volume(pool, &vol.name)? {
        let current = hv.download_volume(pool, &vol.name, payload.len() as u64 + 1)?;
        if current == payload {
            return Ok(existing.path);
        }
        // A half-written or outdated payload: replace it (the domain is not defined yet).
        delete_volume_if_present(hv, pool, &vol.name)?;
    }
    let created = hv.create_volume(pool, &vol).map_err(in_pool(pool))?;
    hv.upload_volume(pool, &vol.name, payload).map_err(in_pool(pool))?;
    Ok(created.path)
}

/// Bring the machine to a running domain.
///
/// # Errors
/// When a step fails; what exists stays, and a rerun continues from there.
pub fn provision(hv: &dyn Hypervisor, req: &Request<'_>) -> Result<Provisioned, ProvisionError> {
    let mut done = provision_domain(hv, req)?;
    if req.read_addresses && done.domain.state.is_active() {
        done.addresses = hv.interface_addresses(&req.domain.name)?;
    }
    Ok(done)
}

fn provision_domain(hv: &dyn Hypervisor, req: &Request<'_>) -> Result<Provisioned, ProvisionError> {
    let name = &req.domain.name;
    ensure_root_volume(hv, req.root)?;
    ensure_data_disks(hv, req.data_disks)?;
    ensure_reservations(hv, req.reservations)?;
    if let Some(existing) = our_domain(hv, name, req.domain.uuid)? {
        return ensure_running(hv, existing, false);
    }
    let ignition_path = ensure_ignition(hv, &req.root.pool, name, req.ignition)?;
    let pool_path =
        hv.pool(&req.root.pool)?
            .and_then(|p| p.path)
            .ok_or_else(|| HypervisorError::StoragePoolNotFound {
                pool: req.root.pool.clone(),
            })?;
    let mut plan = req.domain.clone();
    plan.ignition_path = Some(ignition_path);
    plan.console = ConsolePlan::PtyWithLog(format!(
        "{}/{}",
        pool_path.trim_end_matches('/'),
        console_volume_name(name)
    ));
    let xml: DomainXml = plan.to_xml()?;
    match hv.define_and_start(&xml) {
        Ok(domain) => Ok(Provisioned {
            domain,
            defined_now: true,
            started_now: true,
            addresses: Vec::new(),
        }),
        Err(HypervisorError::AlreadyExists { .. }) => match our_domain(hv, name, req.domain.uuid)? {
            Some(existing) => ensure_running(hv, existing, false),
            None => Err(HypervisorError::AlreadyExists {
                kind: crate::libvirt::hypervisor::ObjectKind::Domain,
                name: name.clone(),
            }
            .into()),
        },
        Err(e) => Err(e.into()),
    }
}

fn ensure_running(hv: &dyn Hypervisor, domain: DomainInfo, defined_now: bool) -> Result<Provisioned, ProvisionError> {
    if domain.state.is_active() {
        return Ok(Provisioned {
            domain,
            defined_now,
            started_now: false,
            addresses: Vec::new(),
        });
    }
    hv.start(&domain.name)?;
    let domain = hv.domain(&domain.name)?.ok_or_else(|| HypervisorError::NotFound {
        kind: crate::libvirt::hypervisor::ObjectKind::Domain,
        name: domain.name.clone(),
    })?;
    Ok(Provisioned {
        domain,
        defined_now,
        started_now: true,
        addresses: Vec::new(),
    })
}

/// The domain's state, if it still exists and is ours.
///
/// # Errors
/// Connection trouble, or a foreign domain under our name.
pub fn inspect(hv: &dyn Hypervisor, name: &str, uuid: Uuid) -> Result<Option<DomainInfo>, ProvisionError> {
    our_domain(hv, name, uuid)
}

/// Start a stopped domain (the watch restarts VMs that shut off).
///
/// # Errors
/// When libvirt refuses.
pub fn restart(hv: &dyn Hypervisor, name: &str) -> HvResult<Option<DomainState>> {
    hv.start(name)?;
    Ok(hv.domain(name)?.map(|d| d.state))
}

fn delete_volume_if_present(hv: &dyn Hypervisor, pool: &str, name: &str) -> HvResult<()> {
    match hv.delete_volume(pool, name) {
        Err(e) if e.is_not_found() || matches!(e, HypervisorError::StoragePoolNotFound { .. }) => Ok(()),
        other => other,
    }
}

/// A recorded volume, and whether libvirt lists it without a pool refresh: the provider
/// creates its disks through libvirt, but virtlogd writes the console log into the pool behind
/// libvirt's back, so only a refresh makes that one visible.
struct Recorded<'a> {
    pool: &'a str,
    name: &'a str,
    listed_without_refresh: bool,
}

fn volumes(artifacts: &ManagedArtifacts) -> impl Iterator<Item = Recorded<'_>> {
    let created = [&artifacts.root_volume, &artifacts.ignition_volume]
        .into_iter()
        .filter_map(|v| v.as_deref())
        .chain(artifacts.additional_volumes.iter().map(String::as_str))
        .map(|v| (v, true));
    let console = artifacts.console_log.as_deref().map(|v| (v, false));
    created.chain(console).filter_map(|(v, listed_without_refresh)| {
        split_pool_volume(v).map(|(pool, name)| Recorded {
            pool,
            name,
            listed_without_refresh,
        })
    })
}

/// Whether a recorded volume exists, refreshing the pool only for one written behind libvirt's
/// back.
fn recorded_volume_exists(hv: &dyn Hypervisor, v: &Recorded<'_>) -> HvResult<bool> {
    let found = if v.listed_without_refresh {
        hv.created_volume(v.pool, v.name)
    } else {
        hv.volume(v.pool, v.name)
    };
    match found {
        Ok(found) => Ok(found.is_some()),
        Err(HypervisorError::StoragePoolNotFound { .. }) => Ok(false),
        Err(e) => Err(e),
    }
}

/// Remove the domain (if ours) with its NVRAM, then every recorded volume.
///
/// # Errors
/// The first failure other than "not found"; a rerun continues.
pub fn teardown(hv: &dyn Hypervisor, artifacts: &ManagedArtifacts, uuid: Uuid) -> Result<(), ProvisionError> {
    if let Some(name) = &artifacts.domain_name
        && let Some(domain) = hv.domain(name)?
    {
        if domain.uuid != uuid {
            // Not ours: leave it, but still remove our volumes.
            tracing::warn!(domain = %name, "a domain with this machine's name is not its own; leaving it");
        } else {
            match hv.destroy(name) {
                Err(e) if !e.is_not_found() => return Err(e.into()),
                _ => {}
            }
            match hv.undefine_with_nvram(name) {
                Err(e) if !e.is_not_found() => return Err(e.into()),
                _ => {}
            }
        }
    }
    for v in volumes(artifacts) {
        // Deleting looks the volume up without a refresh: the console log needs one first.
        if v.listed_without_refresh || recorded_volume_exists(hv, &v)? {
            delete_volume_if_present(hv, v.pool, v.name)?;
        }
    }
    for r in &artifacts.dhcp_reservations {
        match hv.remove_dhcp_host(&r.network, &dhcp_host(r)) {
            Err(e) if !e.is_not_found() => return Err(e.into()),
            _ => {}
        }
    }
    Ok(())
}

/// What of `artifacts` still exists on the host (empty after a complete teardown).
///
/// # Errors
/// Connection trouble.
pub fn leftovers(hv: &dyn Hypervisor, artifacts: &ManagedArtifacts, uuid: Uuid) -> HvResult<Vec<String>> {
    let mut left = Vec::new();
    if let Some(name) = &artifacts.domain_name
        && hv.domain(name)?.is_some_and(|d| d.uuid == uuid)
    {
        left.push(format!("domain {name}"));
    }
    for v in volumes(artifacts) {
        if recorded_volume_exists(hv, &v)? {
            left.push(format!("volume {}/{}", v.pool, v.name));
        }
    }
    for r in &artifacts.dhcp_reservations {
        let entry = dhcp_host(r);
        match hv.dhcp_hosts(&r.network) {
            Ok(hosts) if hosts.iter().any(|h| h.mac == entry.mac && h.ip == entry.ip) => {
                left.push(format!("DHCP host {} {} in network {}", r.mac, r.ip, r.network));
            }
            Ok(_) => {}
            Err(e) if e.is_not_found() => {}
            Err(e) => return Err(e),
        }
    }
    Ok(left)
}

#[cfg(test)]
mod tests;

//! An in-memory [`Hypervisor`] for unit tests (test builds only).
//!
//! It models the trait's documented contract, nothing more, so the controllers' host-side
//! decisions (look before acting, reruns after a failure at any step, foreign objects left alone)
//! can be tested without libvirt:
//! - lookups return `Ok(None)` for a missing object; a missing pool in any volume operation is
//!   [`HypervisorError::StoragePoolNotFound`];
//! - creators never overwrite ([`HypervisorError::AlreadyExists`]); `define_and_start` also refuses
//!   an existing UUID;
//! - `start` of a running and `destroy` of a stopped domain succeed; `destroy`,
//!   `undefine_with_nvram`, `delete_volume` and `upload_volume` on a missing object are
//!   [`HypervisorError::NotFound`]; `clone_volume` from a missing source is
//!   [`HypervisorError::BaseImageNotFound`];
//! - uploads write at the start of the volume and keep the bytes past their length; downloads
//!   return at most `max_len` bytes.
//!
//! Where the contract is silent the fake follows libvirt: volume operations in an inactive pool
//! fail (`OperationInvalid`), and undefining a running domain leaves it running as a transient
//! domain that disappears when destroyed. A stopped domain says why, as libvirt's state reason
//! does: `destroy` leaves it destroyed, an honoured `shutdown` shut down. A guest powers off at
//! once on `shutdown`, unless [`FakeHypervisor::ignore_acpi`] made it one that ignores the
//! request.
//!
//! Networks hold only DHCP host entries (`with_network`); adding one whose MAC, IP or name is
//! already there is `AlreadyExists` (libvirt's rule), removing one matches by MAC and IP.
//! Interface addresses are whatever a test set with `set_interface_addresses`.
//!
//! A volume's content is the bytes written to it: a fresh volume holds as many zeros as its XML's
//! `<allocation>` (a preallocated raw file), a clone holds its source's bytes.

use std::{
    collections::{BTreeMap, HashMap},
    sync::{Mutex, MutexGuard, PoisonError},
};

use uuid::Uuid;

use super::{
    domain_xml::DomainXml,
    hypervisor::{
        DhcpHost, DomainInfo, DomainState, HostInfo, HvResult, Hypervisor, HypervisorError, InterfaceAddress,
        NodeStats, ObjectKind, PoolInfo, StopReason, VolumeInfo, VolumeRef,
    },
    volume_xml::VolumeXml,
    xml::{XmlInputError, element_text},
};

/// Names one [`Hypervisor`] method, for [`FakeHypervisor::fail_next`] and
/// [`FakeHypervisor::calls`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    /// [`Hypervisor::capabilities`].
    Capabilities,
    /// [`Hypervisor::list_domains`].
    ListDomains,
    /// [`Hypervisor::domain`].
    Domain,
    /// [`Hypervisor::define_and_start`].
    DefineAndStart,
    /// [`Hypervisor::start`].
    Start,
    /// [`Hypervisor::destroy`].
    Destroy,
    /// [`Hypervisor::shutdown`].
    Shutdown,
    /// [`Hypervisor::undefine_with_nvram`].
    UndefineWithNvram,
    /// [`Hypervisor::pool`].
    Pool,
    /// [`Hypervisor::list_volumes`].
    ListVolumes,
    /// [`Hypervisor::volume`].
    Volume,
    /// [`Hypervisor::created_volume`].
    CreatedVolume,
    /// [`Hypervisor::create_volume`].
    CreateVolume,
    /// [`Hypervisor::clone_volume`].
    CloneVolume,
    /// [`Hypervisor::upload_volume`].
    UploadVolume,
    /// [`Hypervisor::download_volume`].
    DownloadVolume,
    /// [`Hypervisor::delete_volume`].
    DeleteVolume,
    /// [`Hypervisor::node_stats`].
    NodeStats,
    /// [`Hypervisor::dhcp_hosts`].
    DhcpHosts,
    /// [`Hypervisor::add_dhcp_host`].
    AddDhcpHost,
    /// [`Hypervisor::remove_dhcp_host`].
    RemoveDhcpHost,
    /// [`Hypervisor::interface_addresses`].
    InterfaceAddresses,
}

struct Volume {
    capacity: u64,
    allocation: u64,
    bytes: Vec<u8>,
}

struct Pool {
    path: String,
    active: bool,
    volumes: BTreeMap<String, Volume>,
    /// Files in the pool's directory that libvirt lists only after a refresh.
    unlisted: BTreeMap<String, Volume>,
}

impl Pool {
    /// What `virStoragePoolRefresh` does: every file in the directory becomes a volume.
    fn refresh(&mut self) {
        self.volumes.append(&mut self.unlisted);
    }
}

impl Pool {
    fn volume_path(&self, name: &str) -> String {
        format!("{}/{name}", self.path.trim_end_matches('/'))
    }

    fn info(&self, name: &str, v: &Volume) -> VolumeInfo {
        VolumeInfo {
            name: name.to_owned(),
            path: self.volume_path(name),
            capacity: v.capacity,
            allocation: v.allocation,
        }
    }
}

struct Domain {
    uuid: Uuid,
    state: DomainState,
    stop_reason: Option<StopReason>,
    persistent: bool,
    /// The guest does not react to the ACPI power button.
    ignores_acpi: bool,
    xml: String,
}

impl Domain {
    fn new(uuid: Uuid, state: DomainState, xml: String) -> Self {
        Self {
            uuid,
            state,
            stop_reason: default_reason(state),
            persistent: true,
            ignores_acpi: false,
            xml,
        }
    }

    fn stop(&mut self, why: StopReason) {
        self.state = DomainState::Shutoff;
        self.stop_reason = Some(why);
    }
}

/// The reason libvirt would give for a domain put in `state` without one.
fn default_reason(state: DomainState) -> Option<StopReason> {
    match state {
        DomainState::Crashed => Some(StopReason::Crashed),
        s if s.is_active() => None,
        _ => Some(StopReason::Other),
    }
}

#[derive(Default)]
struct State {
    pools: BTreeMap<String, Pool>,
    domains: BTreeMap<String, Domain>,
    calls: HashMap<Op, usize>,
    failures: HashMap<Op, HypervisorError>,
    stats: NodeStats,
    networks: BTreeMap<String, Vec<DhcpHost>>,
    addresses: BTreeMap<String, Vec<InterfaceAddress>>,
}

impl State {
    /// Counts the call and hands out an injected failure, before anything changes.
    fn enter(&mut self, op: Op) -> HvResult<()> {
        *self.calls.entry(op).or_default() += 1;
        self.failures.remove(&op).map_or(Ok(()), Err)
    }

    /// The pool for a volume operation: libvirt refuses those in a stopped pool.
    fn active_pool(&mut self, name: &str, operation: &'static str) -> HvResult<&mut Pool> {
        let pool = self
            .pools
            .get_mut(name)
            .ok_or_else(|| HypervisorError::StoragePoolNotFound { pool: name.to_owned() })?;
        if pool.active {
            Ok(pool)
        } else {
            Err(HypervisorError::Libvirt {
                operation,
                code: "OperationInvalid".to_owned(),
                message: format!("storage pool '{name}' is not active"),
            })
        }
    }

    fn domain_mut(&mut self, name: &str) -> HvResult<&mut Domain> {
        self.domains
            .get_mut(name)
            .ok_or_else(|| not_found(ObjectKind::Domain, name))
    }
}

fn not_found(kind: ObjectKind, name: &str) -> HypervisorError {
    HypervisorError::NotFound {
        kind,
        name: name.to_owned(),
    }
}

fn exists(kind: ObjectKind, name: &str) -> HypervisorError {
    HypervisorError::AlreadyExists {
        kind,
        name: name.to_owned(),
    }
}

fn invalid(field: &'static str, reason: &str) -> HypervisorError {
    HypervisorError::InvalidInput(XmlInputError::InvalidValue {
        field,
        reason: reason.to_owned(),
    })
}

fn domain_info(name: &str, d: &Domain) -> DomainInfo {
    DomainInfo {
        name: name.to_owned(),
        uuid: d.uuid,
        state: d.state,
        stop_reason: d.stop_reason,
        persistent: d.persistent,
    }
}

/// A byte count from a `<tag unit='bytes'>N</tag>` element (the form the volume builders write).
fn bytes_element(xml: &str, tag: &'static str) -> HvResult<Option<u64>> {
    element_text(xml, &[tag])
        .map(|t| {
            t.parse()
                .map_err(|_| invalid(tag, &format!("{t:?} is not a byte count")))
        })
        .transpose()
}

/// A volume as libvirt would create it from `vol.xml`.
fn new_volume(vol: &VolumeXml) -> HvResult<Volume> {
    let capacity = bytes_element(&vol.xml, "capacity")?.ok_or_else(|| invalid("capacity", "missing"))?;
    let allocation = bytes_element(&vol.xml, "allocation")?.unwrap_or(0).min(capacity);
    Ok(Volume {
        capacity,
        allocation,
        bytes: vec![0; usize::try_from(allocation).unwrap_or(0)],
    })
}

/// An in-memory hypervisor holding pools, their volumes and domains. Cheap to build per test.
#[derive(Default)]
pub struct FakeHypervisor {
    state: Mutex<State>,
}

impl FakeHypervisor {
    /// A host with nothing on it.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// A poisoned lock only means another test thread panicked; the state is still usable.
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Adds a pool whose volumes live under `path`.
    #[must_use]
    pub fn with_pool(self, name: &str, path: &str, active: bool) -> Self {
        self.lock().pools.insert(
            name.to_owned(),
            Pool {
                path: path.to_owned(),
                active,
                volumes: BTreeMap::new(),
                unlisted: BTreeMap::new(),
            },
        );
        self
    }

    /// Adds an empty volume of `capacity` bytes (e.g. a base image). Panics without the pool: a
    /// test that sets up a volume nowhere is wrong.
    #[must_use]
    pub fn with_volume(self, pool: &str, name: &str, capacity: u64) -> Self {
        let volume = Volume {
            capacity,
            allocation: 0,
            bytes: Vec::new(),
        };
        match self.lock().pools.get_mut(pool) {
            Some(p) => p.volumes.insert(name.to_owned(), volume),
            None => panic!("with_volume: no pool {pool:?}"),
        };
        self
    }

    /// Adds a network with no DHCP host entries.
    #[must_use]
    pub fn with_network(self, name: &str) -> Self {
        self.lock().networks.insert(name.to_owned(), Vec::new());
        self
    }

    /// The DHCP host entries of `network` (empty for a missing one).
    pub fn dhcp_entries(&self, network: &str) -> Vec<DhcpHost> {
        self.lock().networks.get(network).cloned().unwrap_or_default()
    }

    /// What `interface_addresses` reports for `domain` from now on.
    pub fn set_interface_addresses(&self, domain: &str, addresses: Vec<InterfaceAddress>) {
        self.lock().addresses.insert(domain.to_owned(), addresses);
    }

    /// A persistent domain someone else defined (no XML), replacing any of that name.
    pub fn insert_domain(&self, name: &str, uuid: Uuid, state: DomainState) {
        self.lock()
            .domains
            .insert(name.to_owned(), Domain::new(uuid, state, String::new()));
    }

    /// Runs `change` on domain `name`; panics if there is none, so a typo cannot make a test pass.
    fn with_domain(&self, name: &str, what: &str, change: impl FnOnce(&mut Domain)) {
        match self.lock().domains.get_mut(name) {
            Some(d) => change(d),
            None => panic!("{what}: no domain {name:?}"),
        }
    }

    /// Changes a domain's state behind the controller's back, with the reason libvirt gives
    /// when it knows no better (`crashed` for a crashed state).
    pub fn set_domain_state(&self, name: &str, state: DomainState) {
        self.with_domain(name, "set_domain_state", |d| {
            d.state = state;
            d.stop_reason = default_reason(state);
        });
    }

    /// The domain stopped behind the controller's back, for `why` (the guest powered off, it
    /// crashed, someone destroyed it).
    pub fn stop_domain(&self, name: &str, why: StopReason) {
        self.with_domain(name, "stop_domain", |d| d.stop(why));
    }

    /// From now on the guest of `name` ignores the ACPI power button: `shutdown` succeeds and
    /// it keeps running.
    pub fn ignore_acpi(&self, name: &str) {
        self.with_domain(name, "ignore_acpi", |d| d.ignores_acpi = true);
    }

    /// The VM vanished (undefined by someone else). Panics if there is no such domain.
    pub fn remove_domain(&self, name: &str) {
        if self.lock().domains.remove(name).is_none() {
            panic!("remove_domain: no domain {name:?}");
        }
    }

    /// Starts or stops a pool. Panics if there is no such pool.
    pub fn set_pool_active(&self, name: &str, active: bool) {
        match self.lock().pools.get_mut(name) {
            Some(p) => p.active = active,
            None => panic!("set_pool_active: no pool {name:?}"),
        }
    }

    /// What [`Hypervisor::node_stats`] reports from now on.
    pub fn set_node_stats(&self, stats: NodeStats) {
        self.lock().stats = stats;
    }

    /// The next call of `op` returns `err` and changes nothing; later calls behave normally.
    pub fn fail_next(&self, op: Op, err: HypervisorError) {
        self.lock().failures.insert(op, err);
    }

    /// How often `op` was called, failed calls included.
    #[must_use]
    pub fn calls(&self, op: Op) -> usize {
        self.lock().calls.get(&op).copied().unwrap_or(0)
    }

    /// Every domain, by name.
    #[must_use]
    pub fn domains(&self) -> Vec<DomainInfo> {
        self.lock().domains.iter().map(|(n, d)| domain_info(n, d)).collect()
    }

    /// The XML a domain was defined with (empty for [`Self::insert_domain`]'s).
    #[must_use]
    pub fn domain_xml(&self, name: &str) -> Option<String> {
        self.lock().domains.get(name).map(|d| d.xml.clone())
    }

    /// A file written into `pool`'s directory behind libvirt's back, as virtlogd writes a
    /// console log: libvirt lists it only after a pool refresh. Panics if there is no such pool.
    pub fn write_behind_libvirt(&self, pool: &str, name: &str) {
        let file = Volume {
            capacity: 0,
            allocation: 0,
            bytes: Vec::new(),
        };
        match self.lock().pools.get_mut(pool) {
            Some(p) => p.unlisted.insert(name.to_owned(), file),
            None => panic!("write_behind_libvirt: no pool {pool:?}"),
        };
    }

    /// Names of the files in `pool`'s directory (listed by libvirt or not), sorted. Panics if
    /// there is no such pool.
    #[must_use]
    pub fn volume_names(&self, pool: &str) -> Vec<String> {
        match self.lock().pools.get(pool) {
            Some(p) => {
                let mut names: Vec<String> = p.volumes.keys().chain(p.unlisted.keys()).cloned().collect();
                names.sort();
                names
            }
            None => panic!("volume_names: no pool {pool:?}"),
        }
    }

    /// A volume's whole content, if the volume exists.
    #[must_use]
    pub fn volume_bytes(&self, pool: &str, name: &str) -> Option<Vec<u8>> {
        self.lock()
            .pools
            .get(pool)
            .and_then(|p| p.volumes.get(name))
            .map(|v| v.bytes.clone())
    }
}

impl Hypervisor for FakeHypervisor {
    fn capabilities(&self) -> HvResult<HostInfo> {
        self.lock().enter(Op::Capabilities)?;
        Ok(HostInfo {
            libvirt_version: "9.0.0".to_owned(),
            driver: "QEMU".to_owned(),
            hypervisor_version: "10.0.2".to_owned(),
            kvm_available: true,
            cpus: 16,
            memory_mib: 31_560,
            free_memory_mib: Some(16_384),
        })
    }

    fn list_domains(&self) -> HvResult<Vec<String>> {
        let mut s = self.lock();
        s.enter(Op::ListDomains)?;
        Ok(s.domains.keys().cloned().collect())
    }

    fn domain(&self, name: &str) -> HvResult<Option<DomainInfo>> {
        let mut s = self.lock();
        s.enter(Op::Domain)?;
        Ok(s.domains.get(name).map(|d| domain_info(name, d)))
    }

    fn define_and_start(&self, def: &DomainXml) -> HvResult<DomainInfo> {
        let mut s = self.lock();
        s.enter(Op::DefineAndStart)?;
        // libvirt defines what the XML says, so read name and UUID from it, not from the fields.
        let name = element_text(&def.xml, &["name"]).ok_or_else(|| invalid("domain XML", "no <name>"))?;
        let uuid = element_text(&def.xml, &["uuid"])
            .and_then(|u| Uuid::parse_str(&u).ok())
            .ok_or_else(|| invalid("domain XML", "no valid <uuid>"))?;
        if name != def.name || uuid != def.uuid {
            return Err(invalid(
                "domain XML",
                "its <name>/<uuid> differ from the DomainXml fields",
            ));
        }
        if s.domains.contains_key(&name) || s.domains.values().any(|d| d.uuid == uuid) {
            return Err(exists(ObjectKind::Domain, &name));
        }
        let d = Domain::new(uuid, DomainState::Running, def.xml.clone());
        let info = domain_info(&name, &d);
        s.domains.insert(name, d);
        Ok(info)
    }

    fn start(&self, name: &str) -> HvResult<()> {
        let mut s = self.lock();
        s.enter(Op::Start)?;
        let d = s.domain_mut(name)?;
        if !d.state.is_active() {
            d.state = DomainState::Running;
            d.stop_reason = None;
        }
        Ok(())
    }

    fn destroy(&self, name: &str) -> HvResult<()> {
        let mut s = self.lock();
        s.enter(Op::Destroy)?;
        let d = s.domain_mut(name)?;
        if !d.state.is_active() {
            return Ok(());
        }
        if d.persistent {
            d.stop(StopReason::Destroyed);
        } else {
            s.domains.remove(name);
        }
        Ok(())
    }

    fn shutdown(&self, name: &str) -> HvResult<()> {
        let mut s = self.lock();
        s.enter(Op::Shutdown)?;
        let d = s.domain_mut(name)?;
        if !d.state.is_active() || d.ignores_acpi {
            return Ok(());
        }
        if d.persistent {
            d.stop(StopReason::ShutDown);
        } else {
            s.domains.remove(name);
        }
        Ok(())
    }

    fn undefine_with_nvram(&self, name: &str) -> HvResult<()> {
        let mut s = self.lock();
        s.enter(Op::UndefineWithNvram)?;
        let d = s.domain_mut(name)?;
        if d.state.is_active() {
            d.persistent = false;
        } else {
            s.domains.remove(name);
        }
        Ok(())
    }

    fn pool(&self, name: &str) -> HvResult<Option<PoolInfo>> {
        let mut s = self.lock();
        s.enter(Op::Pool)?;
        Ok(s.pools.get(name).map(|p| PoolInfo {
            path: Some(p.path.clone()),
            active: p.active,
        }))
    }

    fn list_volumes(&self, pool: &str) -> HvResult<Vec<String>> {
        let mut s = self.lock();
        s.enter(Op::ListVolumes)?;
        Ok(s.active_pool(pool, "list volumes")?.volumes.keys().cloned().collect())
    }

    fn volume(&self, pool: &str, name: &str) -> HvResult<Option<VolumeInfo>> {
        let mut s = self.lock();
        s.enter(Op::Volume)?;
        let p = s.active_pool(pool, "lookup volume")?;
        if !p.volumes.contains_key(name) {
            p.refresh();
        }
        Ok(p.volumes.get(name).map(|v| p.info(name, v)))
    }

    fn created_volume(&self, pool: &str, name: &str) -> HvResult<Option<VolumeInfo>> {
        let mut s = self.lock();
        s.enter(Op::CreatedVolume)?;
        let p = s.active_pool(pool, "lookup volume")?;
        Ok(p.volumes.get(name).map(|v| p.info(name, v)))
    }

    fn create_volume(&self, pool: &str, vol: &VolumeXml) -> HvResult<VolumeInfo> {
        let mut s = self.lock();
        s.enter(Op::CreateVolume)?;
        let p = s.active_pool(pool, "create volume")?;
        if p.volumes.contains_key(&vol.name) {
            return Err(exists(ObjectKind::Volume, &format!("{pool}/{}", vol.name)));
        }
        let v = new_volume(vol)?;
        let info = p.info(&vol.name, &v);
        p.volumes.insert(vol.name.clone(), v);
        Ok(info)
    }

    fn clone_volume(&self, pool: &str, vol: &VolumeXml, from: VolumeRef<'_>) -> HvResult<VolumeInfo> {
        let mut s = self.lock();
        s.enter(Op::CloneVolume)?;
        s.active_pool(pool, "clone volume")?;
        let src = s.active_pool(from.pool, "clone volume")?;
        let (src_capacity, src_bytes) = match src.volumes.get(from.name) {
            Some(v) => (v.capacity, v.bytes.clone()),
            None => {
                return Err(HypervisorError::BaseImageNotFound {
                    pool: from.pool.to_owned(),
                    volume: from.name.to_owned(),
                });
            }
        };
        let mut v = new_volume(vol)?;
        let p = s.active_pool(pool, "clone volume")?;
        if p.volumes.contains_key(&vol.name) {
            return Err(exists(ObjectKind::Volume, &format!("{pool}/{}", vol.name)));
        }
        v.capacity = v.capacity.max(src_capacity);
        v.allocation = src_bytes.len() as u64;
        v.bytes = src_bytes;
        let info = p.info(&vol.name, &v);
        p.volumes.insert(vol.name.clone(), v);
        Ok(info)
    }

    fn upload_volume(&self, pool: &str, name: &str, bytes: &[u8]) -> HvResult<()> {
        let mut s = self.lock();
        s.enter(Op::UploadVolume)?;
        let v = s
            .active_pool(pool, "upload volume")?
            .volumes
            .get_mut(name)
            .ok_or_else(|| not_found(ObjectKind::Volume, &format!("{pool}/{name}")))?;
        if v.bytes.len() < bytes.len() {
            v.bytes.resize(bytes.len(), 0);
        }
        v.bytes[..bytes.len()].copy_from_slice(bytes);
        v.allocation = v.allocation.max(v.bytes.len() as u64);
        Ok(())
    }

    fn download_volume(&self, pool: &str, name: &str, max_len: u64) -> HvResult<Vec<u8>> {
        let mut s = self.lock();
        s.enter(Op::DownloadVolume)?;
        let v = s
            .active_pool(pool, "download volume")?
            .volumes
            .get(name)
            .ok_or_else(|| not_found(ObjectKind::Volume, &format!("{pool}/{name}")))?;
        let n = v.bytes.len().min(usize::try_from(max_len).unwrap_or(usize::MAX));
        Ok(v.bytes[..n].to_vec())
    }

    fn delete_volume(&self, pool: &str, name: &str) -> HvResult<()> {
        let mut s = self.lock();
        s.enter(Op::DeleteVolume)?;
        s.active_pool(pool, "delete volume")?
            .volumes
            .remove(name)
            .map(drop)
            .ok_or_else(|| not_found(ObjectKind::Volume, &format!("{pool}/{name}")))
    }

    fn node_stats(&self) -> HvResult<NodeStats> {
        let mut s = self.lock();
        s.enter(Op::NodeStats)?;
        Ok(s.stats)
    }

    fn dhcp_hosts(&self, network: &str) -> HvResult<Vec<DhcpHost>> {
        let mut s = self.lock();
        s.enter(Op::DhcpHosts)?;
        s.networks
            .get(network)
            .cloned()
            .ok_or_else(|| not_found(ObjectKind::Network, network))
    }

    fn add_dhcp_host(&self, network: &str, host: &DhcpHost) -> HvResult<()> {
        let mut s = self.lock();
        s.enter(Op::AddDhcpHost)?;
        let entries = s
            .networks
            .get_mut(network)
            .ok_or_else(|| not_found(ObjectKind::Network, network))?;
        let clash = |e: &DhcpHost| e.mac == host.mac || e.ip == host.ip || (e.name.is_some() && e.name == host.name);
        if entries.iter().any(clash) {
            return Err(HypervisorError::AlreadyExists {
                kind: ObjectKind::DhcpHost,
                name: format!("{network}/{}", host.mac),
            });
        }
        entries.push(host.clone());
        Ok(())
    }

    fn remove_dhcp_host(&self, network: &str, host: &DhcpHost) -> HvResult<()> {
        let mut s = self.lock();
        s.enter(Op::RemoveDhcpHost)?;
        let entries = s
            .networks
            .get_mut(network)
            .ok_or_else(|| not_found(ObjectKind::Network, network))?;
        let before = entries.len();
        entries.retain(|e| !(e.mac == host.mac && e.ip == host.ip));
        if entries.len() == before {
            return Err(not_found(ObjectKind::DhcpHost, &format!("{network}/{}", host.mac)));
        }
        Ok(())
    }

    fn interface_addresses(&self, domain: &str) -> HvResult<Vec<InterfaceAddress>> {
        let mut s = self.lock();
        s.enter(Op::InterfaceAddresses)?;
        if !s.domains.contains_key(domain) {
            return Err(not_found(ObjectKind::Domain, domain));
        }
        Ok(s.addresses.get(domain).cloned().unwrap_or_default())
    }
}

#[cfg(test)]
mod tests;

//! libvirt's node statistics, which the `virt` crate does not wrap: `virNodeGetMemoryStats` and
//! `virNodeGetCPUStats` through its `sys` bindings, and the running guests' CPU time.
//!
//! Both calls follow libvirt's two-step protocol: called with no buffer they say how many
//! fields there are, then they fill a buffer of that many `{field, value}` pairs. Field names
//! are the ones libvirt documents: `total`, `free`, `buffers`, `cached` (KiB) for memory;
//! `kernel`, `user`, `idle`, `iowait` (ns, cumulative) for CPU.
//!
//! One of two modules with `unsafe` (a house test keeps it so): two C calls, each with a valid
//! connection pointer and a buffer of exactly the length libvirt was told.
#![allow(
    unsafe_code,
    reason = "virNodeGetMemoryStats and virNodeGetCPUStats have no safe wrapper"
)]

use std::{
    ffi::CStr,
    os::raw::{c_char, c_int},
};

use virt::{
    connect::Connect,
    error::{Error as VirtError, ErrorNumber},
    sys,
};

use super::{super::hypervisor::NodeStats, convert::is_code};

/// The `(field, value)` pairs of one node statistics call. `call(buffer, count)` is the C call
/// with all other arguments bound; `entry` reads one filled element.
fn read_fields<T: Copy>(
    blank: T,
    call: impl Fn(*mut T, *mut c_int) -> c_int,
    entry: impl Fn(&T) -> (&[c_char], u64),
) -> Result<Vec<(String, u64)>, VirtError> {
    let mut count: c_int = 0;
    if call(std::ptr::null_mut(), &raw mut count) < 0 {
        return Err(VirtError::last_error());
    }
    let Ok(len) = usize::try_from(count) else {
        return Ok(Vec::new());
    };
    let mut buffer = vec![blank; len];
    if len == 0 || call(buffer.as_mut_ptr(), &raw mut count) < 0 {
        return if len == 0 {
            Ok(Vec::new())
        } else {
            Err(VirtError::last_error())
        };
    }
    buffer.truncate(usize::try_from(count).unwrap_or(0));
    Ok(buffer
        .iter()
        .map(|e| {
            let (field, value) = entry(e);
            // The field is NUL-terminated within its fixed-size array; reinterpret the signed
            // chars as bytes without reading past it.
            let bytes: Vec<u8> = field.iter().map(|c| c.to_ne_bytes()[0]).collect();
            let name = CStr::from_bytes_until_nul(&bytes)
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default();
            (name, value)
        })
        .collect())
}

/// Statistics a test puts beside a test driver's node file (`<node>.xml.stats.json`), since
/// the test driver's own are constant and it has no memory statistics: the sandbox and the
/// tests use it to put a simulated host under pressure. Read only for `test:` URIs.
#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct FakedStats {
    available_memory_mib: Option<u64>,
    #[serde(default)]
    cpu_busy_ns: u64,
    #[serde(default)]
    cpu_total_ns: u64,
    #[serde(default)]
    guest_cpu_ns: u64,
}

/// Where a test puts faked statistics for test driver `uri` (`None` for other URIs).
#[must_use]
pub fn faked_stats_path(uri: &str) -> Option<std::path::PathBuf> {
    uri.strip_prefix("test://")
        .map(|node_file| format!("{node_file}.stats.json").into())
}

/// The faked statistics for test driver `uri`, if a test wrote them.
pub fn faked(uri: &str) -> Option<NodeStats> {
    let text = std::fs::read_to_string(faked_stats_path(uri)?).ok()?;
    let f: FakedStats = serde_json::from_str(&text).ok()?;
    Some(NodeStats {
        available_memory_mib: f.available_memory_mib,
        cpu_busy_ns: f.cpu_busy_ns,
        cpu_total_ns: f.cpu_total_ns,
        guest_cpu_ns: f.guest_cpu_ns,
    })
}

/// One sample of the host: memory (unknown where the driver has no memory statistics, like
/// the test driver), CPU, and the running guests' CPU time. A failure names its operation.
pub fn sample(c: &Connect) -> Result<NodeStats, (&'static str, VirtError)> {
    let available_memory_mib = match memory(c) {
        Ok(fields) => Some(
            ["free", "buffers", "cached"]
                .map(|f| field(&fields, f))
                .iter()
                .sum::<u64>()
                / 1024,
        ),
        Err(e) if is_code(&e, ErrorNumber::NoSupport) => None,
        Err(e) => return Err(("node memory statistics", e)),
    };
    let cpu = cpu(c).map_err(|e| ("node CPU statistics", e))?;
    let busy: u64 = ["kernel", "user"].map(|f| field(&cpu, f)).iter().sum();
    let idle: u64 = ["idle", "iowait"].map(|f| field(&cpu, f)).iter().sum();
    let running = c
        .list_all_domains(sys::VIR_CONNECT_LIST_DOMAINS_ACTIVE)
        .map_err(|e| ("list domains", e))?;
    // A domain that stops between the list and its info simply no longer counts.
    let guest_cpu_ns = running.iter().filter_map(|d| d.info().ok()).map(|i| i.cpu_time).sum();
    Ok(NodeStats {
        available_memory_mib,
        cpu_busy_ns: busy,
        cpu_total_ns: busy + idle,
        guest_cpu_ns,
    })
}

/// Memory statistics of all NUMA cells together, KiB by field.
fn memory(conn: &Connect) -> Result<Vec<(String, u64)>, VirtError> {
    // SAFETY: the pointer is valid while `conn` lives, which outlasts the calls; `buffer` and
    // `count` are valid for writes of `count` elements, as libvirt requires.
    let ptr = unsafe { conn.as_ptr() };
    let blank = sys::virNodeMemoryStats {
        field: [0; 80],
        value: 0,
    };
    read_fields(
        blank,
        // SAFETY: see above.
        |buffer, count| unsafe {
            sys::virNodeGetMemoryStats(ptr, sys::VIR_NODE_MEMORY_STATS_ALL_CELLS, buffer, count, 0)
        },
        |e| (&e.field[..], e.value),
    )
}

/// CPU time of all CPUs together, ns by field.
fn cpu(conn: &Connect) -> Result<Vec<(String, u64)>, VirtError> {
    // SAFETY: as in `memory`.
    let ptr = unsafe { conn.as_ptr() };
    let blank = sys::virNodeCPUStats {
        field: [0; 80],
        value: 0,
    };
    read_fields(
        blank,
        // SAFETY: as in `memory`.
        |buffer, count| unsafe { sys::virNodeGetCPUStats(ptr, sys::VIR_NODE_CPU_STATS_ALL_CPUS, buffer, count, 0) },
        |e| (&e.field[..], e.value),
    )
}

/// The value of `name` among `fields`, 0 when absent.
fn field(fields: &[(String, u64)], name: &str) -> u64 {
    fields.iter().find(|(f, _)| f == name).map_or(0, |(_, v)| *v)
}

//! A host's load between checks: the CPU rate needs two samples far enough apart, so each
//! host's last sample is kept here (checks also run on every machine change, sometimes
//! milliseconds apart; a rate over such a gap is noise).

use std::{
    collections::HashMap,
    sync::{Mutex, PoisonError},
    time::{Duration, Instant},
};

use kube::runtime::reflector::ObjectRef;

use crate::{
    api::libvirt_host::{HostLoad, LibvirtHost},
    libvirt::{hypervisor::NodeStats, pressure},
};

/// Shortest gap between the two samples of a CPU rate.
const MIN_RATE_WINDOW: Duration = Duration::from_secs(5);

/// A host's last kept sample: when, what, and the CPU rate it gave.
type Sample = (Instant, NodeStats, Option<f64>);

/// The last sample per host, and the rate it gave.
#[derive(Default)]
pub struct LoadSampler {
    last: Mutex<HashMap<ObjectRef<LibvirtHost>, Sample>>,
}

impl LoadSampler {
    /// The host's load with `stats` just read.
    pub fn sample(&self, host: &ObjectRef<LibvirtHost>, stats: NodeStats) -> pressure::Measurement {
        let now = Instant::now();
        let mut last = self.last.lock().unwrap_or_else(PoisonError::into_inner);
        let cpu = match last.get(host) {
            Some((at, _, rate)) if now.duration_since(*at) < MIN_RATE_WINDOW => *rate,
            previous => {
                let rate = pressure::measure(previous.map(|(_, s, _)| s), &stats).host_cpu_percent;
                last.insert(host.clone(), (now, stats, rate));
                rate
            }
        };
        pressure::Measurement {
            available_memory_mib: stats.available_memory_mib,
            host_cpu_percent: cpu,
        }
    }
}

/// A measurement as `status.load` shows it.
#[must_use]
pub fn host_load(m: &pressure::Measurement) -> HostLoad {
    HostLoad {
        available_memory_mb: m.available_memory_mib.and_then(|m| i64::try_from(m).ok()),
        #[allow(clippy::cast_possible_truncation, reason = "a percentage rounded to 0..=100")]
        host_cpu_percent: m.host_cpu_percent.map(|p| p.round() as i32),
    }
}

/// Whether the load moved enough to be worth a status write: memory by 5% (and at least
/// 64 MiB), CPU by 5 points, or a value appearing or vanishing.
#[must_use]
pub fn moved(old: Option<&HostLoad>, new: Option<&HostLoad>) -> bool {
    let (Some(old), Some(new)) = (old, new) else {
        return old.is_some() != new.is_some();
    };
    let memory = match (old.available_memory_mb, new.available_memory_mb) {
        (Some(a), Some(b)) => a.abs_diff(b) >= (a.unsigned_abs() / 20).max(64),
        (a, b) => a.is_some() != b.is_some(),
    };
    let cpu = match (old.host_cpu_percent, new.host_cpu_percent) {
        (Some(a), Some(b)) => a.abs_diff(b) >= 5,
        (a, b) => a.is_some() != b.is_some(),
    };
    memory || cpu
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rate_needs_a_window_and_is_kept_within_it() {
        let sampler = LoadSampler::default();
        let host = ObjectRef::new("h").within("ns");
        let at = |busy: u64, total: u64| NodeStats {
            available_memory_mib: Some(4096),
            cpu_busy_ns: busy,
            cpu_total_ns: total,
            guest_cpu_ns: 0,
        };
        let first = host_load(&sampler.sample(&host, at(10, 100)));
        assert_eq!((first.available_memory_mb, first.host_cpu_percent), (Some(4096), None));
        // Milliseconds later: no new rate from a gap that short.
        assert_eq!(sampler.sample(&host, at(60, 110)).host_cpu_percent, None);
        // Once the window has passed, the rate is taken against the kept sample.
        let mut last = sampler.last.lock().unwrap();
        last.get_mut(&host).unwrap().0 -= MIN_RATE_WINDOW;
        drop(last);
        assert_eq!(
            host_load(&sampler.sample(&host, at(40, 200))).host_cpu_percent,
            Some(30)
        );
    }

    #[test]
    fn only_a_load_that_moved_is_worth_a_write() {
        let load = |memory, cpu| HostLoad {
            available_memory_mb: memory,
            host_cpu_percent: cpu,
        };
        let was = load(Some(8192), Some(20));
        assert!(!moved(Some(&was), Some(&load(Some(8000), Some(24)))));
        assert!(moved(Some(&was), Some(&load(Some(7700), Some(20)))), "memory by 6%");
        assert!(moved(Some(&was), Some(&load(Some(8192), Some(25)))), "CPU by 5 points");
        assert!(moved(Some(&was), Some(&load(Some(8192), None))), "a rate vanishing");
        assert!(
            !moved(Some(&load(Some(100), None)), Some(&load(Some(150), None))),
            "under 64 MiB"
        );
        assert!(moved(None, Some(&was)));
        assert!(!moved(None, None));
    }
}

//! How loaded a host is for its owner (pure): available memory, and the CPU the host spends on
//! everything but our guests, from two [`NodeStats`] samples. Guest CPU time shows up in the
//! host's user time (the QEMU threads run it), so it is subtracted: a host busy only with its
//! guests is not under pressure, a host whose owner compiles something is.

use super::hypervisor::NodeStats;

/// The limits a host's owner sets (`LibvirtHost.spec.reclaim`); `None` is no limit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Limits {
    /// Reclaim when available memory stays below this, MiB.
    pub min_free_memory_mib: Option<u64>,
    /// Reclaim when the host's own CPU use stays above this, percent of all CPUs.
    pub max_host_cpu_percent: Option<u32>,
}

/// One measurement of the host.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Measurement {
    /// Memory the host could hand out, MiB, when the driver reports it.
    pub available_memory_mib: Option<u64>,
    /// CPU the host spent on anything but the guests since the previous sample, percent of all
    /// CPUs; `None` for a first sample or when no CPU time passed.
    pub host_cpu_percent: Option<f64>,
}

/// Which limit a measurement breaks.
#[derive(Clone, Debug, PartialEq)]
pub enum Breach {
    /// Available memory below the floor.
    Memory {
        /// Measured, MiB.
        available_mib: u64,
        /// The floor, MiB.
        floor_mib: u64,
    },
    /// The host's own CPU use above the ceiling.
    Cpu {
        /// Measured, percent.
        percent: f64,
        /// The ceiling, percent.
        ceiling: u32,
    },
}

impl std::fmt::Display for Breach {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Memory {
                available_mib,
                floor_mib,
            } => write!(
                f,
                "available memory {available_mib} MiB is below minFreeMemoryMB {floor_mib}"
            ),
            Self::Cpu { percent, ceiling } => {
                write!(
                    f,
                    "the host's own CPU use {percent:.0}% is above maxHostCPUPercent {ceiling}"
                )
            }
        }
    }
}

/// The measurement at `now`, with `previous` (the last sample) for the CPU rate.
#[must_use]
pub fn measure(previous: Option<&NodeStats>, now: &NodeStats) -> Measurement {
    let host_cpu_percent = previous.and_then(|p| {
        let total = now.cpu_total_ns.checked_sub(p.cpu_total_ns).filter(|t| *t > 0)?;
        let busy = now.cpu_busy_ns.saturating_sub(p.cpu_busy_ns);
        // A guest that stopped takes its cumulative time out of the sum: count no guest time
        // rather than a negative one.
        let guests = now.guest_cpu_ns.saturating_sub(p.guest_cpu_ns);
        #[allow(
            clippy::cast_precision_loss,
            reason = "a percentage needs no more than f64's 52 bits"
        )]
        let percent = busy.saturating_sub(guests) as f64 / total as f64 * 100.0;
        Some(percent.clamp(0.0, 100.0))
    });
    Measurement {
        available_memory_mib: now.available_memory_mib,
        host_cpu_percent,
    }
}

/// The first limit `m` breaks: memory, then CPU.
#[must_use]
pub fn breach(limits: &Limits, m: &Measurement) -> Option<Breach> {
    if let (Some(floor_mib), Some(available_mib)) = (limits.min_free_memory_mib, m.available_memory_mib)
        && available_mib < floor_mib
    {
        return Some(Breach::Memory {
            available_mib,
            floor_mib,
        });
    }
    match (limits.max_host_cpu_percent, m.host_cpu_percent) {
        (Some(ceiling), Some(percent)) if percent > f64::from(ceiling) => Some(Breach::Cpu { percent, ceiling }),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: u64 = 1_000_000_000;

    fn stats(memory: Option<u64>, busy: u64, total: u64, guests: u64) -> NodeStats {
        NodeStats {
            available_memory_mib: memory,
            cpu_busy_ns: busy,
            cpu_total_ns: total,
            guest_cpu_ns: guests,
        }
    }

    #[test]
    fn guest_cpu_is_not_the_owners_load() {
        // Four CPUs for ten seconds: 40 s of CPU time, 30 s busy, 25 s of it our guests.
        let before = stats(Some(8000), 100 * SECOND, 1000 * SECOND, 50 * SECOND);
        let after = stats(Some(7000), 130 * SECOND, 1040 * SECOND, 75 * SECOND);
        let m = measure(Some(&before), &after);
        assert_eq!(m.available_memory_mib, Some(7000));
        assert!((m.host_cpu_percent.unwrap() - 12.5).abs() < 1e-9, "{m:?}");
        // A guest that stopped makes the guests' sum fall: no guest time, not a negative one.
        let stopped = stats(Some(7000), 160 * SECOND, 1080 * SECOND, 10 * SECOND);
        assert!((measure(Some(&after), &stopped).host_cpu_percent.unwrap() - 75.0).abs() < 1e-9);
    }

    #[test]
    fn a_first_sample_or_a_still_clock_has_no_cpu_rate() {
        let s = stats(None, SECOND, 10 * SECOND, 0);
        assert_eq!(measure(None, &s).host_cpu_percent, None);
        assert_eq!(measure(Some(&s), &s).host_cpu_percent, None, "no CPU time passed");
        // A counter that went backwards (the host rebooted) is not a rate either.
        assert_eq!(measure(Some(&s), &stats(None, 0, SECOND, 0)).host_cpu_percent, None);
    }

    #[test]
    fn breaches_name_the_measurement_and_the_limit() {
        let limits = Limits {
            min_free_memory_mib: Some(1024),
            max_host_cpu_percent: Some(80),
        };
        let m = |memory: Option<u64>, cpu: Option<f64>| Measurement {
            available_memory_mib: memory,
            host_cpu_percent: cpu,
        };
        assert_eq!(breach(&limits, &m(Some(2048), Some(50.0))), None);
        let low = breach(&limits, &m(Some(812), Some(95.0))).unwrap();
        assert_eq!(
            low.to_string(),
            "available memory 812 MiB is below minFreeMemoryMB 1024",
            "memory first"
        );
        let busy = breach(&limits, &m(None, Some(91.4))).unwrap();
        assert_eq!(
            busy.to_string(),
            "the host's own CPU use 91% is above maxHostCPUPercent 80"
        );
        assert_eq!(breach(&Limits::default(), &m(Some(1), Some(100.0))), None, "no limits");
    }
}

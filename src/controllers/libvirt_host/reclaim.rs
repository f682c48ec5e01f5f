//! The reclaim policy of a host (pure): from a measurement, the policy's memory and the host's
//! spot machines, whether the owner needs the host back and which machine goes next.
//!
//! - A limit crossed at a sample starts the clock (`pressureSince`); a sample within the limits
//!   stops it. Once the limit has been crossed for `for`, the host is `UnderPressure`.
//! - Under pressure, one spot machine at a time is named the victim: the lowest priority, then
//!   the youngest (it has done the least work), then by name. Only admitted machines count, as
//!   only they hold anything on the host; one already being deleted is waited for instead.
//! - When the victim is gone the clock restarts, so the next one is named only if the pressure
//!   outlasts another `for`: the removal gets time to show its effect. Pressure that ends stops
//!   the reclaim; a victim not yet being deleted is then let go.

use std::time::Duration;

use k8s_openapi::{apimachinery::pkg::apis::meta::v1::Time, jiff::Timestamp};
use kube::ResourceExt;

use crate::{
    api::{
        PRIORITY_LABEL, SCHEDULED_MACHINE_LABEL,
        condition::{DesiredCondition, Status},
        libvirt_host::{HostCondition, LibvirtHost, PressureReason, ReclaimPolicy, ReclaimStatus, ReclaimVictim},
        libvirt_machine::LibvirtMachine,
    },
    libvirt::pressure::{Breach, Limits},
    schedule::parse_duration,
};

/// Priority of a spot machine whose label is missing or malformed (the ScheduledMachine default).
const DEFAULT_PRIORITY: i32 = 50;
/// Bounds on how often a host with a policy is sampled.
const SAMPLE_BOUNDS: (Duration, Duration) = (Duration::from_secs(1), Duration::from_secs(15));

/// A readable `spec.reclaim`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Policy {
    /// The limits.
    pub limits: Limits,
    /// How long a limit must stay crossed.
    pub sustain: Duration,
}

impl Policy {
    /// Read `spec.reclaim`.
    ///
    /// # Errors
    /// A duration that cannot be read, naming its field.
    pub fn read(spec: &ReclaimPolicy) -> Result<Self, String> {
        let sustain = parse_duration("spec.reclaim.for", &spec.for_).map_err(|e| e.to_string())?;
        // Read here only to report them: the reclaimed ScheduledMachine applies them.
        parse_duration("spec.reclaim.drainTimeout", &spec.drain_timeout).map_err(|e| e.to_string())?;
        parse_duration("spec.reclaim.coolDown", &spec.cool_down).map_err(|e| e.to_string())?;
        Ok(Self {
            limits: Limits {
                min_free_memory_mib: spec.min_free_memory_mb.and_then(|m| u64::try_from(m).ok()),
                max_host_cpu_percent: spec.max_host_cpu_percent.and_then(|p| u32::try_from(p).ok()),
            },
            sustain,
        })
    }

    /// How often to sample the host: half of `for`, within [`SAMPLE_BOUNDS`].
    #[must_use]
    pub fn sample_period(&self) -> Duration {
        (self.sustain / 2).clamp(SAMPLE_BOUNDS.0, SAMPLE_BOUNDS.1)
    }

    fn describe_limits(&self) -> String {
        let memory = self.limits.min_free_memory_mib.map(|m| format!("minFreeMemoryMB {m}"));
        let cpu = self
            .limits
            .max_host_cpu_percent
            .map(|c| format!("maxHostCPUPercent {c}"));
        memory.into_iter().chain(cpu).collect::<Vec<_>>().join(", ")
    }
}

/// A spot machine on the host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Candidate {
    /// LibvirtMachine name.
    pub machine: String,
    /// The ScheduledMachine that created it.
    pub scheduled_machine: String,
    /// Its `5spot.finos.org/priority`.
    pub priority: i32,
    /// Its creation time, milliseconds since the epoch.
    pub created_ms: i64,
    /// Being deleted.
    pub deleting: bool,
}

/// The host's spot machines among `machines`: in its namespace, placed on it, created by a
/// ScheduledMachine, and admitted.
pub fn candidates<'a>(host: &LibvirtHost, machines: impl IntoIterator<Item = &'a LibvirtMachine>) -> Vec<Candidate> {
    let namespace = host.namespace();
    let name = host.name_any();
    machines
        .into_iter()
        .filter(|m| m.namespace() == namespace && m.host_name() == Some(name.as_str()))
        .filter(|m| m.status.as_ref().is_some_and(|s| s.allocated.is_some()))
        .filter_map(|m| {
            Some(Candidate {
                machine: m.name_any(),
                scheduled_machine: m.labels().get(SCHEDULED_MACHINE_LABEL)?.clone(),
                priority: m
                    .labels()
                    .get(PRIORITY_LABEL)
                    .and_then(|p| p.parse().ok())
                    .unwrap_or(DEFAULT_PRIORITY),
                created_ms: m.creation_timestamp().map_or(0, |t| t.0.as_millisecond()),
                deleting: m.metadata.deletion_timestamp.is_some(),
            })
        })
        .collect()
}

/// What the policy decided.
#[derive(Clone, Debug, PartialEq)]
pub struct Outcome {
    /// `status.reclaim`.
    pub status: ReclaimStatus,
    /// `UnderPressure`.
    pub condition: DesiredCondition,
    /// A victim named by this decision (an Event and a count).
    pub chosen: Option<ReclaimVictim>,
    /// When the pressure will have lasted `for`, if it is building.
    pub sustained_in: Option<Duration>,
}

/// The reason a breach gives.
#[must_use]
pub const fn reason_of(breach: &Breach) -> PressureReason {
    match breach {
        Breach::Memory { .. } => PressureReason::MemoryPressure,
        Breach::Cpu { .. } => PressureReason::CpuPressure,
    }
}

fn millis_between(from: &Time, to: &Time) -> i64 {
    to.0.as_millisecond().saturating_sub(from.0.as_millisecond())
}

fn plus(t: &Time, d: Duration) -> String {
    let ms =
        t.0.as_millisecond()
            .saturating_add(i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
    Timestamp::from_millisecond(ms).map_or_else(|_| "later".to_owned(), |t| t.to_string())
}

/// Decide. `under_pressure` is whether `UnderPressure` is True now; `current` is the policy's
/// memory; `breach` is what the fresh sample crossed.
#[must_use]
pub fn decide(
    policy: &Policy,
    breach: Option<&Breach>,
    under_pressure: bool,
    current: &ReclaimStatus,
    candidates: &[Candidate],
    now: &Time,
) -> Outcome {
    let alive = |v: &&ReclaimVictim| candidates.iter().any(|c| c.machine == v.machine);
    let Some(breach) = breach else {
        return relieved(policy, current, candidates);
    };
    let pressed = Pressed { breach, now };
    if let Some(victim) = current.victim.as_ref().filter(alive) {
        return Outcome {
            status: current.clone(),
            condition: pressed.condition(format!(
                "reclaiming ScheduledMachine {} (LibvirtMachine {})",
                victim.scheduled_machine, victim.machine
            )),
            chosen: None,
            sustained_in: None,
        };
    }
    // The last victim is gone: its removal gets `for` to take effect.
    let since = if current.victim.is_some() {
        now.clone()
    } else {
        current.pressure_since.clone().unwrap_or_else(|| now.clone())
    };
    let sustain_ms = i64::try_from(policy.sustain.as_millis()).unwrap_or(i64::MAX);
    let left_ms = sustain_ms.saturating_sub(millis_between(&since, now));
    if left_ms > 0 {
        return building(&pressed, policy, under_pressure, since, left_ms);
    }
    choose(&pressed, since, candidates)
}

/// A breach at a moment.
struct Pressed<'a> {
    breach: &'a Breach,
    now: &'a Time,
}

impl Pressed<'_> {
    /// `UnderPressure` True with the breach and what is being done about it.
    fn condition(&self, doing: String) -> DesiredCondition {
        DesiredCondition::new(
            HostCondition::UnderPressure,
            Status::True,
            reason_of(self.breach),
            format!("{}; {doing}", self.breach),
        )
    }
}

/// Within the limits: no clock, and a victim is only shown while its removal finishes.
fn relieved(policy: &Policy, current: &ReclaimStatus, candidates: &[Candidate]) -> Outcome {
    let removing = |v: &ReclaimVictim| candidates.iter().any(|c| c.machine == v.machine && c.deleting);
    Outcome {
        status: ReclaimStatus {
            pressure_since: None,
            victim: current.victim.clone().filter(removing),
        },
        condition: DesiredCondition::new(
            HostCondition::UnderPressure,
            Status::False,
            PressureReason::WithinLimits,
            format!("within {}", policy.describe_limits()),
        ),
        chosen: None,
        sustained_in: None,
    }
}

/// Crossed, not yet for `for` (since the breach began or the last victim went).
fn building(pressed: &Pressed<'_>, policy: &Policy, under_pressure: bool, since: Time, left_ms: i64) -> Outcome {
    let next = plus(&since, policy.sustain);
    let condition = if under_pressure {
        pressed.condition(format!("the next spot machine goes at {next} if it lasts"))
    } else {
        DesiredCondition::new(
            HostCondition::UnderPressure,
            Status::False,
            PressureReason::PressureBuilding,
            format!(
                "{}; spot machines are reclaimed from {next} if it lasts",
                pressed.breach
            ),
        )
    };
    Outcome {
        status: ReclaimStatus {
            pressure_since: Some(since),
            victim: None,
        },
        condition,
        chosen: None,
        sustained_in: Some(Duration::from_millis(u64::try_from(left_ms).unwrap_or(0))),
    }
}

/// Pressure that lasted: wait for a machine already going, or name the next victim.
fn choose(pressed: &Pressed<'_>, since: Time, candidates: &[Candidate]) -> Outcome {
    let outcome = |victim: Option<ReclaimVictim>, doing: String| Outcome {
        status: ReclaimStatus {
            pressure_since: Some(since.clone()),
            victim: victim.clone(),
        },
        condition: pressed.condition(doing),
        chosen: victim,
        sustained_in: None,
    };
    if let Some(going) = candidates.iter().find(|c| c.deleting) {
        return outcome(
            None,
            format!("waiting for LibvirtMachine {}, already being removed", going.machine),
        );
    }
    let lowest = candidates
        .iter()
        .min_by(|a, b| (a.priority, -a.created_ms, &a.machine).cmp(&(b.priority, -b.created_ms, &b.machine)));
    let Some(next) = lowest else {
        return outcome(None, "no spot machines left to reclaim".to_owned());
    };
    let victim = ReclaimVictim {
        machine: next.machine.clone(),
        scheduled_machine: next.scheduled_machine.clone(),
        reason: reason_of(pressed.breach).as_str().to_owned(),
        message: pressed.breach.to_string(),
        since: pressed.now.clone(),
    };
    outcome(
        Some(victim),
        format!(
            "reclaiming ScheduledMachine {} (LibvirtMachine {}, priority {})",
            next.scheduled_machine, next.machine, next.priority
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(seconds: i64) -> Time {
        Time(Timestamp::from_second(1_800_000_000 + seconds).unwrap())
    }

    fn policy() -> Policy {
        Policy {
            limits: Limits {
                min_free_memory_mib: Some(2048),
                max_host_cpu_percent: Some(80),
            },
            sustain: Duration::from_secs(60),
        }
    }

    fn low_memory() -> Breach {
        Breach::Memory {
            available_mib: 1000,
            floor_mib: 2048,
        }
    }

    fn spot(machine: &str, priority: i32, created_ms: i64) -> Candidate {
        Candidate {
            machine: machine.into(),
            scheduled_machine: format!("sm-{machine}"),
            priority,
            created_ms,
            deleting: false,
        }
    }

    #[test]
    fn a_breach_must_last_for_before_anything_goes() {
        let machines = [spot("a", 10, 0)];
        let first = decide(
            &policy(),
            Some(&low_memory()),
            false,
            &ReclaimStatus::default(),
            &machines,
            &at(0),
        );
        assert_eq!(first.status.pressure_since, Some(at(0)));
        assert_eq!(first.condition.reason, PressureReason::PressureBuilding.as_str());
        assert_eq!(first.condition.status, Status::False);
        assert_eq!(first.sustained_in, Some(Duration::from_secs(60)));
        assert!(first.chosen.is_none());
        // A sample within the limits stops the clock.
        let relieved = decide(&policy(), None, false, &first.status, &machines, &at(30));
        assert_eq!(relieved.status, ReclaimStatus::default());
        assert_eq!(relieved.condition.reason, PressureReason::WithinLimits.as_str());
        assert_eq!(
            relieved.condition.message,
            "within minFreeMemoryMB 2048, maxHostCPUPercent 80"
        );
        // Crossed again: the clock starts again, from the new breach.
        let again = decide(
            &policy(),
            Some(&low_memory()),
            false,
            &relieved.status,
            &machines,
            &at(40),
        );
        assert_eq!(again.sustained_in, Some(Duration::from_secs(60)));
        let held = decide(
            &policy(),
            Some(&low_memory()),
            false,
            &again.status,
            &machines,
            &at(100),
        );
        assert_eq!(held.chosen.map(|v| v.machine), Some("a".to_owned()));
        assert_eq!(held.condition.status, Status::True);
        assert_eq!(held.condition.reason, "MemoryPressure");
    }

    #[test]
    fn victims_go_lowest_priority_then_youngest_one_at_a_time() {
        let mut machines = vec![spot("old-low", 10, 1), spot("high", 90, 5), spot("young-low", 10, 9)];
        let building = ReclaimStatus {
            pressure_since: Some(at(0)),
            victim: None,
        };
        let first = decide(&policy(), Some(&low_memory()), true, &building, &machines, &at(60));
        let victim = first.chosen.clone().unwrap();
        assert_eq!(
            (victim.machine.as_str(), victim.scheduled_machine.as_str()),
            ("young-low", "sm-young-low")
        );
        assert_eq!(
            victim.message,
            "available memory 1000 MiB is below minFreeMemoryMB 2048"
        );
        assert!(
            first
                .condition
                .message
                .contains("reclaiming ScheduledMachine sm-young-low")
        );
        // While it exists nobody else is named, even long after.
        let waiting = decide(&policy(), Some(&low_memory()), true, &first.status, &machines, &at(600));
        assert_eq!((waiting.chosen, &waiting.status), (None, &first.status));
        // Gone: the clock restarts, so the next goes only if the pressure outlasts another `for`.
        machines.retain(|m| m.machine != "young-low");
        let gone = decide(&policy(), Some(&low_memory()), true, &first.status, &machines, &at(610));
        assert_eq!(gone.status.pressure_since, Some(at(610)));
        assert_eq!(gone.status.victim, None);
        assert_eq!(gone.condition.status, Status::True, "still under pressure");
        let next = decide(&policy(), Some(&low_memory()), true, &gone.status, &machines, &at(670));
        assert_eq!(next.chosen.map(|v| v.machine), Some("old-low".to_owned()));
    }

    #[test]
    fn relief_stops_the_reclaim() {
        let machines = vec![spot("a", 10, 0), spot("b", 20, 0)];
        let naming = ReclaimStatus {
            pressure_since: Some(at(0)),
            victim: Some(ReclaimVictim {
                machine: "a".into(),
                scheduled_machine: "sm-a".into(),
                reason: "MemoryPressure".into(),
                message: String::new(),
                since: at(60),
            }),
        };
        // Not yet being removed: let go.
        let relieved = decide(&policy(), None, true, &naming, &machines, &at(61));
        assert_eq!(relieved.status, ReclaimStatus::default());
        // Its removal under way: shown until it is gone, and nobody else follows.
        let mut removing = machines.clone();
        removing[0].deleting = true;
        let relieved = decide(&policy(), None, true, &naming, &removing, &at(61));
        assert_eq!(relieved.status.victim, naming.victim);
        assert_eq!(relieved.chosen, None);
    }

    #[test]
    fn a_machine_already_going_is_waited_for_and_an_empty_host_says_so() {
        let breach = Breach::Cpu {
            percent: 97.0,
            ceiling: 80,
        };
        let sustained = ReclaimStatus {
            pressure_since: Some(at(0)),
            victim: None,
        };
        let mut going = spot("a", 90, 0);
        going.deleting = true;
        let waiting = decide(
            &policy(),
            Some(&breach),
            true,
            &sustained,
            &[going, spot("b", 10, 0)],
            &at(60),
        );
        assert_eq!(waiting.chosen, None);
        assert_eq!(waiting.condition.reason, "CPUPressure");
        assert!(
            waiting.condition.message.contains("waiting for LibvirtMachine a"),
            "{:?}",
            waiting.condition
        );
        let empty = decide(&policy(), Some(&breach), true, &sustained, &[], &at(60));
        assert_eq!(
            empty.condition.message,
            "the host's own CPU use 97% is above maxHostCPUPercent 80; no spot machines left to reclaim"
        );
    }

    #[test]
    fn the_policy_reads_its_durations_and_names_a_bad_one() {
        let mut spec: ReclaimPolicy = serde_json::from_value(serde_json::json!({"minFreeMemoryMB": 1024})).unwrap();
        assert_eq!((spec.for_.as_str(), spec.cool_down.as_str()), ("1m", "30m"));
        let read = Policy::read(&spec).unwrap();
        assert_eq!(read.sample_period(), Duration::from_secs(15));
        assert_eq!(read.limits.max_host_cpu_percent, None);
        spec.for_ = "1s".into();
        assert_eq!(Policy::read(&spec).unwrap().sample_period(), Duration::from_secs(1));
        spec.cool_down = "99999999999999999h".into();
        let err = Policy::read(&spec).unwrap_err();
        assert!(err.contains("spec.reclaim.coolDown"), "{err}");
    }
}

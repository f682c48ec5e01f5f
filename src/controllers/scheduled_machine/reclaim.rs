//! A reclaim by the machine's host, as the ScheduledMachine lives it (pure).
//!
//! The host names this ScheduledMachine in its `status.reclaim.victim`; from the first
//! reconcile that sees it, the record in our own status carries the reclaim, so it holds even
//! once the host has moved on: the machine is removed (its drain bounded by the host's
//! `drainTimeout`), then stays off for the host's `coolDown`, counted from when everything is
//! gone. After that the schedule decides again.

use std::time::Duration;

use chrono::{DateTime, SecondsFormat, Utc};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::plan::{chrono_of, time};
use crate::{
    api::{
        condition::{self, Condition, DesiredCondition, Status},
        libvirt_host::PressureReason,
        scheduled_machine::{ReclaimRecord, ScheduledCondition, ScheduledReason},
    },
    schedule::format_duration,
};

/// A host asking for this machine back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    /// The LibvirtHost.
    pub host: String,
    /// Its pressure's reason.
    pub reason: PressureReason,
    /// Its measurement and the limit crossed.
    pub message: String,
    /// Its bound on draining.
    pub drain_timeout: Duration,
    /// How long the machine stays off once gone.
    pub cool_down: Duration,
}

/// The record after this reconcile: `None` when no reclaim holds. `gone` is whether nothing of
/// the window's objects is left.
#[must_use]
pub fn advance(
    current: Option<&ReclaimRecord>,
    request: Option<&Request>,
    gone: bool,
    now: DateTime<Utc>,
) -> Option<ReclaimRecord> {
    let live = current.filter(|r| r.off_until.as_ref().and_then(chrono_of).is_none_or(|until| now < until));
    let mut record = match (live, request) {
        (Some(record), _) => record.clone(),
        (None, Some(request)) => ReclaimRecord {
            host: request.host.clone(),
            reason: request.reason.as_str().to_owned(),
            message: request.message.clone(),
            started_at: time(now)?,
            drain_timeout: format_duration(request.drain_timeout),
            cool_down: format_duration(request.cool_down),
            off_until: None,
        },
        (None, None) => return None,
    };
    if gone && record.off_until.is_none() {
        let cool_down = crate::schedule::parse_duration("", &record.cool_down).unwrap_or_default();
        record.off_until = time(now + chrono::Duration::from_std(cool_down).unwrap_or(chrono::Duration::MAX));
    }
    Some(record)
}

/// The host's drain bound, when it is shorter than `own`.
#[must_use]
pub fn drain_timeout(record: &ReclaimRecord, own: Duration) -> Duration {
    crate::schedule::parse_duration("", &record.drain_timeout).map_or(own, |d| d.min(own))
}

/// When the machine may return, once it is gone.
#[must_use]
pub fn off_until(record: &ReclaimRecord) -> Option<DateTime<Utc>> {
    record.off_until.as_ref().and_then(chrono_of)
}

/// Why, for messages: `reclaimed by LibvirtHost h: <measurement>`.
#[must_use]
pub fn why(record: &ReclaimRecord) -> String {
    format!("reclaimed by LibvirtHost {}: {}", record.host, record.message)
}

/// The `Reclaimed` condition's message.
#[must_use]
pub fn describe(record: &ReclaimRecord) -> String {
    match off_until(record) {
        Some(until) => format!(
            "{}; off until {}",
            why(record),
            until.to_rfc3339_opts(SecondsFormat::Secs, true)
        ),
        None => format!("{}; removing the machine", why(record)),
    }
}

/// The record's reason as a condition reason.
#[must_use]
pub fn reason(record: &ReclaimRecord) -> PressureReason {
    PressureReason::parse(&record.reason).unwrap_or(PressureReason::MemoryPressure)
}

/// `conditions` with `Reclaimed`: True while a reclaim holds, False once it is over, absent if
/// there never was one.
#[must_use]
pub fn with_condition(
    conditions: &[Condition],
    record: Option<&ReclaimRecord>,
    now: &Time,
    generation: Option<i64>,
) -> Vec<Condition> {
    let desired = match record {
        Some(record) => DesiredCondition::new(
            ScheduledCondition::Reclaimed,
            Status::True,
            reason(record),
            describe(record),
        ),
        None if condition::find(conditions, ScheduledCondition::Reclaimed.as_str()).is_some() => DesiredCondition::new(
            ScheduledCondition::Reclaimed,
            Status::False,
            ScheduledReason::CoolDownOver,
            "the cool-down after the last reclaim is over; the schedule decides again",
        ),
        None => return conditions.to_vec(),
    };
    condition::merge(conditions, &desired, now, generation)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> DateTime<Utc> {
        s.parse().unwrap()
    }

    fn request() -> Request {
        Request {
            host: "laptop".into(),
            reason: PressureReason::MemoryPressure,
            message: "available memory 900 MiB is below minFreeMemoryMB 2048".into(),
            drain_timeout: Duration::from_secs(60),
            cool_down: Duration::from_secs(600),
        }
    }

    #[test]
    fn a_reclaim_holds_through_removal_and_the_cool_down_after_it() {
        let started = advance(None, Some(&request()), false, at("2026-12-07T09:00:00Z")).unwrap();
        assert_eq!(
            (started.drain_timeout.as_str(), started.cool_down.as_str()),
            ("1m0s", "10m0s")
        );
        assert_eq!(started.off_until, None);
        assert_eq!(
            describe(&started),
            "reclaimed by LibvirtHost laptop: available memory 900 MiB is below minFreeMemoryMB 2048; removing the machine"
        );
        // The host has moved on, the record has not.
        let removing = advance(Some(&started), None, false, at("2026-12-07T09:00:30Z")).unwrap();
        assert_eq!(removing, started);
        // Gone: the cool-down counts from now.
        let gone = advance(Some(&removing), None, true, at("2026-12-07T09:01:00Z")).unwrap();
        assert_eq!(off_until(&gone), Some(at("2026-12-07T09:11:00Z")));
        assert!(
            describe(&gone).ends_with("off until 2026-12-07T09:11:00Z"),
            "{}",
            describe(&gone)
        );
        assert_eq!(
            advance(Some(&gone), None, true, at("2026-12-07T09:10:59Z")),
            Some(gone.clone())
        );
        assert_eq!(
            advance(Some(&gone), None, true, at("2026-12-07T09:11:00Z")),
            None,
            "over"
        );
        // Named again after the cool-down (it came back and the owner still needs the host).
        let again = advance(Some(&gone), Some(&request()), false, at("2026-12-07T09:20:00Z")).unwrap();
        assert_eq!(again.started_at, time(at("2026-12-07T09:20:00Z")).unwrap());
        assert_eq!(again.off_until, None);
    }

    #[test]
    fn the_hosts_drain_bound_applies_when_shorter() {
        let record = advance(None, Some(&request()), false, at("2026-12-07T09:00:00Z")).unwrap();
        assert_eq!(
            drain_timeout(&record, Duration::from_secs(300)),
            Duration::from_secs(60)
        );
        assert_eq!(drain_timeout(&record, Duration::from_secs(10)), Duration::from_secs(10));
        assert_eq!(reason(&record), PressureReason::MemoryPressure);
    }
}

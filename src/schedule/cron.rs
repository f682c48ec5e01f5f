//! Activity and next transition of a cron window: open during `[occurrence, occurrence +
//! duration)` for every occurrence of a 5-field cron expression read in the schedule's zone.
//!
//! Occurrences come from the `cron-parser` crate, which follows the wall clock across DST: a
//! local minute skipped in spring never fires, and one repeated in autumn fires at both instants.
//! The duration is elapsed time, so an 8h window that spans a DST change still lasts 8 real
//! hours.
//!
//! Crate semantics worth knowing: day-of-month and day-of-week are ANDed when both are
//! restricted (classic cron ORs them), Sunday is `0` only (`7` is rejected), and month names are
//! not accepted. Expressions that can never fire (e.g. `0 0 30 2 *`) are rejected at parse time.

use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use chrono_tz::Tz;

use super::{duration::parse_duration, error::ScheduleError};

/// Bound on the merging of overlapping or abutting windows in
/// [`CronWindow::next_transition`]: at most this many steps, and no further than this far ahead.
/// Windows that keep overlapping past either bound (e.g. `* * * * *` with `1h`) are reported as
/// never closing. Each step advances the end of the merged window by up to one duration.
const MAX_MERGE_STEPS: usize = 10_000;
const MERGE_HORIZON: TimeDelta = TimeDelta::days(400);

/// A parsed cron expression with its window length.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CronWindow {
    expression: cron_parser::Schedule,
    duration: TimeDelta,
}

impl CronWindow {
    /// Parses `expression` (at `cron_field`) and `duration` (at `duration_field`). The duration
    /// must be positive and a whole number of seconds, because transitions are reported to the
    /// second.
    pub(crate) fn parse(
        cron_field: &str,
        expression: &str,
        duration_field: &str,
        duration: &str,
    ) -> Result<Self, ScheduleError> {
        let parsed = cron_parser::Schedule::parse(expression).map_err(|err| {
            let problem = if err.token().is_empty() {
                err.to_string()
            } else {
                format!("{err} (at {:?})", err.token())
            };
            ScheduleError::cron(cron_field, expression, problem)
        })?;
        let length = parse_duration(duration_field, duration)?;
        if length.is_zero() {
            return Err(ScheduleError::duration(duration_field, duration, "must be positive"));
        }
        if length.subsec_nanos() != 0 {
            return Err(ScheduleError::duration(
                duration_field,
                duration,
                "must be a whole number of seconds",
            ));
        }
        let length = TimeDelta::from_std(Duration::from_secs(length.as_secs()))
            .map_err(|_| ScheduleError::duration(duration_field, duration, "too large"))?;
        Ok(Self {
            expression: parsed,
            duration: length,
        })
    }

    /// The latest occurrence at or before `t`.
    fn latest_start(&self, tz: Tz, t: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let local = t.with_timezone(&tz);
        if self.expression.includes(&local) {
            return Some(t);
        }
        self.expression
            .previous_before(&local)
            .map(|start| start.with_timezone(&Utc))
    }

    /// End of the window that opened at `start`; `None` if past the representable range.
    fn end_of(&self, start: DateTime<Utc>) -> Option<DateTime<Utc>> {
        start.checked_add_signed(self.duration)
    }

    /// Whether some window contains `t`. Only the latest occurrence at or before `t` matters:
    /// all windows have the same length, so it ends last.
    pub(crate) fn is_active(&self, tz: Tz, t: DateTime<Utc>) -> bool {
        self.latest_start(tz, t)
            .is_some_and(|start| self.end_of(start).is_none_or(|end| t < end))
    }

    /// The first instant after `t` at which activity changes.
    ///
    /// Closed: the next occurrence. Open: the end of the union of the windows that overlap or
    /// abut the current one, found by repeatedly jumping to the latest occurrence at or before
    /// the current end; bounded by [`MAX_MERGE_STEPS`] and [`MERGE_HORIZON`] (`None` past them).
    pub(crate) fn next_transition(&self, tz: Tz, t: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let latest = self.latest_start(tz, t);
        let mut end = match latest.map(|start| self.end_of(start)) {
            Some(Some(end)) if t < end => end,
            // Open with an end beyond the representable range: never closes.
            Some(None) => return None,
            _ => {
                return self
                    .expression
                    .next_after(&t.with_timezone(&tz))
                    .map(|start| start.with_timezone(&Utc));
            }
        };
        let limit = t.checked_add_signed(MERGE_HORIZON);
        for _ in 0..MAX_MERGE_STEPS {
            if limit.is_some_and(|limit| end > limit) {
                return None;
            }
            // A window starting exactly at `end` abuts this one, so activity continues.
            let Some(start) = self.latest_start(tz, end) else {
                return Some(end);
            };
            match self.end_of(start) {
                Some(next_end) if next_end > end => end = next_end,
                Some(_) => return Some(end),
                None => return None,
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window(cron: &str, duration: &str) -> CronWindow {
        CronWindow::parse("schedule.cron", cron, "schedule.duration", duration).unwrap()
    }

    fn utc(s: &str) -> DateTime<Utc> {
        s.parse().unwrap()
    }

    #[test]
    fn rejected_expressions_name_field_and_token() {
        let cases: &[(&str, &str)] = &[
            ("", "expected 5 fields"),
            ("* * * *", "expected 5 fields"),
            ("* * * * * *", "expected 5 fields"),
            ("@daily", "expected 5 fields"),
            ("0 25 * * *", "hour"),
            ("60 * * * *", "minute"),
            ("0 9 * * 7", "day of week"),
            ("0 9 * jan *", "month"),
            ("0 9 * * mon-fri/0", "day of week"),
            ("0 9 30 2 *", "never"),
            ("0 9 * * funday", "funday"),
            ("*/0 * * * *", "step"),
            ("0 17-9 * * *", "reversed"),
            ("0,,1 * * * *", "empty"),
        ];
        for (input, problem) in cases {
            let err = CronWindow::parse("schedule.cron", input, "schedule.duration", "1h").unwrap_err();
            let message = err.to_string();
            assert_eq!(err.reason().as_str(), "InvalidCron", "{input:?}");
            assert!(
                message.starts_with(&format!("schedule.cron: invalid cron expression {input:?}")),
                "{message}"
            );
            assert!(message.contains(problem), "{input:?}: {message}");
        }
    }

    #[test]
    fn rejected_durations_name_field_and_token() {
        for (input, problem) in [
            ("0s", "positive"),
            ("0h0m", "positive"),
            ("1500ms", "whole number"),
            ("8", "unit"),
        ] {
            let err = CronWindow::parse("schedule.cron", "0 9 * * *", "schedule.duration", input).unwrap_err();
            assert_eq!(err.reason().as_str(), "InvalidDuration");
            let message = err.to_string();
            assert!(
                message.starts_with(&format!("schedule.duration: invalid duration {input:?}")),
                "{message}"
            );
            assert!(message.contains(problem), "{input:?}: {message}");
        }
    }

    #[test]
    fn weekday_mornings() {
        let w = window("0 9 * * 1-5", "8h");
        // 2026-03-02 is a Monday.
        let cases = [
            ("2026-03-02T08:59:59Z", false, Some("2026-03-02T09:00:00Z")),
            ("2026-03-02T09:00:00Z", true, Some("2026-03-02T17:00:00Z")),
            ("2026-03-02T16:59:59.5Z", true, Some("2026-03-02T17:00:00Z")),
            ("2026-03-02T17:00:00Z", false, Some("2026-03-03T09:00:00Z")),
            ("2026-03-06T17:00:00Z", false, Some("2026-03-09T09:00:00Z")),
        ];
        for (t, active, next) in cases {
            assert_eq!(w.is_active(Tz::UTC, utc(t)), active, "{t}");
            assert_eq!(w.next_transition(Tz::UTC, utc(t)), next.map(utc), "{t}");
        }
    }

    #[test]
    fn overlapping_and_abutting_windows_merge() {
        // Every 2 hours for 3 hours: the windows overlap forever.
        let w = window("0 */2 * * *", "3h");
        assert_eq!(w.next_transition(Tz::UTC, utc("2026-03-02T05:00:00Z")), None);
        // Abutting: 09:00 + 1h and 10:00 + 1h merge into 09:00-11:00.
        let w = window("0 9,10 * * *", "1h");
        assert_eq!(
            w.next_transition(Tz::UTC, utc("2026-03-02T09:30:00Z")),
            Some(utc("2026-03-02T11:00:00Z"))
        );
        // Overlapping: 09:00 + 2h and 10:00 + 2h merge into 09:00-12:00.
        let w = window("0 9,10 * * *", "2h");
        assert_eq!(
            w.next_transition(Tz::UTC, utc("2026-03-02T09:30:00Z")),
            Some(utc("2026-03-02T12:00:00Z"))
        );
        // Always on, as in the brief.
        let w = window("* * * * *", "1h");
        assert!(w.is_active(Tz::UTC, utc("2026-03-02T09:30:00Z")));
        assert_eq!(w.next_transition(Tz::UTC, utc("2026-03-02T09:30:00Z")), None);
        let w = window("* * * * *", "1m");
        assert_eq!(w.next_transition(Tz::UTC, utc("2026-03-02T09:30:00Z")), None);
        // Not always on: the weekend gap appears.
        let w = window("0 * * * 1-5", "1h");
        assert_eq!(
            w.next_transition(Tz::UTC, utc("2026-03-02T09:30:00Z")),
            Some(utc("2026-03-07T00:00:00Z"))
        );
    }

    #[test]
    fn windows_longer_than_the_gap_between_days() {
        // Daily 20:00 for 26h: always open once started.
        let w = window("0 20 * * *", "26h");
        assert_eq!(w.next_transition(Tz::UTC, utc("2026-03-02T21:00:00Z")), None);
        // Mondays 20:00 for 30h: Monday 20:00 to Wednesday 02:00.
        let w = window("0 20 * * 1", "30h");
        assert!(w.is_active(Tz::UTC, utc("2026-03-04T01:59:59Z")));
        assert!(!w.is_active(Tz::UTC, utc("2026-03-04T02:00:00Z")));
        assert_eq!(
            w.next_transition(Tz::UTC, utc("2026-03-03T12:00:00Z")),
            Some(utc("2026-03-04T02:00:00Z"))
        );
    }

    #[test]
    fn dst_follows_the_wall_clock_and_durations_are_elapsed_time() {
        let ny: Tz = "America/New_York".parse().unwrap();
        // 2026-03-08 02:30 does not exist in New York: no window that day.
        let w = window("30 2 * * *", "1h");
        assert_eq!(
            w.next_transition(ny, utc("2026-03-07T09:00:00Z")),
            Some(utc("2026-03-09T06:30:00Z"))
        );
        // 2026-11-01 01:30 happens twice (EDT 05:30Z, EST 06:30Z): two windows, which abut.
        let w = window("30 1 * * *", "1h");
        assert_eq!(
            w.next_transition(ny, utc("2026-11-01T04:00:00Z")),
            Some(utc("2026-11-01T05:30:00Z"))
        );
        assert_eq!(
            w.next_transition(ny, utc("2026-11-01T05:30:00Z")),
            Some(utc("2026-11-01T07:30:00Z"))
        );
        // An 8h window across the spring change lasts 8 elapsed hours: 00:00 EST to 09:00 EDT.
        let w = window("0 0 * * *", "8h");
        assert_eq!(
            w.next_transition(ny, utc("2026-03-08T05:00:00Z")),
            Some(utc("2026-03-08T13:00:00Z"))
        );
    }

    #[test]
    fn day_of_month_and_day_of_week_are_anded() {
        // The crate ANDs them: the 1st of a month that is also a Monday (2026-06-01), not every
        // Monday plus every 1st as classic cron would.
        let w = window("0 9 1 * 1", "1h");
        assert_eq!(
            w.next_transition(Tz::UTC, utc("2026-03-02T12:00:00Z")),
            Some(utc("2026-06-01T09:00:00Z"))
        );
    }

    #[test]
    fn hourly_windows_in_lord_howe_leave_a_gap_when_dst_starts() {
        // Lord Howe springs forward 30 minutes at 02:00 +10:30 on 2026-10-04 (15:30 UTC on the
        // 3rd): the 01:00 window ends at 02:30 +11:00, and the next starts at 03:00 +11:00.
        let lord_howe: Tz = "Australia/Lord_Howe".parse().unwrap();
        let w = window("0 * * * *", "1h");
        assert_eq!(
            w.next_transition(lord_howe, utc("2026-10-03T12:00:00Z")),
            Some(utc("2026-10-03T15:30:00Z"))
        );
        assert!(!w.is_active(lord_howe, utc("2026-10-03T15:45:00Z")));
        assert_eq!(
            w.next_transition(lord_howe, utc("2026-10-03T15:30:00Z")),
            Some(utc("2026-10-03T16:00:00Z"))
        );
    }
}

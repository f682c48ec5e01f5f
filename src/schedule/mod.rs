//! The schedule engine: when a ScheduledMachine's window is open, and when that next changes.
//!
//! Pure and clock-free: every query takes the instant, so the controller (and tests) inject the
//! clock, and the controller can requeue exactly at [`Schedule::next_transition`] instead of
//! polling. `schedule.enabled` is deliberately not read here; the controller decides what a
//! disabled schedule means.
//!
//! A schedule has one of two forms:
//! - `daysOfWeek` + `hoursOfDay`, read on `timezone`'s wall clock (`hours.rs` explains overnight
//!   ranges such as `22-6`), or
//! - `cron` + `duration`: open for `duration` after every occurrence (`cron.rs` explains DST and
//!   the crate's cron dialect).
//!
//! [`Schedule::parse`] validates the whole spec up front, whatever the day: the predecessor only
//! parsed the hours on listed days, so a typo surfaced days later (or never).

mod cron;
mod days;
mod duration;
mod error;
mod hours;
mod list;
mod margins;
mod periods;
mod timezone;
mod weekly;

#[cfg(test)]
mod proptests;

use chrono::{DateTime, Utc};
use chrono_tz::Tz;

use self::{cron::CronWindow, periods::Span, weekly::WeeklyWindow};
pub use self::{
    duration::{format_duration, parse_duration},
    error::{Reason, ScheduleError},
    margins::{AUTO_HISTORY, LeadTime, Margins, Plan},
};
use crate::api::scheduled_machine::ScheduleSpec;

/// Field paths quoted in errors.
const DAYS_FIELD: &str = "schedule.daysOfWeek";
const HOURS_FIELD: &str = "schedule.hoursOfDay";
const TIMEZONE_FIELD: &str = "schedule.timezone";
const CRON_FIELD: &str = "schedule.cron";
const DURATION_FIELD: &str = "schedule.duration";
const EXCLUSIONS_FIELD: &str = "schedule.exclusions";
const INCLUSIONS_FIELD: &str = "schedule.inclusions";
const LEAD_TIME_FIELD: &str = "schedule.leadTime";
/// How many boundaries `next_transition` steps over before giving up (windows and periods that
/// keep the state unchanged across all of them are reported as no transition).
const MAX_TRANSITION_STEPS: usize = 10_000;

/// A validated, compiled schedule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schedule {
    timezone: Tz,
    window: Window,
    /// Spans when the machine is off whatever the window says.
    exclusions: Vec<Span>,
    /// Spans when it is on although the window is closed (an exclusion wins).
    inclusions: Vec<Span>,
    /// How early provisioning starts.
    lead_time: LeadTime,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Window {
    Weekly(WeeklyWindow),
    Cron(CronWindow),
}

/// Whether a window is open at an instant, and when that next changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Evaluation {
    /// The window is open.
    pub active: bool,
    /// The first instant after the evaluated one at which `active` flips; `None` when it never
    /// does (an always-open window) or not within the engine's search bounds.
    pub next_transition: Option<DateTime<Utc>>,
}

impl Schedule {
    /// Validates and compiles `spec` (all fields, whichever form and whatever the day).
    ///
    /// # Errors
    /// The first problem found, naming the field and the offending token; see [`ScheduleError`].
    pub fn parse(spec: &ScheduleSpec) -> Result<Self, ScheduleError> {
        let weekly_set = spec.days_of_week.is_some() || spec.hours_of_day.is_some();
        let cron_set = spec.cron.is_some() || spec.duration.is_some();
        if weekly_set && cron_set {
            let fields = [
                ("daysOfWeek", spec.days_of_week.is_some()),
                ("hoursOfDay", spec.hours_of_day.is_some()),
                ("cron", spec.cron.is_some()),
                ("duration", spec.duration.is_some()),
            ];
            let fields: Vec<&str> = fields.iter().filter(|(_, set)| *set).map(|(name, _)| *name).collect();
            return Err(ScheduleError::AmbiguousSchedule {
                fields: fields.join(", "),
            });
        }
        let window = match (&spec.days_of_week, &spec.hours_of_day, &spec.cron, &spec.duration) {
            (Some(days), Some(hours), None, None) => {
                let days = days::parse_days(DAYS_FIELD, days)?;
                let hours = hours::parse_hours(HOURS_FIELD, hours)?;
                Window::Weekly(WeeklyWindow::new(days, &hours))
            }
            (None, None, Some(cron), Some(duration)) => {
                Window::Cron(CronWindow::parse(CRON_FIELD, cron, DURATION_FIELD, duration)?)
            }
            (Some(_), None, ..) => {
                return Err(ScheduleError::IncompleteSchedule {
                    field: HOURS_FIELD,
                    with: DAYS_FIELD,
                });
            }
            (None, Some(_), ..) => {
                return Err(ScheduleError::IncompleteSchedule {
                    field: DAYS_FIELD,
                    with: HOURS_FIELD,
                });
            }
            (.., Some(_), None) => {
                return Err(ScheduleError::IncompleteSchedule {
                    field: DURATION_FIELD,
                    with: CRON_FIELD,
                });
            }
            (.., None, Some(_)) => {
                return Err(ScheduleError::IncompleteSchedule {
                    field: CRON_FIELD,
                    with: DURATION_FIELD,
                });
            }
            _ => return Err(ScheduleError::EmptySchedule),
        };
        let timezone = timezone::parse_timezone(TIMEZONE_FIELD, &spec.timezone)?;
        Ok(Self {
            timezone,
            window,
            exclusions: periods::parse_periods(EXCLUSIONS_FIELD, &spec.exclusions, timezone)?,
            inclusions: periods::parse_periods(INCLUSIONS_FIELD, &spec.inclusions, timezone)?,
            lead_time: LeadTime::parse(LEAD_TIME_FIELD, spec.lead_time.as_deref())?,
        })
    }

    /// `leadTime`, as parsed; [`LeadTime::resolve`] turns `auto` into a duration.
    #[must_use]
    pub fn lead_time(&self) -> LeadTime {
        self.lead_time
    }

    /// The zone the schedule is read in.
    #[must_use]
    pub fn timezone(&self) -> Tz {
        self.timezone
    }

    /// Whether the machine should run at `t`: inside the window or an inclusion, and in no
    /// exclusion.
    #[must_use]
    pub fn is_active(&self, t: DateTime<Utc>) -> bool {
        !self.exclusions.iter().any(|s| s.contains(t))
            && (self.window_open(t) || self.inclusions.iter().any(|s| s.contains(t)))
    }

    fn window_open(&self, t: DateTime<Utc>) -> bool {
        match &self.window {
            Window::Weekly(window) => window.is_active(self.timezone, t),
            Window::Cron(window) => window.is_active(self.timezone, t),
        }
    }

    fn window_next(&self, t: DateTime<Utc>) -> Option<DateTime<Utc>> {
        match &self.window {
            Window::Weekly(window) => window.next_transition(self.timezone, t),
            Window::Cron(window) => window.next_transition(self.timezone, t),
        }
    }

    /// The first instant strictly after `t` at which [`is_active`](Self::is_active) changes, to
    /// the second.
    ///
    /// `None` when the window never closes (every hour of every day; cron windows that overlap
    /// or abut forever, such as `* * * * *` with `1h`). Bounds: day/hour windows are searched 16
    /// days ahead (enough for any real zone); cron windows that stay merged for more than 400
    /// days or 10,000 merge steps are reported as `None`, so a caller should still re-evaluate
    /// occasionally.
    ///
    /// Exclusions and inclusions add their edges: the answer is the first window edge or
    /// period edge after `t` at which the combined state differs from `t`'s.
    #[must_use]
    pub fn next_transition(&self, t: DateTime<Utc>) -> Option<DateTime<Utc>> {
        if self.exclusions.is_empty() && self.inclusions.is_empty() {
            return self.window_next(t);
        }
        let now = self.is_active(t);
        let mut cursor = t;
        for _ in 0..MAX_TRANSITION_STEPS {
            let period_edge = self
                .exclusions
                .iter()
                .chain(&self.inclusions)
                .flat_map(|s| [s.start, s.end])
                .filter(|edge| *edge > cursor)
                .min();
            let next = match (self.window_next(cursor), period_edge) {
                (Some(a), Some(b)) => a.min(b),
                (a, b) => a.or(b)?,
            };
            if self.is_active(next) != now {
                return Some(next);
            }
            cursor = next;
        }
        None
    }

    /// [`is_active`](Self::is_active) and [`next_transition`](Self::next_transition) together.
    #[must_use]
    pub fn evaluate(&self, t: DateTime<Utc>) -> Evaluation {
        Evaluation {
            active: self.is_active(t),
            next_transition: self.next_transition(t),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(days: &[&str], hours: &[&str], timezone: &str) -> ScheduleSpec {
        ScheduleSpec {
            enabled: true,
            days_of_week: Some(days.iter().map(|s| (*s).to_owned()).collect()),
            hours_of_day: Some(hours.iter().map(|s| (*s).to_owned()).collect()),
            timezone: timezone.to_owned(),
            ..ScheduleSpec::default()
        }
    }

    fn cron_spec(cron: &str, duration: &str, timezone: &str) -> ScheduleSpec {
        ScheduleSpec {
            enabled: true,
            days_of_week: None,
            hours_of_day: None,
            timezone: timezone.to_owned(),
            cron: Some(cron.to_owned()),
            duration: Some(duration.to_owned()),
            ..ScheduleSpec::default()
        }
    }

    fn utc(s: &str) -> DateTime<Utc> {
        s.parse().unwrap()
    }

    /// Asserts activity and next transition at each `(instant, active, next)`.
    fn check(schedule: &Schedule, cases: &[(&str, bool, Option<&str>)]) {
        for (t, active, next) in cases {
            let evaluation = schedule.evaluate(utc(t));
            assert_eq!(evaluation.active, *active, "active at {t}");
            assert_eq!(evaluation.next_transition, next.map(utc), "next transition after {t}");
        }
    }

    #[test]
    fn seed_schedule_in_new_york_including_dst_weeks() {
        let s = Schedule::parse(&spec(&["mon-fri"], &["9-17"], "America/New_York")).unwrap();
        check(
            &s,
            &[
                // Week of 2026-03-02 (EST, -05:00): Monday 09:00 is 14:00Z, 17:59:59 is 22:59:59Z.
                ("2026-03-02T13:59:59Z", false, Some("2026-03-02T14:00:00Z")),
                ("2026-03-02T14:00:00Z", true, Some("2026-03-02T23:00:00Z")),
                ("2026-03-02T22:59:59Z", true, Some("2026-03-02T23:00:00Z")),
                ("2026-03-02T23:00:00Z", false, Some("2026-03-03T14:00:00Z")),
                // Friday evening until Monday morning; DST starts Sunday 2026-03-08, so Monday
                // 09:00 is now 13:00Z.
                ("2026-03-06T23:00:00Z", false, Some("2026-03-09T13:00:00Z")),
                ("2026-03-08T12:00:00Z", false, Some("2026-03-09T13:00:00Z")),
                ("2026-03-09T13:00:00Z", true, Some("2026-03-09T22:00:00Z")),
                // DST ends Sunday 2026-11-01: Friday closes at 22:00Z (EDT), Monday opens at
                // 14:00Z (EST).
                ("2026-10-30T21:59:59Z", true, Some("2026-10-30T22:00:00Z")),
                ("2026-10-30T22:00:00Z", false, Some("2026-11-02T14:00:00Z")),
                ("2026-11-01T05:30:00Z", false, Some("2026-11-02T14:00:00Z")),
                ("2026-11-02T14:00:00Z", true, Some("2026-11-02T23:00:00Z")),
                // Saturday midday.
                ("2026-03-07T17:00:00Z", false, Some("2026-03-09T13:00:00Z")),
            ],
        );
    }

    #[test]
    fn overnight_window_carries_into_the_next_day() {
        // fri + 22-6 in UTC: Friday 22:00 to Saturday 06:59:59. 2026-03-06 is a Friday.
        let s = Schedule::parse(&spec(&["fri"], &["22-6"], "UTC")).unwrap();
        check(
            &s,
            &[
                ("2026-03-06T03:00:00Z", false, Some("2026-03-06T22:00:00Z")),
                ("2026-03-06T21:59:59Z", false, Some("2026-03-06T22:00:00Z")),
                ("2026-03-06T22:00:00Z", true, Some("2026-03-07T07:00:00Z")),
                ("2026-03-07T02:00:00Z", true, Some("2026-03-07T07:00:00Z")),
                ("2026-03-07T07:00:00Z", false, Some("2026-03-13T22:00:00Z")),
                ("2026-03-07T22:00:00Z", false, Some("2026-03-13T22:00:00Z")),
            ],
        );
        // Friday 03:00 is open only when Thursday is listed too.
        let s = Schedule::parse(&spec(&["thu,fri"], &["22-6"], "UTC")).unwrap();
        assert!(s.is_active(utc("2026-03-06T03:00:00Z")));
        check(&s, &[("2026-03-05T22:00:00Z", true, Some("2026-03-06T07:00:00Z"))]);
        // Consecutive listed days chain overnight windows only across their own hours.
        let s = Schedule::parse(&spec(&["sat-sun"], &["20-4"], "UTC")).unwrap();
        check(
            &s,
            &[
                ("2026-03-07T19:00:00Z", false, Some("2026-03-07T20:00:00Z")),
                ("2026-03-08T04:59:59Z", true, Some("2026-03-08T05:00:00Z")),
                ("2026-03-08T20:00:00Z", true, Some("2026-03-09T05:00:00Z")),
                ("2026-03-09T04:00:00Z", true, Some("2026-03-09T05:00:00Z")),
            ],
        );
    }

    #[test]
    fn full_names_case_and_leading_zeros() {
        let short = Schedule::parse(&spec(&["mon-fri"], &["9-17"], "UTC")).unwrap();
        for (days, hours) in [
            (&["Monday-Friday"][..], &["09-17"][..]),
            (&["MON-fri"], &["009 - 017"]),
            (&["monday", "Tuesday,WEDNESDAY", "thu-FRIDAY"], &["9-12", "13-17"]),
            (&[" mon - fri "], &["9,10-16 , 17"]),
        ] {
            assert_eq!(
                Schedule::parse(&spec(days, hours, "UTC")).unwrap(),
                short,
                "{days:?} {hours:?}"
            );
        }
    }

    #[test]
    fn always_open_windows_never_transition() {
        for (days, hours) in [
            (&["mon-sun"][..], &["0-23"][..]),
            (&["sun-sat"], &["22-21"]),
            (&["mon", "tue-sun"], &["0-11", "12-23"]),
        ] {
            let s = Schedule::parse(&spec(days, hours, "America/New_York")).unwrap();
            for t in ["2026-03-08T07:00:00Z", "2026-11-01T06:00:00Z", "2026-06-01T12:34:56Z"] {
                assert_eq!(
                    s.evaluate(utc(t)),
                    Evaluation {
                        active: true,
                        next_transition: None
                    },
                    "{days:?} {t}"
                );
            }
        }
    }

    #[test]
    fn dst_skipped_hour_never_matches_and_repeated_hour_matches_twice() {
        let s = Schedule::parse(&spec(&["sun"], &["2"], "America/New_York")).unwrap();
        // 2026-03-08: 02:00-02:59 does not exist; the clock jumps 01:59:59 EST to 03:00 EDT (07:00Z).
        assert!(!s.is_active(utc("2026-03-08T07:00:00Z")));
        check(&s, &[("2026-03-08T06:30:00Z", false, Some("2026-03-15T06:00:00Z"))]);
        // 2026-11-01: 01:00-01:59 happens twice (05:00Z EDT, 06:00Z EST); `1` matches both, and
        // `2` starts at 02:00 EST (07:00Z).
        let s = Schedule::parse(&spec(&["sun"], &["1"], "America/New_York")).unwrap();
        check(
            &s,
            &[
                ("2026-11-01T04:59:59Z", false, Some("2026-11-01T05:00:00Z")),
                ("2026-11-01T05:00:00Z", true, Some("2026-11-01T07:00:00Z")),
                ("2026-11-01T06:30:00Z", true, Some("2026-11-01T07:00:00Z")),
            ],
        );
        // Spring week `sun` + `1-3`: 01:00 EST (06:00Z) to 03:59:59 EDT (07:59:59Z).
        let s = Schedule::parse(&spec(&["sun"], &["1-3"], "America/New_York")).unwrap();
        check(&s, &[("2026-03-08T06:00:00Z", true, Some("2026-03-08T08:00:00Z"))]);
    }

    #[test]
    fn half_and_quarter_hour_offsets() {
        // Kolkata is +05:30: Monday 09:00 is 03:30Z, 17:59:59 is 12:29:59Z.
        let s = Schedule::parse(&spec(&["mon-fri"], &["9-17"], "Asia/Kolkata")).unwrap();
        check(
            &s,
            &[
                ("2026-03-02T03:29:59Z", false, Some("2026-03-02T03:30:00Z")),
                ("2026-03-02T03:30:00Z", true, Some("2026-03-02T12:30:00Z")),
                ("2026-03-06T12:30:00Z", false, Some("2026-03-09T03:30:00Z")),
            ],
        );
        // Kathmandu is +05:45: Monday 09:00 is 03:15Z; overnight `22-6` on Friday ends
        // Saturday 07:00 local (01:15Z).
        let s = Schedule::parse(&spec(&["mon-fri"], &["9-17"], "Asia/Kathmandu")).unwrap();
        check(&s, &[("2026-03-02T00:00:00Z", false, Some("2026-03-02T03:15:00Z"))]);
        let s = Schedule::parse(&spec(&["fri"], &["22-6"], "Asia/Kathmandu")).unwrap();
        check(&s, &[("2026-03-06T16:15:00Z", true, Some("2026-03-07T01:15:00Z"))]);
    }

    #[test]
    fn lord_howe_half_hour_dst() {
        // Lord Howe: +11:00 in summer, +10:30 in winter; DST ends 2026-04-05 02:00 +11:00
        // (15:00Z on the 4th), when the clock goes back to 01:30.
        let s = Schedule::parse(&spec(&["sun"], &["1"], "Australia/Lord_Howe")).unwrap();
        check(
            &s,
            &[
                // Sunday 01:00 +11:00 is 14:00Z; the hour runs 01:00-01:59:59 (+11), then
                // 01:30-01:59:59 again (+10:30), so it closes at 02:00 +10:30 = 15:30Z.
                ("2026-04-04T13:59:59Z", false, Some("2026-04-04T14:00:00Z")),
                ("2026-04-04T14:00:00Z", true, Some("2026-04-04T15:30:00Z")),
                ("2026-04-04T15:10:00Z", true, Some("2026-04-04T15:30:00Z")),
                // A week later: 01:00 +10:30 is 14:30Z.
                ("2026-04-04T15:30:00Z", false, Some("2026-04-11T14:30:00Z")),
            ],
        );
        // DST starts 2026-10-04 02:00 +10:30 (15:30Z on the 3rd): 02:00-02:29 is skipped, so
        // `2` is open only 02:30-02:59:59 +11:00 (15:30Z-16:00Z).
        let s = Schedule::parse(&spec(&["sun"], &["2"], "Australia/Lord_Howe")).unwrap();
        check(
            &s,
            &[
                ("2026-10-03T15:00:00Z", false, Some("2026-10-03T15:30:00Z")),
                ("2026-10-03T15:30:00Z", true, Some("2026-10-03T16:00:00Z")),
            ],
        );
    }

    #[test]
    fn cron_form() {
        let s = Schedule::parse(&cron_spec("0 9 * * 1-5", "1h30m", "Asia/Kolkata")).unwrap();
        // Monday 09:00 +05:30 is 03:30Z; the window lasts until 05:00Z.
        check(
            &s,
            &[
                ("2026-03-02T03:00:00Z", false, Some("2026-03-02T03:30:00Z")),
                ("2026-03-02T04:59:59Z", true, Some("2026-03-02T05:00:00Z")),
                ("2026-03-06T05:00:00Z", false, Some("2026-03-09T03:30:00Z")),
            ],
        );
        let s = Schedule::parse(&cron_spec("* * * * *", "1h", "UTC")).unwrap();
        assert_eq!(
            s.evaluate(utc("2026-03-02T03:00:00Z")),
            Evaluation {
                active: true,
                next_transition: None
            }
        );
    }

    #[test]
    fn whole_spec_is_validated_whatever_the_day() {
        // The predecessor parsed hours only on listed days; here a bad hour fails on any day.
        let err = Schedule::parse(&spec(&["sun"], &["9", "25"], "UTC")).unwrap_err();
        assert_eq!(
            err.to_string(),
            r#"schedule.hoursOfDay[1]: invalid hour "25": outside 0-23"#
        );
    }

    #[test]
    fn rejected_specs_name_fields() {
        let none = ScheduleSpec::default();
        let with = |f: &dyn Fn(&mut ScheduleSpec)| {
            let mut s = none.clone();
            f(&mut s);
            s
        };
        let some = |v: &[&str]| Some(v.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>());
        let cases: Vec<(ScheduleSpec, &str, &str)> = vec![
            (none.clone(), "EmptySchedule", "schedule: no window"),
            (
                with(&|s| {
                    s.days_of_week = some(&["mon"]);
                    s.hours_of_day = some(&["9"]);
                    s.cron = Some("0 9 * * *".into());
                    s.duration = Some("1h".into());
                }),
                "AmbiguousSchedule",
                "(found daysOfWeek, hoursOfDay, cron, duration)",
            ),
            (
                with(&|s| {
                    s.days_of_week = some(&["mon"]);
                    s.duration = Some("1h".into());
                }),
                "AmbiguousSchedule",
                "(found daysOfWeek, duration)",
            ),
            (
                with(&|s| s.days_of_week = some(&["mon"])),
                "IncompleteSchedule",
                "schedule.hoursOfDay: required together with schedule.daysOfWeek",
            ),
            (
                with(&|s| s.hours_of_day = some(&["9"])),
                "IncompleteSchedule",
                "schedule.daysOfWeek: required together with schedule.hoursOfDay",
            ),
            (
                with(&|s| s.cron = Some("0 9 * * *".into())),
                "IncompleteSchedule",
                "schedule.duration: required together with schedule.cron",
            ),
            (
                with(&|s| s.duration = Some("1h".into())),
                "IncompleteSchedule",
                "schedule.cron: required together with schedule.duration",
            ),
            (
                spec(&[], &["9"], "UTC"),
                "InvalidDay",
                r#"schedule.daysOfWeek: invalid day "[]""#,
            ),
            (
                spec(&["mon"], &[], "UTC"),
                "InvalidHour",
                r#"schedule.hoursOfDay: invalid hour "[]""#,
            ),
            (
                spec(&["mon", "xyz"], &["9"], "UTC"),
                "InvalidDay",
                r#"schedule.daysOfWeek[1]: invalid day "xyz""#,
            ),
            (
                spec(&["mon"], &["9", "+9"], "UTC"),
                "InvalidHour",
                r#"schedule.hoursOfDay[1]: invalid hour "+9""#,
            ),
            (
                spec(&["mon"], &["9"], "Europe/Nowhere"),
                "InvalidTimezone",
                r#"schedule.timezone: unknown time zone "Europe/Nowhere""#,
            ),
            (
                spec(&["mon"], &["9"], "utc"),
                "InvalidTimezone",
                r#"schedule.timezone: unknown time zone "utc""#,
            ),
            (
                cron_spec("0 9 * * *", "1h", "Nowhere"),
                "InvalidTimezone",
                r#"schedule.timezone: unknown time zone "Nowhere""#,
            ),
            (
                cron_spec("0 24 * * *", "1h", "UTC"),
                "InvalidCron",
                r#"schedule.cron: invalid cron expression "0 24 * * *": invalid hour field: 24 is outside 0..=23 (at "24")"#,
            ),
            (
                cron_spec("0 9 * * *", "-1h", "UTC"),
                "InvalidDuration",
                r#"schedule.duration: invalid duration "-1h": signs"#,
            ),
            (
                cron_spec("0 9 * * *", "0m", "UTC"),
                "InvalidDuration",
                r#"schedule.duration: invalid duration "0m""#,
            ),
        ];
        for (spec, reason, message) in cases {
            let err = Schedule::parse(&spec).unwrap_err();
            assert_eq!(err.reason().as_str(), reason, "{spec:?}");
            assert!(err.to_string().contains(message), "{spec:?}: {err}");
        }
    }
}

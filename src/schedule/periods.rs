//! Exclusions and inclusions: periods that keep the machine off (holidays, freezes) or on (an
//! extra window) whatever the window says. Each is resolved once, in the schedule's zone, to a
//! half-open span of UTC instants, so evaluating one is a comparison.
//!
//! A `date` is the whole local day; a date as `start` is the start of that day and as `end` the
//! end of it. A local midnight that a DST change skips (some zones move at 00:00) starts the day
//! at its first existing instant.

use chrono::{DateTime, Days, NaiveDate, NaiveTime, TimeZone, Utc};
use chrono_tz::Tz;

use super::error::ScheduleError;
use crate::api::scheduled_machine::SchedulePeriod;

/// `[start, end)` in UTC.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Span {
    pub start: DateTime<Utc>,
    pub end: DateTime<Utc>,
}

impl Span {
    pub fn contains(&self, t: DateTime<Utc>) -> bool {
        self.start <= t && t < self.end
    }
}

/// Resolve `periods` (the list at `field`, e.g. `schedule.exclusions`) in `tz`.
pub(crate) fn parse_periods(field: &str, periods: &[SchedulePeriod], tz: Tz) -> Result<Vec<Span>, ScheduleError> {
    periods
        .iter()
        .enumerate()
        .map(|(i, p)| parse_period(&format!("{field}[{i}]"), p, tz))
        .collect()
}

fn parse_period(field: &str, period: &SchedulePeriod, tz: Tz) -> Result<Span, ScheduleError> {
    let span = match (&period.date, &period.start, &period.end) {
        (Some(date), None, None) => {
            let day = parse_date(&format!("{field}.date"), date)?;
            Span {
                start: start_of_day(tz, day),
                end: start_of_day(tz, next_day(&format!("{field}.date"), date, day)?),
            }
        }
        (None, Some(start), Some(end)) => Span {
            start: parse_bound(&format!("{field}.start"), start, tz, Bound::Start)?,
            end: parse_bound(&format!("{field}.end"), end, tz, Bound::End)?,
        },
        _ => {
            return Err(ScheduleError::period(field, "", "set either date, or start with end"));
        }
    };
    if span.end <= span.start {
        let token = period.end.as_deref().or(period.date.as_deref()).unwrap_or_default();
        return Err(ScheduleError::period(
            &format!("{field}.end"),
            token,
            "must be after start",
        ));
    }
    Ok(span)
}

#[derive(Clone, Copy)]
enum Bound {
    Start,
    End,
}

/// An RFC 3339 instant, or a date taken as the start (or, for `end`, the end) of that local day.
fn parse_bound(field: &str, value: &str, tz: Tz, bound: Bound) -> Result<DateTime<Utc>, ScheduleError> {
    if value.len() > 10 {
        return DateTime::parse_from_rfc3339(value)
            .map(|t| t.with_timezone(&Utc))
            .map_err(|e| ScheduleError::period(field, value, format!("not an RFC 3339 instant: {e}")));
    }
    let day = parse_date(field, value)?;
    Ok(match bound {
        Bound::Start => start_of_day(tz, day),
        Bound::End => start_of_day(tz, next_day(field, value, day)?),
    })
}

fn parse_date(field: &str, value: &str) -> Result<NaiveDate, ScheduleError> {
    NaiveDate::parse_from_str(value, "%Y-%m-%d")
        .map_err(|e| ScheduleError::period(field, value, format!("not a YYYY-MM-DD date: {e}")))
}

fn next_day(field: &str, value: &str, day: NaiveDate) -> Result<NaiveDate, ScheduleError> {
    day.checked_add_days(Days::new(1))
        .ok_or_else(|| ScheduleError::period(field, value, "out of range"))
}

/// The first instant of `day` on `tz`'s wall clock.
fn start_of_day(tz: Tz, day: NaiveDate) -> DateTime<Utc> {
    // Midnight exists on almost every day; where a transition skips it, take the first
    // minute of the day that exists (transitions are whole minutes).
    (0..24 * 60)
        .filter_map(|m| NaiveTime::from_num_seconds_from_midnight_opt(m * 60, 0))
        .find_map(|time| tz.from_local_datetime(&day.and_time(time)).earliest())
        .map_or_else(|| day.and_time(NaiveTime::MIN).and_utc(), |t| t.with_timezone(&Utc))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn period(date: Option<&str>, start: Option<&str>, end: Option<&str>) -> SchedulePeriod {
        SchedulePeriod {
            date: date.map(Into::into),
            start: start.map(Into::into),
            end: end.map(Into::into),
        }
    }

    fn utc(s: &str) -> DateTime<Utc> {
        s.parse().unwrap()
    }

    #[test]
    fn dates_are_whole_local_days_and_instants_are_exact() {
        let ny: Tz = "America/New_York".parse().unwrap();
        let spans = parse_periods(
            "schedule.exclusions",
            &[
                period(Some("2026-12-25"), None, None),
                period(None, Some("2026-12-24"), Some("2026-12-26")),
                period(None, Some("2026-12-31T12:00:00-05:00"), Some("2027-01-01")),
            ],
            ny,
        )
        .unwrap();
        assert_eq!(
            spans[0],
            Span {
                start: utc("2026-12-25T05:00:00Z"),
                end: utc("2026-12-26T05:00:00Z")
            }
        );
        assert_eq!(
            spans[1],
            Span {
                start: utc("2026-12-24T05:00:00Z"),
                end: utc("2026-12-27T05:00:00Z")
            }
        );
        assert_eq!(
            spans[2],
            Span {
                start: utc("2026-12-31T17:00:00Z"),
                end: utc("2027-01-02T05:00:00Z")
            }
        );
        assert!(spans[0].contains(utc("2026-12-25T05:00:00Z")) && !spans[0].contains(utc("2026-12-26T05:00:00Z")));
    }

    #[test]
    fn a_day_whose_midnight_is_skipped_starts_at_its_first_instant() {
        // America/Santiago springs forward at 00:00 on 2026-09-06: that day starts at 01:00.
        let tz: Tz = "America/Santiago".parse().unwrap();
        let span = parse_periods("p", &[period(Some("2026-09-06"), None, None)], tz).unwrap()[0];
        assert_eq!(span.start, utc("2026-09-06T04:00:00Z"));
    }

    #[test]
    fn bad_periods_name_the_field_and_value() {
        let cases = [
            (
                period(Some("2026-02-30"), None, None),
                "schedule.exclusions[0].date: invalid period \"2026-02-30\"",
            ),
            (
                period(None, Some("tomorrow morning"), Some("2026-01-02")),
                "schedule.exclusions[0].start: invalid period \"tomorrow morning\"",
            ),
            (
                period(None, Some("2026-01-03"), Some("2026-01-02")),
                "schedule.exclusions[0].end: invalid period \"2026-01-02\": must be after start",
            ),
            (
                period(Some("2026-01-01"), Some("2026-01-01"), None),
                "schedule.exclusions[0]: invalid period \"\": set either date, or start with end",
            ),
        ];
        for (p, want) in cases {
            let err = parse_periods("schedule.exclusions", &[p], Tz::UTC).unwrap_err();
            assert!(err.to_string().starts_with(want), "{err}");
            assert_eq!(err.reason().as_str(), "InvalidPeriod");
        }
    }
}

//! Activity and next transition of a day/hour window.
//!
//! Activity depends only on the local wall-clock (weekday, hour), so the window is compiled into
//! a 7x24 table once. Activity can then change only where the local wall-clock hour changes:
//! at a local hour boundary, or where the zone's UTC offset changes (DST, or a zone moving its
//! standard offset). [`next_transition`](WeeklyWindow::next_transition) walks exactly those
//! instants, so a schedule is evaluated in a few hundred steps instead of second by second, and
//! `:30`/`:45` offsets (Asia/Kolkata, Asia/Kathmandu) and 30-minute DST shifts
//! (Australia/Lord_Howe) need no special cases.

use chrono::{DateTime, Datelike, Offset, TimeDelta, TimeZone, Timelike, Utc};
use chrono_tz::Tz;

use super::{days::DaySet, hours::HourRange};

/// How far ahead [`WeeklyWindow::next_transition`] looks. Every (weekday, hour) cell recurs each
/// local week; a cell can be missed only when a DST or offset jump skips it, and no zone skips
/// the same cell two weeks running, so a non-uniform table always changes within about 15 days.
const SEARCH_HORIZON: TimeDelta = TimeDelta::days(16);

/// A day/hour window compiled to a table: bit `h` of `table[d]` is set when local hour `h` of
/// weekday `d` (0 = Monday) is inside the window.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct WeeklyWindow {
    table: [u32; 7],
}

/// Bits 0..=23: every hour of a day.
const FULL_DAY: u32 = (1 << 24) - 1;

impl WeeklyWindow {
    /// Compiles the normative rule ([`HourRange::covers`]) into the table.
    pub(crate) fn new(days: DaySet, hours: &[HourRange]) -> Self {
        let mut table = [0u32; 7];
        let mut day = chrono::Weekday::Mon;
        for row in &mut table {
            for hour in 0..24u8 {
                if hours.iter().any(|range| range.covers(days, day, hour)) {
                    *row |= 1 << hour;
                }
            }
            day = day.succ();
        }
        Self { table }
    }

    /// Whether the window is open at `t`, read on `tz`'s wall clock. A wall-clock hour skipped by
    /// DST never occurs, so it never matches; an hour repeated in autumn matches both times.
    pub(crate) fn is_active(&self, tz: Tz, t: DateTime<Utc>) -> bool {
        let local = t.with_timezone(&tz);
        self.table[local.weekday().num_days_from_monday() as usize] & (1 << local.hour()) != 0
    }

    /// Every hour of every day is open: the window never closes.
    fn is_always_open(&self) -> bool {
        self.table.iter().all(|row| *row == FULL_DAY)
    }

    /// The first instant after `t` at which activity changes, to the second. `None` when the
    /// window is always open (a window cannot be always closed: its lists are non-empty), or, in
    /// theory, when nothing changes within [`SEARCH_HORIZON`].
    pub(crate) fn next_transition(&self, tz: Tz, t: DateTime<Utc>) -> Option<DateTime<Utc>> {
        if self.is_always_open() {
            return None;
        }
        let current = self.is_active(tz, t);
        let limit = t.checked_add_signed(SEARCH_HORIZON)?;
        let mut cursor = t;
        // Between two consecutive edges the local hour is constant, so activity is too.
        while let Some(edge) = next_wall_clock_edge(tz, cursor) {
            if edge > limit {
                return None;
            }
            if self.is_active(tz, edge) != current {
                return Some(edge);
            }
            cursor = edge;
        }
        None
    }
}

/// The UTC offset of `tz` at `t`, in seconds.
fn offset_seconds(tz: Tz, t: DateTime<Utc>) -> i32 {
    tz.offset_from_utc_datetime(&t.naive_utc()).fix().local_minus_utc()
}

/// The first whole second after `t` at which `tz`'s local wall-clock hour may change: the next
/// local hour boundary under the current offset, or the first offset change before it.
///
/// Offset changes are found by bisection over seconds, which needs no access to the tz
/// database's transition list and is at most 12 lookups per hour. It assumes the offset does not
/// change and change back within one hour, which no zone does.
fn next_wall_clock_edge(tz: Tz, t: DateTime<Utc>) -> Option<DateTime<Utc>> {
    // Offsets and hour boundaries fall on whole seconds, so work in whole seconds.
    let base = t.with_nanosecond(0)?.timestamp();
    let offset = offset_seconds(tz, at(base)?);
    let into_hour = (base + i64::from(offset)).rem_euclid(3600);
    let boundary = base.checked_add(3600 - into_hour)?;
    if offset_seconds(tz, at(boundary - 1)?) == offset {
        return at(boundary);
    }
    // Invariant: the offset at `low` is `offset`; at `high` it differs.
    let (mut low, mut high) = (base, boundary - 1);
    while high - low > 1 {
        let middle = low + (high - low) / 2;
        if offset_seconds(tz, at(middle)?) == offset {
            low = middle;
        } else {
            high = middle;
        }
    }
    at(high)
}

fn at(seconds: i64) -> Option<DateTime<Utc>> {
    DateTime::from_timestamp(seconds, 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::Weekday;

    fn utc(s: &str) -> DateTime<Utc> {
        s.parse().unwrap()
    }

    #[test]
    fn edges_follow_half_and_quarter_hour_offsets() {
        let kolkata: Tz = "Asia/Kolkata".parse().unwrap();
        let kathmandu: Tz = "Asia/Kathmandu".parse().unwrap();
        assert_eq!(
            next_wall_clock_edge(kolkata, utc("2026-01-05T03:00:00Z")),
            Some(utc("2026-01-05T03:30:00Z"))
        );
        assert_eq!(
            next_wall_clock_edge(kathmandu, utc("2026-01-05T03:00:00Z")),
            Some(utc("2026-01-05T03:15:00Z"))
        );
        assert_eq!(
            next_wall_clock_edge(kathmandu, utc("2026-01-05T03:15:00Z")),
            Some(utc("2026-01-05T04:15:00Z"))
        );
        assert_eq!(
            next_wall_clock_edge(Tz::UTC, utc("2026-01-05T03:59:59.999Z")),
            Some(utc("2026-01-05T04:00:00Z"))
        );
    }

    #[test]
    fn edges_stop_at_offset_changes() {
        // Lord Howe ends DST on 2026-04-05 at 02:00 +11:00 (15:00 UTC), back to +10:30: the wall
        // clock jumps from 01:59:59 back to 01:30, so that instant is an edge and the next is
        // 02:00 +10:30 (15:30 UTC).
        let lord_howe: Tz = "Australia/Lord_Howe".parse().unwrap();
        assert_eq!(
            next_wall_clock_edge(lord_howe, utc("2026-04-04T14:10:00Z")),
            Some(utc("2026-04-04T15:00:00Z"))
        );
        assert_eq!(
            next_wall_clock_edge(lord_howe, utc("2026-04-04T15:00:00Z")),
            Some(utc("2026-04-04T15:30:00Z"))
        );
        // An offset change that is not a local hour boundary needs the bisection: until 2010
        // America/St_Johns sprang forward at 00:01 local (-03:30 to -02:30), 03:31 UTC.
        let st_johns: Tz = "America/St_Johns".parse().unwrap();
        assert_eq!(
            next_wall_clock_edge(st_johns, utc("2010-03-14T03:00:00Z")),
            Some(utc("2010-03-14T03:30:00Z"))
        );
        assert_eq!(
            next_wall_clock_edge(st_johns, utc("2010-03-14T03:30:00Z")),
            Some(utc("2010-03-14T03:31:00Z"))
        );
        assert_eq!(
            next_wall_clock_edge(st_johns, utc("2010-03-14T03:31:00Z")),
            Some(utc("2010-03-14T04:30:00Z"))
        );
        // Asia/Kathmandu moved from +05:30 to +05:45 at local midnight 1986-01-01 (18:30 UTC):
        // afterwards the wall clock reads 00:15, so the next edge is 01:00 +05:45.
        let kathmandu: Tz = "Asia/Kathmandu".parse().unwrap();
        assert_eq!(
            next_wall_clock_edge(kathmandu, utc("1985-12-31T18:00:00Z")),
            Some(utc("1985-12-31T18:30:00Z"))
        );
        assert_eq!(
            next_wall_clock_edge(kathmandu, utc("1985-12-31T18:30:00Z")),
            Some(utc("1985-12-31T19:15:00Z"))
        );
    }

    #[test]
    fn table_matches_rule() {
        let mut days = DaySet::default();
        days.insert_range(Weekday::Fri, Weekday::Fri);
        let window = WeeklyWindow::new(days, &[HourRange { start: 22, end: 6 }]);
        assert_eq!(window.table[4], 0b11 << 22); // Friday 22, 23
        assert_eq!(window.table[5], 0b111_1111); // Saturday 0..=6
        assert_eq!(window.table.iter().filter(|row| **row != 0).count(), 2);
        let always = WeeklyWindow::new(DaySet::ALL, &[HourRange { start: 0, end: 23 }]);
        assert!(always.is_always_open());
        let wrapped_always = WeeklyWindow::new(DaySet::ALL, &[HourRange { start: 22, end: 21 }]);
        assert!(wrapped_always.is_always_open());
    }
}

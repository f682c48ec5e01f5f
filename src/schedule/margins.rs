//! The machine's life around the window: provisioning starts `lead` before the window opens, and
//! with `DrainBeforeEnd` the removal starts `drain_ahead` before it closes, so the worker is
//! schedulable at the opening edge and gone at the closing one.
//!
//! The machine is wanted at `t` when some open run `[open, close)` of the schedule has
//! `open - lead <= t < close - drain_ahead`. Runs whose gap is at most `lead - drain_ahead`
//! merge, so a short gap between two windows keeps the machine instead of churning it, and a
//! run no longer than `drain_ahead - lead` is never wanted at all.
//!
//! Both questions reduce to the window's own next edge at two shifted instants,
//! `a = t + lead` and `b = t + drain_ahead`:
//! - `lead >= drain_ahead`: wanted iff the window is open at `b`, or opens within `(b, a]`;
//! - `lead < drain_ahead`: wanted iff the window is open at `a` and does not close in `(a, b]`.
//!
//! and the wanted state can only change where `a` or `b` meets a window edge.

use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};

use super::{MAX_TRANSITION_STEPS, Schedule, ScheduleError, parse_duration};

/// Longest lead time accepted: a week ahead is already more than any boot needs.
pub const MAX_LEAD: Duration = Duration::from_secs(7 * 24 * 3600);

/// How many provisioning durations `auto` looks at.
pub const AUTO_HISTORY: usize = 5;

/// How far back [`Schedule::last_opening`] looks for the start of the open run.
const OPENING_LOOKBACK: TimeDelta = TimeDelta::days(16);

/// `spec.schedule.leadTime`: a fixed duration, or learned from past provisioning.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LeadTime {
    /// Start this long before the window opens (zero: at the edge).
    #[default]
    Zero,
    /// A fixed duration.
    Fixed(Duration),
    /// The median of the last [`AUTO_HISTORY`] provisioning durations; zero without history.
    Auto,
}

impl LeadTime {
    /// Parses `leadTime`; `field` is quoted in errors.
    ///
    /// # Errors
    /// Neither `auto` nor a duration, or a duration over [`MAX_LEAD`].
    pub fn parse(field: &str, text: Option<&str>) -> Result<Self, ScheduleError> {
        let Some(text) = text else { return Ok(Self::Zero) };
        if text == "auto" {
            return Ok(Self::Auto);
        }
        let lead = parse_duration(field, text)
            .map_err(|_| ScheduleError::duration(field, text, "expected a duration such as 10m or 1h30m, or auto"))?;
        if lead > MAX_LEAD {
            return Err(ScheduleError::duration(field, text, "longer than the 168h maximum"));
        }
        Ok(if lead.is_zero() { Self::Zero } else { Self::Fixed(lead) })
    }

    /// The lead to use, given past provisioning durations (oldest first).
    #[must_use]
    pub fn resolve(self, history: &[Duration]) -> Duration {
        match self {
            Self::Zero => Duration::ZERO,
            Self::Fixed(d) => d,
            Self::Auto => median(&history[history.len().saturating_sub(AUTO_HISTORY)..]).min(MAX_LEAD),
        }
    }
}

/// The median of `values` (the mean of the middle two for an even count); zero when empty.
fn median(values: &[Duration]) -> Duration {
    let mut sorted = values.to_vec();
    sorted.sort_unstable();
    match sorted.len() {
        0 => Duration::ZERO,
        n if n % 2 == 1 => sorted[n / 2],
        n => (sorted[n / 2 - 1] + sorted[n / 2]) / 2,
    }
}

/// How far the machine's life is shifted ahead of the window's edges.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Margins {
    /// Provisioning starts this long before the window opens.
    pub lead: Duration,
    /// Removal starts this long before the window closes (zero: at the edge).
    pub drain_ahead: Duration,
}

/// The window and the machine's wanted life at one instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Plan {
    /// The window is open (exclusions and inclusions applied).
    pub open: bool,
    /// When `open` next flips.
    pub next_edge: Option<DateTime<Utc>>,
    /// The machine should exist: provisioning has begun and its removal has not.
    pub wanted: bool,
    /// When `wanted` next flips.
    pub next_wanted_change: Option<DateTime<Utc>>,
}

impl Plan {
    /// The earlier of the two next changes: when a controller must look again.
    #[must_use]
    pub fn next_change(&self) -> Option<DateTime<Utc>> {
        match (self.next_edge, self.next_wanted_change) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

fn shift(t: DateTime<Utc>, by: Duration) -> Option<DateTime<Utc>> {
    t.checked_add_signed(TimeDelta::from_std(by).ok()?)
}

fn unshift(t: DateTime<Utc>, by: Duration) -> Option<DateTime<Utc>> {
    t.checked_sub_signed(TimeDelta::from_std(by).ok()?)
}

impl Schedule {
    /// Whether the machine should exist at `t`, provisioning `margins.lead` early and removed
    /// `margins.drain_ahead` early (see the module docs).
    #[must_use]
    pub fn is_wanted(&self, t: DateTime<Utc>, margins: Margins) -> bool {
        let (Some(a), Some(b)) = (shift(t, margins.lead), shift(t, margins.drain_ahead)) else {
            return false;
        };
        if margins.lead >= margins.drain_ahead {
            self.is_active(b) || self.next_transition(b).is_some_and(|opens| opens <= a)
        } else {
            self.is_active(a) && self.next_transition(a).is_none_or(|closes| closes > b)
        }
    }

    /// The first instant after `t` at which [`is_wanted`](Self::is_wanted) changes; `None`
    /// when it never does within the engine's bounds.
    #[must_use]
    pub fn next_wanted_change(&self, t: DateTime<Utc>, margins: Margins) -> Option<DateTime<Utc>> {
        let now = self.is_wanted(t, margins);
        let mut cursor = t;
        for _ in 0..MAX_TRANSITION_STEPS {
            // Where `cursor + lead` or `cursor + drain_ahead` next meets an edge.
            let candidate = |by: Duration| {
                shift(cursor, by)
                    .and_then(|shifted| self.next_transition(shifted))
                    .and_then(|edge| unshift(edge, by))
            };
            let next = match (candidate(margins.lead), candidate(margins.drain_ahead)) {
                (Some(a), Some(b)) => a.min(b),
                (a, b) => a.or(b)?,
            };
            if self.is_wanted(next, margins) != now {
                return Some(next);
            }
            cursor = next;
        }
        None
    }

    /// The window's state and the machine's wanted life at `t`.
    #[must_use]
    pub fn plan(&self, t: DateTime<Utc>, margins: Margins) -> Plan {
        Plan {
            open: self.is_active(t),
            next_edge: self.next_transition(t),
            wanted: self.is_wanted(t, margins),
            next_wanted_change: self.next_wanted_change(t, margins),
        }
    }

    /// When the open run containing `t` began; `None` when the window is closed at `t`, or has
    /// been open for longer than the engine looks back (16 days).
    #[must_use]
    pub fn last_opening(&self, t: DateTime<Utc>) -> Option<DateTime<Utc>> {
        if !self.is_active(t) {
            return None;
        }
        let mut cursor = t.checked_sub_signed(OPENING_LOOKBACK)?;
        let mut opening = None;
        while let Some(edge) = self.next_transition(cursor).filter(|edge| *edge <= t) {
            if self.is_active(edge) {
                opening = Some(edge);
            }
            cursor = edge;
        }
        opening
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::scheduled_machine::ScheduleSpec;

    fn weekly(days: &str, hours: &str, timezone: &str) -> Schedule {
        Schedule::parse(&ScheduleSpec {
            days_of_week: Some(vec![days.to_owned()]),
            hours_of_day: Some(vec![hours.to_owned()]),
            timezone: timezone.to_owned(),
            ..ScheduleSpec::default()
        })
        .unwrap()
    }

    fn utc(s: &str) -> DateTime<Utc> {
        s.parse().unwrap()
    }

    const fn minutes(m: u64) -> Duration {
        Duration::from_secs(m * 60)
    }

    #[test]
    fn lead_time_parses_durations_and_auto() {
        let field = "schedule.leadTime";
        assert_eq!(LeadTime::parse(field, None), Ok(LeadTime::Zero));
        assert_eq!(LeadTime::parse(field, Some("0s")), Ok(LeadTime::Zero));
        assert_eq!(LeadTime::parse(field, Some("auto")), Ok(LeadTime::Auto));
        assert_eq!(LeadTime::parse(field, Some("10m")), Ok(LeadTime::Fixed(minutes(10))));
        for (bad, problem) in [
            ("Auto", "or auto"),
            ("10", "or auto"),
            ("-5m", "or auto"),
            ("169h", "168h maximum"),
        ] {
            let err = LeadTime::parse(field, Some(bad)).unwrap_err();
            assert_eq!(err.reason(), super::super::Reason::InvalidDuration);
            let message = err.to_string();
            assert!(
                message.starts_with(&format!("{field}: invalid duration {bad:?}")),
                "{message}"
            );
            assert!(message.contains(problem), "{message}");
        }
    }

    #[test]
    fn auto_is_the_median_of_the_last_five() {
        let secs = |list: &[u64]| list.iter().map(|s| Duration::from_secs(*s)).collect::<Vec<_>>();
        assert_eq!(LeadTime::Auto.resolve(&[]), Duration::ZERO);
        assert_eq!(LeadTime::Auto.resolve(&secs(&[300])), Duration::from_secs(300));
        assert_eq!(LeadTime::Auto.resolve(&secs(&[100, 300])), Duration::from_secs(200));
        // Only the last five count: the 9000 s outlier has dropped out.
        assert_eq!(
            LeadTime::Auto.resolve(&secs(&[9000, 240, 200, 600, 250, 230])),
            Duration::from_secs(240)
        );
        assert_eq!(LeadTime::Fixed(minutes(3)).resolve(&secs(&[1])), minutes(3));
    }

    #[test]
    fn lead_and_drain_move_the_machine_inside_a_dst_week() {
        // Mon-Fri 9-17 New York; DST starts Sunday 2026-03-08, so Monday 09:00 is 13:00Z and the
        // window closes at 18:00 local, 22:00Z.
        let s = weekly("mon-fri", "9-17", "America/New_York");
        let margins = Margins {
            lead: minutes(10),
            drain_ahead: minutes(5),
        };
        let plan = s.plan(utc("2026-03-09T12:49:59Z"), margins);
        assert!(!plan.open && !plan.wanted);
        assert_eq!(plan.next_wanted_change, Some(utc("2026-03-09T12:50:00Z")));
        assert_eq!(plan.next_edge, Some(utc("2026-03-09T13:00:00Z")));
        let plan = s.plan(utc("2026-03-09T12:50:00Z"), margins);
        assert!(!plan.open && plan.wanted);
        assert_eq!(plan.next_change(), Some(utc("2026-03-09T13:00:00Z")));
        let plan = s.plan(utc("2026-03-09T13:00:00Z"), margins);
        assert!(plan.open && plan.wanted);
        assert_eq!(plan.next_wanted_change, Some(utc("2026-03-09T21:55:00Z")));
        let plan = s.plan(utc("2026-03-09T21:55:00Z"), margins);
        assert!(plan.open && !plan.wanted);
        assert_eq!(plan.next_edge, Some(utc("2026-03-09T22:00:00Z")));
        // The week before, in EST, the same edges are an hour later in UTC.
        assert_eq!(
            s.next_wanted_change(utc("2026-03-02T00:00:00Z"), margins),
            Some(utc("2026-03-02T13:50:00Z"))
        );
    }

    #[test]
    fn a_gap_shorter_than_the_margins_keeps_the_machine() {
        // 9-10 and 13-16: open 09:00-11:00 and 13:00-17:00, a two-hour gap. A 150-minute lead
        // less 20 minutes' drain ahead bridges it: wanted from 06:30 to 16:40 without a break.
        let s = weekly("mon", "9-10,13-16", "UTC");
        let margins = Margins {
            lead: minutes(150),
            drain_ahead: minutes(20),
        };
        assert!(s.is_wanted(utc("2026-03-02T12:00:00Z"), margins));
        assert_eq!(
            s.next_wanted_change(utc("2026-03-02T06:29:00Z"), margins),
            Some(utc("2026-03-02T06:30:00Z"))
        );
        assert_eq!(
            s.next_wanted_change(utc("2026-03-02T06:30:00Z"), margins),
            Some(utc("2026-03-02T16:40:00Z"))
        );
        // With 40 minutes' drain ahead the gap (120 > 150 - 40) is not bridged: gone at 10:20,
        // back at 10:30.
        let margins = Margins {
            lead: minutes(150),
            drain_ahead: minutes(40),
        };
        assert_eq!(
            s.next_wanted_change(utc("2026-03-02T06:30:00Z"), margins),
            Some(utc("2026-03-02T10:20:00Z"))
        );
        assert_eq!(
            s.next_wanted_change(utc("2026-03-02T10:20:00Z"), margins),
            Some(utc("2026-03-02T10:30:00Z"))
        );
    }

    #[test]
    fn a_window_shorter_than_its_drain_is_never_wanted() {
        let s = weekly("mon", "9", "UTC");
        let margins = Margins {
            lead: Duration::ZERO,
            drain_ahead: minutes(61),
        };
        assert!(!s.is_wanted(utc("2026-03-02T09:00:00Z"), margins));
        assert_eq!(s.next_wanted_change(utc("2026-03-02T08:00:00Z"), margins), None);
    }

    #[test]
    fn zero_margins_are_the_window_itself() {
        let s = weekly("mon-fri", "9-17", "Europe/Berlin");
        for t in ["2026-03-27T07:59:59Z", "2026-03-30T07:00:00Z", "2026-03-28T12:00:00Z"] {
            let plan = s.plan(utc(t), Margins::default());
            assert_eq!(plan.wanted, plan.open, "{t}");
            assert_eq!(plan.next_wanted_change, plan.next_edge, "{t}");
        }
    }

    #[test]
    fn last_opening_finds_the_start_of_the_run() {
        let s = weekly("mon-fri", "9-17", "America/New_York");
        assert_eq!(
            s.last_opening(utc("2026-03-09T15:00:00Z")),
            Some(utc("2026-03-09T13:00:00Z"))
        );
        assert_eq!(s.last_opening(utc("2026-03-09T12:00:00Z")), None);
        let always = weekly("mon-sun", "0-23", "UTC");
        assert_eq!(always.last_opening(utc("2026-03-09T12:00:00Z")), None);
    }
}

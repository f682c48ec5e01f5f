//! `schedule --calendar`: when the schedule is on, as a week view for a terminal, for people
//! who would rather look than read. One row per local day, two characters per local hour:
//! `██` on for the whole hour, `░░` off, `▒▒` changing within it; a DST-skipped hour is blank.

use std::fmt::Write as _;

use chrono::{DateTime, Days, NaiveDate, NaiveTime, TimeDelta, TimeZone, Utc};

use crate::schedule::Schedule;

/// The calendar of `days` local days from the one containing `from`.
#[must_use]
pub fn render(schedule: &Schedule, from: DateTime<Utc>, days: u32) -> String {
    let tz = schedule.timezone();
    let first = from.with_timezone(&tz).date_naive();
    let mut out = format!(
        "{} from {} (██ on, ░░ off, ▒▒ changes within the hour)\n",
        tz.name(),
        first
    );
    let mut header = format!("{:<12}", "");
    for hour in (0..24).step_by(2) {
        let _ = write!(header, "{hour:02}  ");
    }
    out.push_str(header.trim_end());
    out.push('\n');
    for day in (0..days).filter_map(|d| first.checked_add_days(Days::new(u64::from(d)))) {
        let _ = write!(out, "{:<12}", day.format("%a %m-%d"));
        for hour in 0..24 {
            out.push_str(cell(schedule, day, hour));
        }
        out.push('\n');
    }
    out
}

/// The two characters for `hour` of local `day`.
fn cell(schedule: &Schedule, day: NaiveDate, hour: u32) -> &'static str {
    let tz = schedule.timezone();
    let Some(start) = NaiveTime::from_hms_opt(hour, 0, 0)
        .and_then(|t| tz.from_local_datetime(&day.and_time(t)).earliest())
        .map(|t| t.with_timezone(&Utc))
    else {
        return "  ";
    };
    let end = start + TimeDelta::hours(1);
    let on = schedule.is_active(start);
    let changes = schedule.next_transition(start).is_some_and(|t| t < end);
    match (changes, on) {
        (true, _) => "▒▒",
        (false, true) => "██",
        (false, false) => "░░",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::scheduled_machine::{SchedulePeriod, ScheduleSpec};

    fn seed() -> ScheduleSpec {
        ScheduleSpec {
            enabled: true,
            days_of_week: Some(vec!["mon-fri".into()]),
            hours_of_day: Some(vec!["9-17".into()]),
            timezone: "America/New_York".into(),
            cron: None,
            duration: None,
            ..ScheduleSpec::default()
        }
    }

    #[test]
    fn a_week_of_the_seed_schedule_with_a_holiday_and_a_half_hour() {
        let mut spec = seed();
        spec.exclusions = vec![SchedulePeriod {
            date: Some("2026-12-09".into()),
            start: None,
            end: None,
        }];
        spec.inclusions = vec![SchedulePeriod {
            date: None,
            start: Some("2026-12-12T10:30:00-05:00".into()),
            end: Some("2026-12-12T12:00:00-05:00".into()),
        }];
        let schedule = Schedule::parse(&spec).unwrap();
        let out = render(&schedule, "2026-12-07T17:00:00Z".parse().unwrap(), 7);
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(
            lines[0],
            "America/New_York from 2026-12-07 (██ on, ░░ off, ▒▒ changes within the hour)"
        );
        assert!(
            lines[1].starts_with("            00  02  04") && lines[1].ends_with("22"),
            "{:?}",
            lines[1]
        );
        let off = "░░".repeat(9);
        let on = "██".repeat(9);
        assert_eq!(lines[2], format!("Mon 12-07   {off}{on}{}", "░░".repeat(6)));
        assert_eq!(lines[4], format!("Wed 12-09   {}", "░░".repeat(24)), "the holiday");
        assert_eq!(
            lines[7],
            format!("Sat 12-12   {}▒▒██{}", "░░".repeat(10), "░░".repeat(12)),
            "10:30 to 12:00"
        );
        assert_eq!(lines.len(), 9);
    }

    #[test]
    fn a_skipped_dst_hour_is_blank() {
        let schedule = Schedule::parse(&seed()).unwrap();
        // Sunday 2026-03-08: 02:00-02:59 does not exist in New York.
        let out = render(&schedule, "2026-03-08T12:00:00Z".parse().unwrap(), 1);
        let day = out.lines().nth(2).unwrap();
        assert_eq!(day, format!("Sun 03-08   {}  {}", "░░".repeat(2), "░░".repeat(21)));
    }
}

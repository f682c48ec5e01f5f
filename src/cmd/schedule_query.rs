//! The `schedule` subcommand: "when will my worker run?", answered by the same engine the
//! controller uses, as one JSON line.

use chrono::{DateTime, SecondsFormat, Utc};
use serde_json::json;

use crate::{
    api::scheduled_machine::{SchedulePeriod, ScheduleSpec},
    cli::ScheduleArgs,
    schedule::{Schedule, ScheduleError},
};

/// The schedule spec the flags describe.
#[must_use]
pub fn spec_of(args: &ScheduleArgs) -> ScheduleSpec {
    let non_empty = |v: &Vec<String>| (!v.is_empty()).then(|| v.clone());
    ScheduleSpec {
        enabled: true,
        days_of_week: non_empty(&args.days),
        hours_of_day: non_empty(&args.hours),
        timezone: args.timezone.clone(),
        cron: args.cron.clone(),
        duration: args.duration.clone(),
        exclusions: args.exclude.iter().map(|p| period(p)).collect(),
        inclusions: args.include.iter().map(|p| period(p)).collect(),
    }
}

/// `DATE` or `START/END`, as the spec's `{date}` or `{start, end}` (the engine validates them).
fn period(flag: &str) -> SchedulePeriod {
    match flag.split_once('/') {
        Some((start, end)) => SchedulePeriod {
            date: None,
            start: Some(start.trim().to_owned()),
            end: Some(end.trim().to_owned()),
        },
        None => SchedulePeriod {
            date: Some(flag.trim().to_owned()),
            start: None,
            end: None,
        },
    }
}

/// Evaluate the schedule at `at`: `{"active":…,"nextTransition":"…Z"|null}`.
///
/// # Errors
/// The first problem in the schedule, naming the field and the token.
pub fn answer(args: &ScheduleArgs, at: DateTime<Utc>) -> Result<String, ScheduleError> {
    let evaluation = Schedule::parse(&spec_of(args))?.evaluate(at);
    let next = evaluation
        .next_transition
        .map(|t| t.to_rfc3339_opts(SecondsFormat::Secs, true));
    Ok(json!({"active": evaluation.active, "nextTransition": next}).to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(days: &[&str], hours: &[&str], tz: &str) -> ScheduleArgs {
        ScheduleArgs {
            days: days.iter().map(|s| (*s).to_owned()).collect(),
            hours: hours.iter().map(|s| (*s).to_owned()).collect(),
            cron: None,
            duration: None,
            timezone: tz.to_owned(),
            exclude: Vec::new(),
            include: Vec::new(),
            at: None,
        }
    }

    #[test]
    fn exclusions_and_inclusions_change_the_answer() {
        // Friday 2026-12-25 in New York: the seed's window would be open at 10:00.
        let mut a = args(&["mon-fri"], &["9-17"], "America/New_York");
        a.exclude = vec!["2026-12-25".into()];
        let at = "2026-12-25T15:00:00Z".parse().unwrap();
        assert_eq!(
            answer(&a, at).unwrap(),
            r#"{"active":false,"nextTransition":"2026-12-28T14:00:00Z"}"#,
            "off for the day, back on Monday"
        );
        // Saturday 2026-12-26 10:00-12:00 local, as an extra window.
        let mut a = args(&["mon-fri"], &["9-17"], "America/New_York");
        a.include = vec!["2026-12-26T10:00:00-05:00/2026-12-26T12:00:00-05:00".into()];
        assert_eq!(
            answer(&a, "2026-12-26T15:30:00Z".parse().unwrap()).unwrap(),
            r#"{"active":true,"nextTransition":"2026-12-26T17:00:00Z"}"#
        );
        a.include = vec!["2026-12-26/yesterday".into()];
        let err = answer(&a, at).unwrap_err().to_string();
        assert!(
            err.starts_with(r#"schedule.inclusions[0].end: invalid period "yesterday""#),
            "{err}"
        );
    }

    #[test]
    fn the_seed_schedule_on_a_monday_morning() {
        let out = answer(
            &args(&["mon-fri"], &["9-17"], "America/New_York"),
            "2026-04-27T12:00:00Z".parse().unwrap(),
        );
        assert_eq!(
            out.unwrap(),
            r#"{"active":false,"nextTransition":"2026-04-27T13:00:00Z"}"#
        );
    }

    #[test]
    fn always_on_has_no_next_transition() {
        let out = answer(
            &args(&["mon-sun"], &["0-23"], "UTC"),
            "2026-04-27T12:00:00Z".parse().unwrap(),
        );
        assert_eq!(out.unwrap(), r#"{"active":true,"nextTransition":null}"#);
    }

    #[test]
    fn a_bad_day_names_field_and_token() {
        let err = answer(&args(&["mon", "funday"], &["9-17"], "UTC"), Utc::now())
            .unwrap_err()
            .to_string();
        assert!(err.contains("daysOfWeek[1]") && err.contains("funday"), "{err}");
    }
}

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

/// Why `schedule` has no answer.
#[derive(Debug, thiserror::Error)]
pub enum QueryError {
    /// The schedule is invalid.
    #[error(transparent)]
    Schedule(#[from] ScheduleError),
    /// The `-f` manifest cannot be read or is not a ScheduledMachine.
    #[error("{path}: {problem}")]
    File {
        /// The path given.
        path: String,
        /// What went wrong.
        problem: String,
    },
}

/// The schedule spec: from the `-f` manifest when given, else the flags; `--exclude` and
/// `--include` add to it either way.
///
/// # Errors
/// The manifest cannot be read or parsed.
pub fn spec_for(args: &ScheduleArgs) -> Result<ScheduleSpec, QueryError> {
    let Some(path) = &args.file else {
        return Ok(spec_of(args));
    };
    let file_error = |problem: String| QueryError::File {
        path: path.display().to_string(),
        problem,
    };
    let text = std::fs::read_to_string(path).map_err(|e| file_error(e.to_string()))?;
    let sm: crate::api::ScheduledMachine =
        serde_yaml::from_str(&text).map_err(|e| file_error(format!("not a ScheduledMachine: {e}")))?;
    let mut spec = sm.spec.schedule;
    let flags = spec_of(args);
    spec.exclusions.extend(flags.exclusions);
    spec.inclusions.extend(flags.inclusions);
    Ok(spec)
}

/// Evaluate the schedule at `at`: `{"active":…,"nextTransition":"…Z"|null}`, or with
/// `--calendar` the week view from `at`'s day.
///
/// # Errors
/// The first problem in the schedule, naming the field and the token, or an unreadable `-f`.
pub fn answer(args: &ScheduleArgs, at: DateTime<Utc>) -> Result<String, QueryError> {
    let schedule = Schedule::parse(&spec_for(args)?)?;
    if let Some(days) = args.calendar {
        return Ok(super::schedule_calendar::render(&schedule, at, days));
    }
    let evaluation = schedule.evaluate(at);
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
            calendar: None,
            file: None,
        }
    }

    #[test]
    fn a_manifest_gives_the_schedule_and_flags_add_to_it() {
        let dir = std::env::temp_dir().join(format!("caplv-schedule-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("sm.yaml");
        std::fs::write(&path, include_str!("../../examples/seed/05-scheduledmachine.yaml")).unwrap();
        let mut a = args(&[], &[], "UTC");
        a.file = Some(path.clone());
        a.exclude = vec!["2026-04-27".into()];
        let at = "2026-04-27T14:00:00Z".parse().unwrap();
        assert_eq!(
            answer(&a, at).unwrap(),
            r#"{"active":false,"nextTransition":"2026-04-28T13:00:00Z"}"#
        );
        a.calendar = Some(1);
        assert!(answer(&a, at).unwrap().starts_with("America/New_York from 2026-04-27"));
        std::fs::write(&path, "kind: Pod\n").unwrap();
        let err = answer(&a, at).unwrap_err().to_string();
        assert!(err.contains("sm.yaml: not a ScheduledMachine"), "{err}");
        a.file = Some(dir.join("missing.yaml"));
        assert!(answer(&a, at).unwrap_err().to_string().contains("missing.yaml"));
        std::fs::remove_dir_all(&dir).unwrap();
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

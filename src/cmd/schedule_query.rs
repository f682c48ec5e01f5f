//! The `schedule` subcommand: "when will my worker run?", answered by the same engine the
//! controller uses, as one JSON line.

use std::time::Duration;

use chrono::{DateTime, SecondsFormat, Utc};
use serde_json::json;

use crate::{
    api::scheduled_machine::{EndPolicy, SchedulePeriod, ScheduleSpec},
    cli::ScheduleArgs,
    schedule::{Margins, Schedule, ScheduleError, parse_duration},
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
        lead_time: args.lead_time.clone(),
        ..ScheduleSpec::default()
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

/// What `schedule` evaluates: the schedule spec, and the grace period `DrainBeforeEnd` drains
/// ahead by.
#[derive(Debug, Clone, PartialEq)]
pub struct Manifest {
    /// `spec.schedule`.
    pub spec: ScheduleSpec,
    /// `spec.gracefulShutdownTimeout`, from a `-f` manifest.
    pub graceful_shutdown_timeout: Option<String>,
}

/// The schedule spec: from the `-f` manifest when given, else the flags; `--exclude`,
/// `--include` and `--lead-time` add to it either way.
///
/// # Errors
/// The manifest cannot be read or parsed.
pub fn spec_for(args: &ScheduleArgs) -> Result<Manifest, QueryError> {
    let Some(path) = &args.file else {
        return Ok(Manifest {
            spec: spec_of(args),
            graceful_shutdown_timeout: None,
        });
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
    if flags.lead_time.is_some() {
        spec.lead_time = flags.lead_time;
    }
    Ok(Manifest {
        spec,
        graceful_shutdown_timeout: Some(sm.spec.graceful_shutdown_timeout),
    })
}

/// Evaluate the schedule at `at`: `{"active":…,"nextTransition":"…Z"|null}`, or with
/// `--calendar` the week view from `at`'s day. With a lead time, or `DrainBeforeEnd` from a
/// manifest, also when the machine exists: `"provisioned"` and `"nextProvisionedChange"`.
///
/// # Errors
/// The first problem in the schedule, naming the field and the token, or an unreadable `-f`.
pub fn answer(args: &ScheduleArgs, at: DateTime<Utc>) -> Result<String, QueryError> {
    let manifest = spec_for(args)?;
    let schedule = Schedule::parse(&manifest.spec)?;
    if let Some(days) = args.calendar {
        return Ok(super::schedule_calendar::render(&schedule, at, days));
    }
    let drain_ahead = match (&manifest.graceful_shutdown_timeout, manifest.spec.end_policy) {
        (Some(grace), EndPolicy::DrainBeforeEnd) => parse_duration("spec.gracefulShutdownTimeout", grace)?,
        _ => Duration::ZERO,
    };
    let margins = Margins {
        lead: schedule.lead_time().resolve(&[]),
        drain_ahead,
    };
    let plan = schedule.plan(at, margins);
    let format = |t: Option<DateTime<Utc>>| t.map(|t| t.to_rfc3339_opts(SecondsFormat::Secs, true));
    let mut out = json!({"active": plan.open, "nextTransition": format(plan.next_edge)});
    if margins != Margins::default() {
        out["provisioned"] = json!(plan.wanted);
        out["nextProvisionedChange"] = json!(format(plan.next_wanted_change));
    }
    Ok(out.to_string())
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
            lead_time: None,
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
    fn a_lead_time_says_when_provisioning_starts() {
        let mut a = args(&["mon-fri"], &["9-17"], "America/New_York");
        a.lead_time = Some("10m".into());
        assert_eq!(
            answer(&a, "2026-04-27T12:00:00Z".parse().unwrap()).unwrap(),
            r#"{"active":false,"nextProvisionedChange":"2026-04-27T12:50:00Z","nextTransition":"2026-04-27T13:00:00Z","provisioned":false}"#
        );
        a.lead_time = Some("ten minutes".into());
        let err = answer(&a, Utc::now()).unwrap_err().to_string();
        assert!(
            err.starts_with(r#"schedule.leadTime: invalid duration "ten minutes""#),
            "{err}"
        );
    }

    #[test]
    fn drain_before_end_comes_from_the_manifest() {
        let dir = std::env::temp_dir().join(format!("caplv-schedule-drain-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("sm.yaml");
        let seed = include_str!("../../examples/seed/05-scheduledmachine.yaml");
        let mut sm: serde_json::Value = serde_yaml::from_str(seed).unwrap();
        sm["spec"]["schedule"]["endPolicy"] = json!("DrainBeforeEnd");
        sm["spec"]["gracefulShutdownTimeout"] = json!("15m");
        std::fs::write(&path, serde_yaml::to_string(&sm).unwrap()).unwrap();
        let mut a = args(&[], &[], "UTC");
        a.file = Some(path);
        // Monday 2026-04-27 in New York (EDT): the window closes at 18:00 local, 22:00Z.
        assert_eq!(
            answer(&a, "2026-04-27T21:00:00Z".parse().unwrap()).unwrap(),
            r#"{"active":true,"nextProvisionedChange":"2026-04-27T21:45:00Z","nextTransition":"2026-04-27T22:00:00Z","provisioned":true}"#
        );
        std::fs::remove_dir_all(&dir).unwrap();
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

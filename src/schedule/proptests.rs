//! Property tests: the engine against brute-force oracles, and parsers against arbitrary input.
//!
//! The oracles scan minute by minute (every zone used here has whole-minute offsets and
//! transitions, so activity can only change on a UTC minute) and implement the rules from the
//! spec directly, from the generated structure rather than from the parsed schedule. Case counts
//! are kept modest so the suite stays fast in debug builds.

use std::collections::BTreeSet;

use chrono::{DateTime, Datelike, NaiveDate, TimeDelta, Timelike, Utc};
use chrono_tz::Tz;
use proptest::prelude::*;

use super::{Reason, Schedule, parse_duration};
use crate::api::scheduled_machine::ScheduleSpec;

const ZONES: &[&str] = &[
    "UTC",
    "America/New_York",
    "Europe/Berlin",
    "Asia/Kolkata",
    "Asia/Kathmandu",
    "Australia/Lord_Howe",
    "Pacific/Chatham",
    "America/St_Johns",
];

const SHORT_DAYS: [&str; 7] = ["mon", "tue", "wed", "thu", "fri", "sat", "sun"];
const FULL_DAYS: [&str; 7] = [
    "monday",
    "tuesday",
    "wednesday",
    "thursday",
    "friday",
    "saturday",
    "sunday",
];

fn zone() -> impl Strategy<Value = &'static str> {
    prop::sample::select(ZONES)
}

/// Instants from 2005 to 2031, half of them in the weeks around spring and autumn DST changes.
fn instant() -> impl Strategy<Value = DateTime<Utc>> {
    let start = NaiveDate::from_ymd_opt(2005, 1, 1)
        .unwrap()
        .and_hms_opt(0, 0, 0)
        .unwrap()
        .and_utc()
        .timestamp();
    let end = NaiveDate::from_ymd_opt(2032, 1, 1)
        .unwrap()
        .and_hms_opt(0, 0, 0)
        .unwrap()
        .and_utc()
        .timestamp();
    let uniform = (start..end).prop_map(|s| DateTime::from_timestamp(s, 0).unwrap());
    let near_dst = (2005i32..2032, prop::bool::ANY, 0i64..50, 0i64..86_400).prop_map(|(year, autumn, days, secs)| {
        let (month, day) = if autumn { (9, 20) } else { (3, 1) };
        NaiveDate::from_ymd_opt(year, month, day)
            .unwrap()
            .and_hms_opt(0, 0, 0)
            .unwrap()
            .and_utc()
            + TimeDelta::days(days)
            + TimeDelta::seconds(secs)
    });
    let nanos = prop_oneof![Just(0u32), 0u32..1_000_000_000];
    (prop_oneof![uniform, near_dst], nanos).prop_map(|(t, nanos)| t.with_nanosecond(nanos).unwrap())
}

/// The first whole minute strictly after `t`.
/// The first whole UTC minute after `t`, within `horizon`, at which `changed` holds.
fn first_change(
    t: DateTime<Utc>,
    horizon: TimeDelta,
    changed: impl Fn(DateTime<Utc>) -> bool,
) -> Option<DateTime<Utc>> {
    let mut m = next_minute(t);
    while m <= t + horizon {
        if changed(m) {
            return Some(m);
        }
        m += TimeDelta::minutes(1);
    }
    None
}

fn next_minute(t: DateTime<Utc>) -> DateTime<Utc> {
    let floor = t.with_second(0).unwrap().with_nanosecond(0).unwrap();
    floor + TimeDelta::minutes(1)
}

// ---------------------------------------------------------------------------------------------
// Day/hour windows.

/// A generated day/hour schedule: elements of comma lists of (start, end) pairs, plus how to
/// spell them.
#[derive(Debug, Clone)]
struct WeeklyCase {
    days: Vec<Vec<(u8, u8)>>,
    hours: Vec<Vec<(u8, u8)>>,
    zone: &'static str,
    /// Spelling choices: full day names, upper case, leading zeros, spaces.
    style: (bool, bool, bool, bool),
}

impl WeeklyCase {
    fn spec(&self) -> ScheduleSpec {
        let (full, upper, zeros, spaces) = self.style;
        let day = |d: u8| {
            let name = if full {
                FULL_DAYS[d as usize]
            } else {
                SHORT_DAYS[d as usize]
            };
            if upper { name.to_uppercase() } else { name.to_owned() }
        };
        let hour = |h: u8| if zeros { format!("{h:02}") } else { h.to_string() };
        let sep = if spaces { " , " } else { "," };
        let dash = if spaces { " - " } else { "-" };
        let render = |elements: &[Vec<(u8, u8)>], name: &dyn Fn(u8) -> String| -> Vec<String> {
            elements
                .iter()
                .map(|items| {
                    items
                        .iter()
                        .map(|&(a, b)| {
                            if a == b {
                                name(a)
                            } else {
                                format!("{}{dash}{}", name(a), name(b))
                            }
                        })
                        .collect::<Vec<_>>()
                        .join(sep)
                })
                .collect()
        };
        ScheduleSpec {
            enabled: true,
            days_of_week: Some(render(&self.days, &day)),
            hours_of_day: Some(render(&self.hours, &hour)),
            timezone: self.zone.to_owned(),
            cron: None,
            duration: None,
            ..ScheduleSpec::default()
        }
    }

    fn listed_days(&self) -> [bool; 7] {
        let mut listed = [false; 7];
        for &(a, b) in self.days.iter().flatten() {
            let mut d = a;
            loop {
                listed[d as usize] = true;
                if d == b {
                    break;
                }
                d = (d + 1) % 7;
            }
        }
        listed
    }

    /// The spec's formal rule, evaluated directly.
    fn oracle_active(&self, t: DateTime<Utc>) -> bool {
        let tz: Tz = self.zone.parse().unwrap();
        let local = t.with_timezone(&tz);
        let w = local.weekday().num_days_from_monday() as usize;
        let h = local.hour() as u8;
        let listed = self.listed_days();
        let previous = (w + 6) % 7;
        self.hours.iter().flatten().any(|&(a, b)| {
            if a <= b {
                a <= h && h <= b && listed[w]
            } else {
                (h >= a && listed[w]) || (h <= b && listed[previous])
            }
        })
    }
}

fn weekly_case() -> impl Strategy<Value = WeeklyCase> {
    let day_items = prop::collection::vec(prop::collection::vec((0u8..7, 0u8..7), 1..3), 1..3);
    let hour_pair = prop_oneof![(0u8..24).prop_map(|h| (h, h)), (0u8..24, 0u8..24)];
    let hour_items = prop::collection::vec(prop::collection::vec(hour_pair, 1..3), 1..3);
    (day_items, hour_items, zone(), any::<(bool, bool, bool, bool)>()).prop_map(|(days, hours, zone, style)| {
        WeeklyCase {
            days,
            hours,
            zone,
            style,
        }
    })
}

/// How far the weekly oracle scans.
const WEEKLY_ORACLE_HORIZON: TimeDelta = TimeDelta::days(8);

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn weekly_matches_brute_force(case in weekly_case(), t in instant()) {
        let schedule = Schedule::parse(&case.spec()).unwrap();
        let active = case.oracle_active(t);
        prop_assert_eq!(schedule.is_active(t), active);

        let oracle_next = first_change(t, WEEKLY_ORACLE_HORIZON, |m| case.oracle_active(m) != active);
        let next = schedule.next_transition(t);
        match oracle_next {
            Some(expected) => prop_assert_eq!(next, Some(expected)),
            None => prop_assert!(next.is_none_or(|n| n > t + WEEKLY_ORACLE_HORIZON), "engine found {:?}", next),
        }
        if let Some(n) = next {
            prop_assert_eq!(schedule.is_active(n), !active);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Cron windows.

#[derive(Debug, Clone)]
struct CronCase {
    minutes: BTreeSet<u8>,
    /// `None` is `*`.
    hours: Option<BTreeSet<u8>>,
    /// `None` is `*`; 0 is Sunday.
    weekdays: Option<BTreeSet<u8>>,
    duration_minutes: i64,
    zone: &'static str,
}

fn join(values: &BTreeSet<u8>) -> String {
    values.iter().map(u8::to_string).collect::<Vec<_>>().join(",")
}

impl CronCase {
    fn spec(&self) -> ScheduleSpec {
        let hours = self.hours.as_ref().map_or_else(|| "*".to_owned(), join);
        let weekdays = self.weekdays.as_ref().map_or_else(|| "*".to_owned(), join);
        let (h, m) = (self.duration_minutes / 60, self.duration_minutes % 60);
        let duration = match (h, m) {
            (0, m) => format!("{m}m"),
            (h, 0) => format!("{h}h"),
            (h, m) => format!("{h}h{m}m"),
        };
        ScheduleSpec {
            enabled: true,
            days_of_week: None,
            hours_of_day: None,
            timezone: self.zone.to_owned(),
            cron: Some(format!("{} {hours} * * {weekdays}", join(&self.minutes))),
            duration: Some(duration),
            ..ScheduleSpec::default()
        }
    }

    /// Whether the cron expression fires at UTC minute `m` (local wall-clock match).
    fn fires(&self, tz: Tz, m: DateTime<Utc>) -> bool {
        let local = m.with_timezone(&tz);
        local.second() == 0
            && self.minutes.contains(&(local.minute() as u8))
            && self.hours.as_ref().is_none_or(|h| h.contains(&(local.hour() as u8)))
            && self
                .weekdays
                .as_ref()
                .is_none_or(|d| d.contains(&(local.weekday().num_days_from_sunday() as u8)))
    }
}

fn cron_case() -> impl Strategy<Value = CronCase> {
    let minutes = prop::collection::btree_set(0u8..60, 1..4);
    let hours = prop_oneof![1 => Just(None), 4 => prop::collection::btree_set(0u8..24, 1..6).prop_map(Some)];
    let weekdays = prop_oneof![1 => Just(None), 2 => prop::collection::btree_set(0u8..7, 1..7).prop_map(Some)];
    (minutes, hours, weekdays, 1i64..=300, zone()).prop_map(|(minutes, hours, weekdays, duration_minutes, zone)| {
        CronCase {
            minutes,
            hours,
            weekdays,
            duration_minutes,
            zone,
        }
    })
}

/// How far the cron oracle scans.
const CRON_ORACLE_HORIZON: TimeDelta = TimeDelta::days(2);

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn cron_matches_brute_force(case in cron_case(), t in instant()) {
        let schedule = Schedule::parse(&case.spec()).unwrap();
        let tz: Tz = case.zone.parse().unwrap();
        let duration = TimeDelta::minutes(case.duration_minutes);
        let horizon = t + CRON_ORACLE_HORIZON;

        // Merge the windows of every occurrence that can touch [t, horizon].
        let mut merged: Vec<(DateTime<Utc>, DateTime<Utc>)> = Vec::new();
        let mut m = next_minute(t - duration - TimeDelta::minutes(1));
        while m <= horizon {
            if case.fires(tz, m) {
                match merged.last_mut() {
                    Some((_, end)) if m <= *end => *end = m + duration,
                    _ => merged.push((m, m + duration)),
                }
            }
            m += TimeDelta::minutes(1);
        }
        let active = merged.iter().any(|&(start, end)| start <= t && t < end);
        prop_assert_eq!(schedule.is_active(t), active);

        let oracle_next = merged.iter().flat_map(|&(start, end)| [start, end]).find(|b| *b > t && *b <= horizon);
        let next = schedule.next_transition(t);
        match oracle_next {
            Some(expected) => prop_assert_eq!(next, Some(expected)),
            None => prop_assert!(next.is_none_or(|n| n > horizon), "engine found {:?}", next),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Parsers never panic and always explain.

fn weekly_spec(days: Vec<String>, hours: Vec<String>, timezone: String) -> ScheduleSpec {
    ScheduleSpec {
        enabled: true,
        days_of_week: Some(days),
        hours_of_day: Some(hours),
        timezone,
        cron: None,
        duration: None,
        ..ScheduleSpec::default()
    }
}

fn cron_spec(cron: String, duration: String, timezone: String) -> ScheduleSpec {
    ScheduleSpec {
        enabled: true,
        days_of_week: None,
        hours_of_day: None,
        timezone,
        cron: Some(cron),
        duration: Some(duration),
        ..ScheduleSpec::default()
    }
}

/// Strings that look like schedule input often enough to reach deep parser paths: arbitrary
/// text, text over the field's alphabet, and soups of valid and invalid tokens.
fn near_miss(alphabet: &'static str, tokens: &'static [&'static str]) -> impl Strategy<Value = String> {
    let soup = prop::collection::vec(prop::sample::select(tokens), 0..6).prop_map(|parts| parts.concat());
    prop_oneof![any::<String>(), alphabet, soup]
}

const DAY_TOKENS: &[&str] = &["mon", "Friday", "SUN", "tues", "-", ",", " ", "", "+"];
const HOUR_TOKENS: &[&str] = &["9", "09", "23", "24", "0", "-", ",", " ", "+", "x"];
const CRON_TOKENS: &[&str] = &[
    "*", "0", "59", "60", "23", "1-5", "*/15", "/", ",", "-", " ", "mon", "7", "31", "2",
];
const DURATION_TOKENS: &[&str] = &["1", "0", "30", ".", "5", "h", "m", "s", "ms", "us", "-", "+", " "];

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn weekly_parser_never_panics(
        days in prop::collection::vec(near_miss("[a-zA-Z ,+-]{0,16}", DAY_TOKENS), 0..4),
        hours in prop::collection::vec(near_miss("[0-9 ,+-]{0,10}", HOUR_TOKENS), 0..4),
        timezone in prop_oneof![Just("UTC".to_owned()), Just("Asia/Kathmandu".to_owned()), any::<String>()],
        t in instant(),
    ) {
        match Schedule::parse(&weekly_spec(days, hours, timezone)) {
            Ok(schedule) => {
                let evaluation = schedule.evaluate(t);
                prop_assert!(evaluation.next_transition.is_none_or(|n| n > t));
            }
            Err(err) => prop_assert!(err.to_string().starts_with(err.field()), "{}", err),
        }
    }

    #[test]
    fn cron_parser_never_panics(
        cron in near_miss("[0-9*/,a-zA-Z -]{0,24}", CRON_TOKENS),
        duration in near_miss("[0-9.hms+-]{0,8}", DURATION_TOKENS),
        t in instant(),
    ) {
        match Schedule::parse(&cron_spec(cron, duration, "Australia/Lord_Howe".to_owned())) {
            Ok(schedule) => {
                let evaluation = schedule.evaluate(t);
                prop_assert!(evaluation.next_transition.is_none_or(|n| n > t));
            }
            Err(err) => {
                prop_assert!(matches!(err.reason(), Reason::InvalidCron | Reason::InvalidDuration), "{}", err);
                prop_assert!(err.to_string().starts_with(err.field()), "{}", err);
            }
        }
    }

    #[test]
    fn duration_parser_never_panics(text in near_miss("[0-9.hms+-]{0,12}", DURATION_TOKENS)) {
        if let Err(err) = parse_duration("spec.nodeDrainTimeout", &text) {
            prop_assert_eq!(err.reason().as_str(), "InvalidDuration");
            prop_assert!(err.to_string().starts_with("spec.nodeDrainTimeout: invalid duration "), "{}", err);
        }
    }

    #[test]
    fn duration_parser_adds_components(parts in prop::collection::vec((0u64..100_000, 0usize..4), 1..5)) {
        const UNITS: [(&str, u64); 4] = [("h", 3_600_000), ("m", 60_000), ("s", 1_000), ("ms", 1)];
        let text: String = parts.iter().map(|&(n, u)| format!("{n}{}", UNITS[u].0)).collect();
        let millis: u64 = parts.iter().map(|&(n, u)| n * UNITS[u].1).sum();
        prop_assert_eq!(parse_duration("f", &text).unwrap(), std::time::Duration::from_millis(millis));
    }
}

#[test]
fn extreme_instants_do_not_panic() {
    let specs = [
        weekly_spec(vec!["fri-mon".into()], vec!["22-6".into()], "Pacific/Chatham".into()),
        weekly_spec(vec!["mon-sun".into()], vec!["0-23".into()], "Asia/Kathmandu".into()),
        cron_spec("0 9 * * 1-5".into(), "8h".into(), "Pacific/Kiritimati".into()),
        cron_spec("* * * * *".into(), "1h".into(), "America/Adak".into()),
    ];
    for spec in specs {
        let schedule = Schedule::parse(&spec).unwrap();
        for t in [DateTime::<Utc>::MIN_UTC, DateTime::<Utc>::MAX_UTC, DateTime::UNIX_EPOCH] {
            let _ = schedule.evaluate(t);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Exclusions and inclusions over a day/hour window.

/// A period for the property test: a whole local day some days from `t`, or a span of whole
/// minutes starting some minutes from `t`.
#[derive(Debug, Clone)]
enum PeriodCase {
    Day(i64),
    Span(i64, i64),
}

impl PeriodCase {
    fn spec(&self, t: DateTime<Utc>, tz: Tz) -> crate::api::scheduled_machine::SchedulePeriod {
        let blank = crate::api::scheduled_machine::SchedulePeriod {
            date: None,
            start: None,
            end: None,
        };
        match *self {
            Self::Day(days) => crate::api::scheduled_machine::SchedulePeriod {
                date: Some((t.with_timezone(&tz).date_naive() + TimeDelta::days(days)).to_string()),
                ..blank
            },
            Self::Span(from, len) => {
                let start = next_minute(t) + TimeDelta::minutes(from);
                crate::api::scheduled_machine::SchedulePeriod {
                    start: Some(start.to_rfc3339()),
                    end: Some((start + TimeDelta::minutes(len)).to_rfc3339()),
                    ..blank
                }
            }
        }
    }

    /// Whether the period holds at `m`, from the rule itself.
    fn holds(&self, t: DateTime<Utc>, tz: Tz, m: DateTime<Utc>) -> bool {
        match *self {
            Self::Day(days) => {
                m.with_timezone(&tz).date_naive() == t.with_timezone(&tz).date_naive() + TimeDelta::days(days)
            }
            Self::Span(from, len) => {
                let start = next_minute(t) + TimeDelta::minutes(from);
                start <= m && m < start + TimeDelta::minutes(len)
            }
        }
    }
}

fn period_case() -> impl Strategy<Value = PeriodCase> {
    prop_oneof![
        (-1i64..6).prop_map(PeriodCase::Day),
        (-600i64..6000, 1i64..3000).prop_map(|(from, len)| PeriodCase::Span(from, len)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn exclusions_and_inclusions_match_brute_force(
        case in weekly_case(),
        exclusions in prop::collection::vec(period_case(), 0..3),
        inclusions in prop::collection::vec(period_case(), 0..3),
        t in instant(),
    ) {
        let tz: Tz = case.zone.parse().unwrap();
        let mut spec = case.spec();
        spec.exclusions = exclusions.iter().map(|p| p.spec(t, tz)).collect();
        spec.inclusions = inclusions.iter().map(|p| p.spec(t, tz)).collect();
        let schedule = Schedule::parse(&spec).unwrap();
        let oracle = |m: DateTime<Utc>| {
            !exclusions.iter().any(|p| p.holds(t, tz, m))
                && (case.oracle_active(m) || inclusions.iter().any(|p| p.holds(t, tz, m)))
        };
        let active = oracle(t);
        prop_assert_eq!(schedule.is_active(t), active);
        let oracle_next = first_change(t, WEEKLY_ORACLE_HORIZON, |m| oracle(m) != active);
        let next = schedule.next_transition(t);
        match oracle_next {
            Some(expected) => prop_assert_eq!(next, Some(expected)),
            None => prop_assert!(next.is_none_or(|n| n > t + WEEKLY_ORACLE_HORIZON), "engine found {:?}", next),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Lead time and drain ahead: when the machine is wanted around a day/hour window.

/// Whole minutes from 0 to `max`, zero a quarter of the time.
fn margin_minutes(max: i64) -> impl Strategy<Value = i64> {
    prop_oneof![1 => Just(0i64), 3 => 0..=max]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn wanted_life_matches_brute_force(
        case in weekly_case(),
        lead in margin_minutes(180),
        ahead in margin_minutes(120),
        t in instant(),
    ) {
        let schedule = Schedule::parse(&case.spec()).unwrap();
        let margins = super::Margins {
            lead: std::time::Duration::from_secs(lead as u64 * 60),
            drain_ahead: std::time::Duration::from_secs(ahead as u64 * 60),
        };
        // Activity minute by minute from t's minute to past the horizon plus both margins.
        let first = next_minute(t) - TimeDelta::minutes(1);
        let span = WEEKLY_ORACLE_HORIZON.num_minutes() + lead + ahead + 2;
        let minute = |i: i64| first + TimeDelta::minutes(i);
        let active: Vec<bool> = (0..=span).map(|i| case.oracle_active(minute(i))).collect();
        // first_off[k]: the first minute index >= k at which the window is closed.
        let mut first_off = vec![span + 1; active.len() + 1];
        for k in (0..active.len()).rev() {
            first_off[k] = if active[k] { first_off[k + 1] } else { k as i64 };
        }
        // The rule itself: some open minute s within the lead whose run lasts past i + ahead.
        let wanted = |i: i64| {
            (i..=i + lead).any(|s| active[s as usize] && (s > i + ahead || first_off[s as usize] > i + ahead))
        };
        let now = wanted(0);
        prop_assert_eq!(schedule.is_wanted(t, margins), now);

        let oracle_next = (1..=WEEKLY_ORACLE_HORIZON.num_minutes()).find(|&i| wanted(i) != now).map(minute);
        let next = schedule.next_wanted_change(t, margins);
        match oracle_next {
            Some(expected) => prop_assert_eq!(next, Some(expected)),
            None => prop_assert!(next.is_none_or(|n| n > t + WEEKLY_ORACLE_HORIZON), "engine found {:?}", next),
        }
        if let Some(n) = next {
            prop_assert_eq!(schedule.is_wanted(n, margins), !now);
        }
        let plan = schedule.plan(t, margins);
        prop_assert_eq!((plan.open, plan.next_edge), (schedule.is_active(t), schedule.next_transition(t)));
    }
}

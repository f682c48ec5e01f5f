//! Why a schedule was rejected, phrased for a status condition.
//!
//! Every variant carries the field path (e.g. `schedule.hoursOfDay[1]`) and the offending token so
//! a user can fix the spec from the condition message alone, and [`ScheduleError::reason`] gives a
//! bounded CamelCase word for the condition's `reason`.

/// Longest token echoed back in a message. Lists and strings in the spec are user input of
/// unbounded length; echoing them whole could bloat status far past what anyone reads.
const MAX_TOKEN_CHARS: usize = 64;

/// A schedule (or duration) field that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ScheduleError {
    /// A `daysOfWeek` element is empty, malformed or names an unknown day.
    #[error("{field}: invalid day {token:?}: {problem}")]
    InvalidDay {
        /// Path of the offending field, e.g. `schedule.daysOfWeek[0]`.
        field: String,
        /// The offending token (clipped).
        token: String,
        /// What is wrong with it.
        problem: String,
    },
    /// An `hoursOfDay` element is empty, malformed or outside 0-23.
    #[error("{field}: invalid hour {token:?}: {problem}")]
    InvalidHour {
        /// Path of the offending field, e.g. `schedule.hoursOfDay[1]`.
        field: String,
        /// The offending token (clipped).
        token: String,
        /// What is wrong with it.
        problem: String,
    },
    /// The time zone is not an IANA tz database name.
    #[error(
        "{field}: unknown time zone {token:?}: expected an IANA tz database name such as \
         America/New_York or UTC (names are case-sensitive)"
    )]
    InvalidTimezone {
        /// Path of the offending field.
        field: String,
        /// The offending name (clipped).
        token: String,
    },
    /// The cron expression does not parse or can never fire.
    #[error("{field}: invalid cron expression {token:?}: {problem}")]
    InvalidCron {
        /// Path of the offending field.
        field: String,
        /// The whole expression (clipped).
        token: String,
        /// The parser's explanation, naming the cron field and token.
        problem: String,
    },
    /// A duration is malformed, too large, or not usable where it appears.
    #[error("{field}: invalid duration {token:?}: {problem}")]
    InvalidDuration {
        /// Path of the offending field.
        field: String,
        /// The offending duration (clipped).
        token: String,
        /// What is wrong with it.
        problem: String,
    },
    /// Both the day/hour form and the cron form are set.
    #[error("schedule: set either daysOfWeek with hoursOfDay, or cron with duration, not both (found {fields})")]
    AmbiguousSchedule {
        /// The schedule fields that were set, e.g. `daysOfWeek, cron`.
        fields: String,
    },
    /// One form is half set, e.g. `cron` without `duration`.
    #[error("{field}: required together with {with}")]
    IncompleteSchedule {
        /// Path of the missing field.
        field: &'static str,
        /// Path of the field that was set without it.
        with: &'static str,
    },
    /// Neither form is set.
    #[error("schedule: no window: set daysOfWeek with hoursOfDay, or cron with duration")]
    EmptySchedule,
    /// An exclusion or inclusion is malformed, or ends before it starts.
    #[error("{field}: invalid period {token:?}: {problem}")]
    InvalidPeriod {
        /// Path of the offending field, e.g. `schedule.exclusions[0].start`.
        field: String,
        /// The offending value (clipped).
        token: String,
        /// What is wrong with it.
        problem: String,
    },
}

crate::condition_names! {
    /// Why a schedule was refused: the `ScheduleValid` reason of a ScheduledMachine.
    pub enum Reason {
        /// A day or day range is not a weekday name.
        InvalidDay,
        /// An hour or hour range is outside 0–23.
        InvalidHour,
        /// The time zone is not an IANA name.
        InvalidTimezone,
        /// The cron expression does not parse.
        InvalidCron,
        /// A duration does not parse.
        InvalidDuration,
        /// Both forms (days/hours and cron) are set.
        AmbiguousSchedule,
        /// One form is half set.
        IncompleteSchedule,
        /// Neither form is set.
        EmptySchedule,
        /// An exclusion or inclusion cannot be read, or ends before it starts.
        InvalidPeriod,
    }
}

impl ScheduleError {
    /// The condition reason.
    #[must_use]
    pub const fn reason(&self) -> Reason {
        match self {
            Self::InvalidDay { .. } => Reason::InvalidDay,
            Self::InvalidHour { .. } => Reason::InvalidHour,
            Self::InvalidTimezone { .. } => Reason::InvalidTimezone,
            Self::InvalidCron { .. } => Reason::InvalidCron,
            Self::InvalidDuration { .. } => Reason::InvalidDuration,
            Self::AmbiguousSchedule { .. } => Reason::AmbiguousSchedule,
            Self::IncompleteSchedule { .. } => Reason::IncompleteSchedule,
            Self::EmptySchedule => Reason::EmptySchedule,
            Self::InvalidPeriod { .. } => Reason::InvalidPeriod,
        }
    }

    /// Path of the field at fault (`schedule` when the fault is the combination of fields).
    #[must_use]
    pub fn field(&self) -> &str {
        match self {
            Self::InvalidDay { field, .. }
            | Self::InvalidHour { field, .. }
            | Self::InvalidTimezone { field, .. }
            | Self::InvalidCron { field, .. }
            | Self::InvalidDuration { field, .. }
            | Self::InvalidPeriod { field, .. } => field,
            Self::IncompleteSchedule { field, .. } => field,
            Self::AmbiguousSchedule { .. } | Self::EmptySchedule => "schedule",
        }
    }

    pub(crate) fn day(field: &str, token: &str, problem: impl Into<String>) -> Self {
        Self::InvalidDay {
            field: field.to_owned(),
            token: clip(token),
            problem: problem.into(),
        }
    }

    pub(crate) fn hour(field: &str, token: &str, problem: impl Into<String>) -> Self {
        Self::InvalidHour {
            field: field.to_owned(),
            token: clip(token),
            problem: problem.into(),
        }
    }

    pub(crate) fn duration(field: &str, token: &str, problem: impl Into<String>) -> Self {
        Self::InvalidDuration {
            field: field.to_owned(),
            token: clip(token),
            problem: problem.into(),
        }
    }

    pub(crate) fn timezone(field: &str, token: &str) -> Self {
        Self::InvalidTimezone {
            field: field.to_owned(),
            token: clip(token),
        }
    }

    pub(crate) fn period(field: &str, token: &str, problem: impl Into<String>) -> Self {
        Self::InvalidPeriod {
            field: field.to_owned(),
            token: clip(token),
            problem: problem.into(),
        }
    }

    pub(crate) fn cron(field: &str, token: &str, problem: impl Into<String>) -> Self {
        Self::InvalidCron {
            field: field.to_owned(),
            token: clip(token),
            problem: problem.into(),
        }
    }
}

/// Shortens user input to [`MAX_TOKEN_CHARS`] characters (on a character boundary).
pub(crate) fn clip(token: &str) -> String {
    match token.char_indices().nth(MAX_TOKEN_CHARS) {
        Some((cut, _)) => format!("{}…", &token[..cut]),
        None => token.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clip_keeps_short_tokens_and_cuts_long_ones_on_char_boundaries() {
        assert_eq!(clip("mon"), "mon");
        let long = "é".repeat(100);
        let clipped = clip(&long);
        assert_eq!(clipped.chars().count(), MAX_TOKEN_CHARS + 1);
        assert!(clipped.ends_with('…'));
    }

    #[test]
    fn messages_name_field_and_token() {
        let err = ScheduleError::hour("schedule.hoursOfDay[1]", "+9", "signs are not allowed");
        assert_eq!(
            err.to_string(),
            r#"schedule.hoursOfDay[1]: invalid hour "+9": signs are not allowed"#
        );
        assert_eq!(err.reason().as_str(), "InvalidHour");
        assert_eq!(err.field(), "schedule.hoursOfDay[1]");
    }

    #[test]
    fn reasons_are_bounded_camel_case() {
        let all = [
            ScheduleError::day("f", "t", "p"),
            ScheduleError::hour("f", "t", "p"),
            ScheduleError::timezone("f", "t"),
            ScheduleError::cron("f", "t", "p"),
            ScheduleError::duration("f", "t", "p"),
            ScheduleError::AmbiguousSchedule { fields: "x".into() },
            ScheduleError::IncompleteSchedule { field: "a", with: "b" },
            ScheduleError::EmptySchedule,
            ScheduleError::period("f", "t", "p"),
        ];
        for err in all {
            let reason = err.reason().as_str();
            assert!(reason.chars().all(|c| c.is_ascii_alphabetic()), "{reason}");
            assert!(reason.starts_with(|c: char| c.is_ascii_uppercase()), "{reason}");
        }
    }
}

//! `timezone`: the IANA zone the schedule's wall-clock fields are read in.

use chrono_tz::Tz;

use super::error::ScheduleError;

/// Looks `name` up in the bundled tz database, exactly as written (case-sensitive, no trimming):
/// `America/New_York`, `UTC`, `Asia/Kathmandu`. Anything else is an error rather than a silent
/// fallback to UTC, which would open windows at the wrong hour.
pub(crate) fn parse_timezone(field: &str, name: &str) -> Result<Tz, ScheduleError> {
    name.parse::<Tz>().map_err(|_| ScheduleError::timezone(field, name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iana_names_are_accepted() {
        for name in [
            "UTC",
            "America/New_York",
            "Asia/Kolkata",
            "Asia/Kathmandu",
            "Australia/Lord_Howe",
            "Etc/GMT+5",
        ] {
            assert_eq!(parse_timezone("schedule.timezone", name).unwrap().name(), name);
        }
    }

    #[test]
    fn other_names_are_rejected_with_field_and_token() {
        for name in [
            "",
            "utc",
            "america/new_york",
            " UTC",
            "UTC ",
            "Mars/Olympus",
            "+05:30",
            "EDT",
        ] {
            let err = parse_timezone("schedule.timezone", name).unwrap_err();
            assert_eq!(err.reason().as_str(), "InvalidTimezone");
            assert!(
                err.to_string()
                    .starts_with(&format!("schedule.timezone: unknown time zone {name:?}")),
                "{err}"
            );
        }
    }
}

//! `daysOfWeek`: which local weekdays a day/hour window opens on.

use chrono::Weekday;

use super::{
    error::ScheduleError,
    list::{self, Item},
};

/// A set of weekdays; bit `n` is `Weekday::num_days_from_monday() == n`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct DaySet(u8);

impl DaySet {
    /// Every day of the week.
    #[cfg(test)]
    pub(crate) const ALL: DaySet = DaySet(0x7f);

    /// Whether `day` is in the set.
    pub(crate) fn contains(self, day: Weekday) -> bool {
        self.0 & (1 << day.num_days_from_monday()) != 0
    }

    /// Adds the inclusive range `from..=to`, wrapping past Sunday when `from` comes after `to`
    /// (`fri-mon` is fri, sat, sun, mon).
    pub(crate) fn insert_range(&mut self, from: Weekday, to: Weekday) {
        let mut day = from;
        loop {
            self.0 |= 1 << day.num_days_from_monday();
            if day == to {
                break;
            }
            day = day.succ();
        }
    }
}

/// Parses every element of `daysOfWeek` (field path `field`, e.g. `schedule.daysOfWeek`).
pub(crate) fn parse_days(field: &str, elements: &[String]) -> Result<DaySet, ScheduleError> {
    if elements.is_empty() {
        return Err(ScheduleError::day(
            field,
            "[]",
            "the list is empty; name at least one day",
        ));
    }
    let mut days = DaySet::default();
    for (index, element) in elements.iter().enumerate() {
        let field = format!("{field}[{index}]");
        let shape_error =
            |shape: list::Shape<'_>| ScheduleError::day(&field, shape.token(element), shape.problem("mon-fri"));
        for raw in list::raw_items(element).map_err(shape_error)? {
            let (from, to) = match list::split_item(raw).map_err(shape_error)? {
                Item::Single(day) => {
                    let day = parse_day(&field, day)?;
                    (day, day)
                }
                Item::Range(from, to) => (parse_day(&field, from)?, parse_day(&field, to)?),
            };
            days.insert_range(from, to);
        }
    }
    Ok(days)
}

/// A day name: `mon`..`sun` or the full English name, in any letter case.
fn parse_day(field: &str, token: &str) -> Result<Weekday, ScheduleError> {
    let day = match token.to_ascii_lowercase().as_str() {
        "mon" | "monday" => Weekday::Mon,
        "tue" | "tuesday" => Weekday::Tue,
        "wed" | "wednesday" => Weekday::Wed,
        "thu" | "thursday" => Weekday::Thu,
        "fri" | "friday" => Weekday::Fri,
        "sat" | "saturday" => Weekday::Sat,
        "sun" | "sunday" => Weekday::Sun,
        _ => {
            return Err(ScheduleError::day(
                field,
                token,
                "unknown day; use mon, tue, wed, thu, fri, sat, sun or the full English name",
            ));
        }
    };
    Ok(day)
}

#[cfg(test)]
mod tests {
    use super::*;
    use Weekday::*;

    fn days(elements: &[&str]) -> Result<Vec<Weekday>, ScheduleError> {
        let elements: Vec<String> = elements.iter().map(|s| (*s).to_owned()).collect();
        let set = parse_days("schedule.daysOfWeek", &elements)?;
        Ok([Mon, Tue, Wed, Thu, Fri, Sat, Sun]
            .into_iter()
            .filter(|d| set.contains(*d))
            .collect())
    }

    #[test]
    fn accepted_forms() {
        let cases: &[(&[&str], &[Weekday])] = &[
            (&["mon"], &[Mon]),
            (&["mon-fri"], &[Mon, Tue, Wed, Thu, Fri]),
            (&["fri-mon"], &[Mon, Fri, Sat, Sun]),
            (&["sun-sat"], &[Mon, Tue, Wed, Thu, Fri, Sat, Sun]),
            (&["wed-wed"], &[Wed]),
            (&["mon,wed", "fri"], &[Mon, Wed, Fri]),
            (&[" Monday , WEDNESDAY ", "friDay"], &[Mon, Wed, Fri]),
            (&["Saturday - sunday"], &[Sat, Sun]),
            (&["TUE-thursday"], &[Tue, Wed, Thu]),
            (&["mon", "mon-tue"], &[Mon, Tue]),
        ];
        for (input, want) in cases {
            assert_eq!(days(input).unwrap(), *want, "{input:?}");
        }
    }

    #[test]
    fn rejected_forms_name_field_and_token() {
        let cases: &[(&[&str], &str, &str)] = &[
            (&[], "schedule.daysOfWeek", r#""[]""#),
            (&[""], "schedule.daysOfWeek[0]", r#""""#),
            (&["mon", "  "], "schedule.daysOfWeek[1]", r#""  ""#),
            (&["mon,,tue"], "schedule.daysOfWeek[0]", r#""mon,,tue""#),
            (&["mon,"], "schedule.daysOfWeek[0]", r#""mon,""#),
            (&["funday"], "schedule.daysOfWeek[0]", r#""funday""#),
            (&["mon", "tues"], "schedule.daysOfWeek[1]", r#""tues""#),
            (&["mon-"], "schedule.daysOfWeek[0]", r#""mon-""#),
            (&["-fri"], "schedule.daysOfWeek[0]", r#""-fri""#),
            (&["mon-wed-fri"], "schedule.daysOfWeek[0]", r#""mon-wed-fri""#),
            (&["mon-xyz"], "schedule.daysOfWeek[0]", r#""xyz""#),
            (&["1"], "schedule.daysOfWeek[0]", r#""1""#),
        ];
        for (input, field, token) in cases {
            let err = days(input).unwrap_err();
            let message = err.to_string();
            assert_eq!(err.reason().as_str(), "InvalidDay", "{input:?}");
            assert_eq!(err.field(), *field, "{input:?}");
            assert!(
                message.starts_with(&format!("{field}: invalid day {token}")),
                "{input:?}: {message}"
            );
        }
    }
}

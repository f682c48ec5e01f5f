//! `hoursOfDay`: which local wall-clock hours a day/hour window covers.
//!
//! A range `a-b` with `a <= b` covers hours `a` through `b` of a listed day (`9-17` is 09:00:00
//! to 17:59:59). A range with `a > b` is an overnight window: it starts at `a` on a listed day
//! and carries past midnight until the end of hour `b` on the next day, so `fri` + `22-6` is open
//! from Friday 22:00 to Saturday 06:59:59. (The predecessor wrapped the hours within the same
//! calendar day, which silently split overnight shifts; that was a bug.)

use chrono::Weekday;

use super::{
    days::DaySet,
    error::ScheduleError,
    list::{self, Item},
};

/// An inclusive hour range as written; wraps past midnight when `start > end`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct HourRange {
    pub(crate) start: u8,
    pub(crate) end: u8,
}

impl HourRange {
    /// Whether this range opens the window at local `hour` of `day`, given the listed `days`.
    ///
    /// This is the normative rule; [`super::weekly`] compiles it into a table.
    pub(crate) fn covers(self, days: DaySet, day: Weekday, hour: u8) -> bool {
        if self.start <= self.end {
            (self.start..=self.end).contains(&hour) && days.contains(day)
        } else {
            (hour >= self.start && days.contains(day)) || (hour <= self.end && days.contains(day.pred()))
        }
    }
}

/// Parses every element of `hoursOfDay` (field path `field`, e.g. `schedule.hoursOfDay`).
pub(crate) fn parse_hours(field: &str, elements: &[String]) -> Result<Vec<HourRange>, ScheduleError> {
    if elements.is_empty() {
        return Err(ScheduleError::hour(
            field,
            "[]",
            "the list is empty; name at least one hour",
        ));
    }
    let mut ranges = Vec::new();
    for (index, element) in elements.iter().enumerate() {
        let field = format!("{field}[{index}]");
        let shape_error =
            |shape: list::Shape<'_>| ScheduleError::hour(&field, shape.token(element), shape.problem("9-17"));
        for raw in list::raw_items(element).map_err(shape_error)? {
            // Checked before range splitting so `-5` reads as a sign, not a range without a start.
            reject_sign(&field, raw)?;
            let range = match list::split_item(raw).map_err(shape_error)? {
                Item::Single(hour) => {
                    let hour = parse_hour(&field, hour)?;
                    HourRange { start: hour, end: hour }
                }
                Item::Range(start, end) => HourRange {
                    start: parse_hour(&field, start)?,
                    end: parse_hour(&field, end)?,
                },
            };
            ranges.push(range);
        }
    }
    Ok(ranges)
}

fn reject_sign(field: &str, token: &str) -> Result<(), ScheduleError> {
    if token.starts_with(['+', '-']) {
        return Err(ScheduleError::hour(
            field,
            token,
            "signs are not allowed; use digits 0-23",
        ));
    }
    Ok(())
}

/// An hour 0-23 in ASCII digits; leading zeros are fine (`09`, `007`).
fn parse_hour(field: &str, token: &str) -> Result<u8, ScheduleError> {
    reject_sign(field, token)?;
    if !token.bytes().all(|b| b.is_ascii_digit()) {
        return Err(ScheduleError::hour(field, token, "not a number; use digits 0-23"));
    }
    let significant = token.trim_start_matches('0');
    // At most two significant digits, so the parse below cannot overflow.
    let value = if significant.is_empty() {
        0
    } else if significant.len() > 2 {
        u8::MAX
    } else {
        significant.parse::<u8>().unwrap_or(u8::MAX)
    };
    if value > 23 {
        return Err(ScheduleError::hour(field, token, "outside 0-23"));
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hours(elements: &[&str]) -> Result<Vec<(u8, u8)>, ScheduleError> {
        let elements: Vec<String> = elements.iter().map(|s| (*s).to_owned()).collect();
        Ok(parse_hours("schedule.hoursOfDay", &elements)?
            .into_iter()
            .map(|r| (r.start, r.end))
            .collect())
    }

    #[test]
    fn accepted_forms() {
        type Case<'a> = (&'a [&'a str], &'a [(u8, u8)]);
        let cases: &[Case<'_>] = &[
            (&["9-17"], &[(9, 17)]),
            (&["09-017"], &[(9, 17)]),
            (&["0"], &[(0, 0)]),
            (&["00"], &[(0, 0)]),
            (&["23"], &[(23, 23)]),
            (&["22-6"], &[(22, 6)]),
            (&[" 1 , 3 - 4 ", "8"], &[(1, 1), (3, 4), (8, 8)]),
            (&["0-23"], &[(0, 23)]),
        ];
        for (input, want) in cases {
            assert_eq!(hours(input).unwrap(), *want, "{input:?}");
        }
    }

    #[test]
    fn rejected_forms_name_field_and_token() {
        let cases: &[(&[&str], &str, &str, &str)] = &[
            (&[], "schedule.hoursOfDay", r#""[]""#, "empty"),
            (&[""], "schedule.hoursOfDay[0]", r#""""#, "empty"),
            (&["9", "1,,2"], "schedule.hoursOfDay[1]", r#""1,,2""#, "empty item"),
            (&["24"], "schedule.hoursOfDay[0]", r#""24""#, "outside 0-23"),
            (&["9", "0100"], "schedule.hoursOfDay[1]", r#""0100""#, "outside 0-23"),
            (
                &["99999999999999999999"],
                "schedule.hoursOfDay[0]",
                r#""99999999999999999999""#,
                "outside",
            ),
            (&["9", "+9"], "schedule.hoursOfDay[1]", r#""+9""#, "signs"),
            (&["-5"], "schedule.hoursOfDay[0]", r#""-5""#, "signs"),
            (&["9-+5"], "schedule.hoursOfDay[0]", r#""+5""#, "signs"),
            (&["9-"], "schedule.hoursOfDay[0]", r#""9-""#, "range"),
            (&["9-12-15"], "schedule.hoursOfDay[0]", r#""9-12-15""#, "range"),
            (&["9--5"], "schedule.hoursOfDay[0]", r#""9--5""#, "range"),
            (&["nine"], "schedule.hoursOfDay[0]", r#""nine""#, "not a number"),
            (&["9 10"], "schedule.hoursOfDay[0]", r#""9 10""#, "not a number"),
            (&["٣"], "schedule.hoursOfDay[0]", r#""٣""#, "not a number"),
            (&["9:00"], "schedule.hoursOfDay[0]", r#""9:00""#, "not a number"),
        ];
        for (input, field, token, problem) in cases {
            let err = hours(input).unwrap_err();
            let message = err.to_string();
            assert_eq!(err.reason().as_str(), "InvalidHour", "{input:?}");
            assert!(
                message.starts_with(&format!("{field}: invalid hour {token}")),
                "{input:?}: {message}"
            );
            assert!(message.contains(problem), "{input:?}: {message}");
        }
    }

    #[test]
    fn overnight_range_carries_into_the_next_day_only() {
        let mut fri = DaySet::default();
        fri.insert_range(Weekday::Fri, Weekday::Fri);
        let r = HourRange { start: 22, end: 6 };
        assert!(r.covers(fri, Weekday::Fri, 22));
        assert!(r.covers(fri, Weekday::Fri, 23));
        assert!(r.covers(fri, Weekday::Sat, 0));
        assert!(r.covers(fri, Weekday::Sat, 6));
        assert!(!r.covers(fri, Weekday::Sat, 7));
        assert!(!r.covers(fri, Weekday::Fri, 3));
        assert!(!r.covers(fri, Weekday::Fri, 21));
        assert!(!r.covers(fri, Weekday::Sat, 22));
    }
}

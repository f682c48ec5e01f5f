//! Go-style durations as written in the spec (`5m`, `90s`, `1h30m`, `500ms`, `1.5h`).
//!
//! The grammar is exactly the CRD's pattern `^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$`, so a value the
//! API server admits always parses here and vice versa; nothing is trimmed and there are no signs.
//! Values are capped at Go's limit (2^63-1 ns, about 292 years), so a duration written for a Go
//! controller means the same here.

use std::time::Duration;

use super::error::ScheduleError;

/// Largest duration Go's `time.Duration` can hold, in nanoseconds.
const MAX_NANOS: u128 = i64::MAX as u128;

/// Fraction digits beyond this are ignored (they are below a nanosecond for every unit).
const MAX_FRACTION_DIGITS: usize = 18;

/// Parses a Go-style duration; `field` is the spec path quoted in errors
/// (e.g. `spec.gracefulShutdownTimeout`). Zero (`0s`) is accepted; callers that need a positive
/// value check for it.
pub fn parse_duration(field: &str, text: &str) -> Result<Duration, ScheduleError> {
    let invalid = |problem: &str| ScheduleError::duration(field, text, problem);
    if text.is_empty() {
        return Err(invalid("empty; write e.g. 5m, 90s, 1h30m or 500ms"));
    }
    if text.starts_with(['+', '-']) {
        return Err(invalid("signs are not allowed"));
    }
    let mut rest = text;
    let mut total: u128 = 0;
    while !rest.is_empty() {
        let (whole, after) = split_digits(rest);
        if whole.is_empty() {
            return Err(invalid(
                "expected a number followed by a unit (h, m, s, ms), like 1h30m",
            ));
        }
        let (fraction, after) = match after.strip_prefix('.') {
            Some(after) => {
                let (fraction, after) = split_digits(after);
                if fraction.is_empty() {
                    return Err(invalid("expected digits after the decimal point"));
                }
                (fraction, after)
            }
            None => ("", after),
        };
        let unit_len = after.find(|c: char| !c.is_ascii_alphabetic()).unwrap_or(after.len());
        let (unit, after) = after.split_at(unit_len);
        let unit_nanos: u128 = match unit {
            "h" => 3_600_000_000_000,
            "m" => 60_000_000_000,
            "s" => 1_000_000_000,
            "ms" => 1_000_000,
            "" if after.is_empty() => return Err(invalid("missing unit; use h, m, s or ms")),
            "" => return Err(invalid("unexpected character; use digits and the units h, m, s, ms")),
            _ => return Err(invalid("unknown unit; use h, m, s or ms")),
        };
        total = total
            .checked_add(component_nanos(whole, fraction, unit_nanos).ok_or_else(|| invalid("too large"))?)
            .filter(|total| *total <= MAX_NANOS)
            .ok_or_else(|| invalid("too large (at most about 292 years)"))?;
        rest = after;
    }
    let nanos = u64::try_from(total).map_err(|_| invalid("too large"))?;
    Ok(Duration::from_nanos(nanos))
}

/// Writes `d` the way [`parse_duration`] reads it, to the millisecond, as Go prints durations:
/// `0s`, `12ms`, `1.204s`, `4m12s`, `1h0m5s`.
#[must_use]
pub fn format_duration(d: Duration) -> String {
    let millis = d.as_millis();
    if millis < 1000 {
        return if millis == 0 {
            "0s".to_owned()
        } else {
            format!("{millis}ms")
        };
    }
    let (hours, rest) = (millis / 3_600_000, millis % 3_600_000);
    let (minutes, rest) = (rest / 60_000, rest % 60_000);
    let (seconds, fraction) = (rest / 1000, rest % 1000);
    let seconds = if fraction == 0 {
        format!("{seconds}s")
    } else {
        format!("{seconds}.{}s", format!("{fraction:03}").trim_end_matches('0'))
    };
    match (hours, minutes) {
        (0, 0) => seconds,
        (0, m) => format!("{m}m{seconds}"),
        (h, m) => format!("{h}h{m}m{seconds}"),
    }
}

/// Splits off the leading ASCII digits.
fn split_digits(text: &str) -> (&str, &str) {
    text.split_at(text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len()))
}

/// `whole.fraction` units in nanoseconds (fraction truncated), or `None` past [`MAX_NANOS`].
fn component_nanos(whole: &str, fraction: &str, unit_nanos: u128) -> Option<u128> {
    let whole = whole.trim_start_matches('0');
    // More than 20 significant digits is beyond any representable duration.
    if whole.len() > 20 {
        return None;
    }
    let whole: u128 = if whole.is_empty() { 0 } else { whole.parse().ok()? };
    let mut nanos = whole.checked_mul(unit_nanos).filter(|n| *n <= MAX_NANOS)?;
    let fraction = &fraction[..fraction.len().min(MAX_FRACTION_DIGITS)];
    if !fraction.is_empty() {
        let numerator: u128 = fraction.parse().ok()?;
        let denominator = 10u128.checked_pow(u32::try_from(fraction.len()).ok()?)?;
        // numerator < 10^18 and unit_nanos < 4e12, so the product fits in u128.
        nanos = nanos.checked_add(numerator.checked_mul(unit_nanos)? / denominator)?;
    }
    Some(nanos)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepted_forms() {
        let cases: &[(&str, Duration)] = &[
            ("5m", Duration::from_secs(300)),
            ("90s", Duration::from_secs(90)),
            ("1h30m", Duration::from_secs(5400)),
            ("500ms", Duration::from_millis(500)),
            ("8h", Duration::from_secs(8 * 3600)),
            ("1.5h", Duration::from_secs(5400)),
            ("0.5s", Duration::from_millis(500)),
            ("1h1m1s1ms", Duration::from_millis(3_661_001)),
            ("0s", Duration::ZERO),
            ("007m", Duration::from_secs(420)),
            ("1m1m", Duration::from_secs(120)),
            ("1.0000000000000000000001s", Duration::from_secs(1)),
            ("2562047h", Duration::from_secs(2_562_047 * 3600)),
        ];
        for (input, want) in cases {
            assert_eq!(
                parse_duration("spec.nodeDrainTimeout", input).unwrap(),
                *want,
                "{input}"
            );
        }
    }

    #[test]
    fn formatted_durations_read_back() {
        for (d, text) in [
            (Duration::ZERO, "0s"),
            (Duration::from_micros(400), "0s"),
            (Duration::from_millis(12), "12ms"),
            (Duration::from_millis(1204), "1.204s"),
            (Duration::from_millis(1500), "1.5s"),
            (Duration::from_secs(252), "4m12s"),
            (Duration::from_secs(3605), "1h0m5s"),
            (Duration::from_millis(90_061_001), "25h1m1.001s"),
        ] {
            assert_eq!(format_duration(d), text);
            let millis = Duration::from_millis(u64::try_from(d.as_millis()).unwrap());
            assert_eq!(parse_duration("f", text).unwrap(), millis, "{text}");
        }
    }

    #[test]
    fn rejected_forms_name_field_and_token() {
        let cases: &[(&str, &str)] = &[
            ("", "empty"),
            ("5", "missing unit"),
            ("0", "missing unit"),
            ("-5m", "signs"),
            ("+5m", "signs"),
            ("5d", "unknown unit"),
            ("5ns", "unknown unit"),
            ("5us", "unknown unit"),
            ("5M", "unknown unit"),
            ("5min", "unknown unit"),
            (" 5m", "expected a number"),
            ("5m ", "expected a number"),
            ("5 m", "unexpected character"),
            ("1h-30m", "expected a number"),
            (".5s", "expected a number"),
            ("5.s", "digits after the decimal point"),
            ("h", "expected a number"),
            ("2562048h", "too large"),
            ("99999999999999999999999999999h", "too large"),
            ("9223372036854775808ms", "too large"),
            ("2562047h2562047h", "too large"),
            ("5m\u{0}", "expected a number"),
        ];
        for (input, problem) in cases {
            let err = parse_duration("spec.gracefulShutdownTimeout", input).unwrap_err();
            let message = err.to_string();
            assert_eq!(err.reason().as_str(), "InvalidDuration");
            assert!(
                message.starts_with(&format!("spec.gracefulShutdownTimeout: invalid duration {input:?}")),
                "{input:?}: {message}"
            );
            assert!(message.contains(problem), "{input:?}: {message}");
        }
    }
}

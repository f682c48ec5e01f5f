//! Annotations that override the schedule for a while (pure): `force-on-until` keeps the
//! machine on and `force-off-until` keeps it off until an RFC 3339 instant, whatever the window,
//! its exclusions and inclusions say. Off wins when both hold. An override whose instant has
//! passed is ignored, and the controller removes it.

use std::collections::BTreeMap;

use chrono::{DateTime, SecondsFormat, Utc};

use crate::schedule::Plan;

/// Keep the machine on until this instant.
pub const FORCE_ON_UNTIL: &str = "5spot.finos.org/force-on-until";
/// Keep the machine off until this instant.
pub const FORCE_OFF_UNTIL: &str = "5spot.finos.org/force-off-until";

/// An override that holds now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Forced {
    /// On or off.
    pub active: bool,
    /// Until when.
    pub until: DateTime<Utc>,
    /// The annotation that says so.
    pub annotation: &'static str,
}

impl Forced {
    /// For the status message: `forced on by <annotation> until <instant>`.
    #[must_use]
    pub fn note(&self) -> String {
        format!(
            "forced {} by {} until {}",
            if self.active { "on" } else { "off" },
            self.annotation,
            self.until.to_rfc3339_opts(SecondsFormat::Secs, true)
        )
    }
}

/// The overrides on an object at `now`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Overrides {
    /// The one that holds, if any.
    pub forced: Option<Forced>,
    /// Annotations whose instant has passed, to remove.
    pub expired: Vec<&'static str>,
}

/// Read the override annotations at `now`.
///
/// # Errors
/// An annotation that is not an RFC 3339 instant: the message names it and its value.
pub fn read(annotations: &BTreeMap<String, String>, now: DateTime<Utc>) -> Result<Overrides, String> {
    let mut overrides = Overrides::default();
    // Off first: when both hold, off wins.
    for (annotation, active) in [(FORCE_OFF_UNTIL, false), (FORCE_ON_UNTIL, true)] {
        let Some(value) = annotations.get(annotation) else {
            continue;
        };
        let until = DateTime::parse_from_rfc3339(value.trim())
            .map_err(|e| format!("metadata.annotations[{annotation}]: {value:?} is not an RFC 3339 instant: {e}"))?
            .with_timezone(&Utc);
        if until <= now {
            overrides.expired.push(annotation);
        } else if overrides.forced.is_none() {
            overrides.forced = Some(Forced {
                active,
                until,
                annotation,
            });
        }
    }
    Ok(overrides)
}

/// The schedule's plan under `forced`: the override's state, for the window and the machine
/// alike, until its instant, when the schedule decides again.
#[must_use]
pub fn apply(plan: Plan, forced: Option<&Forced>) -> Plan {
    match forced {
        Some(f) => Plan {
            open: f.active,
            next_edge: Some(f.until),
            wanted: f.active,
            next_wanted_change: Some(f.until),
        },
        None => plan,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> DateTime<Utc> {
        s.parse().unwrap()
    }

    fn annotations(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    #[test]
    fn a_live_override_decides_until_its_instant() {
        let now = at("2026-12-07T17:00:00Z");
        let o = read(&annotations(&[(FORCE_ON_UNTIL, "2026-12-07T20:00:00-05:00")]), now).unwrap();
        let forced = o.forced.unwrap();
        assert_eq!((forced.active, forced.until), (true, at("2026-12-08T01:00:00Z")));
        let closed = Plan {
            open: false,
            next_edge: Some(now),
            wanted: false,
            next_wanted_change: None,
        };
        let until = Some(at("2026-12-08T01:00:00Z"));
        assert_eq!(
            apply(closed, Some(&forced)),
            Plan {
                open: true,
                next_edge: until,
                wanted: true,
                next_wanted_change: until
            }
        );
        assert_eq!(
            forced.note(),
            "forced on by 5spot.finos.org/force-on-until until 2026-12-08T01:00:00Z"
        );
        assert_eq!(apply(closed, None), closed, "no override, the schedule's answer");
    }

    #[test]
    fn off_wins_and_expired_ones_are_listed_for_removal() {
        let now = at("2026-12-07T17:00:00Z");
        let both = annotations(&[
            (FORCE_ON_UNTIL, "2026-12-08T00:00:00Z"),
            (FORCE_OFF_UNTIL, "2026-12-07T18:00:00Z"),
        ]);
        assert!(!read(&both, now).unwrap().forced.unwrap().active);
        let expired = annotations(&[(FORCE_ON_UNTIL, "2026-12-07T16:59:59Z")]);
        let o = read(&expired, now).unwrap();
        assert_eq!((o.forced, o.expired), (None, vec![FORCE_ON_UNTIL]));
    }

    #[test]
    fn a_bad_value_names_the_annotation() {
        let err = read(
            &annotations(&[(FORCE_OFF_UNTIL, "tomorrow")]),
            at("2026-12-07T17:00:00Z"),
        )
        .unwrap_err();
        assert!(
            err.starts_with(r#"metadata.annotations[5spot.finos.org/force-off-until]: "tomorrow" is not an RFC 3339"#),
            "{err}"
        );
    }
}

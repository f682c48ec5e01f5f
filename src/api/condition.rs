//! Conditions in the `metav1.Condition` shape, and merging that keeps their history.
//!
//! Controllers decide a [`DesiredCondition`]; [`merge`] folds it into the stored list so that
//! `lastTransitionTime` only moves when the status really changes, and other conditions survive.

pub use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

/// The condition type every kind reports as its summary.
pub const READY: &str = "Ready";
/// The condition type reporting that reconciliation is paused.
pub const PAUSED: &str = "Paused";

/// Declares a bounded set of condition types or reasons: a `Copy` enum whose variants are the
/// wire names (or carry an explicit one, `InvalidJson = "InvalidJSON"`), with `as_str`, `ALL`
/// (every variant, for docs and tests) and `parse` (the stored string back to the variant, so
/// that logic compares variants, never strings).
#[macro_export]
macro_rules! condition_names {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident {
            $( $(#[$vmeta:meta])* $variant:ident $(= $wire:literal)? ),+ $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        $vis enum $name {
            $( $(#[$vmeta])* $variant ),+
        }

        impl $name {
            /// Every name in the set.
            pub const ALL: &[Self] = &[$(Self::$variant),+];

            /// The wire form.
            #[must_use]
            pub const fn as_str(self) -> &'static str {
                match self {
                    $( Self::$variant => $crate::condition_names!(@wire $variant $($wire)?) ),+
                }
            }

            /// The name whose wire form is `s`, if any.
            #[must_use]
            pub fn parse(s: &str) -> Option<Self> {
                Self::ALL.iter().copied().find(|n| n.as_str() == s)
            }
        }

        impl $crate::api::condition::Name for $name {
            fn as_str(self) -> &'static str {
                Self::as_str(self)
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
    (@wire $variant:ident $wire:literal) => { $wire };
    (@wire $variant:ident) => { stringify!($variant) };
}

/// Declares a kind's reason as the union of bounded sets (its own, and those of the domain
/// modules whose failures it reports), each set a tuple variant with a `From` into the union.
#[macro_export]
macro_rules! condition_reasons {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident {
            $( $(#[$vmeta:meta])* $variant:ident($set:ty) ),+ $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        $vis enum $name {
            $( $(#[$vmeta])* $variant($set) ),+
        }

        impl $name {
            /// The wire form.
            #[must_use]
            pub const fn as_str(self) -> &'static str {
                match self {
                    $( Self::$variant(r) => r.as_str() ),+
                }
            }
        }

        impl $crate::api::condition::Name for $name {
            fn as_str(self) -> &'static str {
                Self::as_str(self)
            }
        }

        $(impl From<$set> for $name {
            fn from(r: $set) -> Self {
                Self::$variant(r)
            }
        })+
    };
}

/// A condition type or reason from one of the bounded sets [`condition_names!`] declares:
/// what [`DesiredCondition::new`] takes, so that no condition is written from a bare string.
pub trait Name: Copy {
    /// The wire form.
    fn as_str(self) -> &'static str;
}

/// A status that carries conditions (every kind's), for the shared status writer.
pub trait HasConditions {
    /// The conditions, in stored order.
    fn conditions(&self) -> &[Condition];
}

/// Implement [`HasConditions`] for status types whose list is the `conditions` field.
#[macro_export]
macro_rules! has_conditions {
    ($($status:ty),+ $(,)?) => {
        $(impl $crate::api::condition::HasConditions for $status {
            fn conditions(&self) -> &[$crate::api::condition::Condition] {
                &self.conditions
            }
        })+
    };
}

/// The three values a condition status can take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    /// The condition holds.
    True,
    /// The condition does not hold.
    False,
    /// The controller cannot tell yet.
    Unknown,
}

impl Status {
    /// The wire form of the status.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::True => "True",
            Self::False => "False",
            Self::Unknown => "Unknown",
        }
    }

    /// `True` when `holds`, else `False`.
    #[must_use]
    pub const fn from_bool(holds: bool) -> Self {
        if holds { Self::True } else { Self::False }
    }
}

/// A condition as a controller decides it, before timestamps are attached.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DesiredCondition {
    /// Condition type, e.g. `Ready`.
    pub type_: &'static str,
    /// Whether it holds.
    pub status: Status,
    /// A CamelCase reason drawn from a bounded set.
    pub reason: &'static str,
    /// A human-readable explanation; never carries secret material.
    pub message: String,
}

impl DesiredCondition {
    /// A condition of `type_` with the given status, reason and message.
    pub fn new(type_: impl Name, status: Status, reason: impl Name, message: impl Into<String>) -> Self {
        Self {
            type_: type_.as_str(),
            status,
            reason: reason.as_str(),
            message: message.into(),
        }
    }
}

/// Fold `desired` into `existing`, returning the new list.
///
/// The entry of the same type is replaced; its `lastTransitionTime` is kept unless the status
/// changed. Entries of other types are kept in place, and a new type is appended.
#[must_use]
pub fn merge(
    existing: &[Condition],
    desired: &DesiredCondition,
    now: &Time,
    generation: Option<i64>,
) -> Vec<Condition> {
    let mut out: Vec<Condition> = existing.to_vec();
    let previous = out.iter().position(|c| c.type_ == desired.type_);
    let last_transition_time = match previous.map(|i| &out[i]) {
        Some(old) if old.status == desired.status.as_str() => old.last_transition_time.clone(),
        _ => now.clone(),
    };
    let condition = Condition {
        type_: desired.type_.to_owned(),
        status: desired.status.as_str().to_owned(),
        reason: desired.reason.to_owned(),
        message: desired.message.clone(),
        last_transition_time,
        observed_generation: generation,
    };
    match previous {
        Some(i) => out[i] = condition,
        None => out.push(condition),
    }
    out
}

/// Fold several desired conditions into `existing`, in order.
#[must_use]
pub fn merge_all(
    existing: &[Condition],
    desired: &[DesiredCondition],
    now: &Time,
    generation: Option<i64>,
) -> Vec<Condition> {
    desired
        .iter()
        .fold(existing.to_vec(), |acc, d| merge(&acc, d, now, generation))
}

/// The condition of `type_`, if present.
#[must_use]
pub fn find<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

/// True when the condition of `type_` is present with status `True`.
#[must_use]
pub fn is_true(conditions: &[Condition], type_: &str) -> bool {
    find(conditions, type_).is_some_and(|c| c.status == Status::True.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    crate::condition_names! {
        enum Type { Ready, Paused }
    }

    crate::condition_names! {
        enum Why { A, B, Ok, NotPaused, Paused, InvalidJson = "InvalidJSON" }
    }

    #[test]
    fn names_round_trip_and_keep_explicit_wire_forms() {
        assert_eq!(Why::InvalidJson.as_str(), "InvalidJSON");
        assert_eq!(Why::parse("InvalidJSON"), Some(Why::InvalidJson));
        assert_eq!(Why::parse("InvalidJson"), None);
        assert_eq!(Type::ALL, [Type::Ready, Type::Paused]);
        assert_eq!(Type::parse("Paused"), Some(Type::Paused));
        assert_eq!(Why::Ok.to_string(), "Ok");
    }

    fn time(s: &str) -> Time {
        Time(s.parse().unwrap())
    }

    #[test]
    fn keeps_transition_time_when_status_is_unchanged() {
        let first = merge(
            &[],
            &DesiredCondition::new(Type::Ready, Status::False, Why::A, "a"),
            &time("2026-01-01T00:00:00Z"),
            Some(1),
        );
        let second = merge(
            &first,
            &DesiredCondition::new(Type::Ready, Status::False, Why::B, "b"),
            &time("2026-01-02T00:00:00Z"),
            Some(2),
        );
        assert_eq!(second.len(), 1);
        assert_eq!(second[0].reason, "B");
        assert_eq!(second[0].observed_generation, Some(2));
        assert_eq!(second[0].last_transition_time, time("2026-01-01T00:00:00Z"));
    }

    #[test]
    fn moves_transition_time_when_status_flips() {
        let first = merge(
            &[],
            &DesiredCondition::new(Type::Ready, Status::False, Why::A, ""),
            &time("2026-01-01T00:00:00Z"),
            None,
        );
        let second = merge(
            &first,
            &DesiredCondition::new(Type::Ready, Status::True, Why::A, ""),
            &time("2026-01-03T00:00:00Z"),
            None,
        );
        assert_eq!(second[0].last_transition_time, time("2026-01-03T00:00:00Z"));
        assert!(is_true(&second, READY));
    }

    #[test]
    fn other_conditions_survive_in_place() {
        let now = time("2026-01-01T00:00:00Z");
        let list = merge_all(
            &[],
            &[
                DesiredCondition::new(Type::Paused, Status::False, Why::NotPaused, ""),
                DesiredCondition::new(Type::Ready, Status::True, Why::Ok, ""),
            ],
            &now,
            None,
        );
        let list = merge(
            &list,
            &DesiredCondition::new(Type::Paused, Status::True, Why::Paused, ""),
            &now,
            None,
        );
        assert_eq!(
            list.iter().map(|c| c.type_.as_str()).collect::<Vec<_>>(),
            [PAUSED, READY]
        );
        assert!(is_true(&list, PAUSED));
        assert!(find(&list, "Missing").is_none());
    }
}

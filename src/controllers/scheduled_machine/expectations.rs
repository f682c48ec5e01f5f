//! What this controller knows of its own objects without asking the API server.
//!
//! **Creates on their way.**
//! A reconcile woken right after the creating one (by our own status write, say) can find the
//! Machine cache without the new Machine, because the watch has not delivered it yet. Without a
//! memory of the create it would create all three objects again, get 409s and read each back.
//! As client-go's controller expectations do, a create is remembered until the cache shows the
//! Machine, or for [`PATIENCE`] at most, so a Machine deleted before its watch event arrived
//! cannot wedge the ScheduledMachine.
//!
//! **Nothing left over.** Without a Machine, a reconcile GETs the bootstrap and infrastructure
//! objects to find leftovers (a create cut short, a window closed mid-way). Once such a check
//! found nothing, only this controller's own creates can change that, so the answer is kept
//! until the next create (or a failed one) and each idle ScheduledMachine is checked once per
//! process, not at every reconcile.

use std::{
    collections::{HashMap, HashSet},
    sync::{Mutex, MutexGuard, PoisonError},
    time::{Duration, Instant},
};

/// How long a create is trusted without the cache confirming it.
pub const PATIENCE: Duration = Duration::from_secs(60);

/// Both memories, keyed by the ScheduledMachine's uid.
#[derive(Debug, Default)]
pub struct Expectations {
    /// Creates awaiting their watch event, with when they were made.
    created: Mutex<HashMap<String, Instant>>,
    /// ScheduledMachines whose bootstrap and infrastructure objects are known not to exist.
    absent: Mutex<HashSet<String>>,
}

impl Expectations {
    /// Remember that the objects of ScheduledMachine `uid` were created at `now`.
    pub fn created(&self, uid: &str, now: Instant) {
        self.lock().insert(uid.to_owned(), now);
        self.forget_absence(uid);
    }

    /// A check found neither the bootstrap nor the infrastructure object of `uid`.
    pub fn found_absent(&self, uid: &str) {
        self.absent_set().insert(uid.to_owned());
    }

    /// Whether the objects of `uid` are known not to exist.
    pub fn known_absent(&self, uid: &str) -> bool {
        self.absent_set().contains(uid)
    }

    /// Check again next time: a create was attempted (and may have got part-way), or the
    /// ScheduledMachine is gone.
    pub fn forget_absence(&self, uid: &str) {
        self.absent_set().remove(uid);
    }

    fn absent_set(&self) -> MutexGuard<'_, HashSet<String>> {
        self.absent.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether a Machine created for `uid` is still on its way to the cache at `now`.
    pub fn awaiting(&self, uid: &str, now: Instant) -> bool {
        let mut created = self.lock();
        match created.get(uid) {
            Some(at) if now.saturating_duration_since(*at) < PATIENCE => true,
            Some(_) => {
                created.remove(uid);
                false
            }
            None => false,
        }
    }

    /// The cache shows the Machine (or it was deleted on purpose): nothing to wait for.
    pub fn settled(&self, uid: &str) {
        self.lock().remove(uid);
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, Instant>> {
        self.created.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_create_is_awaited_until_seen_or_patience_runs_out() {
        let e = Expectations::default();
        let t0 = Instant::now();
        assert!(!e.awaiting("a", t0), "nothing created yet");
        e.created("a", t0);
        assert!(e.awaiting("a", t0 + Duration::from_secs(1)));
        assert!(!e.awaiting("b", t0), "per ScheduledMachine");
        e.settled("a");
        assert!(!e.awaiting("a", t0 + Duration::from_secs(1)));

        e.created("a", t0);
        assert!(
            !e.awaiting("a", t0 + PATIENCE),
            "a Machine never seen is not waited for forever"
        );
        assert!(!e.awaiting("a", t0 + Duration::from_secs(1)), "and is forgotten");
    }

    #[test]
    fn an_absence_holds_until_a_create() {
        let e = Expectations::default();
        assert!(!e.known_absent("a"), "unknown until checked");
        e.found_absent("a");
        assert!(e.known_absent("a") && !e.known_absent("b"));
        e.created("a", Instant::now());
        assert!(!e.known_absent("a"), "a create makes it worth checking again");
        e.found_absent("a");
        e.forget_absence("a");
        assert!(!e.known_absent("a"));
    }
}

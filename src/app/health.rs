//! Readiness bookkeeping: the manager is ready once every controller it runs has synced its
//! watch caches, or while it stands by without the leader lease.

use std::{
    collections::BTreeMap,
    sync::{Arc, Mutex, MutexGuard, PoisonError},
};

/// Shared readiness state, cheap to clone.
#[derive(Clone, Debug, Default)]
pub struct Readiness {
    inner: Arc<Mutex<State>>,
}

#[derive(Debug, Default)]
struct State {
    /// False until the manager has decided what it runs (controllers, or standing by).
    settled: bool,
    /// Controllers that must sync, and whether they have.
    controllers: BTreeMap<&'static str, bool>,
}

impl Readiness {
    /// Expect `controller` to report ready before the manager is.
    pub fn expect(&self, controller: &'static str) {
        self.lock().controllers.insert(controller, false);
    }

    /// Mark `controller`'s caches as synced.
    pub fn mark_ready(&self, controller: &'static str) {
        self.lock().controllers.insert(controller, true);
    }

    /// Every expected controller is registered; readiness now depends only on them.
    pub fn settle(&self) {
        self.lock().settled = true;
    }

    /// No controllers run (e.g. standing by for the lease); the manager is ready as it is.
    pub fn stand_by(&self) {
        let mut state = self.lock();
        state.controllers.clear();
        state.settled = true;
    }

    /// What the manager still waits for; empty when ready.
    #[must_use]
    pub fn pending(&self) -> Vec<&'static str> {
        let state = self.lock();
        if !state.settled {
            return vec!["start-up"];
        }
        state
            .controllers
            .iter()
            .filter(|(_, ready)| !**ready)
            .map(|(name, _)| *name)
            .collect()
    }

    /// True when nothing is pending.
    #[must_use]
    pub fn is_ready(&self) -> bool {
        self.pending().is_empty()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_only_once_settled_and_every_expected_controller_is() {
        let r = Readiness::default();
        assert_eq!(r.pending(), ["start-up"]);
        r.expect("a");
        r.expect("b");
        r.settle();
        r.mark_ready("a");
        assert_eq!(r.pending(), ["b"]);
        r.mark_ready("b");
        assert!(r.is_ready());
        r.expect("c");
        assert!(!r.is_ready());
        r.stand_by();
        assert!(r.is_ready());
    }
}

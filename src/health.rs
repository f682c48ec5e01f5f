//! Readiness bookkeeping: the manager is ready once every controller it runs has synced its
//! watch caches, or while it stands by without the leader lease.

use std::{
    collections::BTreeMap,
    sync::{Arc, Mutex, PoisonError},
};

/// Shared readiness state, cheap to clone.
#[derive(Clone, Debug, Default)]
pub struct Readiness {
    inner: Arc<Mutex<BTreeMap<&'static str, bool>>>,
}

impl Readiness {
    /// Expect `controller` to report ready before the manager is.
    pub fn expect(&self, controller: &'static str) {
        self.lock().insert(controller, false);
    }

    /// Mark `controller`'s caches as synced.
    pub fn mark_ready(&self, controller: &'static str) {
        self.lock().insert(controller, true);
    }

    /// Forget every controller (they stopped, e.g. because the lease was lost).
    pub fn clear(&self) {
        self.lock().clear();
    }

    /// Controllers still waiting for their caches.
    #[must_use]
    pub fn pending(&self) -> Vec<&'static str> {
        self.lock()
            .iter()
            .filter(|(_, ready)| !**ready)
            .map(|(name, _)| *name)
            .collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<&'static str, bool>> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_only_when_every_expected_controller_is() {
        let r = Readiness::default();
        assert!(r.pending().is_empty());
        r.expect("a");
        r.expect("b");
        r.mark_ready("a");
        assert_eq!(r.pending(), ["b"]);
        r.mark_ready("b");
        assert!(r.pending().is_empty());
        r.expect("c");
        r.clear();
        assert!(r.pending().is_empty());
    }
}

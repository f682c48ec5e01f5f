//! The clock controllers read, injectable so tests can move time to a schedule edge.

use std::sync::{
    Arc,
    atomic::{AtomicI64, Ordering},
};

use chrono::{DateTime, Utc};

/// Tells the time.
pub trait Clock: Send + Sync {
    /// The current instant.
    fn now(&self) -> DateTime<Utc>;
}

/// The system clock.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> DateTime<Utc> {
        Utc::now()
    }
}

/// The system clock shifted by an adjustable offset: time still flows, and tests can jump it
/// to just before an edge and watch the controller act when the edge arrives.
#[derive(Clone, Debug, Default)]
pub struct OffsetClock {
    offset_ms: Arc<AtomicI64>,
}

impl OffsetClock {
    /// Make `now()` return `target` at this moment (time keeps flowing from there).
    pub fn set(&self, target: DateTime<Utc>) {
        let offset = (target - Utc::now()).num_milliseconds();
        self.offset_ms.store(offset, Ordering::SeqCst);
    }
}

impl Clock for OffsetClock {
    fn now(&self) -> DateTime<Utc> {
        Utc::now() + chrono::Duration::milliseconds(self.offset_ms.load(Ordering::SeqCst))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offset_clock_jumps_and_keeps_flowing() {
        let clock = OffsetClock::default();
        let target: DateTime<Utc> = "2030-01-01T00:00:00Z".parse().unwrap();
        clock.set(target);
        let now = clock.now();
        assert!((now - target).abs() < chrono::Duration::seconds(5), "{now} vs {target}");
    }
}

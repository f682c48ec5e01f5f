//! Backing off from a host that cannot be connected to.
//!
//! Several reconcilers reach one host (its health check, every machine on it, their domain
//! checks), each on its own requeue. Without a shared memory of the last failure, a dead host
//! would see a new SSH handshake from each of them: one every few seconds. So the cache keeps
//! the failure per host and answers it again, without dialling, until the backoff has passed:
//! 1 s after the first failure, doubling up to [`MAX_DELAY`], reset by a success. A changed
//! connection key (a new URI, pin or key Secret) is tried at once: the user may have fixed it.

use std::time::Duration;

use tokio::time::Instant;

use super::{ConnKey, Failure};

/// The wait after the first failed open.
pub const FIRST_DELAY: Duration = Duration::from_secs(1);

/// The longest wait between two opens of a failing host: how late a host that came back may be
/// noticed.
pub const MAX_DELAY: Duration = Duration::from_secs(30);

/// The last failed open of one host, and when the next may be tried.
#[derive(Clone, Debug)]
pub struct Backoff {
    key: ConnKey,
    failure: Failure,
    delay: Duration,
    retry_at: Instant,
}

impl Backoff {
    /// The backoff after an open with `key` failed at `now`, following `previous` (if any).
    #[must_use]
    pub fn after(previous: Option<&Self>, key: ConnKey, failure: Failure, now: Instant) -> Self {
        let delay = previous
            .filter(|p| p.key == key)
            .map_or(FIRST_DELAY, |p| (p.delay * 2).min(MAX_DELAY));
        Self {
            key,
            failure,
            delay,
            retry_at: now + delay,
        }
    }

    /// The failure to answer again instead of opening with `key` at `now`, while backing off.
    #[must_use]
    pub fn holds(&self, key: &ConnKey, now: Instant) -> Option<&Failure> {
        (self.key == *key && now < self.retry_at).then_some(&self.failure)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::libvirt_host::HostReason;

    fn key(uri: &str) -> ConnKey {
        ConnKey {
            uri: uri.to_owned(),
            host_key_fingerprint: None,
            insecure: false,
            secret_version: Some("1".to_owned()),
        }
    }

    fn refused() -> Failure {
        Failure::new(HostReason::ConnectionFailed, "connection refused")
    }

    #[test]
    fn the_wait_doubles_from_one_second_up_to_the_cap() {
        let start = Instant::now();
        let k = key("qemu+ssh://root@127.0.0.1:2222/system");
        let mut now = start;
        let mut previous: Option<Backoff> = None;
        let mut waits = Vec::new();
        for _ in 0..8 {
            let next = Backoff::after(previous.as_ref(), k.clone(), refused(), now);
            waits.push(next.delay.as_secs());
            now = next.retry_at;
            previous = Some(next);
        }
        assert_eq!(waits, [1, 2, 4, 8, 16, 30, 30, 30]);
    }

    #[test]
    fn the_failure_is_answered_again_only_until_the_retry_time() {
        let now = Instant::now();
        let k = key("qemu+ssh://root@127.0.0.1:2222/system");
        let first = Backoff::after(None, k.clone(), refused(), now);
        assert_eq!(first.holds(&k, now), Some(&refused()));
        assert_eq!(first.holds(&k, now + Duration::from_millis(999)), Some(&refused()));
        assert_eq!(first.holds(&k, now + FIRST_DELAY), None, "the retry time has come");
    }

    #[test]
    fn a_changed_key_is_tried_at_once_and_starts_its_own_backoff() {
        let now = Instant::now();
        let old = key("qemu+ssh://root@127.0.0.1:2222/system");
        let mut fixed = old.clone();
        fixed.host_key_fingerprint = Some("SHA256:new".to_owned());
        let long = (0..6).fold(None, |p: Option<Backoff>, _| {
            Some(Backoff::after(p.as_ref(), old.clone(), refused(), now))
        });
        let long = long.as_ref();
        assert_eq!(long.and_then(|b| b.holds(&fixed, now)), None, "a new pin is tried now");
        let after_fix = Backoff::after(long, fixed, refused(), now);
        assert_eq!(after_fix.delay, FIRST_DELAY, "the new key's backoff starts over");
    }
}

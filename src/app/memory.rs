//! Gives the memory a burst freed back to the OS.
//!
//! glibc's malloc returns freed memory to the OS only from the top of each arena. The buffers
//! of a burst (1000 windows opening at once: a connection and a response per request) are freed
//! from the middle of the heap, so without help they stay resident long after the burst, about
//! 30 MB of the manager's RSS. `malloc_trim` releases every free page of every arena.
#![allow(unsafe_code, reason = "malloc_trim has no safe wrapper")]

use std::time::Duration;

use tokio_util::sync::CancellationToken;

/// How often free pages are released: often enough that RSS follows a burst's end, and cheap,
/// since a trim with little free memory only walks the free lists.
pub const TRIM_INTERVAL: Duration = Duration::from_secs(10);

/// Release free heap pages every [`TRIM_INTERVAL`] until `shutdown`.
pub fn spawn_trimmer(shutdown: CancellationToken) {
    tokio::spawn(async move {
        let mut every = tokio::time::interval(TRIM_INTERVAL);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                _ = every.tick() => trim(),
            }
        }
    });
}

/// Release the free pages of every malloc arena.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub fn trim() {
    // SAFETY: malloc_trim only inspects and shrinks the allocator's own free lists.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Other allocators (musl's, for one) return freed memory themselves.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn trim() {}

//! Orders creations when many windows open at once: higher `priority` first, then older
//! ScheduledMachines, with a bound on how many create at the same time.
//!
//! Every reconcile due at the same edge wakes in the same instant; waiters queue in a heap and
//! permits go to the best waiter whenever one is free, so a burst is served in priority order
//! instead of in whatever order the reconciles happened to be polled.

use std::{
    cmp::Reverse,
    collections::BinaryHeap,
    sync::{Arc, Mutex, PoisonError},
};

use tokio::sync::oneshot;

/// Who is waiting: ordered by priority, then age (older first), then arrival.
#[derive(PartialEq, Eq, PartialOrd, Ord)]
struct Waiter {
    priority: i32,
    created: Reverse<i64>,
    arrival: Reverse<u64>,
    #[allow(clippy::struct_field_names, reason = "the sender is the waiter's wake-up")]
    wake: OrderedSender,
}

/// A oneshot sender that takes no part in ordering.
struct OrderedSender(oneshot::Sender<Permit>);

impl PartialEq for OrderedSender {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}
impl Eq for OrderedSender {}
impl PartialOrd for OrderedSender {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for OrderedSender {
    fn cmp(&self, _: &Self) -> std::cmp::Ordering {
        std::cmp::Ordering::Equal
    }
}

#[derive(Default)]
struct State {
    free: usize,
    arrivals: u64,
    waiting: BinaryHeap<Waiter>,
}

/// The gate; cheap to clone.
#[derive(Clone)]
pub struct CreationGate {
    state: Arc<Mutex<State>>,
}

/// The right to create; returning it (drop) lets the next waiter in.
pub struct Permit {
    gate: CreationGate,
}

impl Drop for Permit {
    fn drop(&mut self) {
        self.gate.release();
    }
}

impl CreationGate {
    /// A gate letting `concurrency` (at least one) creations run at once.
    #[must_use]
    pub fn new(concurrency: usize) -> Self {
        Self {
            state: Arc::new(Mutex::new(State {
                free: concurrency.max(1),
                ..State::default()
            })),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Wait for a permit. `created` is the object's creation time in seconds (older wins ties).
    pub async fn acquire(&self, priority: i32, created: i64) -> Permit {
        let (tx, rx) = oneshot::channel();
        {
            let mut state = self.lock();
            state.arrivals += 1;
            let arrival = Reverse(state.arrivals);
            state.waiting.push(Waiter {
                priority,
                created: Reverse(created),
                arrival,
                wake: OrderedSender(tx),
            });
        }
        // Let every reconcile woken by the same edge queue up before permits are handed out.
        tokio::task::yield_now().await;
        self.dispatch();
        match rx.await {
            Ok(permit) => permit,
            // The gate never drops a queued sender without sending; stay safe regardless.
            Err(_) => Permit { gate: self.clone() },
        }
    }

    fn release(&self) {
        self.lock().free += 1;
        self.dispatch();
    }

    /// Hand free permits to the best waiters.
    fn dispatch(&self) {
        loop {
            let waiter = {
                let mut state = self.lock();
                if state.free == 0 {
                    return;
                }
                let Some(waiter) = state.waiting.pop() else { return };
                state.free -= 1;
                waiter
            };
            if let Err(permit) = waiter.wake.0.send(Permit { gate: self.clone() }) {
                // The waiter went away (its reconcile was cancelled): the permit returns on drop.
                drop(permit);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex as StdMutex;

    use super::*;

    #[tokio::test]
    async fn a_burst_is_served_by_priority_then_age() {
        let gate = CreationGate::new(1);
        let held = gate.acquire(0, 0).await;
        let order = Arc::new(StdMutex::new(Vec::new()));
        let mut tasks = Vec::new();
        for (name, priority, created) in [("low", 10, 1), ("high-new", 90, 5), ("mid", 50, 1), ("high-old", 90, 2)] {
            let (gate, order) = (gate.clone(), order.clone());
            tasks.push(tokio::spawn(async move {
                let _permit = gate.acquire(priority, created).await;
                order.lock().unwrap().push(name);
            }));
        }
        // Let all four queue behind the held permit.
        while gate.lock().waiting.len() < 4 {
            tokio::task::yield_now().await;
        }
        drop(held);
        for task in tasks {
            task.await.unwrap();
        }
        assert_eq!(*order.lock().unwrap(), ["high-old", "high-new", "mid", "low"]);
    }

    #[tokio::test]
    async fn concurrency_bounds_permits_in_flight() {
        let gate = CreationGate::new(2);
        let a = gate.acquire(1, 0).await;
        let _b = gate.acquire(1, 0).await;
        let waiting = tokio::spawn({
            let gate = gate.clone();
            async move { gate.acquire(1, 0).await }
        });
        while gate.lock().waiting.is_empty() {
            tokio::task::yield_now().await;
        }
        assert!(!waiting.is_finished());
        drop(a);
        let _c = waiting.await.unwrap();
        assert_eq!(gate.lock().free, 0);
    }
}

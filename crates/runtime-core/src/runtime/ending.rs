//! Leases whose release or destroy is in flight in this runtime.
//!
//! A release removes a lease's resource before the store says the lease ended, so an
//! operation racing it can meet the driver's "resource gone" while the row still says
//! active. Such an operation waits here for the release to finish and then reads the
//! store again, instead of calling the lease lost.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::watch;

/// One in-flight end: its serial and what a waiter watches.
type InFlight = (u64, watch::Receiver<()>);

/// The in-flight ends, keyed by lease id; shared by every view of one runtime.
#[derive(Clone, Default)]
pub(super) struct Ending {
    inner: Arc<Mutex<HashMap<String, InFlight>>>,
    next: Arc<std::sync::atomic::AtomicU64>,
}

/// Held while a lease is being ended; dropping it wakes every waiter.
pub(super) struct EndingGuard {
    ending: Ending,
    lease_id: String,
    serial: u64,
    _done: watch::Sender<()>,
}

impl Ending {
    /// Marks `lease_id` as being ended until the guard drops.
    pub(super) fn begin(&self, lease_id: &str) -> EndingGuard {
        let (done, waiter) = watch::channel(());
        let serial = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.inner
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(lease_id.to_owned(), (serial, waiter));
        EndingGuard {
            ending: self.clone(),
            lease_id: lease_id.to_owned(),
            serial,
            _done: done,
        }
    }

    /// Waits until no end of `lease_id` is in flight; returns at once when none is.
    pub(super) async fn settled(&self, lease_id: &str) {
        let waiter = self
            .inner
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(lease_id)
            .map(|(_, waiter)| waiter.clone());
        if let Some(mut waiter) = waiter {
            // Resolves with an error once the guard (the only sender) is dropped.
            while waiter.changed().await.is_ok() {}
        }
    }
}

impl Drop for EndingGuard {
    fn drop(&mut self) {
        let mut inner = self.ending.inner.lock().unwrap_or_else(|e| e.into_inner());
        // A later end of the same lease may have replaced this one; leave it.
        if inner
            .get(&self.lease_id)
            .is_some_and(|(serial, _)| *serial == self.serial)
        {
            inner.remove(&self.lease_id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn a_waiter_returns_when_the_end_finishes_and_at_once_when_none_is_in_flight() {
        let ending = Ending::default();
        ending.settled("a").await;
        let guard = ending.begin("a");
        let waiting = tokio::spawn({
            let ending = ending.clone();
            async move { ending.settled("a").await }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!waiting.is_finished(), "waits while the end is in flight");
        drop(guard);
        tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .unwrap()
            .unwrap();
        assert!(ending.inner.lock().unwrap().is_empty());
    }

    #[tokio::test]
    async fn an_earlier_guard_dropping_late_keeps_a_later_end_registered() {
        let ending = Ending::default();
        let first = ending.begin("a");
        let second = ending.begin("a");
        drop(first);
        assert!(ending.inner.lock().unwrap().contains_key("a"));
        drop(second);
        assert!(ending.inner.lock().unwrap().is_empty());
    }
}

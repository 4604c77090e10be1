//! Dropping a runtime stops its pools, best-effort: a host that returns early (`?`) after
//! starting pools must not leave their ready leases (containers, sandboxes) held until
//! `envrt gc`. A drop cannot await, so the pools' leases are released on the tokio runtime
//! the drop happens in: on a multi-thread runtime the drop waits for that
//! ([`tokio::task::block_in_place`]), which is what a plain `?` return from
//! `#[tokio::main]` gets; on a current-thread runtime the release is only spawned (it runs
//! if that runtime keeps going); outside any runtime nothing can run and the leases are
//! left to `envrt gc` (their holder is gone). Leases already handed out are never touched.

use std::sync::atomic::Ordering;
use std::sync::{Arc, RwLock};

use tokio::runtime::{Handle, RuntimeFlavor};

use super::pool::Pool;
use super::{EnvironmentRuntime, pool};

impl Drop for EnvironmentRuntime {
    fn drop(&mut self) {
        // Nothing reaches a lease through a runtime that is gone.
        self.exposed.close_all();
        let pools = self.pools.drain();
        if pools.is_empty() {
            return;
        }
        for pool in &pools {
            pool.stopped.store(true, Ordering::SeqCst);
            pool.wake.notify_one();
        }
        let Ok(handle) = Handle::try_current() else { return };
        // What releasing needs, moved into a runtime of its own (with no pools, so its
        // own drop does nothing).
        let rest = EnvironmentRuntime {
            drivers: RwLock::new(self.drivers.read().unwrap_or_else(|e| e.into_inner()).clone()),
            store: Arc::clone(&self.store),
            pools: pool::Pools::default(),
            exposed: super::expose::Exposed::default(),
            ending: self.ending.clone(),
            tenant: self.tenant.clone(),
        };
        let work = async move {
            rest.stop_these(pools).await;
        };
        match handle.runtime_flavor() {
            RuntimeFlavor::MultiThread => tokio::task::block_in_place(|| handle.block_on(work)),
            _ => drop(handle.spawn(work)),
        }
    }
}

/// Whether `pool`'s filler is the task running now (a drop of the last handle inside the
/// filler itself must not wait for the filler).
pub(super) fn is_current_filler(pool: &Pool) -> bool {
    let current = tokio::task::try_id();
    let filler = pool.filler.lock().unwrap_or_else(|e| e.into_inner());
    current.is_some() && filler.as_ref().map(|f| f.id()) == current
}

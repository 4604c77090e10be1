//! Pause and unpause (contract section 8, "Pause and unpause"): the facade calls, and the
//! lease-metadata marker that records a paused lease in the store.
//!
//! A paused lease keeps its status `active` (it is live: release, destroy, listing and
//! its expiry work as for any active lease) and carries the metadata key
//! [`PAUSED_KEY`], the time of the pause in milliseconds since the epoch. The gate refuses
//! every operation that needs an active lease while the key is there (`Lease "{id}" is
//! paused.`); release and destroy drop it, since they end every process of the lease.

use crate::error::RuntimeError;
use crate::model::{Lease, Timestamp};

use super::EnvironmentRuntime;
use super::gate::{Operation, gate};

/// Lease metadata key of a paused lease: when it was paused (milliseconds since the
/// epoch). Written and removed by the facade only.
pub const PAUSED_KEY: &str = "envrtPausedAt";

/// Whether the lease is paused.
pub fn is_paused(lease: &Lease) -> bool {
    lease.metadata.contains_key(PAUSED_KEY)
}

/// When the lease was paused, if it is.
pub fn paused_at(lease: &Lease) -> Option<Timestamp> {
    lease.metadata.get(PAUSED_KEY).and_then(|v| v.as_u64()).map(Timestamp)
}

impl EnvironmentRuntime {
    /// Stops every process of an active lease without ending it (the driver's
    /// [`PauseLease`](crate::driver::PauseLease) group; without it `Environment driver
    /// "{key}" does not support pause.`). Pausing a paused lease changes nothing.
    pub async fn pause_lease(&self, lease_id: &str) -> Result<Lease, RuntimeError> {
        self.traced("pause_lease", lease_id, async {
            let resolved = self.resolve(lease_id).await?;
            let pause = gate(&resolved, Operation::Pause, |d| d.as_pause(), |_| true).await?;
            let mut lease = super::idle::current(&resolved).await?;
            if is_paused(&lease) {
                return Ok(lease);
            }
            pause.pause_lease(&resolved.context).await?;
            super::idle::touch_as(&resolved, true).await?;
            let now = Timestamp::now();
            lease.metadata.insert(PAUSED_KEY.into(), now.0.into());
            lease.last_used_at = now;
            self.store.put_lease(&lease).await?;
            Ok(lease)
        })
        .await
    }

    /// Continues every process [`pause_lease`](Self::pause_lease) stopped. Unpausing a
    /// lease that is not paused changes nothing.
    pub async fn unpause_lease(&self, lease_id: &str) -> Result<Lease, RuntimeError> {
        self.traced("unpause_lease", lease_id, async {
            let resolved = self.resolve(lease_id).await?;
            let pause = gate(&resolved, Operation::Pause, |d| d.as_pause(), |_| true).await?;
            // The gate may have just recorded a pause the idle timeout made.
            let mut lease = super::idle::current(&resolved).await?;
            if !is_paused(&lease) {
                return Ok(lease);
            }
            pause.unpause_lease(&resolved.context).await?;
            super::idle::touch_as(&resolved, false).await?;
            lease.metadata.remove(PAUSED_KEY);
            lease.last_used_at = Timestamp::now();
            self.store.put_lease(&lease).await?;
            Ok(lease)
        })
        .await
    }
}

//! Pause and unpause of the faulty driver: the local driver's own, or one of two broken
//! promises (a pause that stops nothing, an unpause that continues nothing).

use async_trait::async_trait;
use envrt_runtime_core::{DriverError, LeaseContext, PauseLease};

use super::{Fault, Faulty};

#[async_trait]
impl PauseLease for Faulty {
    async fn pause_lease(&self, context: &LeaseContext) -> Result<(), DriverError> {
        if self.has(Fault::PauseStopsNothing) {
            return Ok(());
        }
        self.inner.pause_lease(context).await
    }

    async fn unpause_lease(&self, context: &LeaseContext) -> Result<(), DriverError> {
        if self.has(Fault::UnpauseContinuesNothing) {
            return Ok(());
        }
        self.inner.unpause_lease(context).await
    }
}

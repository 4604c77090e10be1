//! Fork of the local driver: each copy is a new lease whose workspace is a copy of the
//! source's, made with the templates' tree copy (files cloned with `FICLONE` where the
//! file system shares blocks, copied otherwise). The first copy is taken from the source;
//! the others from the first, which no process touches yet, so every copy holds the same
//! state even while the source's commands keep writing.

use async_trait::async_trait;
use envrt_driver_api::{AcquireInput, DriverError, ForkLease, LeaseContext, LeaseGrant};

use crate::LocalDriver;

#[async_trait]
impl ForkLease for LocalDriver {
    async fn fork_lease(&self, source: &LeaseContext, copies: &[AcquireInput]) -> Result<Vec<LeaseGrant>, DriverError> {
        let mut seed = self.live_workspace(source)?;
        let mut grants = Vec::with_capacity(copies.len());
        for (index, input) in copies.iter().enumerate() {
            match self.acquire_seeded(input, Some(&seed)) {
                Ok(grant) => grants.push(grant),
                Err(error) => {
                    // All or nothing: end the copies made so far (their watchdogs too).
                    for made in &copies[..index] {
                        let _ = self.remove_workspace(&made.lease_id).await;
                    }
                    return Err(error);
                }
            }
            if index == 0 {
                seed = self.workspace_of(&input.lease_id)?;
            }
        }
        Ok(grants)
    }
}

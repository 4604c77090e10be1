//! Sync over the worker: `environmentSyncIn` and `environmentSyncOut`, each checked on
//! the host first (post-upload cwds; sync-out targets held until the worker is done).

use async_trait::async_trait;
use envrt_driver_api::{DriverError, FileSync, LeaseContext, SyncOperation, SyncResult};

use super::SandboxDriver;
use crate::protocol::methods;

#[async_trait]
impl FileSync for SandboxDriver {
    async fn sync_in(&self, context: &LeaseContext, operations: &[SyncOperation]) -> Result<SyncResult, DriverError> {
        self.sync(methods::SYNC_IN, context, operations).await
    }

    async fn sync_out(&self, context: &LeaseContext, operations: &[SyncOperation]) -> Result<SyncResult, DriverError> {
        // The worker writes into hold directories; links are checked here before anything
        // reaches a target (see `sync_out`).
        let (held_operations, holds) = crate::host::driver::sync_out::Holds::prepare(operations)?;
        match self.sync(methods::SYNC_OUT, context, &held_operations).await {
            Ok(result) => holds.commit().map(|()| result),
            Err(e) => Err(holds.explain(e)),
        }
    }

    fn supports_sync(&self, _context: &LeaseContext) -> bool {
        self.advertises(methods::SYNC_IN) && self.advertises(methods::SYNC_OUT)
    }
}

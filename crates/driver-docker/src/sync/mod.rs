//! Native sync (contract section 6) through the archive API: `sync_in` (host →
//! container), `sync_out` (container → host) and the tar streams both build and read
//! (`archive`).

pub(crate) mod archive;
pub(crate) mod sync_in;
pub(crate) mod sync_out;

use async_trait::async_trait;
use envrt_driver_api::{DriverError, FileSync, LeaseContext, SyncOperation, SyncResult};

use crate::DockerDriver;

#[async_trait]
impl FileSync for DockerDriver {
    async fn sync_in(&self, context: &LeaseContext, operations: &[SyncOperation]) -> Result<SyncResult, DriverError> {
        sync_in::sync_in(self, context, operations).await
    }

    async fn sync_out(&self, context: &LeaseContext, operations: &[SyncOperation]) -> Result<SyncResult, DriverError> {
        sync_out::sync_out(self, context, operations).await
    }
}

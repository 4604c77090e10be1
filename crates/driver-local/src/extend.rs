//! Moving a local lease's expiry (contract section 8, `extend`): its expiry watchdog is
//! ended and a new one started for the new time, with the same cgroup, workspace and
//! policy. Should the new one fail to start, the old expiry is armed again, so a lease
//! never loses its expiry.

use async_trait::async_trait;
use envrt_driver_api::{DriverError, ExtendLease, LeaseContext, LeasePolicy, Timestamp};

use crate::LocalDriver;
use crate::expiry;
use crate::workspace::lease_dir_name;

#[async_trait]
impl ExtendLease for LocalDriver {
    async fn extend_lease(&self, context: &LeaseContext, expires_at: Timestamp) -> Result<Timestamp, DriverError> {
        let workspace = self.live_workspace(context)?;
        let name = lease_dir_name(&context.lease.id)?;
        let pid_file = expiry::pid_file(self.root(), &name);
        let cgroup = self.containment_mode().lease_dir(&context.lease.id);
        let watch = |at| expiry::Watch {
            at,
            cgroup: cgroup.as_deref(),
            workspace: &workspace,
            remove: context.lease.lease_policy != LeasePolicy::ReuseByEnvironment,
            pid_file: &pid_file,
        };
        expiry::stop(&pid_file, &workspace);
        if let Err(error) = expiry::start(&watch(expires_at)) {
            if let Some(old) = context.lease.expires_at {
                expiry::start(&watch(old))?;
            }
            return Err(error);
        }
        Ok(expires_at)
    }
}

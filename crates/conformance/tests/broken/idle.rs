//! Idle timeouts of the faulty driver: the local driver's own, or one of two broken
//! promises (an idle timeout armed with
//! another length than the one asked for, a keep-alive that resets nothing).

use std::time::Duration;

use async_trait::async_trait;
use envrt_runtime_core::{DriverError, IdleTimeout, LeaseContext};

use super::{Fault, Faulty};

#[async_trait]
impl IdleTimeout for Faulty {
    async fn arm_idle(&self, context: &LeaseContext, idle: Duration) -> Result<(), DriverError> {
        if self.has(Fault::IdleNeverEnds) {
            return self.inner.arm_idle(context, Duration::from_secs(30 * 24 * 3600)).await;
        }
        self.inner.arm_idle(context, idle).await
    }

    async fn touch_idle(&self, context: &LeaseContext, paused: bool) -> Result<(), DriverError> {
        if self.has(Fault::KeepAliveResetsNothing) {
            return Ok(());
        }
        self.inner.touch_idle(context, paused).await
    }
}

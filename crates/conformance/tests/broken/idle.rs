//! Idle timeouts of the faulty driver: the local driver's own, or one of two broken
//! promises (an idle timeout armed with
//! another length than the one asked for, a keep-alive that resets nothing).

use std::time::Duration;

use async_trait::async_trait;
use envrt_runtime_core::{DriverError, IdleClock, IdleTimeout, LeaseContext, OnIdle};

use super::{Fault, Faulty};

#[async_trait]
impl IdleTimeout for Faulty {
    async fn arm_idle(&self, context: &LeaseContext, idle: Duration, on_idle: OnIdle) -> Result<(), DriverError> {
        if self.has(Fault::IdleNeverEnds) {
            return self
                .inner
                .arm_idle(context, Duration::from_secs(30 * 24 * 3600), on_idle)
                .await;
        }
        self.inner.arm_idle(context, idle, on_idle).await
    }

    async fn touch_idle(&self, context: &LeaseContext, paused: bool) -> Result<IdleClock, DriverError> {
        if self.has(Fault::KeepAliveResetsNothing) {
            return Ok(IdleClock::Reset);
        }
        self.inner.touch_idle(context, paused).await
    }
}

//! Opening a duplex channel on a sandbox lease: the worker's `duplexChannelOpen`, with a
//! route the host's channel picks.

use async_trait::async_trait;
use envrt_driver_api::{DriverError, DuplexChannel, DuplexChannels, LeaseContext};

use super::SandboxDriver;
use crate::host::duplex::channel;
use crate::protocol::duplex::OpenParams;
use crate::protocol::methods;

#[async_trait]
impl DuplexChannels for SandboxDriver {
    async fn open_duplex_channel(
        &self,
        context: &LeaseContext,
        command: &[String],
    ) -> Result<Box<dyn DuplexChannel>, DriverError> {
        self.require(methods::DUPLEX_OPEN)?;
        if command.first().is_none_or(String::is_empty) {
            return Err(DriverError::invalid(
                "a duplex command needs a program (argv element 0)",
            ));
        }
        let lease = &context.lease;
        let provider_lease_id = lease
            .provider_lease_id
            .clone()
            .ok_or_else(|| DriverError::invalid("the lease has no provider lease id"))?;
        let params = OpenParams {
            host_route_id: String::new(), // the channel picks it
            driver_key: self.key.clone(),
            company_id: lease.company_id.clone(),
            environment_id: lease.environment_id.clone().unwrap_or_default(),
            provider_lease_id,
            command: command.to_vec(),
        };
        let channel = channel::open(&self.supervisor, params, &lease.company_id).await?;
        Ok(Box::new(channel))
    }
}

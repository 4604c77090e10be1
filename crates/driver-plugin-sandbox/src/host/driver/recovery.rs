//! The recovery group over the worker: inventory is the worker's own list of its leases
//! (the `envrtListLeases` extension), reaping one destroys it at the worker. Offered only
//! while the live worker advertises the extension (see `as_recovery`).

use async_trait::async_trait;
use envrt_driver_api::{DriverError, InventoryItem, Lease, Recovery};

use super::SandboxDriver;
use crate::host::error::SandboxError;
use crate::protocol::environment::{DriverBase, EndLeaseParams, ListLeasesParams, ListLeasesResult};
use crate::protocol::methods;

/// The inventory kind of a worker's lease.
pub(super) const LEASE_KIND: &str = "sandbox-lease";

impl SandboxDriver {
    fn recovery_base(&self) -> DriverBase {
        DriverBase {
            driver_key: self.key.clone(),
            ..DriverBase::default()
        }
    }
}

#[async_trait]
impl Recovery for SandboxDriver {
    async fn inventory(&self) -> Result<Vec<InventoryItem>, DriverError> {
        self.require(methods::LIST_LEASES)?;
        let params = ListLeasesParams {
            base: self.recovery_base(),
        };
        let value = self.call_unscoped(methods::LIST_LEASES, &params).await?;
        let list: ListLeasesResult = serde_json::from_value(value).map_err(|e| SandboxError::InvalidResult {
            method: methods::LIST_LEASES.into(),
            message: e.to_string(),
        })?;
        Ok(list
            .leases
            .into_iter()
            .map(|lease| InventoryItem {
                kind: LEASE_KIND.into(),
                id: lease.provider_lease_id,
                lease_id: lease.envrt_lease_id,
            })
            .collect())
    }

    async fn reap(&self, item: &InventoryItem) -> Result<(), DriverError> {
        self.require(methods::DESTROY_LEASE)?;
        let params = EndLeaseParams {
            base: self.recovery_base(),
            provider_lease_id: Some(item.id.clone()),
            lease_metadata: None,
            cancel_active_work: Some(true),
        };
        self.call_unscoped(methods::DESTROY_LEASE, &params).await?;
        Ok(())
    }

    /// Lost when the worker's own list of its leases no longer has it.
    async fn lost(&self, lease: &Lease) -> Result<bool, DriverError> {
        let Some(resource) = lease.provider_lease_id.as_deref().filter(|id| !id.is_empty()) else {
            return Ok(false);
        };
        Ok(!self.inventory().await?.iter().any(|item| item.id == resource))
    }
}

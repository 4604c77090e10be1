//! The recovery group: the lease directories on every host this driver knows (its default
//! target, [`SshConfig::known_targets`](crate::SshConfig::known_targets) and every host it
//! has connected to), and removing one whose lease is over.

use std::sync::Arc;

use async_trait::async_trait;
use envrt_driver_api::{DriverError, InventoryItem, Lease, Recovery};

use crate::connection::Host;
use crate::{SshDriver, remote};

impl SshDriver {
    fn known_hosts(&self) -> Vec<Arc<Host>> {
        for target in self.config.target.iter().chain(&self.config.known_targets) {
            self.host(target);
        }
        self.hosts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .cloned()
            .collect()
    }
}

/// `{user@host:port}:{lease dir}`.
fn item_id(host: &Host, dir: &str) -> String {
    format!("{}:{dir}", host.target().shown())
}

#[async_trait]
impl Recovery for SshDriver {
    async fn inventory(&self) -> Result<Vec<InventoryItem>, DriverError> {
        let mut items = Vec::new();
        for host in self.known_hosts() {
            let out = host
                .run_ok("list the leases", &remote::list_leases(&self.config.root))
                .await?;
            for dir in String::from_utf8_lossy(&out).lines().filter(|l| !l.is_empty()) {
                let lease_id = dir
                    .rsplit('/')
                    .next()
                    .and_then(|n| n.strip_prefix("lease-"))
                    .map(str::to_owned);
                items.push(InventoryItem {
                    kind: "workspace".into(),
                    id: item_id(&host, dir),
                    lease_id,
                });
            }
        }
        Ok(items)
    }

    async fn reap(&self, item: &InventoryItem) -> Result<(), DriverError> {
        for host in self.known_hosts() {
            let prefix = format!("{}:", host.target().shown());
            if let Some(dir) = item.id.strip_prefix(&prefix) {
                let name = dir.rsplit('/').next().unwrap_or_default();
                if !dir.starts_with('/') || !name.starts_with("lease-") {
                    return Err(DriverError::invalid(format!(
                        "{:?} is not an ssh lease directory",
                        item.id
                    )));
                }
                host.run_ok("remove the lease", &remote::remove_lease(dir)).await?;
                self.drop_forwards(&host, dir).await;
                return Ok(());
            }
        }
        Err(DriverError::invalid(format!(
            "{:?} names no host this driver knows",
            item.id
        )))
    }

    async fn kill_leftovers(&self, lease: &Lease) -> Result<usize, DriverError> {
        let context = envrt_driver_api::LeaseContext {
            lease: lease.clone(),
            environment: None,
        };
        if let Some(place) = self.find(&context).await? {
            place
                .host
                .run_ok("stop the lease's commands", &remote::kill_lease(&place.lease_dir))
                .await?;
            self.drop_forwards(&place.host, &place.lease_dir).await;
        }
        Ok(0)
    }

    /// Lost when its remote workspace directory is gone (asked of its host; a host that
    /// cannot be reached is an error).
    async fn lost(&self, lease: &Lease) -> Result<bool, DriverError> {
        let context = envrt_driver_api::LeaseContext {
            lease: lease.clone(),
            environment: None,
        };
        let place = match self.place(&context).await {
            Ok(place) => place,
            Err(DriverError::ResourceGone { .. }) => return Ok(true),
            Err(e) => return Err(e),
        };
        let out = place
            .host
            .run_ok(
                "look for the lease's workspace",
                &remote::workspace_present(&place.workspace),
            )
            .await?;
        Ok(out.trim_ascii() == b"gone")
    }
}

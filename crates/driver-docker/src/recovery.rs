//! Recovery: the containers this driver owns (found by label, whatever process made
//! them), and removing those no active lease owns after a crash. The recovery group
//! ([`Recovery`]) lists them as items of kind [`KIND_CONTAINER`] and reaps one by removing
//! it; the driver's configured extra labels scope both, so a driver labelled with one
//! state directory never sees another's containers.

use std::collections::HashMap;

use async_trait::async_trait;
use bollard::query_parameters::{ListContainersOptionsBuilder, RemoveContainerOptionsBuilder};
use envrt_driver_api::{DriverError, InventoryItem, Lease, LeaseContext, Recovery};

use crate::driver::{DockerDriver, LABEL_LEASE_ID, LABEL_MANAGED};
use crate::engine::{has_status, is_not_found};

/// The kind of a container item.
pub const KIND_CONTAINER: &str = "container";

#[async_trait]
impl Recovery for DockerDriver {
    async fn inventory(&self) -> Result<Vec<InventoryItem>, DriverError> {
        Ok(self
            .managed_containers()
            .await?
            .into_iter()
            .map(|(id, lease)| InventoryItem {
                kind: KIND_CONTAINER.to_owned(),
                id,
                lease_id: Some(lease),
            })
            .collect())
    }

    async fn reap(&self, item: &InventoryItem) -> Result<(), DriverError> {
        if item.kind != KIND_CONTAINER {
            return Err(DriverError::invalid(format!(
                "the Docker driver has no {} items",
                item.kind
            )));
        }
        // Only a container of this driver's scope (labels), never one named by mistake.
        let ours = self
            .managed_containers()
            .await?
            .into_iter()
            .find(|(id, _)| *id == item.id);
        match ours {
            Some((_, lease)) => {
                self.remove(&item.id).await?;
                self.remove_lease_dirs(&lease);
                Ok(())
            }
            None => Ok(()),
        }
    }

    /// Lost when the engine says its container does not exist (or no longer carries the
    /// lease's label).
    async fn lost(&self, lease: &Lease) -> Result<bool, DriverError> {
        if lease.provider_lease_id.as_deref().is_none_or(str::is_empty) {
            return Ok(false);
        }
        let context = LeaseContext {
            lease: lease.clone(),
            environment: None,
        };
        Ok(self.owned_container(&context).await?.is_none())
    }
}

impl DockerDriver {
    fn scope_filters(&self) -> HashMap<String, Vec<String>> {
        let mut labels = vec![format!("{LABEL_MANAGED}=true")];
        labels.extend(self.config.extra_labels.iter().map(|(k, v)| format!("{k}={v}")));
        HashMap::from([("label".to_owned(), labels)])
    }

    /// Every container of this driver (carrying [`LABEL_MANAGED`] and the configured extra
    /// labels), as (container id, owning lease id). An engine ghost is left out: a `dead`
    /// entry the engine lists but answers "no such container" for, which Docker 20.10 can
    /// keep listing after a restart although nothing of it is left.
    pub async fn managed_containers(&self) -> Result<Vec<(String, String)>, DriverError> {
        let list = self.containers_matching(&self.scope_filters()).await?;
        let mut owned = Vec::with_capacity(list.len());
        for c in list {
            let (Some(id), Some(lease)) = (c.id, c.labels.and_then(|l| l.get(LABEL_LEASE_ID).cloned())) else {
                continue;
            };
            let dead = c.state == Some(bollard::models::ContainerSummaryStateEnum::DEAD);
            if dead && self.is_ghost(&id).await? {
                tracing::debug!(container = %id, "the engine lists a container it no longer has; left out");
                continue;
            }
            owned.push((id, lease));
        }
        Ok(owned)
    }

    /// Whether the engine answers "no such container" for `id` although it listed it: a
    /// ghost, which Docker 20.10 (at least) can keep in its listing after a restart that
    /// found an `AutoRemove` container dead: its restore removes the container (directory,
    /// layer, task) on one path while another writes it back into the listing's view as
    /// `dead`. Nothing of it is left to remove (every removal answers 404) and it goes with
    /// the engine's next start (moby/moby#51692 describes the same class). A removal of it
    /// is no removal, so recovery and `gc` neither report it nor fail on it.
    async fn is_ghost(&self, id: &str) -> Result<bool, DriverError> {
        match self
            .engine
            .retry(|| self.engine.docker.inspect_container(id, None))
            .await
        {
            Ok(_) => Ok(false),
            Err(e) if is_not_found(&e) => Ok(true),
            Err(e) => Err(self.engine.error("inspecting a container", e)),
        }
    }

    /// Removes every container of this driver whose lease is not in `active_lease_ids`
    /// (pass every lease whose container must stay: active, retained and reusable ones) —
    /// the recovery after a crash. Returns the removed container ids.
    pub async fn reap_orphans(&self, active_lease_ids: &[String]) -> Result<Vec<String>, DriverError> {
        let mut removed = Vec::new();
        for (id, lease) in self.managed_containers().await? {
            if !active_lease_ids.contains(&lease) {
                self.remove(&id).await?;
                self.remove_lease_dirs(&lease);
                removed.push(id);
            }
        }
        Ok(removed)
    }

    /// Removes a container by force with its anonymous volumes; a missing one is fine. It
    /// returns once the engine no longer lists the container ([`REMOVAL_WAIT`] at most,
    /// asking again every 100 ms): an engine restarted under an `AutoRemove` container that
    /// died with it removes that container itself after its API is back, and meanwhile
    /// answers a removal with 409 ("already in progress") or 404 while still listing it; a
    /// release that called either done left the container behind when that removal was
    /// slow or failed. Past the bound it fails with the engine's last answer.
    pub(crate) async fn remove(&self, id: &str) -> Result<(), DriverError> {
        crate::idle::stop(id);
        let options = RemoveContainerOptionsBuilder::default().force(true).v(true).build();
        let deadline = tokio::time::Instant::now() + REMOVAL_WAIT;
        loop {
            let still = match self
                .engine
                .retry(|| self.engine.docker.remove_container(id, Some(options.clone())))
                .await
            {
                Ok(()) => None,
                Err(e) if is_not_found(&e) => None,
                Err(e) if has_status(&e, 409) => Some(e),
                Err(e) => return Err(self.engine.error("removing a container", e)),
            };
            let listed = still.is_some() || self.listed(id).await?;
            if !listed {
                return Ok(());
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(match still {
                    Some(e) => self.engine.error("removing a container", e),
                    None => DriverError::other(format!(
                        "the Docker engine still lists container {id} {} s after its removal",
                        REMOVAL_WAIT.as_secs()
                    )),
                });
            }
            // The engine has no event for a removal's end that this could wait on.
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    }

    /// Every container the engine lists under `filters`, in any state.
    async fn containers_matching(
        &self,
        filters: &HashMap<String, Vec<String>>,
    ) -> Result<Vec<bollard::models::ContainerSummary>, DriverError> {
        let options = ListContainersOptionsBuilder::default()
            .all(true)
            .filters(filters)
            .build();
        self.engine
            .retry(|| self.engine.docker.list_containers(Some(options.clone())))
            .await
            .map_err(|e| self.engine.error("listing containers", e))
    }

    /// Whether the engine lists container `id` (in any state, a removal in progress
    /// included).
    async fn listed(&self, id: &str) -> Result<bool, DriverError> {
        let filters = HashMap::from([("id".to_owned(), vec![id.to_owned()])]);
        let list = self.containers_matching(&filters).await?;
        Ok(list
            .iter()
            .any(|c| c.id.as_deref().is_some_and(|c| c.starts_with(id) || id.starts_with(c))))
    }
}

/// How long [`DockerDriver::remove`] waits for a removal the engine already has in
/// progress before it fails with the engine's answer.
const REMOVAL_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

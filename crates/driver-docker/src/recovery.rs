//! Recovery: the containers this driver owns (found by label, whatever process made
//! them), and removing those no active lease owns after a crash.

use std::collections::HashMap;

use bollard::query_parameters::{ListContainersOptionsBuilder, RemoveContainerOptionsBuilder};
use envrt_runtime_core::DriverError;

use crate::driver::{DockerDriver, LABEL_LEASE_ID, LABEL_MANAGED};
use crate::engine::{has_status, is_not_found};

impl DockerDriver {
    fn scope_filters(&self) -> HashMap<String, Vec<String>> {
        let mut labels = vec![format!("{LABEL_MANAGED}=true")];
        labels.extend(self.config.extra_labels.iter().map(|(k, v)| format!("{k}={v}")));
        HashMap::from([("label".to_owned(), labels)])
    }

    /// Every container of this driver (carrying [`LABEL_MANAGED`] and the configured extra
    /// labels), as (container id, owning lease id).
    pub async fn managed_containers(&self) -> Result<Vec<(String, String)>, DriverError> {
        let options = ListContainersOptionsBuilder::default()
            .all(true)
            .filters(&self.scope_filters())
            .build();
        let list = self
            .engine
            .retry(|| self.engine.docker.list_containers(Some(options.clone())))
            .await
            .map_err(|e| self.engine.error("listing containers", e))?;
        Ok(list
            .into_iter()
            .filter_map(|c| {
                let lease = c.labels.as_ref()?.get(LABEL_LEASE_ID)?.clone();
                Some((c.id?, lease))
            })
            .collect())
    }

    /// Removes every container of this driver whose lease is not in `active_lease_ids`
    /// (pass every lease whose container must stay: active, retained and reusable ones) —
    /// the recovery after a crash. Returns the removed container ids.
    pub async fn reap_orphans(&self, active_lease_ids: &[String]) -> Result<Vec<String>, DriverError> {
        let mut removed = Vec::new();
        for (id, lease) in self.managed_containers().await? {
            if !active_lease_ids.contains(&lease) {
                self.remove(&id).await?;
                removed.push(id);
            }
        }
        Ok(removed)
    }

    /// Removes a container by force with its anonymous volumes; a missing one is fine.
    pub(crate) async fn remove(&self, id: &str) -> Result<(), DriverError> {
        let options = RemoveContainerOptionsBuilder::default().force(true).v(true).build();
        match self
            .engine
            .retry(|| self.engine.docker.remove_container(id, Some(options.clone())))
            .await
        {
            Ok(()) => Ok(()),
            Err(e) if is_not_found(&e) => Ok(()),
            // 409: removal already in progress.
            Err(e) if has_status(&e, 409) => Ok(()),
            Err(e) => Err(self.engine.error("removing a container", e)),
        }
    }
}

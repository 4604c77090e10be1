//! Fork of the Docker driver: the source container is committed once, paused for the
//! commit (the templates' capture path), to an image the copies share; each copy is a
//! new container of that image, created and started as any lease's. The image is no
//! template: its tag is removed as soon as the copies run, so it is never listed, and the
//! engine keeps it (untagged, labelled as this driver's) until the last copy's container
//! is removed, when the templates' prune removes it.

use async_trait::async_trait;
use bollard::query_parameters::RemoveImageOptionsBuilder;
use envrt_driver_api::{AcquireInput, DriverError, EnvironmentDriver, ForkLease, LeaseContext, LeaseGrant};

use crate::driver::DockerDriver;
use crate::engine::is_not_found;

#[async_trait]
impl ForkLease for DockerDriver {
    async fn fork_lease(&self, source: &LeaseContext, copies: &[AcquireInput]) -> Result<Vec<LeaseGrant>, DriverError> {
        let label = format!("fork of lease {}", source.lease.id);
        let image = envrt_driver_api::Templates::capture_template(self, source, Some(&label)).await?;
        let mut grants: Vec<LeaseGrant> = Vec::with_capacity(copies.len());
        let mut failure = None;
        for input in copies {
            let mut input = input.clone();
            input.template = Some(image.clone());
            match self.acquire_lease(&input).await {
                Ok(mut grant) => {
                    // Its release then prunes the shared image once no container runs it.
                    grant
                        .metadata
                        .insert(envrt_driver_api::SOURCE_TEMPLATE_KEY.into(), image.id.clone().into());
                    grants.push(grant);
                }
                Err(error) => {
                    failure = Some(error);
                    break;
                }
            }
        }
        let untagged = self.untag(&image.id).await;
        let failure = failure.or(untagged.err());
        if let Some(error) = failure {
            // All or nothing: end the copies made so far, then the image nobody runs.
            for (input, grant) in copies.iter().zip(&grants) {
                if let Some(container) = &grant.provider_lease_id {
                    let _ = self.remove(container).await;
                }
                self.remove_lease_dirs(&input.lease_id);
            }
            let _ = self.untag(&image.id).await;
            let _ = self.prune_template_images().await;
            return Err(error);
        }
        Ok(grants)
    }
}

impl DockerDriver {
    /// Removes the tag of the fork image `id` (forced: the copies' containers run it; the
    /// engine keeps the image for them). Already gone is success.
    async fn untag(&self, id: &str) -> Result<(), DriverError> {
        let options = RemoveImageOptionsBuilder::default().force(true).build();
        let image = crate::templates::template_image(id);
        match self
            .engine
            .retry(|| self.engine.docker.remove_image(&image, Some(options.clone()), None))
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if is_not_found(&e) => Ok(()),
            Err(e) => Err(self.engine.error("removing an image", e)),
        }
    }
}

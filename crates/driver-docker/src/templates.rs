//! Templates of the Docker driver: a template is the lease's container committed to the
//! image `envrt-template:{id}` (kind `image`), labelled as this driver's
//! ([`LABEL_MANAGED`], the configured extra labels) and with [`LABEL_TEMPLATE`] and its
//! environment. A lease started from it runs that image instead of the environment's.
//!
//! A commit captures the container's file system, not its volumes: with `readOnlyRootFs`
//! the workspace is a volume, so such leases refuse to be captured rather than produce a
//! template without their files; so do leases with a bind-mounted workspace
//! ([`crate::WorkspaceMount::Bind`]), and a lease started from a template never binds
//! its workspace (the bind would hide the image's).

use std::collections::HashMap;

use async_trait::async_trait;
use bollard::models::ContainerConfig;
use bollard::query_parameters::{CommitContainerOptionsBuilder, ListImagesOptionsBuilder, RemoveImageOptionsBuilder};
use envrt_driver_api::template::{check_template_id, new_template_id};
use envrt_driver_api::{DriverError, Environment, JsonMap, LeaseContext, TemplateRef, Templates, Timestamp};

use crate::config::EnvConfig;
use crate::driver::{DockerDriver, LABEL_COMPANY_ID, LABEL_EXPIRES_AT, LABEL_LEASE_ID, LABEL_MANAGED};
use crate::engine::{has_status, is_not_found};

/// The repository of every template image; the tag is the template id.
pub const TEMPLATE_REPOSITORY: &str = "envrt-template";
/// Label: the template id, on template images.
pub const LABEL_TEMPLATE: &str = "envrt.template";
/// Label: the environment a template was captured in.
pub const LABEL_TEMPLATE_ENVIRONMENT: &str = "envrt.template.environment";
/// Label: the template's human label (empty when none).
pub const LABEL_TEMPLATE_LABEL: &str = "envrt.template.label";
/// Label: the lease the template was captured from.
pub const LABEL_TEMPLATE_SOURCE: &str = "envrt.template.source-lease";
/// Label: when the template was captured (milliseconds since the epoch).
pub const LABEL_TEMPLATE_CREATED: &str = "envrt.template.created-at";

/// The image of template `id`.
pub(crate) fn template_image(id: &str) -> String {
    format!("{TEMPLATE_REPOSITORY}:{id}")
}

impl DockerDriver {
    fn template_filters(&self, environment_id: &str, company_id: &str) -> HashMap<String, Vec<String>> {
        let mut labels = vec![
            format!("{LABEL_MANAGED}=true"),
            format!("{LABEL_TEMPLATE_ENVIRONMENT}={environment_id}"),
            format!("{LABEL_COMPANY_ID}={company_id}"),
        ];
        labels.extend(self.config.extra_labels.iter().map(|(k, v)| format!("{k}={v}")));
        HashMap::from([
            ("label".to_owned(), labels),
            ("reference".to_owned(), vec![TEMPLATE_REPOSITORY.to_owned()]),
        ])
    }
}

/// The template an image summary stands for, if it is one (its tag and label agree).
fn template_of(summary: &bollard::models::ImageSummary, environment_id: &str, company_id: &str) -> Option<TemplateRef> {
    let labels = &summary.labels;
    let id = labels.get(LABEL_TEMPLATE)?;
    let image = template_image(id);
    let tenant = labels.get(LABEL_COMPANY_ID).map(String::as_str);
    if !summary.repo_tags.contains(&image) || check_template_id(id).is_err() || tenant != Some(company_id) {
        return None;
    }
    let non_empty = |key: &str| labels.get(key).filter(|v| !v.is_empty()).cloned();
    let mut metadata = JsonMap::new();
    metadata.insert("image".into(), image.into());
    metadata.insert("imageId".into(), summary.id.clone().into());
    metadata.insert("size".into(), summary.size.into());
    Some(TemplateRef {
        id: id.clone(),
        kind: "image".into(),
        environment_id: environment_id.to_owned(),
        company_id: company_id.to_owned(),
        label: non_empty(LABEL_TEMPLATE_LABEL),
        source_lease_id: non_empty(LABEL_TEMPLATE_SOURCE),
        created_at: labels
            .get(LABEL_TEMPLATE_CREATED)
            .and_then(|v| v.parse().ok())
            .map(Timestamp),
        metadata,
    })
}

#[async_trait]
impl Templates for DockerDriver {
    async fn capture_template(&self, context: &LeaseContext, label: Option<&str>) -> Result<TemplateRef, DriverError> {
        if context
            .lease
            .metadata
            .get(crate::driver::META_WORKSPACE_MOUNT)
            .and_then(|v| v.as_str())
            == Some("bind")
        {
            return Err(DriverError::invalid(
                "a lease with a bind-mounted workspace keeps its files in a host directory, which a template (an image commit) would not hold",
            ));
        }
        if let Some(environment) = &context.environment
            && EnvConfig::of(environment)?.read_only_root_fs
        {
            return Err(DriverError::invalid(
                "a container with readOnlyRootFs keeps its workspace on a volume, which a template (an image commit) would not hold",
            ));
        }
        let container = Self::container_of(context)?;
        let inspected = self.inspect_leased(container).await?;
        let labels = inspected.config.and_then(|c| c.labels).unwrap_or_default();
        if labels.get(LABEL_LEASE_ID) != Some(&context.lease.id) {
            return Err(DriverError::ResourceGone {
                id: container.to_owned(),
            });
        }
        let id = new_template_id();
        let environment_id = context.lease.environment_id.clone().unwrap_or_default();
        let created_at = Timestamp::now();
        // A commit keeps the container's labels; every template label is written (empty
        // when unset) so that nothing of an earlier template or lease carries over, and a
        // lease expiry is blanked: it belonged to the source container only.
        let mut image_labels: HashMap<String, String> = self.config.extra_labels.clone().into_iter().collect();
        image_labels.insert(LABEL_MANAGED.into(), "true".into());
        image_labels.insert(LABEL_TEMPLATE.into(), id.clone());
        image_labels.insert(LABEL_TEMPLATE_ENVIRONMENT.into(), environment_id.clone());
        image_labels.insert(LABEL_COMPANY_ID.into(), context.lease.company_id.clone());
        image_labels.insert(LABEL_TEMPLATE_LABEL.into(), label.unwrap_or_default().to_owned());
        image_labels.insert(LABEL_TEMPLATE_SOURCE.into(), context.lease.id.clone());
        image_labels.insert(LABEL_TEMPLATE_CREATED.into(), created_at.0.to_string());
        if labels.contains_key(LABEL_EXPIRES_AT) {
            image_labels.insert(LABEL_EXPIRES_AT.into(), String::new());
        }
        let options = CommitContainerOptionsBuilder::default()
            .container(container)
            .repo(TEMPLATE_REPOSITORY)
            .tag(&id)
            .comment(&format!("envrt template of lease {}", context.lease.id))
            .pause(true)
            .build();
        let config = ContainerConfig {
            labels: Some(image_labels),
            ..Default::default()
        };
        let committed = self
            .engine
            .call(self.engine.docker.commit_container(options, config))
            .await
            .map_err(|e| self.engine.error("committing a container", e))?;
        let listed = match &context.environment {
            Some(environment) => self.list_templates(environment, &context.lease.company_id).await?,
            None => Vec::new(),
        };
        if let Some(found) = listed.into_iter().find(|t| t.id == id) {
            return Ok(found);
        }
        let mut metadata = JsonMap::new();
        metadata.insert("image".into(), template_image(&id).into());
        metadata.insert("imageId".into(), committed.id.into());
        Ok(TemplateRef {
            id,
            kind: "image".into(),
            environment_id,
            company_id: context.lease.company_id.clone(),
            label: label.filter(|l| !l.is_empty()).map(str::to_owned),
            source_lease_id: Some(context.lease.id.clone()),
            created_at: Some(created_at),
            metadata,
        })
    }

    async fn list_templates(
        &self,
        environment: &Environment,
        company_id: &str,
    ) -> Result<Vec<TemplateRef>, DriverError> {
        let options = ListImagesOptionsBuilder::default()
            .filters(&self.template_filters(&environment.id, company_id))
            .build();
        let images = self
            .engine
            .retry(|| self.engine.docker.list_images(Some(options.clone())))
            .await
            .map_err(|e| self.engine.error("listing images", e))?;
        let mut found: Vec<TemplateRef> = images
            .iter()
            .filter_map(|s| template_of(s, &environment.id, company_id))
            .collect();
        found.sort_by(|a, b| (a.created_at, &a.id).cmp(&(b.created_at, &b.id)));
        Ok(found)
    }

    async fn delete_template(&self, _environment: &Environment, template: &TemplateRef) -> Result<bool, DriverError> {
        check_template_id(&template.id)?;
        // Forced: a container of a lease started from the template may still run the
        // image; the tag goes (the template is no longer listed) and the engine keeps the
        // layers until that container is gone.
        let options = RemoveImageOptionsBuilder::default().force(true).build();
        let image = template_image(&template.id);
        let deleted = match self
            .engine
            .retry(|| self.engine.docker.remove_image(&image, Some(options.clone()), None))
            .await
        {
            Ok(_) => true,
            Err(e) if is_not_found(&e) => false,
            Err(e) => return Err(self.engine.error("removing an image", e)),
        };
        self.prune_template_images().await?;
        Ok(deleted)
    }
}

impl DockerDriver {
    /// After the container of a lease started from a template is removed: the image of a
    /// template deleted while the lease ran has no user left, so it goes now (best effort;
    /// the next deletion or prune retries).
    pub(crate) async fn prune_after(&self, context: &LeaseContext) {
        if context
            .lease
            .metadata
            .contains_key(envrt_driver_api::SOURCE_TEMPLATE_KEY)
            && let Err(error) = self.prune_template_images().await
        {
            tracing::debug!(%error, "pruning deleted template images failed");
        }
    }

    /// Removes the images of deleted templates that a lease's container still ran when
    /// they were deleted (untagged, labelled as this driver's templates) and that no
    /// container uses any more. Returns the removed image ids. Deleting a template calls
    /// it; so may `gc`.
    pub async fn prune_template_images(&self) -> Result<Vec<String>, DriverError> {
        let mut labels = vec![format!("{LABEL_MANAGED}=true"), LABEL_TEMPLATE.to_owned()];
        labels.extend(self.config.extra_labels.iter().map(|(k, v)| format!("{k}={v}")));
        let filters = HashMap::from([
            ("label".to_owned(), labels),
            ("dangling".to_owned(), vec!["true".to_owned()]),
        ]);
        let options = ListImagesOptionsBuilder::default().filters(&filters).build();
        let images = self
            .engine
            .retry(|| self.engine.docker.list_images(Some(options.clone())))
            .await
            .map_err(|e| self.engine.error("listing images", e))?;
        let mut removed = Vec::new();
        let options = RemoveImageOptionsBuilder::default().build();
        // Older engines list an untagged image with the tag `<none>:<none>`.
        let untagged = |i: &bollard::models::ImageSummary| i.repo_tags.iter().all(|t| t == "<none>:<none>");
        for image in images.into_iter().filter(untagged) {
            match self
                .engine
                .retry(|| self.engine.docker.remove_image(&image.id, Some(options.clone()), None))
                .await
            {
                Ok(_) => removed.push(image.id),
                // Still used by a container (409), or already gone.
                Err(e) if is_not_found(&e) || has_status(&e, 409) => {}
                Err(e) => return Err(self.engine.error("removing an image", e)),
            }
        }
        Ok(removed)
    }
}

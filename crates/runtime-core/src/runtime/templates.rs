//! The facade's template operations: capture a lease's state, list and delete an
//! environment's templates, and find the template an acquire names. Each passes the gate
//! table first (capture as a lease operation, the others at environment level).

use crate::error::RuntimeError;
use crate::model::Environment;
use crate::template::{TemplateRef, check_template_id};

use super::EnvironmentRuntime;
use super::gate::{Operation, gate, gate_driver};

impl EnvironmentRuntime {
    /// Captures the lease's current state as a new template of its environment. Refused
    /// with `Environment driver "{key}" does not support template capture.` when the
    /// driver has no templates group, then like every lease operation when the lease is
    /// expired or not active.
    pub async fn capture_template(&self, lease_id: &str, label: Option<&str>) -> Result<TemplateRef, RuntimeError> {
        self.traced("capture_template", lease_id, async {
            let resolved = self.resolve(lease_id).await?;
            let templates = gate(&resolved, Operation::CaptureTemplate, |d| d.as_templates(), |_| true).await?;
            envrt_driver_api::fault::point("capture");
            let template = templates.capture_template(&resolved.context, label).await?;
            envrt_driver_api::fault::point("capture");
            Ok(template)
        })
        .await
    }

    /// Every template of an environment for tenant `company_id`, oldest first. Refused
    /// with `Tenant "{company_id}" is not this runtime's tenant "{tenant}".` on a runtime
    /// bound to another tenant, and with `Environment driver "{key}" does not support
    /// templates.` when its driver has none.
    pub async fn templates(&self, environment_id: &str, company_id: &str) -> Result<Vec<TemplateRef>, RuntimeError> {
        self.check_tenant(company_id)?;
        let environment = self.known_environment(environment_id).await?;
        let driver = self.registered(&environment.driver)?;
        let templates = gate_driver(&environment.driver, driver.as_ref(), Operation::ListTemplates, |d| {
            d.as_templates()
        })?;
        Ok(templates.list_templates(&environment, company_id).await?)
    }

    /// Deletes a template of an environment and tenant; `Ok(false)` when there is none by
    /// that id (idempotent). Refused first on a runtime bound to another tenant (as
    /// [`templates`](Self::templates)), then with `Environment driver "{key}" does not support
    /// template deletion.` when its driver has no templates group.
    pub async fn delete_template(
        &self,
        environment_id: &str,
        company_id: &str,
        template_id: &str,
    ) -> Result<bool, RuntimeError> {
        self.check_tenant(company_id)?;
        let environment = self.known_environment(environment_id).await?;
        let driver = self.registered(&environment.driver)?;
        let templates = gate_driver(&environment.driver, driver.as_ref(), Operation::DeleteTemplate, |d| {
            d.as_templates()
        })?;
        check_template_id(template_id)?;
        match templates.find_template(&environment, company_id, template_id).await? {
            Some(template) => Ok(templates.delete_template(&environment, &template).await?),
            None => Ok(false),
        }
    }

    /// The template `template_id` of `environment`, for an acquire: refused when the
    /// driver has no templates, and with `Template "{id}" was not found in environment
    /// "{environment_id}".` when it has no such template (never captured, or deleted).
    pub(super) async fn template_for_acquire(
        &self,
        environment: &Environment,
        driver: &dyn crate::EnvironmentDriver,
        company_id: &str,
        template_id: &str,
    ) -> Result<TemplateRef, RuntimeError> {
        let templates = gate_driver(&environment.driver, driver, Operation::AcquireFromTemplate, |d| {
            d.as_templates()
        })?;
        let not_found = || RuntimeError::TemplateNotFound {
            id: template_id.to_owned(),
            environment_id: environment.id.clone(),
        };
        if check_template_id(template_id).is_err() {
            return Err(not_found());
        }
        templates
            .find_template(environment, company_id, template_id)
            .await?
            .ok_or_else(not_found)
    }
}

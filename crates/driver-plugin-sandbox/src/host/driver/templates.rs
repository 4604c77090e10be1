//! Templates forwarded to the worker: Paperclip's `environmentCaptureTemplate` and
//! `environmentDeleteTemplate`, our `environmentListTemplates` extension, and
//! `sourceTemplateRef` / `sourceTemplateKind` on `environmentAcquireLease`.
//!
//! A worker that does not advertise a verb is refused before anything is sent, in
//! Paperclip's own words: `Sandbox provider "{key}" does not support template capture.`,
//! `... template deletion.`, and ours for listing, `... template listing.` Starting a
//! lease from a template needs a worker that captures (else `... template capture.`). A
//! worker that does not list is trusted with the ids: the facade's lookup passes the id
//! through and the worker refuses an unknown one itself.

use async_trait::async_trait;
use envrt_driver_api::{
    AcquireInput, DriverError, Environment, JsonMap, LeaseContext, TemplateRef, Templates, Timestamp,
};
use envrt_plugin_protocol::environment::{AcquireLeaseParams, DriverBase};
use envrt_plugin_protocol::methods;
use envrt_plugin_protocol::setup::{CaptureTemplateParams, DeleteTemplateParams, DeleteTemplateResult};
use serde_json::Value;

use super::SandboxDriver;
use crate::host::error::SandboxError;

impl SandboxDriver {
    pub(super) fn refuse(&self, operation: &'static str) -> DriverError {
        DriverError::ProviderUnsupported {
            provider: self.key.clone(),
            operation,
        }
    }

    /// The base params of an environment-level verb (no lease).
    pub(super) fn environment_base(&self, environment: &Environment, company_id: &str) -> DriverBase {
        DriverBase {
            driver_key: self.key.clone(),
            company_id: company_id.to_owned(),
            environment_id: environment.id.clone(),
            issue_id: None,
            config: environment.config.clone(),
        }
    }

    /// Adds the template of an acquire to its params. Starting from a template needs a
    /// worker that captures them: one that does not would ignore the template and start
    /// clean, so it is refused instead.
    pub(super) fn add_template(
        &self,
        input: &AcquireInput,
        params: &mut AcquireLeaseParams,
    ) -> Result<(), DriverError> {
        if let Some(template) = &input.template {
            if !self.advertises(methods::CAPTURE_TEMPLATE) {
                return Err(self.refuse("template capture"));
            }
            params.source_template_ref = Some(template.id.clone());
            params.source_template_kind = Some(template.kind.clone());
        }
        Ok(())
    }

    /// A template out of a capture result or a listed entry.
    pub(super) fn template_from(
        &self,
        method: &str,
        (environment_id, company_id): (&str, &str),
        value: &Value,
    ) -> Result<TemplateRef, SandboxError> {
        let invalid = |message: &str| SandboxError::InvalidResult {
            method: method.to_owned(),
            message: message.to_owned(),
        };
        let id = value["templateRef"]
            .as_str()
            .filter(|s| !s.is_empty())
            .ok_or_else(|| invalid("templateRef must be a non-empty string"))?;
        let kind = value["templateKind"].as_str().unwrap_or("unknown");
        let metadata = match &value["metadata"] {
            Value::Object(m) => m.clone(),
            Value::Null => JsonMap::new(),
            _ => return Err(invalid("metadata must be an object")),
        };
        let text = |key: &str| {
            value[key]
                .as_str()
                .or_else(|| metadata.get(key).and_then(Value::as_str))
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
        };
        Ok(TemplateRef {
            id: id.to_owned(),
            kind: kind.to_owned(),
            environment_id: environment_id.to_owned(),
            company_id: company_id.to_owned(),
            label: text("label"),
            source_lease_id: text("sourceLeaseId"),
            created_at: text("createdAt").and_then(|t| Timestamp::parse_rfc3339(&t)),
            metadata,
        })
    }
}

#[async_trait]
impl Templates for SandboxDriver {
    async fn capture_template(&self, context: &LeaseContext, label: Option<&str>) -> Result<TemplateRef, DriverError> {
        if !self.advertises(methods::CAPTURE_TEMPLATE) {
            return Err(self.refuse("template capture"));
        }
        let params = CaptureTemplateParams {
            base: self.base(context),
            provider_lease_id: context.lease.provider_lease_id.clone(),
            setup_metadata: Some(context.lease.metadata.clone()),
            source_template_ref: context
                .lease
                .metadata
                .get(envrt_driver_api::SOURCE_TEMPLATE_KEY)
                .and_then(Value::as_str)
                .map(str::to_owned),
            template_label: label.map(str::to_owned),
            ..CaptureTemplateParams::default()
        };
        let value = self
            .rpc(methods::CAPTURE_TEMPLATE, &params, &context.lease.company_id)
            .await?;
        let environment_id = context.lease.environment_id.clone().unwrap_or_default();
        let scope = (environment_id.as_str(), context.lease.company_id.as_str());
        let mut template = self.template_from(methods::CAPTURE_TEMPLATE, scope, &value)?;
        template.source_lease_id = Some(context.lease.id.clone());
        if template.label.is_none() {
            template.label = label.filter(|l| !l.is_empty()).map(str::to_owned);
        }
        Ok(template)
    }

    async fn list_templates(
        &self,
        environment: &Environment,
        company_id: &str,
    ) -> Result<Vec<TemplateRef>, DriverError> {
        if !self.advertises(methods::LIST_TEMPLATES) {
            return Err(self.refuse("template listing"));
        }
        let params = self.environment_base(environment, company_id);
        let value = self.rpc(methods::LIST_TEMPLATES, &params, company_id).await?;
        let Some(items) = value["templates"].as_array() else {
            return Err(SandboxError::InvalidResult {
                method: methods::LIST_TEMPLATES.into(),
                message: "templates must be an array".into(),
            }
            .into());
        };
        Ok(items
            .iter()
            .map(|item| self.template_from(methods::LIST_TEMPLATES, (&environment.id, company_id), item))
            .collect::<Result<_, _>>()?)
    }

    async fn find_template(
        &self,
        environment: &Environment,
        company_id: &str,
        id: &str,
    ) -> Result<Option<TemplateRef>, DriverError> {
        if self.advertises(methods::LIST_TEMPLATES) {
            return Ok(self
                .list_templates(environment, company_id)
                .await?
                .into_iter()
                .find(|t| t.id == id));
        }
        // Vouched for: deletion and acquire are refused by their own checks, or by the
        // worker, which knows its templates.
        Ok(Some(TemplateRef {
            id: id.to_owned(),
            kind: "unknown".into(),
            environment_id: environment.id.clone(),
            company_id: company_id.to_owned(),
            label: None,
            source_lease_id: None,
            created_at: None,
            metadata: JsonMap::new(),
        }))
    }

    async fn delete_template(&self, environment: &Environment, template: &TemplateRef) -> Result<bool, DriverError> {
        if !self.advertises(methods::DELETE_TEMPLATE) {
            return Err(self.refuse("template deletion"));
        }
        let company = template.company_id.clone();
        let params = DeleteTemplateParams {
            base: self.environment_base(environment, &company),
            template_ref: template.id.clone(),
            template_kind: Some(template.kind.clone()),
            metadata: Some(template.metadata.clone()),
            reason: None,
        };
        let value = self.rpc(methods::DELETE_TEMPLATE, &params, &company).await?;
        let result: DeleteTemplateResult = serde_json::from_value(value).map_err(|e| SandboxError::InvalidResult {
            method: methods::DELETE_TEMPLATE.into(),
            message: e.to_string(),
        })?;
        Ok(result.deleted)
    }
}

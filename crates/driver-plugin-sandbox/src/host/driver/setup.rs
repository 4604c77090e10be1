//! Paperclip's interactive setup, hosted for workers that advertise it:
//! `environmentStartInteractiveSetup`, `environmentGetInteractiveSetup`,
//! `environmentCancelInteractiveSetup`. A worker that does not advertise a verb is refused
//! before anything is sent with Paperclip's
//! `Sandbox provider "{key}" does not support interactive setup.` The setup lease is the
//! worker's: capturing it is [`SandboxDriver::capture_setup`] (`environmentCaptureTemplate`
//! on its `providerLeaseId`).

use envrt_driver_api::{DriverError, Environment, TemplateRef};
use envrt_plugin_protocol::methods;
use envrt_plugin_protocol::setup::{
    CancelInteractiveSetupParams, CancelInteractiveSetupResult, CaptureTemplateParams, GetInteractiveSetupParams,
    InteractiveSetupSession, StartInteractiveSetupParams,
};
use serde::de::DeserializeOwned;

use super::SandboxDriver;
use crate::host::error::SandboxError;

impl SandboxDriver {
    fn require_setup(&self, method: &str) -> Result<(), DriverError> {
        if self.advertises(method) {
            Ok(())
        } else {
            Err(self.refuse("interactive setup"))
        }
    }

    fn answer<T: DeserializeOwned>(method: &str, value: serde_json::Value) -> Result<T, DriverError> {
        serde_json::from_value(value).map_err(|e| {
            SandboxError::InvalidResult {
                method: method.to_owned(),
                message: e.to_string(),
            }
            .into()
        })
    }

    /// Starts an interactive setup session of `environment` for tenant `company_id`
    /// (`session_id` is the caller's name for it), from `template` when given.
    pub async fn start_interactive_setup(
        &self,
        environment: &Environment,
        company_id: &str,
        session_id: &str,
        template: Option<&TemplateRef>,
    ) -> Result<InteractiveSetupSession, DriverError> {
        let method = methods::START_INTERACTIVE_SETUP;
        self.require_setup(method)?;
        let params = StartInteractiveSetupParams {
            base: self.environment_base(environment, company_id),
            session_id: session_id.to_owned(),
            source_template_ref: template.map(|t| t.id.clone()),
            source_template_kind: template.map(|t| t.kind.clone()),
            ..StartInteractiveSetupParams::default()
        };
        Self::answer(method, self.rpc(method, &params, company_id).await?)
    }

    /// Looks at a setup session (`environmentGetInteractiveSetup`).
    pub async fn get_interactive_setup(
        &self,
        environment: &Environment,
        company_id: &str,
        provider_lease_id: &str,
    ) -> Result<InteractiveSetupSession, DriverError> {
        let method = methods::GET_INTERACTIVE_SETUP;
        self.require_setup(method)?;
        let params = GetInteractiveSetupParams {
            base: self.environment_base(environment, company_id),
            provider_lease_id: Some(provider_lease_id.to_owned()),
            ..GetInteractiveSetupParams::default()
        };
        Self::answer(method, self.rpc(method, &params, company_id).await?)
    }

    /// Cancels a setup session; answers its final status (`cancelled`, `missing`, ...).
    pub async fn cancel_interactive_setup(
        &self,
        environment: &Environment,
        company_id: &str,
        provider_lease_id: &str,
        reason: Option<&str>,
    ) -> Result<String, DriverError> {
        let method = methods::CANCEL_INTERACTIVE_SETUP;
        self.require_setup(method)?;
        let params = CancelInteractiveSetupParams {
            base: self.environment_base(environment, company_id),
            provider_lease_id: Some(provider_lease_id.to_owned()),
            setup_metadata: None,
            reason: reason.map(str::to_owned),
        };
        let result: CancelInteractiveSetupResult = Self::answer(method, self.rpc(method, &params, company_id).await?)?;
        Ok(result.status)
    }

    /// Captures a setup session as a template (`environmentCaptureTemplate` on its
    /// `providerLeaseId`); refused like any capture when the worker does not capture.
    pub async fn capture_setup(
        &self,
        environment: &Environment,
        company_id: &str,
        provider_lease_id: &str,
        label: Option<&str>,
    ) -> Result<TemplateRef, DriverError> {
        let method = methods::CAPTURE_TEMPLATE;
        if !self.advertises(method) {
            return Err(self.refuse("template capture"));
        }
        let params = CaptureTemplateParams {
            base: self.environment_base(environment, company_id),
            provider_lease_id: Some(provider_lease_id.to_owned()),
            template_label: label.map(str::to_owned),
            ..CaptureTemplateParams::default()
        };
        let value = self.rpc(method, &params, company_id).await?;
        let mut template = self.template_from(method, (&environment.id, company_id), &value)?;
        if template.label.is_none() {
            template.label = label.filter(|l| !l.is_empty()).map(str::to_owned);
        }
        Ok(template)
    }
}

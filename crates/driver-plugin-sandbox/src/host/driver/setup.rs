//! Paperclip's interactive setup, hosted for workers that advertise it:
//! `environmentStartInteractiveSetup`, `environmentGetInteractiveSetup`,
//! `environmentCancelInteractiveSetup`. A worker that does not advertise a verb is refused
//! before anything is sent with Paperclip's
//! `Sandbox provider "{key}" does not support interactive setup.` The setup lease is the
//! worker's: capturing it is [`SandboxDriver::capture_setup`] (`environmentCaptureTemplate`
//! on its `providerLeaseId`).

use envrt_runtime_core::{DriverError, Environment, JsonMap, TemplateRef};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::SandboxDriver;
use super::templates::CAPTURE;
use crate::host::error::SandboxError;

const START: &str = "environmentStartInteractiveSetup";
const GET: &str = "environmentGetInteractiveSetup";
const CANCEL: &str = "environmentCancelInteractiveSetup";

/// A setup session as the worker reports it (Paperclip's
/// `PluginEnvironmentInteractiveSetupSession`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InteractiveSetup {
    /// The worker's lease of the session; `None` once it is gone.
    pub provider_lease_id: Option<String>,
    /// `starting`, `waiting_for_user`, `capturing`, `promoted`, `cancelled`, `timed_out`,
    /// `failed` or `missing`.
    pub status: String,
    /// How a user connects, with secrets redacted.
    #[serde(default)]
    pub connection_summary: Option<Value>,
    /// The secret connection details, when asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connection_payload: Option<Value>,
    /// When the session ends by itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<String>,
    /// Provider facts.
    #[serde(default)]
    pub metadata: Option<JsonMap>,
}

impl SandboxDriver {
    fn setup_params(&self, environment: &Environment, company_id: &str) -> Result<JsonMap, DriverError> {
        if !self.advertises(START) {
            return Err(DriverError::ProviderUnsupported {
                provider: self.key.clone(),
                operation: "interactive setup",
            });
        }
        let mut params = JsonMap::new();
        params.insert("driverKey".into(), json!(self.key));
        params.insert("companyId".into(), json!(company_id));
        params.insert("environmentId".into(), json!(environment.id));
        params.insert("config".into(), Value::Object(environment.config.clone()));
        Ok(params)
    }

    async fn setup_call(&self, method: &str, params: JsonMap, company_id: &str) -> Result<Value, DriverError> {
        if !self.advertises(method) {
            return Err(DriverError::ProviderUnsupported {
                provider: self.key.clone(),
                operation: "interactive setup",
            });
        }
        Ok(self.rpc(method, params, company_id).await?)
    }

    fn session_from(method: &str, value: Value) -> Result<InteractiveSetup, DriverError> {
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
    ) -> Result<InteractiveSetup, DriverError> {
        let mut params = self.setup_params(environment, company_id)?;
        params.insert("sessionId".into(), json!(session_id));
        if let Some(template) = template {
            params.insert("sourceTemplateRef".into(), json!(template.id));
            params.insert("sourceTemplateKind".into(), json!(template.kind));
        }
        let value = self.setup_call(START, params, company_id).await?;
        Self::session_from(START, value)
    }

    /// Looks at a setup session (`environmentGetInteractiveSetup`).
    pub async fn get_interactive_setup(
        &self,
        environment: &Environment,
        company_id: &str,
        provider_lease_id: &str,
    ) -> Result<InteractiveSetup, DriverError> {
        let mut params = self.setup_params(environment, company_id)?;
        params.insert("providerLeaseId".into(), json!(provider_lease_id));
        let value = self.setup_call(GET, params, company_id).await?;
        Self::session_from(GET, value)
    }

    /// Cancels a setup session; answers its final status (`cancelled`, `missing`, ...).
    pub async fn cancel_interactive_setup(
        &self,
        environment: &Environment,
        company_id: &str,
        provider_lease_id: &str,
        reason: Option<&str>,
    ) -> Result<String, DriverError> {
        let mut params = self.setup_params(environment, company_id)?;
        params.insert("providerLeaseId".into(), json!(provider_lease_id));
        if let Some(reason) = reason {
            params.insert("reason".into(), json!(reason));
        }
        let value = self.setup_call(CANCEL, params, company_id).await?;
        value["status"].as_str().map(str::to_owned).ok_or_else(|| {
            SandboxError::InvalidResult {
                method: CANCEL.into(),
                message: "status must be a string".into(),
            }
            .into()
        })
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
        if !self.advertises(CAPTURE) {
            return Err(DriverError::ProviderUnsupported {
                provider: self.key.clone(),
                operation: "template capture",
            });
        }
        let mut params = JsonMap::new();
        params.insert("driverKey".into(), json!(self.key));
        params.insert("companyId".into(), json!(company_id));
        params.insert("environmentId".into(), json!(environment.id));
        params.insert("config".into(), Value::Object(environment.config.clone()));
        params.insert("providerLeaseId".into(), json!(provider_lease_id));
        if let Some(label) = label {
            params.insert("templateLabel".into(), json!(label));
        }
        let value = self.rpc(CAPTURE, params, company_id).await?;
        let mut template = self.template_from(CAPTURE, (&environment.id, company_id), &value)?;
        if template.label.is_none() {
            template.label = label.filter(|l| !l.is_empty()).map(str::to_owned);
        }
        Ok(template)
    }
}

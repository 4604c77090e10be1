//! Honest narrowing: the worker's verdict on an environment's provider configuration
//! (`environmentValidateConfig`), asked once per configuration and handed to the shared
//! classifier as `config_resolved`.

use envrt_driver_api::{DriverError, Environment, JsonMap};
use serde_json::Value;

use super::SandboxDriver;
use crate::protocol::environment::ValidateConfigParams;
use crate::protocol::{methods, to_value};

/// Most characters of a worker's refusal shown (the worker is as untrusted as the command).
const MAX_REFUSAL: usize = 1000;

/// Most configuration verdicts kept; past it the cache starts afresh.
const MAX_VALIDATED: usize = 256;

impl SandboxDriver {
    /// Whether the environment's provider configuration resolves, for the capability
    /// classifier's narrowing: the worker's `environmentValidateConfig` verdict (`ok`),
    /// asked once per configuration, where the worker advertises the verb. A worker that
    /// cannot be asked, or a snapshot without an environment, counts as resolved; a call
    /// that fails (worker gone, timeout) counts as not resolved and is asked again next time.
    pub(super) async fn config_resolves(&self, environment: Option<&Environment>) -> bool {
        let Some(environment) = environment else { return true };
        if !self.advertises(methods::VALIDATE_CONFIG) {
            return true;
        }
        let text = Value::Object(environment.config.clone()).to_string();
        if let Some(ok) = self.validated.lock().unwrap_or_else(|e| e.into_inner()).get(&text) {
            return *ok;
        }
        let params = to_value(&ValidateConfigParams {
            driver_key: self.key.clone(),
            config: Value::Object(environment.config.clone()),
        });
        let timeout = self.supervisor.options().rpc_timeout;
        let ok = match self
            .supervisor
            .call(methods::VALIDATE_CONFIG, params, timeout, None, None)
            .await
        {
            Ok(answer) => answer.get("ok").and_then(Value::as_bool) == Some(true),
            Err(_) => return false,
        };
        let mut validated = self.validated.lock().unwrap_or_else(|e| e.into_inner());
        if validated.len() >= MAX_VALIDATED {
            validated.clear();
        }
        validated.insert(text, ok);
        ok
    }

    /// Checks an environment's configuration before it is stored: the worker's
    /// `environmentValidateConfig` verdict, where it advertises the verb. A refusal is
    /// `Invalid input: {key} environment config: {the worker's errors}` (the reference
    /// worker knows no keys, so any key is refused as
    /// ``unknown field `{key}`, there are no fields``).
    pub(super) async fn check_config(&self, config: &JsonMap) -> Result<(), DriverError> {
        if !self.advertises(methods::VALIDATE_CONFIG) {
            return Ok(());
        }
        let params = to_value(&ValidateConfigParams {
            driver_key: self.key.clone(),
            config: Value::Object(config.clone()),
        });
        let timeout = self.supervisor.options().rpc_timeout;
        let answer = self
            .supervisor
            .call(methods::VALIDATE_CONFIG, params, timeout, None, None)
            .await?;
        if answer.get("ok").and_then(Value::as_bool) == Some(true) {
            return Ok(());
        }
        let errors: Vec<&str> = answer
            .get("errors")
            .and_then(Value::as_array)
            .map(|list| list.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let mut reason = match errors.is_empty() {
            true => "the worker refused it".to_owned(),
            false => errors.join("; "),
        };
        if reason.chars().count() > MAX_REFUSAL {
            reason = reason.chars().take(MAX_REFUSAL).collect::<String>() + "…";
        }
        Err(DriverError::invalid(format!(
            "{} environment config: {reason}",
            self.key
        )))
    }
}

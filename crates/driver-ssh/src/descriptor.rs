//! The SSH driver's [`DriverDescriptor`]: key `ssh`, no `envrt.toml` section of its own
//! (each environment names its host), the rows of `envrt caps`, and the `envrt doctor`
//! check of every configured host: it connects the way a lease would (host key checked
//! against the environment's known-hosts file, key login) and runs a no-op command, so an
//! unreachable host, an unknown or changed host key and a refused login each show with
//! their own reason before any lease is taken; for a reachable host, an optional check
//! says whether the process supervisor runs there (persistent process sessions) or why
//! not.

use std::any::Any;
use std::collections::BTreeMap;

use async_trait::async_trait;
use envrt_driver_api::Environment;
use envrt_driver_api::descriptor::{
    BuildContext, Built, DoctorCheck, DoctorContext, DoctorPhase, DriverConfig, DriverDescriptor, DriverSettings,
    SettingsContext, settings_as,
};

use crate::{DRIVER_KEY, SshConfig, SshDriver, SshTarget};

/// The SSH driver's descriptor (the facade registers it under feature `ssh`).
pub static DESCRIPTOR: SshDescriptor = SshDescriptor;

/// See [`DESCRIPTOR`].
#[derive(Debug)]
pub struct SshDescriptor;

impl DriverConfig for SshConfig {
    const KEY: &'static str = DRIVER_KEY;
}

#[async_trait]
impl DriverDescriptor for SshDescriptor {
    fn key(&self) -> &'static str {
        DRIVER_KEY
    }

    fn default_settings(&self) -> DriverSettings {
        Box::new(SshConfig::default())
    }

    fn settings(
        &self,
        _: &BTreeMap<String, serde_json::Value>,
        _: &SettingsContext<'_>,
    ) -> Result<DriverSettings, String> {
        Ok(self.default_settings())
    }

    /// Connects lazily (on a lease's first call); recovery (`envrt gc`) also lists the
    /// lease directories of every configured environment's host.
    async fn build(
        &self,
        settings: &(dyn Any + Send + Sync),
        context: &BuildContext<'_>,
    ) -> Result<Vec<Built>, String> {
        if !context.needs(DRIVER_KEY) {
            return Ok(Vec::new());
        }
        let mut config = settings_as::<SshConfig>(DRIVER_KEY, settings)?.clone();
        config.known_targets.extend(
            context
                .environments
                .iter()
                .filter(|e| e.driver == DRIVER_KEY)
                .filter_map(|e| SshTarget::from_config(&e.config, None).ok()),
        );
        Ok(vec![Built::new(DRIVER_KEY, SshDriver::new(config))])
    }

    fn isolation(&self, environment: &Environment) -> Vec<(String, String)> {
        vec![
            (
                "isolation".into(),
                "none beyond the remote login user: commands run as that user on the remote host".into(),
            ),
            (
                "host".into(),
                SshTarget::from_config(&environment.config, None).map_or_else(|e| e.to_string(), |t| t.shown()),
            ),
        ]
    }

    async fn doctor(&self, context: &DoctorContext<'_>) -> Vec<DoctorCheck> {
        let mut checks = Vec::new();
        for environment in context.environments.iter().filter(|e| e.driver == DRIVER_KEY) {
            let (ok, detail, fix) = host_check(environment).await;
            checks.push(DoctorCheck {
                name: "ssh host".into(),
                required: true,
                ok,
                detail,
                fix,
                phase: DoctorPhase::Environments,
            });
            if ok {
                let (ok, detail, fix) = supervisor_check(environment).await;
                checks.push(DoctorCheck {
                    name: "ssh process supervisor".into(),
                    required: false,
                    ok,
                    detail,
                    fix,
                    phase: DoctorPhase::Environments,
                });
            }
        }
        checks
    }
}

/// `(ok, detail, fix)` of persistent process sessions on one environment's (reachable)
/// host: whether the supervisor can be placed and runs there (the probe copies it when
/// missing, as a lease's first capability resolution would).
async fn supervisor_check(environment: &Environment) -> (bool, String, Option<String>) {
    let Ok(driver) = SshDriver::new(SshConfig::default()) else {
        return (false, format!("{}: no driver", environment.id), None);
    };
    let outcome = match driver.target_of(&environment.config) {
        Ok(target) => driver.process_support(&target).await,
        Err(e) => Err(e.to_string()),
    };
    driver.shutdown().await;
    match outcome {
        Ok(()) => (
            true,
            format!("{}: envrt-agent runs there: persistent process sessions", environment.id),
            None,
        ),
        Err(why) => (
            false,
            format!("{}: no persistent process sessions: {why}", environment.id),
            Some("build envrt-agent for the remote architecture (a static build runs on any Linux host: crates/agent/README.md) and set ENVRT_AGENT to it".into()),
        ),
    }
}

/// `(ok, detail, fix)` of one environment's host.
async fn host_check(environment: &Environment) -> (bool, String, Option<String>) {
    let driver = match SshDriver::new(SshConfig::default()) {
        Ok(driver) => driver,
        Err(e) => return (false, format!("{}: {e}", environment.id), None),
    };
    let target = match driver.target_of(&environment.config) {
        Ok(target) => target,
        Err(e) => {
            return (
                false,
                format!("{}: {e}", environment.id),
                Some("set host (and port, user, key, known_hosts) in [environment.config]".into()),
            );
        }
    };
    let outcome = driver.check(&target).await;
    driver.shutdown().await;
    match outcome {
        Ok(()) => (
            true,
            format!(
                "{}: {} reachable, host key verified, login works",
                environment.id,
                target.shown()
            ),
            None,
        ),
        Err(e) => {
            let text = e.to_string();
            let fix = if text.contains("host key is not in") {
                format!(
                    "add the host's key to the known-hosts file (ssh-keyscan -p PORT {} >> FILE), or set accept_new_host_key = true",
                    target.host
                )
            } else if text.contains("host key does not match") {
                "the host's key changed: verify it out of band before replacing its known-hosts line".to_owned()
            } else {
                "check host, port, user and key in [environment.config]; try ssh by hand with the same settings"
                    .to_owned()
            };
            (false, format!("{}: {text}", environment.id), Some(fix))
        }
    }
}

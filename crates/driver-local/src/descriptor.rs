//! The local driver's [`DriverDescriptor`]: key `local`, the `[local]` section of
//! `envrt.toml` (`root`, `paths`), and what its environments enforce (nothing beyond the
//! user, and how processes are contained).

use std::any::Any;
use std::collections::BTreeMap;
use std::path::PathBuf;

use async_trait::async_trait;
use envrt_driver_api::Environment;
use envrt_driver_api::PathScope;
use envrt_driver_api::descriptor::{
    BuildContext, Built, DoctorCheck, DoctorContext, DriverConfig, DriverDescriptor, DriverSettings, SettingsContext,
    read_section, settings_as, shown,
};

use crate::{DRIVER_KEY, LocalConfig, LocalDriver};

/// The local driver's descriptor (the facade registers it under feature `local`).
pub static DESCRIPTOR: LocalDescriptor = LocalDescriptor;

/// See [`DESCRIPTOR`].
#[derive(Debug)]
pub struct LocalDescriptor;

impl DriverConfig for LocalConfig {
    const KEY: &'static str = DRIVER_KEY;
}

/// `[local]`: `root` (lease workspaces; default `<state dir>/workspaces` in an
/// `envrt.toml`, else the driver's own default) and `paths`
/// (`"workspace"`, the default, or `"host"`).
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Section {
    root: Option<PathBuf>,
    paths: Option<serde_json::Value>,
}

/// The checked `[local] paths`.
fn path_scope(value: Option<&serde_json::Value>) -> Result<PathScope, String> {
    match value {
        None => Ok(PathScope::Workspace),
        Some(serde_json::Value::String(s)) if s == "workspace" => Ok(PathScope::Workspace),
        Some(serde_json::Value::String(s)) if s == "host" => Ok(PathScope::WholeEnvironment),
        Some(other) => Err(format!(
            "[local] paths expects \"workspace\" or \"host\", got {}",
            shown(other)
        )),
    }
}

#[async_trait]
impl DriverDescriptor for LocalDescriptor {
    fn key(&self) -> &'static str {
        DRIVER_KEY
    }

    fn sections(&self) -> &'static [&'static str] {
        &["local"]
    }

    fn default_settings(&self) -> DriverSettings {
        Box::new(LocalConfig::default())
    }

    fn settings(
        &self,
        sections: &BTreeMap<String, serde_json::Value>,
        context: &SettingsContext<'_>,
    ) -> Result<DriverSettings, String> {
        let section: Section = read_section(sections, "local")?;
        Ok(Box::new(LocalConfig {
            path_scope: path_scope(section.paths.as_ref())?,
            root: section
                .root
                .or_else(|| context.state_dir.map(|dir| dir.join("workspaces"))),
            ..Default::default()
        }))
    }

    async fn build(
        &self,
        settings: &(dyn Any + Send + Sync),
        context: &BuildContext<'_>,
    ) -> Result<Vec<Built>, String> {
        if !context.needs(DRIVER_KEY) {
            return Ok(Vec::new());
        }
        let config = settings_as::<LocalConfig>(DRIVER_KEY, settings)?;
        Ok(vec![Built::new(DRIVER_KEY, LocalDriver::new(config.clone()))])
    }

    fn isolation(&self, _: &Environment) -> Vec<(String, String)> {
        vec![
            (
                "isolation".into(),
                "none: commands run as this user, with its access to everything".into(),
            ),
            ("processes".into(), crate::describe_containment(true)),
        ]
    }

    async fn doctor(&self, context: &DoctorContext<'_>) -> Vec<DoctorCheck> {
        vec![context.readiness(
            DRIVER_KEY,
            "local driver",
            "make the workspace root ([local] root in envrt.toml) a writable directory",
        )]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(text: serde_json::Value) -> Result<LocalConfig, String> {
        let sections = BTreeMap::from([("local".to_owned(), text)]);
        let context = SettingsContext {
            state_dir: Some("/state".as_ref()),
            config_dir: None,
        };
        DESCRIPTOR
            .settings(&sections, &context)
            .map(|s| s.downcast_ref::<LocalConfig>().unwrap().clone())
    }

    #[test]
    fn the_section_sets_the_root_and_the_path_scope_with_exact_refusals() {
        let config = read(serde_json::json!({})).unwrap();
        assert_eq!(config.root, Some(PathBuf::from("/state/workspaces")));
        assert_eq!(config.path_scope, PathScope::Workspace);
        let config = read(serde_json::json!({"root": "/r", "paths": "host"})).unwrap();
        assert_eq!(config.root, Some(PathBuf::from("/r")));
        assert_eq!(config.path_scope, PathScope::WholeEnvironment);
        assert_eq!(
            read(serde_json::json!({"paths": 1})).unwrap_err(),
            "[local] paths expects \"workspace\" or \"host\", got 1"
        );
        assert_eq!(
            read(serde_json::json!({"rot": 1})).unwrap_err(),
            "unknown field `rot`, expected `root` or `paths`"
        );
    }
}

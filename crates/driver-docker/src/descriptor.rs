//! The Docker driver's [`DriverDescriptor`]: key `docker`, the `[docker]` section of
//! `envrt.toml` (`host`, `workspace_mount`, `bind_root`, `agent`, `egress`, `egress_dns`), set up only when an environment
//! needs it (setting up connects to the engine), and the hardening rows of `envrt caps`.

use std::any::Any;
use std::collections::BTreeMap;
use std::path::PathBuf;

use async_trait::async_trait;
use envrt_driver_api::Environment;
use envrt_driver_api::descriptor::{
    BuildContext, Built, DoctorCheck, DoctorContext, DoctorPhase, DriverConfig, DriverDescriptor, DriverSettings,
    SettingsContext, read_section, settings_as, shown,
};

use crate::{DRIVER_KEY, DockerConfig, DockerDriver, EnvConfig, WorkspaceMount};

/// The Docker driver's descriptor (the facade registers it under feature `docker`).
pub static DESCRIPTOR: DockerDescriptor = DockerDescriptor;

/// See [`DESCRIPTOR`].
#[derive(Debug)]
pub struct DockerDescriptor;

/// The label that scopes the containers of one `envrt.toml` state directory, so that
/// reconciliation only reaps containers leased through that store.
pub const STATE_LABEL: &str = "envrt.cli-state";

impl DriverConfig for DockerConfig {
    const KEY: &'static str = DRIVER_KEY;
}

/// `[docker]`: `host`, `workspace_mount` (`"container"` or `"bind"`), `bind_root`, `agent`
/// (the static process supervisor), `egress` (the egress proxy binary) and `egress_dns`
/// (its upstream DNS server, `ADDRESS:PORT`), `egress_roots` (PEM roots its brokered
/// credentials' hosts are also verified against).
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Section {
    host: Option<String>,
    workspace_mount: Option<serde_json::Value>,
    bind_root: Option<PathBuf>,
    agent: Option<PathBuf>,
    egress: Option<PathBuf>,
    egress_dns: Option<String>,
    egress_roots: Option<PathBuf>,
}

/// The checked `[docker] workspace_mount`.
fn workspace_mount(value: Option<&serde_json::Value>) -> Result<WorkspaceMount, String> {
    match value {
        None => Ok(WorkspaceMount::Container),
        Some(serde_json::Value::String(s)) if s == "container" => Ok(WorkspaceMount::Container),
        Some(serde_json::Value::String(s)) if s == "bind" => Ok(WorkspaceMount::Bind),
        Some(other) => Err(format!(
            "[docker] workspace_mount expects \"container\" or \"bind\", got {}",
            shown(other)
        )),
    }
}

/// The checked `[docker] {key}` that names a host path: an absolute one.
fn absolute(key: &str, value: Option<PathBuf>) -> Result<Option<PathBuf>, String> {
    match value {
        Some(path) if !path.is_absolute() => Err(format!(
            "[docker] {key} must be an absolute path, got \"{}\"",
            path.display()
        )),
        other => Ok(other),
    }
}

#[async_trait]
impl DriverDescriptor for DockerDescriptor {
    fn key(&self) -> &'static str {
        DRIVER_KEY
    }

    fn sections(&self) -> &'static [&'static str] {
        &["docker"]
    }

    fn default_settings(&self) -> DriverSettings {
        Box::new(DockerConfig::default())
    }

    fn settings(
        &self,
        sections: &BTreeMap<String, serde_json::Value>,
        _: &SettingsContext<'_>,
    ) -> Result<DriverSettings, String> {
        let section: Section = read_section(sections, "docker")?;
        Ok(Box::new(DockerConfig {
            workspace_mount: workspace_mount(section.workspace_mount.as_ref())?,
            bind_root: absolute("bind_root", section.bind_root)?,
            agent: absolute("agent", section.agent)?,
            egress: absolute("egress", section.egress)?,
            egress_roots: absolute("egress_roots", section.egress_roots)?,
            egress_dns: section
                .egress_dns
                .map(|text| {
                    text.parse::<std::net::SocketAddr>()
                        .map_err(|_| format!("[docker] egress_dns must be ADDRESS:PORT, got \"{text}\""))
                })
                .transpose()?,
            host: section.host,
            ..Default::default()
        }))
    }

    fn on_demand(&self) -> bool {
        true
    }

    fn doctor_sets_up(&self) -> bool {
        true
    }

    async fn build(
        &self,
        settings: &(dyn Any + Send + Sync),
        context: &BuildContext<'_>,
    ) -> Result<Vec<Built>, String> {
        if !context.needs(DRIVER_KEY) {
            return Ok(Vec::new());
        }
        let mut config = settings_as::<DockerConfig>(DRIVER_KEY, settings)?.clone();
        if let Some(state_dir) = context.state_dir {
            config
                .extra_labels
                .insert(STATE_LABEL.into(), state_dir.display().to_string());
        }
        Ok(vec![Built::new(DRIVER_KEY, DockerDriver::connect(config).await)])
    }

    fn isolation(&self, environment: &Environment) -> Vec<(String, String)> {
        match EnvConfig::of(environment) {
            Ok(config) => config
                .enforcement()
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v))
                .collect(),
            Err(e) => vec![("config".into(), e.to_string())],
        }
    }

    async fn doctor(&self, context: &DoctorContext<'_>) -> Vec<DoctorCheck> {
        let mut checks = vec![context.readiness(
            DRIVER_KEY,
            "Docker engine",
            "start the Docker engine (systemctl start docker) or point DOCKER_HOST at one",
        )];
        // Persistent processes are optional: said where an environment uses the driver.
        if context.uses(DRIVER_KEY)
            && let Ok(config) = settings_as::<DockerConfig>(DRIVER_KEY, context.settings)
        {
            let found = crate::processes::resolve(config.agent.as_deref(), &config.resolved_host());
            checks.push(DoctorCheck {
                name: "Docker process supervisor".to_owned(),
                required: false,
                ok: found.is_ok(),
                detail: match &found {
                    Ok(path) => format!("{} (static): leases grant persistentProcessSessions", path.display()),
                    Err(why) => format!("no persistent processes on Docker leases: {why}"),
                },
                fix: found.is_err().then(|| {
                    "name a static envrt-agent in [docker] agent or ENVRT_AGENT (with a Docker engine on this host)"
                        .to_owned()
                }),
                phase: DoctorPhase::Setup,
            });
            let egress = crate::egress::resolve(config.egress.as_deref(), config.egress_dns, &found);
            checks.push(DoctorCheck {
                name: "Docker egress proxy".to_owned(),
                required: false,
                ok: egress.is_ok(),
                detail: match &egress {
                    Ok(setup) => format!(
                        "{} resolving through {}: network = \"none\" environments accept egress = \"allow\" and \"open\"",
                        setup.binary.display(),
                        setup.upstream
                    ),
                    Err(why) => format!("network = \"none\" environments accept only egress = \"none\": {why}"),
                },
                fix: egress.is_err().then(|| {
                    "put envrt-egress beside envrt or name it in [docker] egress or ENVRT_EGRESS (with a static supervisor)"
                        .to_owned()
                }),
                phase: DoctorPhase::Setup,
            });
        }
        checks
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(section: serde_json::Value) -> Result<DockerConfig, String> {
        let sections = BTreeMap::from([("docker".to_owned(), section)]);
        let context = SettingsContext {
            state_dir: Some("/state".as_ref()),
            config_dir: None,
        };
        DESCRIPTOR
            .settings(&sections, &context)
            .map(|s| s.downcast_ref::<DockerConfig>().unwrap().clone())
    }

    #[test]
    fn workspace_mount_values_and_exact_refusals() {
        assert_eq!(
            read(serde_json::json!({})).unwrap().workspace_mount,
            WorkspaceMount::Container
        );
        let bind = read(serde_json::json!({"workspace_mount": "bind", "bind_root": "/srv/b"})).unwrap();
        assert_eq!(bind.workspace_mount, WorkspaceMount::Bind);
        assert_eq!(bind.bind_root.as_deref(), Some(std::path::Path::new("/srv/b")));
        for (value, got) in [
            (serde_json::json!("tmpfs"), "\"tmpfs\""),
            (serde_json::json!("Bind"), "\"Bind\""),
            (serde_json::json!(true), "true"),
        ] {
            assert_eq!(
                read(serde_json::json!({ "workspace_mount": value })).unwrap_err(),
                format!("[docker] workspace_mount expects \"container\" or \"bind\", got {got}")
            );
        }
        assert_eq!(
            read(serde_json::json!({"bind_root": "rel/dir"})).unwrap_err(),
            "[docker] bind_root must be an absolute path, got \"rel/dir\""
        );
        assert_eq!(
            read(serde_json::json!({"agent": "bin/envrt-agent"})).unwrap_err(),
            "[docker] agent must be an absolute path, got \"bin/envrt-agent\""
        );
        let agent = read(serde_json::json!({"agent": "/opt/envrt/envrt-agent"}))
            .unwrap()
            .agent;
        assert_eq!(agent.as_deref(), Some(std::path::Path::new("/opt/envrt/envrt-agent")));
    }

    #[test]
    fn the_egress_settings_are_read_and_every_fault_named() {
        let read_back =
            read(serde_json::json!({"egress": "/opt/envrt/envrt-egress", "egress_dns": "192.0.2.53:53"})).unwrap();
        assert_eq!(
            read_back.egress.as_deref(),
            Some(std::path::Path::new("/opt/envrt/envrt-egress"))
        );
        assert_eq!(read_back.egress_dns, Some("192.0.2.53:53".parse().unwrap()));
        assert_eq!(
            read(serde_json::json!({"egress": "envrt-egress"})).unwrap_err(),
            "[docker] egress must be an absolute path, got \"envrt-egress\""
        );
        assert_eq!(
            read(serde_json::json!({"egress_dns": "192.0.2.53"})).unwrap_err(),
            "[docker] egress_dns must be ADDRESS:PORT, got \"192.0.2.53\""
        );
    }
}

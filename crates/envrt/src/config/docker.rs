//! The checked `[docker]` keys of `envrt.toml` that choose where lease workspaces live:
//! `workspace_mount` (`"container"`, the default, or `"bind"`) and `bind_root`.

use std::path::Path;

use super::file::shown;

/// The checked `[docker] workspace_mount`: whether workspaces are bind-mounted host
/// directories.
pub(super) fn docker_bind(value: Option<&toml::Value>) -> Result<bool, String> {
    match value {
        None => Ok(false),
        Some(toml::Value::String(s)) if s == "container" => Ok(false),
        Some(toml::Value::String(s)) if s == "bind" => Ok(true),
        Some(other) => Err(format!(
            "[docker] workspace_mount expects \"container\" or \"bind\", got {}",
            shown(other)
        )),
    }
}

/// The checked `[docker] bind_root`: an absolute path.
pub(super) fn docker_bind_root(value: Option<&Path>) -> Result<(), String> {
    match value {
        Some(path) if !path.is_absolute() => Err(format!(
            "[docker] bind_root must be an absolute path, got \"{}\"",
            path.display()
        )),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(s: &str) -> toml::Value {
        toml::Value::String(s.into())
    }

    #[test]
    fn workspace_mount_values_and_exact_refusals() {
        assert_eq!(docker_bind(None), Ok(false));
        assert_eq!(docker_bind(Some(&text("container"))), Ok(false));
        assert_eq!(docker_bind(Some(&text("bind"))), Ok(true));
        for (value, got) in [
            (text("tmpfs"), "\"tmpfs\""),
            (text("Bind"), "\"Bind\""),
            (toml::Value::Boolean(true), "true"),
        ] {
            assert_eq!(
                docker_bind(Some(&value)),
                Err(format!(
                    "[docker] workspace_mount expects \"container\" or \"bind\", got {got}"
                ))
            );
        }
        assert_eq!(docker_bind_root(None), Ok(()));
        assert_eq!(docker_bind_root(Some(Path::new("/srv/binds"))), Ok(()));
        assert_eq!(
            docker_bind_root(Some(Path::new("rel/dir"))),
            Err("[docker] bind_root must be an absolute path, got \"rel/dir\"".to_owned())
        );
    }

    /// The keys reach the driver's configuration through `docker_config`.
    #[cfg(feature = "docker")]
    #[test]
    fn the_keys_reach_the_docker_config() {
        use crate::docker::WorkspaceMount;
        let dir = std::env::temp_dir().join(format!("envrt-config-docker-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("envrt.toml");
        let paths = super::super::Paths {
            config: Some(file.clone()),
            state_dir: dir.join("state"),
        };
        std::fs::write(&file, "[docker]\nworkspace_mount = \"bind\"\nbind_root = \"/srv/b\"\n").unwrap();
        let config = super::super::Config::load(&paths).unwrap();
        let docker = super::super::docker_config(&paths, &config);
        assert_eq!(docker.workspace_mount, WorkspaceMount::Bind);
        assert_eq!(docker.bind_root.as_deref(), Some(Path::new("/srv/b")));
        std::fs::write(&file, "[docker]\n").unwrap();
        let config = super::super::Config::load(&paths).unwrap();
        let docker = super::super::docker_config(&paths, &config);
        assert_eq!(docker.workspace_mount, WorkspaceMount::Container);
        assert_eq!(docker.bind_root, None);
        std::fs::write(&file, "[docker]\nworkspace_mount = \"tmpfs\"\n").unwrap();
        let error = super::super::Config::load(&paths).unwrap_err().to_string();
        assert_eq!(
            error,
            format!(
                "envrt: config \"{}\": [docker] workspace_mount expects \"container\" or \"bind\", got \"tmpfs\"",
                file.display()
            )
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

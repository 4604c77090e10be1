//! Each driver's `envrt.toml` sections reach its settings through its descriptor, with the
//! exact refusals the file format had before the registry: `[local]`, `[docker]`,
//! `[sandbox]` and `[[plugin]]`.
#![cfg(all(feature = "config", feature = "all-drivers"))]

use std::path::{Path, PathBuf};

use envrt::config::{Config, Paths};

/// Loads `text` as `<dir>/envrt.toml`: the configuration or the error's text.
fn load(dir: &Path, text: &str) -> Result<Config, String> {
    let file = dir.join("envrt.toml");
    std::fs::write(&file, text).unwrap();
    let paths = Paths {
        config: Some(file),
        state_dir: dir.join("state"),
    };
    Config::load(&paths).map_err(|e| e.to_string())
}

fn prefix(dir: &Path) -> String {
    format!("envrt: config \"{}\": ", dir.join("envrt.toml").display())
}

#[test]
fn the_local_section_sets_the_root_and_the_path_scope() {
    let dir = tempfile::tempdir().unwrap();
    let local =
        |text: &str| load(dir.path(), text).map(|c| c.driver_settings::<envrt::local::LocalConfig>().unwrap().clone());
    let config = local("").unwrap();
    assert_eq!(config.root, Some(dir.path().join("state/workspaces")));
    assert_eq!(config.path_scope, envrt::core::PathScope::Workspace);
    let config = local("[local]\nroot = \"/tmp/ws\"\npaths = \"host\"\n").unwrap();
    assert_eq!(config.root, Some(PathBuf::from("/tmp/ws")));
    assert_eq!(config.path_scope, envrt::core::PathScope::WholeEnvironment);
    for (value, got) in [
        ("\"Host\"", "\"Host\""),
        ("\"anywhere\"", "\"anywhere\""),
        ("true", "true"),
        ("1", "1"),
    ] {
        assert_eq!(
            local(&format!("[local]\npaths = {value}\n")).unwrap_err(),
            format!(
                "{}[local] paths expects \"workspace\" or \"host\", got {got}",
                prefix(dir.path())
            )
        );
    }
}

#[test]
fn the_docker_keys_reach_the_docker_config_and_are_labelled_with_the_state_dir() {
    use envrt::docker::{DockerConfig, WorkspaceMount};
    let dir = tempfile::tempdir().unwrap();
    let docker = |text: &str| load(dir.path(), text).map(|c| c.driver_settings::<DockerConfig>().unwrap().clone());
    let config =
        docker("[docker]\nhost = \"tcp://127.0.0.1:2375\"\nworkspace_mount = \"bind\"\nbind_root = \"/srv/b\"\n")
            .unwrap();
    assert_eq!(config.host.as_deref(), Some("tcp://127.0.0.1:2375"));
    assert_eq!(config.workspace_mount, WorkspaceMount::Bind);
    assert_eq!(config.bind_root.as_deref(), Some(Path::new("/srv/b")));
    let config = docker("[docker]\n").unwrap();
    assert_eq!(config.workspace_mount, WorkspaceMount::Container);
    assert_eq!(config.bind_root, None);
    assert_eq!(
        docker("[docker]\nworkspace_mount = \"tmpfs\"\n").unwrap_err(),
        format!(
            "{}[docker] workspace_mount expects \"container\" or \"bind\", got \"tmpfs\"",
            prefix(dir.path())
        )
    );
    assert_eq!(
        docker("[docker]\nbind_root = \"b\"\n").unwrap_err(),
        format!(
            "{}[docker] bind_root must be an absolute path, got \"b\"",
            prefix(dir.path())
        )
    );
}

#[test]
fn the_sandbox_worker_and_plugins_are_paths_beside_the_file() {
    use envrt::plugin_sandbox::{PluginFile, SandboxSettings};
    let dir = tempfile::tempdir().unwrap();
    let sandbox = |text: &str| load(dir.path(), text).map(|c| c.driver_settings::<SandboxSettings>().unwrap().clone());
    assert_eq!(sandbox("").unwrap().worker, None);
    assert_eq!(
        sandbox("[sandbox]\nworker = \"/opt/w\"\n").unwrap().worker,
        Some("/opt/w".into())
    );
    assert_eq!(
        sandbox("[sandbox]\nworker = \"bin/w\"\n").unwrap().worker,
        Some(dir.path().join("bin/w"))
    );
    assert_eq!(
        sandbox("[sandbox]\nwork = \"w\"\n").unwrap_err(),
        format!("{}unknown field `work`, expected `worker`", prefix(dir.path()))
    );
    let settings = sandbox(
        "[[plugin]]\nmanifest = \"p/plugin.json\"\ndriver_key = \"bwrap\"\n\
         secrets = [\"env:API_TOKEN\", \"file:/run/secrets/t\"]\nhttp_allow = [\"api.example.com\", \"10.0.0.1:8080\"]\n\
         http_roots = [\"ca/root.pem\"]\n[plugin.config]\nlevel = 2\n",
    )
    .unwrap();
    assert_eq!(
        settings.plugin_files,
        vec![PluginFile {
            manifest: dir.path().join("p/plugin.json"),
            driver_key: Some("bwrap".into()),
            config: serde_json::json!({"level": 2}).as_object().cloned().unwrap(),
            secrets: vec!["env:API_TOKEN".into(), "file:/run/secrets/t".into()],
            http_allow: vec!["api.example.com".into(), "10.0.0.1:8080".into()],
            http_roots: vec![dir.path().join("ca/root.pem")],
        }]
    );
    assert_eq!(
        sandbox("[[plugin]]\nmanifest = \"m\"\nkey = 1\n").unwrap_err(),
        format!(
            "{}unknown field `key`, expected one of `manifest`, `driver_key`, `config`, `secrets`, `http_allow`, `http_roots`",
            prefix(dir.path())
        )
    );
    for entry in ["API_TOKEN", "env:", "env:1X", "env:A-B", "file:rel/path", "vault:x"] {
        assert_eq!(
            sandbox(&format!("[[plugin]]\nmanifest = \"m.json\"\nsecrets = [\"{entry}\"]\n")).unwrap_err(),
            format!(
                "{}[[plugin]] \"m.json\": secrets entry \"{entry}\" must be env:NAME (a variable name) or file:/absolute/path",
                prefix(dir.path())
            ),
            "{entry}"
        );
    }
    for entry in [
        "",
        "http://api.example.com",
        "api.example.com/path",
        "api.example.com:0",
        "api.example.com:65536",
        "api.example.com:",
        "[::1]:80",
        "user@host",
        "-host",
        "a b",
    ] {
        assert_eq!(
            sandbox(&format!(
                "[[plugin]]\nmanifest = \"m.json\"\nhttp_allow = [\"{entry}\"]\n"
            ))
            .unwrap_err(),
            format!(
                "{}[[plugin]] \"m.json\": http_allow entry \"{entry}\" must be a host or host:port \
                 (no scheme, path or IPv6 literal; port 1-65535)",
                prefix(dir.path())
            ),
            "{entry}"
        );
    }
    assert_eq!(
        sandbox("[[plugin]]\nmanifest = \"m.json\"\nsecrets = \"env:A\"\n").unwrap_err(),
        format!(
            "{}invalid type: string \"env:A\", expected a sequence",
            prefix(dir.path())
        )
    );
}

#[test]
fn an_unknown_top_level_key_lists_every_section_in_the_format_order() {
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(
        load(dir.path(), "colour = 1\n").unwrap_err(),
        format!(
            "{}unknown field `colour`, expected one of `company`, `default`, `local`, `docker`, `sandbox`, `plugin`, `environment`",
            prefix(dir.path())
        )
    );
}

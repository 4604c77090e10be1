//! Unknown driver config keys are refused, never silently ignored: a misspelled hardening
//! key (`pidLimit`, `memorybytes`, `readonlyRootFs`, or envrt.toml's snake case spellings
//! of them) in `[environment.config]` stops `Assembly::open` with a text naming the file,
//! the environment, the key and the known keys, for the local, Docker (real engine) and
//! ssh drivers; the same environment handed to `put_environment` (the store and Python
//! path) is refused with the same driver text and not stored. `[[plugin]]` entries are
//! strict as well.
#![cfg(all(feature = "config", feature = "local", feature = "docker", feature = "ssh"))]

use envrt::config::{Assembly, Paths};
use envrt::{Environment, JsonMap, RuntimeBuilder};

const DOCKER_KEYS: &str = "`image`, `user`, `workingDir`, `env`, `network`, `memoryBytes`, `nanoCpus`, `pidsLimit`, `readOnlyRootFs`, `duplex`, `allowedUsers`";
const SSH_KEYS: &str = "`host`, `port`, `user`, `key`, `knownHosts`, `known_hosts`, `acceptNewHostKey`, `accept_new_host_key`, \
     `connectRetrySeconds`, `connect_retry_seconds`";

/// The refusal `Assembly::open` gives for `toml`, an envrt.toml.
async fn open_error(toml: &str) -> (String, String) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("envrt.toml");
    std::fs::write(&file, toml).unwrap();
    let paths = Paths {
        config: Some(file.clone()),
        state_dir: dir.path().join("state"),
    };
    let error = Assembly::open(&paths, None).await.unwrap_err().to_string();
    (error, file.display().to_string())
}

fn config(value: serde_json::Value) -> JsonMap {
    value.as_object().cloned().unwrap()
}

#[tokio::test]
async fn misspelled_docker_hardening_keys_are_refused_naming_the_key_and_the_known_ones() {
    for key in [
        "pidLimit",
        "memorybytes",
        "readonlyRootFs",
        "read_only_root_fs",
        "pids_limit",
        "memory_bytes",
    ] {
        let (error, file) = open_error(&format!(
            "[[environment]]\nid = \"dev\"\ndriver = \"docker\"\n[environment.config]\nimage = \"envrt-test:latest\"\n{key} = 10\n"
        ))
        .await;
        assert_eq!(
            error,
            format!(
                "envrt: config \"{file}\": environment \"dev\": Docker environment config: unknown field `{key}`, expected one of {DOCKER_KEYS}"
            )
        );
    }
    let runtime = RuntimeBuilder::new().build().await.expect("the Docker engine answers");
    let environment = Environment::new("dev", "Dev", "docker").with_config(config(
        serde_json::json!({"image": "envrt-test:latest", "readOnlyRootFS": true}),
    ));
    let error = runtime.put_environment(environment).await.unwrap_err();
    assert_eq!(
        error.to_string(),
        format!(
            "Invalid input: Docker environment config: unknown field `readOnlyRootFS`, expected one of {DOCKER_KEYS}"
        )
    );
    assert_eq!(runtime.environment("dev").await.unwrap(), None, "nothing is stored");
    let known = Environment::new("ok", "Ok", "docker").with_config(config(serde_json::json!({
        "image": "envrt-test:latest", "pidsLimit": 10, "memoryBytes": 100000000, "readOnlyRootFs": true
    })));
    runtime.put_environment(known).await.unwrap();
}

#[tokio::test]
async fn unknown_local_and_ssh_keys_are_refused_on_open_and_on_put_environment() {
    let (error, file) = open_error(
        "[[environment]]\nid = \"box\"\ndriver = \"local\"\n[environment.config]\nallowed_users = [\"nobody\"]\n",
    )
    .await;
    assert_eq!(
        error,
        format!(
            "envrt: config \"{file}\": environment \"box\": local environment config: unknown field `allowed_users`, expected `allowedUsers`"
        )
    );
    let (error, file) = open_error(
        "[[environment]]\nid = \"far\"\ndriver = \"ssh\"\n[environment.config]\nhost = \"127.0.0.1\"\nidentity_file = \"/k\"\n",
    )
    .await;
    assert_eq!(
        error,
        format!(
            "envrt: config \"{file}\": environment \"far\": ssh environment config: unknown field `identity_file`, expected one of {SSH_KEYS}"
        )
    );
    let runtime = RuntimeBuilder::new().without_driver("docker").build().await.unwrap();
    let local = Environment::new("box", "Box", "local").with_config(config(serde_json::json!({"workingDir": "/w"})));
    assert_eq!(
        runtime.put_environment(local).await.unwrap_err().to_string(),
        "Invalid input: local environment config: unknown field `workingDir`, expected `allowedUsers`"
    );
    let ssh = Environment::new("far", "Far", "ssh").with_config(config(serde_json::json!({"host": "h", "prot": 22})));
    assert_eq!(
        runtime.put_environment(ssh).await.unwrap_err().to_string(),
        format!("Invalid input: ssh environment config: unknown field `prot`, expected one of {SSH_KEYS}")
    );
    assert!(runtime.environment("box").await.unwrap().is_none() && runtime.environment("far").await.unwrap().is_none());
    let fine =
        Environment::new("box", "Box", "local").with_config(config(serde_json::json!({"allowedUsers": ["nobody"]})));
    runtime.put_environment(fine).await.unwrap();
}

#[tokio::test]
async fn an_unknown_plugin_key_is_refused_naming_the_known_ones() {
    let (error, file) = open_error("[[plugin]]\nmanifest = \"plugin.json\"\ndriverKey = \"sandbox\"\n").await;
    assert_eq!(
        error,
        format!(
            "envrt: config \"{file}\": unknown field `driverKey`, expected one of `manifest`, `driver_key`, `config`, `secrets`, `http_allow`, `http_roots`"
        )
    );
}

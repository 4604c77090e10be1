//! The Docker driver has no idle timeouts yet: `--idle-timeout` on a Docker lease is
//! refused with the facade's exact text, and the lease acquired for it is released again,
//! its container removed. Against a real engine (skips loudly without one; fails under
//! `CI` as the shared helper says).

use std::path::PathBuf;
use std::process::{Command, Stdio};

use envrt_test_support::docker::image;

const BIN: &str = env!("CARGO_BIN_EXE_envrt");

#[test]
fn an_idle_timeout_on_a_docker_lease_is_refused_and_leaves_nothing() {
    if envrt_test_support::docker::image_or_skip().is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("envrt.toml"),
        format!(
            "[[environment]]\nid = \"ctr\"\ndriver = \"docker\"\n[environment.config]\nimage = \"{}\"\n",
            image()
        ),
    )
    .unwrap();
    let state: PathBuf = std::path::absolute(dir.path().join("state")).unwrap();
    let run = |args: &[&str]| {
        Command::new(BIN)
            .args(args)
            .current_dir(dir.path())
            .env("ENVRT_STATE_DIR", &state)
            .env_remove("ENVRT_CONFIG")
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    let out = run(&[
        "lease",
        "acquire",
        "--env-id",
        "ctr",
        "--detached",
        "--idle-timeout",
        "5s",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "Environment driver \"docker\" does not support idle timeouts.\n"
    );
    let list = run(&["lease", "list", "--all", "--json"]);
    let leases: serde_json::Value = serde_json::from_slice(&list.stdout).unwrap();
    let leases = leases.as_array().unwrap();
    assert_eq!(leases.len(), 1, "{leases:?}");
    assert_eq!(leases[0]["status"], "released");
    let id = leases[0]["id"].as_str().unwrap();
    let left = Command::new("docker")
        .args(["ps", "-aq", "--filter", &format!("label=envrt.lease-id={id}")])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&left.stdout),
        "",
        "the refused lease's container is left"
    );
}

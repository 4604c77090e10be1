//! The implicit `sandbox` driver of `envrt.toml` (no `[[plugin]]`): the reference worker
//! named by `[sandbox] worker` runs real leases, and a worker that cannot be found leaves
//! the driver out with the exact reason in the skipped drivers.
#![cfg(all(feature = "config", feature = "plugin-sandbox"))]

use std::path::PathBuf;

use envrt::config::{Assembly, Paths};
use envrt::{AcquireRequest, ExecuteRequest, LeaseStatus};

/// The reference worker built in this target directory (`cargo build -p
/// envrt-sandbox-worker`; `cargo xtask ci` builds the workspace).
fn built_worker() -> PathBuf {
    envrt_test_support::sandbox::built_worker().unwrap_or_else(|e| panic!("{e}"))
}

fn setup(sandbox_section: &str) -> (tempfile::TempDir, Paths) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("envrt.toml");
    std::fs::write(
        &file,
        format!("{sandbox_section}\n[[environment]]\nid = \"box\"\ndriver = \"sandbox\"\n"),
    )
    .unwrap();
    let paths = Paths {
        config: Some(file),
        state_dir: dir.path().join("state"),
    };
    (dir, paths)
}

#[tokio::test]
async fn the_configured_sandbox_worker_runs_the_sandbox_driver() {
    let worker = built_worker();
    let (_dir, paths) = setup(&format!("[sandbox]\nworker = \"{}\"", worker.display()));
    let assembly = Assembly::open(&paths, None).await.unwrap();
    assert!(assembly.skipped.is_empty(), "{:?}", assembly.skipped);
    let runtime = &assembly.runtime;
    let lease = runtime
        .acquire_lease(AcquireRequest::new("box", "local"))
        .await
        .unwrap();
    let result = runtime
        .execute(&lease.id, ExecuteRequest::new("echo", ["inside"]))
        .await
        .unwrap();
    assert_eq!(result.stdout, b"inside\n");
    runtime.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
}

#[tokio::test]
async fn a_missing_sandbox_worker_is_a_skipped_driver_with_the_reason() {
    let (dir, paths) = setup("[sandbox]\nworker = \"bin/envrt-sandbox-worker\"");
    let assembly = Assembly::open(&paths, None).await.unwrap();
    let skipped: Vec<(String, String)> = assembly
        .skipped
        .iter()
        .map(|s| (s.key.clone(), s.error.to_string()))
        .collect();
    assert_eq!(
        skipped,
        [(
            "sandbox".to_owned(),
            format!(
                "Sandbox worker \"{}\" (set by [sandbox] worker in envrt.toml) is not an executable file.",
                dir.path().join("bin/envrt-sandbox-worker").display()
            )
        )]
    );
    assert_eq!(assembly.skipped[0].error.kind(), "unavailable");
    // the facade keeps Paperclip's text
    let err = assembly
        .runtime
        .acquire_lease(AcquireRequest::new("box", "local"))
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "Environment driver \"sandbox\" is not registered in the environment runtime yet."
    );
}

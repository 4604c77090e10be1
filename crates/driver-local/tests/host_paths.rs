//! The opt-in host path scope (`LocalConfig::path_scope` = whole-environment, `paths =
//! "host"` in envrt.toml): absolute `cwd` and sync paths anywhere on the host are accepted,
//! relative ones still start at the workspace and `..` is still refused; the default
//! scope keeps refusing them with the exact text.

mod common;

use common::{Harness, Scratch};
use envrt_driver_local::LocalConfig;
use envrt_runtime_core::{EnvironmentDriver, ExecuteRequest, PathScope, SyncFile, SyncOperation};

fn op(file: SyncFile) -> Vec<SyncOperation> {
    vec![SyncOperation {
        operation_id: "op".into(),
        files: vec![file],
        post_upload_commands: Vec::new(),
    }]
}

#[tokio::test]
async fn the_host_scope_accepts_absolute_cwd_and_file_paths_anywhere() {
    let h = Harness::with_config(LocalConfig {
        path_scope: PathScope::WholeEnvironment,
        ..Default::default()
    })
    .await;
    assert_eq!(h.driver.path_scope(), PathScope::WholeEnvironment);
    let lease = h.lease().await;
    let outside = Scratch::new("hostpaths");
    let staging = Scratch::new("hostpaths-staging");
    std::fs::write(staging.join("in.txt"), "hello").unwrap();

    // A command may start anywhere on the host.
    let mut request = ExecuteRequest::new("ls", Vec::<String>::new());
    request.cwd = Some("/usr/bin".into());
    let listed = h.execute(&lease, request).await;
    assert_eq!(listed.exit_code, Some(0));
    assert!(String::from_utf8_lossy(&listed.stdout).lines().any(|l| l == "env"));

    // Files go in and out of any absolute host path (parents created).
    let target = outside.s("deep/er/file.txt");
    h.runtime
        .sync_in(&lease.id, &op(SyncFile::file(staging.s("in.txt"), target.clone())))
        .await
        .unwrap();
    assert_eq!(
        std::fs::read_to_string(outside.join("deep/er/file.txt")).unwrap(),
        "hello"
    );
    h.runtime
        .sync_out(&lease.id, &op(SyncFile::file(target, staging.s("out.txt"))))
        .await
        .unwrap();
    assert_eq!(std::fs::read_to_string(staging.join("out.txt")).unwrap(), "hello");

    // Relative paths still start at the workspace; `..` is still refused.
    h.runtime
        .sync_in(&lease.id, &op(SyncFile::file(staging.s("in.txt"), "rel/x.txt")))
        .await
        .unwrap();
    assert!(h.workspace(&lease).join("rel/x.txt").is_file());
    let error = h
        .runtime
        .sync_in(&lease.id, &op(SyncFile::file(staging.s("in.txt"), "../x.txt")))
        .await
        .unwrap_err();
    assert_eq!(error.to_string(), "Path \"../x.txt\" is outside the lease workspace.");
    let mut request = ExecuteRequest::new("true", Vec::<String>::new());
    request.cwd = Some("/tmp/../etc".into());
    let error = h.runtime.execute(&lease.id, request).await.unwrap_err();
    assert_eq!(
        error.to_string(),
        "Path \"/tmp/../etc\" is outside the lease workspace."
    );
    h.runtime
        .release_lease(&lease.id, envrt_runtime_core::LeaseStatus::Released)
        .await
        .unwrap();
    h.finish();
}

#[tokio::test]
async fn the_default_scope_still_refuses_host_paths() {
    let h = Harness::new().await;
    assert_eq!(h.driver.path_scope(), PathScope::Workspace);
    let lease = h.lease().await;
    let staging = Scratch::new("hostpaths-default");
    std::fs::write(staging.join("in.txt"), "hello").unwrap();
    let mut request = ExecuteRequest::new("ls", Vec::<String>::new());
    request.cwd = Some("/usr/bin".into());
    let error = h.runtime.execute(&lease.id, request).await.unwrap_err();
    assert_eq!(error.to_string(), "Path \"/usr/bin\" is outside the lease workspace.");
    let error = h
        .runtime
        .sync_in(
            &lease.id,
            &op(SyncFile::file(staging.s("in.txt"), staging.s("copy.txt"))),
        )
        .await
        .unwrap_err();
    assert_eq!(
        error.to_string(),
        format!("Path \"{}\" is outside the lease workspace.", staging.s("copy.txt"))
    );
    assert!(!staging.join("copy.txt").exists());
    h.runtime
        .release_lease(&lease.id, envrt_runtime_core::LeaseStatus::Released)
        .await
        .unwrap();
    h.finish();
}

//! `envrt::files` on real drivers: the local driver (real processes; the permission cases
//! only when not root, since root's `test -w` is always true) and, with the `docker`
//! feature, a real Docker engine whose commands run as `nobody` (skips loudly without an
//! engine or the test image; fails instead with `ENVRT_REQUIRE_DOCKER=1`).

use envrt::files::{self, EntryKind, FileAccess, FileError};
use envrt::{AcquireRequest, Environment, EnvironmentRuntime, ExecuteRequest, LeaseStatus, RuntimeBuilder};

fn is_root() -> bool {
    std::process::Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

async fn sh(runtime: &EnvironmentRuntime, lease: &str, script: &str) {
    let result = runtime
        .execute(lease, ExecuteRequest::new("sh", ["-c", script]))
        .await
        .unwrap();
    assert_eq!(
        result.exit_code,
        Some(0),
        "{script}: {}",
        String::from_utf8_lossy(&result.stderr)
    );
}

/// The checks every driver passes; `absolute` is a writable absolute directory the
/// driver accepts, when it accepts any outside the workspace.
async fn common_checks(runtime: &EnvironmentRuntime, lease: &str) {
    files::write_file(runtime, lease, "a/b.txt", b"one", None)
        .await
        .unwrap();
    assert_eq!(files::read_file(runtime, lease, "a/b.txt").await.unwrap(), b"one");
    files::write_file(runtime, lease, "a/b.txt", b"two", None)
        .await
        .unwrap();
    assert_eq!(files::read_file(runtime, lease, "a/b.txt").await.unwrap(), b"two");

    // A file over a directory: refused, and the directory keeps its content.
    let error = files::write_file(runtime, lease, "a", b"x", None).await.unwrap_err();
    assert!(matches!(error, FileError::IsADirectory { .. }), "{error:?}");
    assert_eq!(error.to_string(), "Path \"a\" is a directory, not a file.");
    assert_eq!(files::read_file(runtime, lease, "a/b.txt").await.unwrap(), b"two");

    let error = files::read_file(runtime, lease, "a").await.unwrap_err();
    assert_eq!(error.to_string(), "Path \"a\" is a directory, not a file.");
    assert_eq!(error.kind(), "is_a_directory");

    for missing in ["nothing.txt", "no/such/parent.txt"] {
        let error = files::read_file(runtime, lease, missing).await.unwrap_err();
        assert!(matches!(error, FileError::NotFound { .. }), "{error:?}");
        assert_eq!(error.to_string(), format!("File \"{missing}\" does not exist."));
    }

    let found = files::probe(runtime, lease, "a/b.txt", true).await.unwrap();
    assert_eq!((found.kind, found.link), (EntryKind::File, false));
    assert!(found.mode.as_deref().is_some_and(|m| m.starts_with("-rw")), "{found:?}");
    let found = files::probe(runtime, lease, "a/b.txt", false).await.unwrap();
    assert_eq!((found.kind, found.mode), (EntryKind::File, None));
}

/// The permission checks, for a lease whose commands run as an unprivileged user.
async fn permission_checks(runtime: &EnvironmentRuntime, lease: &str) {
    files::write_file(runtime, lease, "ro.txt", b"keep", None)
        .await
        .unwrap();
    sh(runtime, lease, "chmod a-w ro.txt").await;
    let error = files::write_file(runtime, lease, "ro.txt", b"lost", None)
        .await
        .unwrap_err();
    assert!(
        matches!(
            &error,
            FileError::PermissionDenied {
                access: FileAccess::Write,
                ..
            }
        ),
        "{error:?}"
    );
    assert_eq!(error.to_string(), "The lease's user may not write \"ro.txt\".");
    sh(runtime, lease, "chmod u+w ro.txt && chmod a-r ro.txt").await;
    let error = files::read_file(runtime, lease, "ro.txt").await.unwrap_err();
    assert_eq!(error.to_string(), "The lease's user may not read \"ro.txt\".");
    assert_eq!(error.kind(), "permission_denied");
    sh(runtime, lease, "chmod u+r ro.txt").await;
    assert_eq!(files::read_file(runtime, lease, "ro.txt").await.unwrap(), b"keep");

    // A new file below a directory the user may not write.
    sh(runtime, lease, "mkdir -p locked && chmod a-w locked").await;
    let error = files::write_file(runtime, lease, "locked/new/x.txt", b"x", None)
        .await
        .unwrap_err();
    assert_eq!(
        error.to_string(),
        "The lease's user may not write \"locked/new/x.txt\"."
    );
    sh(runtime, lease, "chmod u+w locked").await;
}

#[tokio::test]
async fn local_leases_refuse_directories_missing_files_and_denied_access() {
    let root = tempfile::tempdir().unwrap();
    let runtime = RuntimeBuilder::new()
        .without_driver("docker")
        .configure(envrt::local::LocalConfig {
            root: Some(root.path().join("ws")),
            ..Default::default()
        })
        .build()
        .await
        .unwrap();
    runtime
        .put_environment(Environment::new("dev", "dev", "local"))
        .await
        .unwrap();
    let lease = runtime.acquire_lease(AcquireRequest::new("dev", "acme")).await.unwrap();
    common_checks(&runtime, &lease.id).await;

    // The default path scope still refuses outside paths with the driver's own text,
    // before any probe could say what is there.
    for outside in ["/etc", "/etc/hostname"] {
        let error = files::read_file(&runtime, &lease.id, outside).await.unwrap_err();
        assert_eq!(
            error.to_string(),
            format!("Path \"{outside}\" is outside the lease workspace.")
        );
        assert_eq!(error.kind(), "path_outside_workspace");
    }
    assert_eq!(files::probe(&runtime, &lease.id, "/etc", false).await, None);

    if is_root() {
        eprintln!("SKIPPED: the local permission checks (root's test -w and -r are always true)");
    } else {
        permission_checks(&runtime, &lease.id).await;
    }
    runtime.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
}

#[cfg(feature = "docker")]
#[tokio::test]
async fn docker_leases_check_files_as_the_container_user() {
    let Some(image) = envrt_test_support::docker::image_or_skip() else {
        return;
    };
    let root = tempfile::tempdir().unwrap();
    let runtime = RuntimeBuilder::new()
        .configure(envrt::local::LocalConfig {
            root: Some(root.path().join("ws")),
            ..Default::default()
        })
        .build()
        .await
        .unwrap();
    let mut environment = Environment::new("ctr", "ctr", "docker");
    environment.config.insert("image".into(), image.clone().into());
    environment.config.insert("user".into(), "65534:65534".into());
    runtime.put_environment(environment).await.unwrap();
    let lease = runtime.acquire_lease(AcquireRequest::new("ctr", "acme")).await.unwrap();
    common_checks(&runtime, &lease.id).await;
    permission_checks(&runtime, &lease.id).await;
    // The container is the boundary: absolute paths anywhere in it are looked at.
    let error = files::write_file(&runtime, &lease.id, "/tmp", b"x", None)
        .await
        .unwrap_err();
    assert_eq!(error.to_string(), "Path \"/tmp\" is a directory, not a file.");
    let error = files::write_file(&runtime, &lease.id, "/etc/passwd", b"x", None)
        .await
        .unwrap_err();
    assert_eq!(error.to_string(), "The lease's user may not write \"/etc/passwd\".");
    runtime.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
}

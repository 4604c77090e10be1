//! Through the host and the reference worker on real `bwrap`: a
//! command runs as a uid (and gid) inside the sandbox's user namespace; `cwd` may be any
//! directory of the sandbox; `/tmp` is kept across a lease's commands and goes with the
//! lease. A worker that does not advertise the user extension gets no user request.

mod host_common;

use envrt_driver_plugin_sandbox::SandboxOptions;
use envrt_runtime_core::{DriverError, ExecuteRequest, LeaseStatus, RuntimeError};
use host_common::*;

fn sh(script: &str) -> ExecuteRequest {
    ExecuteRequest::new("sh", ["-c", script])
}

fn stdout(r: &envrt_runtime_core::ExecuteResult) -> String {
    String::from_utf8_lossy(&r.stdout).into_owned()
}

/// Names under the worker root that are a lease's `/tmp`.
fn tmp_dirs(root: &std::path::Path) -> Vec<String> {
    std::fs::read_dir(root)
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with(".tmp-"))
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test]
async fn users_cwds_and_a_kept_tmp_on_the_reference_worker() {
    let root = TempDir::new("user-cwd-tmp");
    let Some(manifest) = reference_manifest(root.path()) else {
        return;
    };
    let driver = start(manifest, SandboxOptions::default()).await;
    assert!(driver.supported_methods().contains("envrtExecuteAsUser"));
    {
        use envrt_runtime_core::EnvironmentDriver as _;
        assert_eq!(driver.path_scope(), envrt_runtime_core::PathScope::WholeEnvironment);
    }
    let runtime = runtime_with(driver).await;
    let lease = acquire(&runtime).await;

    // Users: a uid, a uid and gid, names of the sandbox's /etc/passwd and /etc/group; an
    // unknown name is refused with the worker's exact text.
    for (user, expected) in [
        ("1234", "1234 1234\n"),
        ("1234:2345", "1234 2345\n"),
        ("0", "0 0\n"),
        ("root", "0 0\n"),
        ("nobody", "65534 65534\n"),
        ("nobody:root", "65534 0\n"),
        ("1234:nogroup", "1234 65534\n"),
    ] {
        let mut request = sh("echo $(id -u) $(id -g)");
        request.user = Some(user.into());
        let r = bounded("execute", runtime.execute(&lease.id, request)).await.unwrap();
        assert_eq!(stdout(&r), expected, "{user}: {}", String::from_utf8_lossy(&r.stderr));
    }
    // `whoami` as root names root: the sandbox's /etc/passwd is the host's
    let mut request = ExecuteRequest::new("whoami", [""; 0]);
    request.user = Some("root".into());
    let r = bounded("execute", runtime.execute(&lease.id, request)).await.unwrap();
    assert_eq!(stdout(&r), "root\n", "{}", String::from_utf8_lossy(&r.stderr));
    for (user, reason) in [
        ("no-such-user", "no such user in the sandbox."),
        ("root:no-such-group", "no such group in the sandbox."),
        ("root:", "the sandbox takes UID, UID:GID, NAME or NAME:GROUP."),
        ("a:b:c", "the sandbox takes UID, UID:GID, NAME or NAME:GROUP."),
    ] {
        let mut request = sh("true");
        request.user = Some(user.into());
        let err = bounded("execute", runtime.execute(&lease.id, request))
            .await
            .unwrap_err();
        assert!(
            matches!(&err, RuntimeError::Driver(DriverError::UserRefused { user: u, .. }) if u == user),
            "{err:?}"
        );
        assert_eq!(err.to_string(), format!("Cannot run as user \"{user}\": {reason}"));
    }
    // Files the user writes in the workspace are its own, inside.
    let mut request = sh("touch mine && stat -c %u mine");
    request.user = Some("1234".into());
    let r = bounded("execute", runtime.execute(&lease.id, request)).await.unwrap();
    assert_eq!(stdout(&r), "1234\n", "{}", String::from_utf8_lossy(&r.stderr));

    // Any directory of the sandbox as cwd; one it lacks, and `..`, are refused.
    for cwd in ["/usr/bin", "/tmp", "/", "/workspace"] {
        let mut request = ExecuteRequest::new("pwd", [""; 0]);
        request.cwd = Some(cwd.into());
        let r = bounded("execute", runtime.execute(&lease.id, request)).await.unwrap();
        assert_eq!(stdout(&r), format!("{cwd}\n"));
    }
    let mut request = ExecuteRequest::new("pwd", [""; 0]);
    request.cwd = Some("/envrt-nowhere".into());
    let err = bounded("execute", runtime.execute(&lease.id, request))
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "Invalid input: cwd \"/envrt-nowhere\" is not a directory in the environment."
    );
    let mut request = ExecuteRequest::new("pwd", [""; 0]);
    request.cwd = Some("../x".into());
    let err = bounded("execute", runtime.execute(&lease.id, request))
        .await
        .unwrap_err();
    assert_eq!(err.to_string(), "Path \"../x\" is outside the lease workspace.");

    // /tmp outlives a command, belongs to the lease, and is not in the workspace.
    let r = bounded(
        "execute",
        runtime.execute(&lease.id, sh("echo kept > /tmp/f; mkdir -p /tmp/d")),
    )
    .await;
    assert_eq!(r.unwrap().exit_code, Some(0));
    let r = bounded(
        "execute",
        runtime.execute(&lease.id, sh("cat /tmp/f; ls -A /workspace")),
    )
    .await;
    assert_eq!(stdout(&r.unwrap()), "kept\nmine\n");
    let other = acquire(&runtime).await;
    let r = bounded("execute", runtime.execute(&other.id, sh("ls -A /tmp"))).await;
    assert_eq!(stdout(&r.unwrap()), "", "another lease sees another /tmp");
    assert_eq!(tmp_dirs(root.path()).len(), 2, "one /tmp per lease that ran a command");
    for lease in [&lease, &other] {
        runtime.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
    }
    assert_eq!(
        tmp_dirs(root.path()),
        Vec::<String>::new(),
        "a lease's /tmp goes with it"
    );
}

#[tokio::test]
async fn a_worker_without_the_user_extension_gets_no_user_request() {
    let driver = start(script_manifest("", &[]), SandboxOptions::default()).await;
    assert!(!driver.supported_methods().contains("envrtExecuteAsUser"));
    {
        use envrt_runtime_core::EnvironmentDriver as _;
        assert_eq!(driver.path_scope(), envrt_runtime_core::PathScope::Workspace);
    }
    let runtime = runtime_with(driver).await;
    let lease = acquire(&runtime).await;
    let mut request = sh("true");
    request.user = Some("1234".into());
    let err = bounded("execute", runtime.execute(&lease.id, request))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, RuntimeError::Driver(DriverError::UserRefused { .. })),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        "Cannot run as user \"1234\": the plugin worker does not advertise \"envrtExecuteAsUser\"."
    );
    runtime.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
}

//! Execute, sync, duplex and the lease life cycle against the real test `sshd`.

mod common;

use std::time::Duration;

use envrt_runtime_core::sync::{SyncFile, SyncOperation};
use envrt_runtime_core::{ExecuteRequest, LeasePolicy, LeaseStatus, Secret};

use common::{acquire, runtime, server, survivors};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn execute_reports_codes_output_env_and_missing_programs() {
    let Some(server) = server() else { return };
    let (_driver, rt, root) = runtime(&server, "exec", |_| {}).await;
    let lease = acquire(&rt).await;
    let r = rt
        .execute(
            &lease.id,
            ExecuteRequest::new("sh", ["-c", "printf out; printf err >&2; exit 3"]),
        )
        .await
        .unwrap();
    assert_eq!(
        (r.stdout.as_slice(), r.stderr.as_slice(), r.exit_code),
        (&b"out"[..], &b"err"[..], Some(3))
    );

    let mut request = ExecuteRequest::new("sh", ["-c", "printf '%s|%s|%s' \"$TOKEN\" \"$HOME\" \"$(pwd)\"; cat"]);
    request
        .env
        .insert("TOKEN".into(), Secret::new("it's a secret\nline").into());
    request.stdin = Some(b"from stdin".to_vec());
    let r = rt.execute(&lease.id, request).await.unwrap();
    let workspace = format!("{}/{root}/lease-{}/work", server.home(), lease.id);
    assert_eq!(
        String::from_utf8(r.stdout).unwrap(),
        format!("it's a secret\nline|{workspace}|{workspace}from stdin")
    );

    let r = rt
        .execute(&lease.id, ExecuteRequest::new("no-such-program-envrt", ["x"]))
        .await
        .unwrap();
    assert_eq!(r.exit_code, Some(127));
    assert_eq!(
        String::from_utf8_lossy(&r.stderr),
        "envrt: command not found: no-such-program-envrt\n"
    );

    // Only the allow-list, HOME and the request's variables reach the command.
    let r = rt
        .execute(&lease.id, ExecuteRequest::new("env", [""; 0]))
        .await
        .unwrap();
    let mut names: Vec<String> = String::from_utf8_lossy(&r.stdout)
        .lines()
        .filter_map(|l| l.split_once('=').map(|(k, _)| k.to_owned()))
        .collect();
    names.sort();
    names.retain(|n| n != "PWD" && n != "LANG");
    assert_eq!(names, ["HOME", "PATH"]);

    let mut capped = ExecuteRequest::new("sh", ["-c", "head -c 300000 /dev/zero"]);
    capped.max_output_bytes = Some(1000);
    let r = rt.execute(&lease.id, capped).await.unwrap();
    assert_eq!((r.stdout.len(), r.stdout_truncated), (1000, true));

    rt.execute(&lease.id, ExecuteRequest::new("ln", ["-s", "/tmp", "out"]))
        .await
        .unwrap();
    for cwd in ["out", "../x", "/etc"] {
        let mut request = ExecuteRequest::new("pwd", [""; 0]);
        request.cwd = Some(cwd.into());
        let err = rt.execute(&lease.id, request).await.unwrap_err();
        assert_eq!(
            err.to_string(),
            format!("Path \"{cwd}\" is outside the lease workspace.")
        );
    }
    let mut request = ExecuteRequest::new("pwd", [""; 0]);
    request.cwd = Some("missing".into());
    assert_eq!(
        rt.execute(&lease.id, request).await.unwrap_err().to_string(),
        "Invalid input: cwd \"missing\" is not a directory in the environment."
    );
    rt.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
    assert!(
        !std::path::Path::new(&workspace).exists(),
        "the workspace is removed on release"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timeout_kills_the_whole_remote_tree_and_keeps_partial_output() {
    let Some(server) = server() else { return };
    let (_driver, rt, _root) = runtime(&server, "timeout", |c| c.kill_grace = Duration::from_millis(500)).await;
    let lease = acquire(&rt).await;
    let marker = format!("envrt-ssh-timeout-{}", common::uuid_like());
    let script = format!(
        "echo partial; sh -c 'while :; do sleep 1; done' {marker} & sh -c 'trap \"\" TERM; while :; do sleep 1; done' {marker} & wait"
    );
    let mut request = ExecuteRequest::new("sh", ["-c".to_string(), script]);
    request.timeout = Some(Duration::from_millis(1500));
    let r = rt.execute(&lease.id, request).await.unwrap();
    assert!(r.timed_out);
    assert_eq!(r.exit_code, None);
    assert!(r.signal.is_some());
    assert!(r.stdout.starts_with(b"partial"));
    assert_eq!(survivors(&marker).await, Vec::<u32>::new());

    // A background child holding stdout does not hold the call, and does not survive it.
    let script = format!("sh -c 'while :; do sleep 1; done' {marker} & echo started");
    let r = rt
        .execute(&lease.id, ExecuteRequest::new("sh", ["-c".to_string(), script]))
        .await
        .unwrap();
    assert_eq!((r.exit_code, r.stdout.as_slice()), (Some(0), &b"started\n"[..]));
    assert_eq!(survivors(&marker).await, Vec::<u32>::new());
    rt.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sync_round_trips_a_tree_and_refuses_escapes() {
    let Some(server) = server() else { return };
    let (_driver, rt, _root) = runtime(&server, "sync", |_| {}).await;
    let lease = acquire(&rt).await;
    let local = tempfile::tempdir().unwrap();
    let src = local.path().join("src");
    std::fs::create_dir_all(src.join("a/b")).unwrap();
    std::fs::write(src.join("a/b/f.txt"), b"hello").unwrap();
    std::fs::write(src.join("skip.log"), b"x").unwrap();
    std::os::unix::fs::symlink("a/b/f.txt", src.join("link")).unwrap();
    let mut entry = SyncFile::directory(src.to_str().unwrap(), "app");
    entry.exclude = vec!["*.log".into()];
    let op = SyncOperation {
        operation_id: "in".into(),
        files: vec![entry],
        post_upload_commands: vec![],
    };
    let result = rt.sync_in(&lease.id, &[op]).await.unwrap();
    assert_eq!(
        (
            result.operations[0].files_transferred,
            result.operations[0].bytes_transferred
        ),
        (1, 5)
    );
    let r = rt
        .execute(&lease.id, ExecuteRequest::new("sh", ["-c", "cat app/link; ls app"]))
        .await
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&r.stdout), "helloa\nlink\n");

    let out = local.path().join("out");
    let op = SyncOperation {
        operation_id: "out".into(),
        files: vec![SyncFile::directory("app", out.to_str().unwrap())],
        post_upload_commands: vec![],
    };
    rt.sync_out(&lease.id, &[op]).await.unwrap();
    assert_eq!(std::fs::read(out.join("link")).unwrap(), b"hello");
    assert_eq!(
        std::fs::read_link(out.join("link")).unwrap(),
        std::path::Path::new("a/b/f.txt")
    );

    // A link leading out of the target is refused before anything lands.
    std::os::unix::fs::symlink("../../etc", src.join("a/up")).unwrap();
    let op = SyncOperation {
        operation_id: "bad".into(),
        files: vec![SyncFile::directory(src.to_str().unwrap(), "other")],
        post_upload_commands: vec![],
    };
    assert_eq!(
        rt.sync_in(&lease.id, &[op]).await.unwrap_err().to_string(),
        "Entry \"a/up\" would be written outside the target \"other\"."
    );
    // A target whose parent is a link leading out is refused on the remote side.
    rt.execute(&lease.id, ExecuteRequest::new("ln", ["-s", "/tmp", "tmplink"]))
        .await
        .unwrap();
    let op = SyncOperation {
        operation_id: "bad2".into(),
        files: vec![SyncFile::file(src.join("a/b/f.txt").to_str().unwrap(), "tmplink/f")],
        post_upload_commands: vec![],
    };
    assert_eq!(
        rt.sync_in(&lease.id, &[op]).await.unwrap_err().to_string(),
        "Path \"tmplink/f\" is outside the lease workspace."
    );
    assert!(!std::path::Path::new("/tmp/f").exists());
    rt.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplex_round_trips_and_half_closes() {
    let Some(server) = server() else { return };
    let (_driver, rt, _root) = runtime(&server, "duplex", |_| {}).await;
    let lease = acquire(&rt).await;
    let channel = rt.open_duplex_channel(&lease.id, &["cat".to_string()]).await.unwrap();
    channel.write(b"ping\n").await.unwrap();
    assert_eq!(channel.read().await.unwrap().unwrap(), b"ping\n");
    channel.close_input().await.unwrap();
    assert_eq!(channel.read().await.unwrap(), None);
    let exit = channel.wait().await.unwrap();
    assert_eq!(exit.exit_code, Some(0));
    channel.close().await.unwrap();
    channel.close().await.unwrap();
    rt.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reusable_lease_resumes_from_another_driver() {
    let Some(server) = server() else { return };
    let (_driver, rt, root) = runtime(&server, "resume", |_| {}).await;
    let mut request = envrt_runtime_core::AcquireRequest::new("env-ssh", "acme");
    request.policy = LeasePolicy::ReuseByEnvironment;
    let lease = rt.acquire_lease(request).await.unwrap();
    rt.execute(&lease.id, ExecuteRequest::new("touch", ["kept"]))
        .await
        .unwrap();
    rt.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
    let dir = format!("{}/{root}/lease-{}/work/kept", server.home(), lease.id);
    assert!(
        std::path::Path::new(&dir).exists(),
        "a reusable lease keeps its workspace"
    );
    // A second driver (a restarted host program) finds it again.
    let other = envrt_driver_ssh::SshDriver::new(envrt_driver_ssh::SshConfig {
        root: root.to_string(),
        ..Default::default()
    })
    .unwrap();
    let mut stored = lease.clone();
    stored.metadata.remove("workspace");
    let context = envrt_runtime_core::LeaseContext {
        lease: stored,
        environment: None,
    };
    use envrt_runtime_core::EnvironmentDriver;
    let grant = other
        .as_resume()
        .unwrap()
        .resume_lease(&context)
        .await
        .unwrap()
        .unwrap();
    assert!(grant.metadata["workspace"].as_str().unwrap().ends_with("/work"));
    other.as_destroy().unwrap().destroy_lease(&context).await.unwrap();
    other.as_destroy().unwrap().destroy_lease(&context).await.unwrap();
    assert!(!std::path::Path::new(&dir).exists());
    assert!(
        other
            .as_resume()
            .unwrap()
            .resume_lease(&context)
            .await
            .unwrap()
            .is_none()
    );
    other.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_never_shows_on_any_command_line() {
    let Some(server) = server() else { return };
    let (_driver, rt, _root) = runtime(&server, "secret", |_| {}).await;
    let lease = acquire(&rt).await;
    let secret = format!("envrt-ssh-secret-{}", common::uuid_like());
    let mut request = ExecuteRequest::new("sh", ["-c", "sleep 2; printf %s \"$TOKEN\""]);
    request.env.insert("TOKEN".into(), Secret::new(secret.clone()).into());
    let run = rt.execute(&lease.id, request);
    let watch = async {
        let mut seen = Vec::new();
        // Every process of this machine (host and server side) while the command runs.
        for _ in 0..15 {
            seen.extend(common::processes_with(&secret));
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        seen
    };
    let (result, seen) = tokio::join!(run, watch);
    assert_eq!(result.unwrap().stdout, secret.as_bytes());
    assert_eq!(seen, Vec::<u32>::new(), "the secret showed on a command line");
    rt.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
}

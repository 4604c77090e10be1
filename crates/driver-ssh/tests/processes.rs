//! Persistent process sessions on the SSH driver against the real test `sshd` (this
//! machine is the server): the supervisor runs on the remote host and outlives the program
//! that started it and its master connection; release leaves no process of the lease (the
//! supervisor included), no supervisor socket and no forward; a supervisor that cannot be
//! placed withholds the capability with its exact reason. Needs `envrt-agent` built in this
//! target directory (`cargo build -p envrt-agent`).

mod common;

use std::sync::Arc;
use std::time::Duration;

use envrt_driver_ssh::{SshConfig, SshDriver};
use envrt_runtime_core::{
    AcquireRequest, Environment, EnvironmentRuntime, LeaseStatus, Offsets, OutputEvent, ProcessStatus, ProcessStream,
    SpawnRequest,
};

use common::{Root, Server, processes_with, server, survivors, unique_root};

/// How long any one call here may take before the test fails instead of hanging.
const BOUND: Duration = Duration::from_secs(60);

fn sh(script: &str) -> SpawnRequest {
    SpawnRequest::new(["sh", "-c", script])
}

/// A driver on `root` with its own control directory, behind a runtime on `store`.
async fn runtime_on(
    server: &Server,
    root: &str,
    control: &std::path::Path,
    store: Option<Arc<dyn envrt_runtime_core::LeaseStore>>,
    tune: impl FnOnce(&mut SshConfig),
) -> (Arc<SshDriver>, EnvironmentRuntime) {
    let mut config = SshConfig {
        root: root.to_owned(),
        control_dir: Some(control.to_path_buf()),
        ..SshConfig::default()
    };
    tune(&mut config);
    let driver = Arc::new(SshDriver::new(config).unwrap());
    let runtime = match store {
        Some(store) => EnvironmentRuntime::with_store(store),
        None => EnvironmentRuntime::new(),
    };
    runtime.register_driver(driver.clone());
    runtime
        .put_environment(Environment::new("env-ssh", "Remote", "ssh").with_config(server.config()))
        .await
        .unwrap();
    (driver, runtime)
}

fn root_guard(server: &Server, relative: String) -> Root {
    common::root_at(server, relative)
}

/// A private control directory for one driver (`0700`, as the driver requires).
fn control_dir() -> tempfile::TempDir {
    let dir = tempfile::Builder::new().prefix("essh").tempdir_in("/tmp").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    dir
}

/// The processes of the remote user whose working directory lies in `dir`.
fn processes_in(dir: &str) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        if entry.file_name().to_string_lossy().parse::<u32>().is_err() {
            continue;
        }
        if let Ok(cwd) = std::fs::read_link(entry.path().join("cwd"))
            && cwd.starts_with(dir)
        {
            found.push(format!("{} in {}", entry.path().display(), cwd.display()));
        }
    }
    found
}

/// The pid recorded for the lease's supervisor, while its directory exists.
fn agent_pid(workspace: &str) -> Option<u32> {
    let dir = workspace.trim_end_matches("/work");
    std::fs::read_to_string(format!("{dir}/agent.pid"))
        .ok()
        .and_then(|p| p.trim().parse().ok())
}

/// Whether `pid` runs (a zombie has ended: the test machine's PID 1 may not reap it soon).
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| stat.rsplit_once(") ").map(|(_, rest)| !rest.starts_with('Z')))
        .unwrap_or(false)
}

/// Every supervisor socket left in the account's cache.
fn sockets(server: &Server) -> Vec<String> {
    std::fs::read_dir(format!("{}/.cache/envrt-agent", server.home()))
        .map(|entries| {
            entries
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.ends_with(".sock"))
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_outlives_the_program_and_the_connection_that_spawned_it() {
    let Some(server) = server() else { return };
    let relative = unique_root("proc-survive");
    let _root = root_guard(&server, relative.clone());
    let (control_a, control_b) = (control_dir(), control_dir());
    let marker = format!("envrt-ssh-survivor-{}", common::uuid_like());
    let (first_driver, first) = runtime_on(&server, &relative, control_a.path(), None, |_| {}).await;
    let store = first.store().clone();
    let lease = first
        .acquire_lease(AcquireRequest::new("env-ssh", "acme"))
        .await
        .unwrap();
    let caps = first.resolve_capabilities(&lease.id).await.unwrap().unwrap();
    assert!(caps.persistent_process_sessions, "the test host serves processes");
    let script = format!("echo one; echo two >&2; read line; echo \"got $line\"; sleep 300; : {marker}");
    let mut request = sh(&script);
    request.stdin = envrt_runtime_core::StdinMode::Piped;
    let info = tokio::time::timeout(BOUND, first.spawn(&lease.id, request))
        .await
        .unwrap()
        .unwrap();
    let id = info.id.to_string();
    assert_eq!(info.status, ProcessStatus::Running);
    // The started time is the remote host's clock (here, this one's): within a minute.
    let now = envrt_runtime_core::Timestamp::now().0;
    assert!(
        info.started_at.0.abs_diff(now) < 60_000,
        "{} vs {now}",
        info.started_at.0
    );
    let workspace = lease.metadata["workspace"].as_str().unwrap().to_owned();
    let agent = agent_pid(&workspace).expect("the supervisor's pid is recorded");

    // The program goes away: its master connection (and with it the forward) is closed.
    first_driver.shutdown().await;
    drop(first);
    drop(first_driver);
    assert!(alive(agent), "the supervisor outlives the connection that started it");
    assert_eq!(processes_with(&marker).len(), 1, "the process still runs");

    let (second_driver, second) = runtime_on(&server, &relative, control_b.path(), Some(store), |_| {}).await;
    let found = second.process(&id).await.unwrap();
    assert_eq!(found.status, ProcessStatus::Running);
    assert_eq!(found.pid, info.pid);
    second.write_stdin(&id, b"hello\n").await.unwrap();
    let mut output = second.output(&id, &Offsets::zero()).await.unwrap();
    let mut stdout = Vec::new();
    let mut stderr = Vec::new();
    // The streams are read in no order between them: until both are whole.
    while !(String::from_utf8_lossy(&stdout).contains("got hello\n") && stderr == b"two\n") {
        match tokio::time::timeout(BOUND, output.next()).await.unwrap().unwrap() {
            Some(OutputEvent::Chunk(c)) if c.stream == ProcessStream::Stdout => {
                assert_eq!(c.offset, stdout.len() as u64);
                stdout.extend(c.bytes);
            }
            Some(OutputEvent::Chunk(c)) => {
                assert_eq!(c.offset, stderr.len() as u64);
                stderr.extend(c.bytes);
            }
            other => panic!("expected output, got {other:?}"),
        }
    }
    assert_eq!(stdout, b"one\ngot hello\n");
    assert_eq!(stderr, b"two\n");
    let signalled = second.signal(&id, "KILL").await.unwrap();
    assert_eq!(signalled.id.to_string(), id);
    let status = tokio::time::timeout(BOUND, second.wait_process(&id, None))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(status, ProcessStatus::Signalled { signal: 9 });
    assert_eq!(
        second.process(&id).await.unwrap().status,
        ProcessStatus::Signalled { signal: 9 }
    );
    assert_eq!(survivors(&marker).await, Vec::<u32>::new());
    second.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
    second_driver.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_leaves_no_process_of_the_lease_no_supervisor_and_no_socket() {
    let Some(server) = server() else { return };
    let relative = unique_root("proc-release");
    let _root = root_guard(&server, relative.clone());
    let control = control_dir();
    let marker = format!("envrt-ssh-released-{}", common::uuid_like());
    let (driver, rt) = runtime_on(&server, &relative, control.path(), None, |_| {}).await;
    let lease = rt.acquire_lease(AcquireRequest::new("env-ssh", "acme")).await.unwrap();
    let workspace = lease.metadata["workspace"].as_str().unwrap().to_owned();
    let lease_dir = workspace.trim_end_matches("/work").to_owned();
    let sockets_before = sockets(&server);
    // A plain child, a `setsid` escapee that left the workspace with a clean environment
    // (only the supervisor's subtree finds it), and a terminal process.
    let escapee = format!("cd / && exec env -i setsid sh -c 'sleep 300; : {marker}' &");
    let plain = rt
        .spawn(&lease.id, sh(&format!("{escapee} echo up; sleep 300; : {marker}")))
        .await
        .unwrap();
    let mut tty = sh(&format!("sleep 300; : {marker}"));
    tty.tty = Some(envrt_runtime_core::TtySize { rows: 24, cols: 80 });
    rt.spawn(&lease.id, tty).await.unwrap();
    let mut output = rt.output(&plain.id.to_string(), &Offsets::zero()).await.unwrap();
    match tokio::time::timeout(BOUND, output.next()).await.unwrap().unwrap() {
        Some(OutputEvent::Chunk(c)) => assert_eq!(c.bytes, b"up\n"),
        other => panic!("expected `up`, got {other:?}"),
    }
    drop(output);
    let until = tokio::time::Instant::now() + Duration::from_secs(10);
    while processes_with(&marker).len() < 3 && tokio::time::Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        processes_with(&marker).len() >= 3,
        "every process runs before the release"
    );
    let agent = agent_pid(&workspace).expect("the supervisor's pid is recorded");
    assert!(
        sockets(&server).len() > sockets_before.len(),
        "the supervisor has a socket"
    );
    let forwards: Vec<_> = std::fs::read_dir(control.path())
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("p-"))
        .collect();
    assert_eq!(forwards.len(), 1, "one forward directory for the lease");

    rt.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
    assert_eq!(survivors(&marker).await, Vec::<u32>::new());
    assert!(!alive(agent), "the supervisor is gone");
    assert_eq!(processes_in(&lease_dir), Vec::<String>::new());
    assert!(!std::path::Path::new(&lease_dir).exists());
    assert_eq!(sockets(&server), sockets_before, "no supervisor socket is left");
    let left: Vec<String> = std::fs::read_dir(control.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("p-"))
        .collect();
    assert_eq!(left, Vec::<String>::new(), "no forward directory is left");
    driver.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_supervisor_that_cannot_be_placed_withholds_the_capability_with_its_reason() {
    let Some(server) = server() else { return };
    let relative = unique_root("proc-none");
    let _root = root_guard(&server, relative.clone());
    let control = control_dir();
    let missing = control.path().join("no-agent");
    let (driver, rt) = runtime_on(&server, &relative, control.path(), None, |c| {
        c.agent = Some(missing.clone());
    })
    .await;
    let lease = rt.acquire_lease(AcquireRequest::new("env-ssh", "acme")).await.unwrap();
    let caps = rt.resolve_capabilities(&lease.id).await.unwrap().unwrap();
    assert!(!caps.persistent_process_sessions);
    assert_eq!(
        driver.process_support(&server.target()).await.unwrap_err(),
        format!(
            "Process supervisor \"{}\" cannot be read: No such file or directory (os error 2).",
            missing.display()
        )
    );
    assert_eq!(
        rt.spawn(&lease.id, sh("true")).await.unwrap_err().to_string(),
        "Environment driver \"ssh\" does not support persistent process sessions."
    );
    // A script is no executable of any architecture.
    let script = control.path().join("script-agent");
    std::fs::write(&script, "#!/bin/sh\n").unwrap();
    let other = SshDriver::new(SshConfig {
        root: relative.clone(),
        control_dir: Some(control.path().to_path_buf()),
        agent: Some(script.clone()),
        ..SshConfig::default()
    })
    .unwrap();
    assert_eq!(
        other.process_support(&server.target()).await.unwrap_err(),
        format!(
            "Process supervisor \"{}\" is not a Linux executable of a known architecture.",
            script.display()
        )
    );
    rt.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
    driver.shutdown().await;
    other.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cwd_is_resolved_on_the_remote_host_and_confined_to_the_workspace() {
    let Some(server) = server() else { return };
    let relative = unique_root("proc-cwd");
    let _root = root_guard(&server, relative.clone());
    let control = control_dir();
    let (driver, rt) = runtime_on(&server, &relative, control.path(), None, |_| {}).await;
    let lease = rt.acquire_lease(AcquireRequest::new("env-ssh", "acme")).await.unwrap();
    let workspace = lease.metadata["workspace"].as_str().unwrap().to_owned();
    rt.execute(
        &lease.id,
        envrt_runtime_core::ExecuteRequest::new("sh", ["-c", "mkdir sub && ln -s / out"]),
    )
    .await
    .unwrap();
    let mut request = sh("pwd; echo \"$HOME\"");
    request.cwd = Some("sub".into());
    let id = rt.spawn(&lease.id, request).await.unwrap().id.to_string();
    rt.wait_process(&id, None).await.unwrap();
    let mut output = rt.output(&id, &Offsets::zero()).await.unwrap();
    let mut text = Vec::new();
    while let Some(event) = tokio::time::timeout(BOUND, output.next()).await.unwrap().unwrap() {
        match event {
            OutputEvent::Chunk(c) => text.extend(c.bytes),
            OutputEvent::Exit(_) => break,
        }
    }
    assert_eq!(
        String::from_utf8_lossy(&text),
        format!("{workspace}/sub\n{workspace}\n")
    );
    let mut outside = sh("true");
    outside.cwd = Some("out".into());
    assert_eq!(
        rt.spawn(&lease.id, outside).await.unwrap_err().to_string(),
        "Path \"out\" is outside the lease workspace."
    );
    let mut missing = sh("true");
    missing.cwd = Some("nowhere".into());
    assert_eq!(
        rt.spawn(&lease.id, missing).await.unwrap_err().to_string(),
        "Invalid input: cwd \"nowhere\" is not a directory in the environment."
    );
    rt.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
    driver.shutdown().await;
}

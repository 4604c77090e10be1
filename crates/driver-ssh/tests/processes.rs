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

/// The socket the supervisor `pid` listens on (from its command line).
fn socket_of(pid: u32) -> std::path::PathBuf {
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap();
    let args: Vec<String> = cmdline
        .split(|b| *b == 0)
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    let at = args.iter().position(|a| a == "--socket").expect("--socket");
    std::path::PathBuf::from(&args[at + 1])
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
    let socket = socket_of(agent);
    assert!(socket.exists(), "the supervisor listens on {}", socket.display());
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
    assert!(!socket.exists(), "no supervisor socket is left");
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

/// Reads `id`'s stdout from 0 until it holds `want` (bounded).
async fn stdout_until(rt: &EnvironmentRuntime, id: &str, want: &str) -> String {
    let mut output = rt.output(id, &Offsets::zero()).await.unwrap();
    let mut text = Vec::new();
    while !String::from_utf8_lossy(&text).contains(want) {
        match tokio::time::timeout(BOUND, output.next()).await.unwrap().unwrap() {
            Some(OutputEvent::Chunk(c)) if c.stream == ProcessStream::Stdout => text.extend(c.bytes),
            Some(OutputEvent::Chunk(_)) => {}
            other => panic!(
                "expected {want:?}, got {other:?} after {:?}",
                String::from_utf8_lossy(&text)
            ),
        }
    }
    String::from_utf8_lossy(&text).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_master_connection_is_replaced_and_the_process_read_again_through_a_new_forward() {
    let Some(server) = server() else { return };
    let relative = unique_root("proc-broken");
    let _root = root_guard(&server, relative.clone());
    let control = control_dir();
    let marker = format!("envrt-ssh-broken-{}", common::uuid_like());
    let (driver, rt) = runtime_on(&server, &relative, control.path(), None, |_| {}).await;
    let lease = rt.acquire_lease(AcquireRequest::new("env-ssh", "acme")).await.unwrap();
    let target = server.target();
    let id = rt
        .spawn(&lease.id, sh(&format!("echo before; sleep 300; : {marker}")))
        .await
        .unwrap()
        .id
        .to_string();
    // A reader holds a forwarded connection while the master is killed.
    let mut reading = rt.output(&id, &Offsets::zero()).await.unwrap();
    let master = driver.control_socket(&target).await.expect("a live master");
    let masters = processes_with(&master.to_string_lossy());
    assert!(!masters.is_empty(), "the master process is found by its control path");
    for pid in masters {
        let _ = std::process::Command::new("kill")
            .args(["-9", &pid.to_string()])
            .status();
    }
    // The reader sees its stream end or fail, it does not hang.
    let ended = tokio::time::timeout(BOUND, async {
        loop {
            match reading.next().await {
                Ok(Some(OutputEvent::Chunk(_))) => continue,
                other => return other,
            }
        }
    })
    .await
    .expect("the reader of a broken connection returns");
    assert!(ended.is_err(), "{ended:?}");
    assert_eq!(processes_with(&marker).len(), 1, "the process survives the connection");
    let info = rt.process(&id).await.unwrap();
    assert_eq!(info.status, ProcessStatus::Running);
    assert_eq!(stdout_until(&rt, &id, "before\n").await, "before\n");
    assert_eq!(driver.connections_opened(&target), 2, "the next call reconnected");
    rt.signal(&id, "TERM").await.unwrap();
    assert_eq!(
        rt.wait_process(&id, None).await.unwrap(),
        ProcessStatus::Signalled { signal: 15 }
    );
    rt.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
    assert_eq!(survivors(&marker).await, Vec::<u32>::new());
    driver.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_programs_spawning_at_once_start_one_supervisor() {
    let Some(server) = server() else { return };
    let relative = unique_root("proc-once");
    let _root = root_guard(&server, relative.clone());
    let (control_a, control_b) = (control_dir(), control_dir());
    let (driver_a, a) = runtime_on(&server, &relative, control_a.path(), None, |_| {}).await;
    let (driver_b, b) = runtime_on(&server, &relative, control_b.path(), Some(a.store().clone()), |_| {}).await;
    let lease = a.acquire_lease(AcquireRequest::new("env-ssh", "acme")).await.unwrap();
    let workspace = lease.metadata["workspace"].as_str().unwrap().to_owned();
    let (x, y) = tokio::join!(a.spawn(&lease.id, sh("echo a")), b.spawn(&lease.id, sh("echo b")));
    let (x, y) = (x.unwrap(), y.unwrap());
    assert_ne!(x.id, y.id, "two processes of one supervisor");
    let mut listed: Vec<String> = a
        .processes(&lease.id)
        .await
        .unwrap()
        .iter()
        .map(|p| p.id.to_string())
        .collect();
    listed.sort();
    let mut both = vec![x.id.to_string(), y.id.to_string()];
    both.sort();
    assert_eq!(listed, both, "each program sees both processes");
    let agents: Vec<String> = processes_in(&workspace)
        .into_iter()
        .filter(|p| {
            let pid = p.trim_start_matches("/proc/").split(' ').next().unwrap_or_default();
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains("--subreaper"))
        })
        .collect();
    assert_eq!(agents.len(), 1, "one supervisor: {agents:?}");
    a.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
    assert_eq!(processes_in(&workspace), Vec::<String>::new());
    driver_a.shutdown().await;
    driver_b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_binary_missing_on_the_host_is_copied_once_by_its_hash_and_gc_reaps_its_supervisor() {
    let Some(server) = server() else { return };
    let relative = unique_root("proc-copy");
    let _root = root_guard(&server, relative.clone());
    let control = control_dir();
    // A binary no other test uses: the built supervisor with one byte more (its own hash).
    let built = envrt_driver_agent_path();
    let mut bytes = std::fs::read(&built).unwrap();
    bytes.extend_from_slice(common::uuid_like().as_bytes());
    let copy = control.path().join("envrt-agent");
    std::fs::write(&copy, &bytes).unwrap();
    let (driver, rt) = runtime_on(&server, &relative, control.path(), None, |c| {
        c.agent = Some(copy.clone())
    })
    .await;
    let cache = format!("{}/.cache/envrt-agent", server.home());
    let before: Vec<String> = std::fs::read_dir(&cache)
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    let started = std::time::Instant::now();
    driver.process_support(&server.target()).await.unwrap();
    let placed = started.elapsed();
    let new: Vec<String> = std::fs::read_dir(&cache)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("envrt-agent-") && !before.contains(n))
        .collect();
    assert_eq!(new.len(), 1, "one copy: {new:?}");
    assert!(new[0].starts_with("envrt-agent-") && new[0].len() == "envrt-agent-".len() + 16);
    let copied = format!("{cache}/{}", new[0]);
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(std::fs::metadata(&copied).unwrap().permissions().mode() & 0o777, 0o700);
    assert_eq!(std::fs::read(&copied).unwrap(), bytes);
    // Another program finds it there (its own hash of the binary and one probe).
    let other = SshDriver::new(SshConfig {
        root: relative.clone(),
        control_dir: Some(control.path().to_path_buf()),
        agent: Some(copy.clone()),
        ..SshConfig::default()
    })
    .unwrap();
    let started = std::time::Instant::now();
    other.process_support(&server.target()).await.unwrap();
    let found = started.elapsed();
    other.shutdown().await;
    let after: Vec<String> = std::fs::read_dir(&cache)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("envrt-agent-") && !before.contains(n))
        .collect();
    assert_eq!(after, new, "no second copy");
    eprintln!(
        "placing a {} byte supervisor took {placed:?}; finding it placed (hash and probe) {found:?}",
        bytes.len()
    );

    let lease = rt.acquire_lease(AcquireRequest::new("env-ssh", "acme")).await.unwrap();
    let workspace = lease.metadata["workspace"].as_str().unwrap().to_owned();
    let marker = format!("envrt-ssh-gc-{}", common::uuid_like());
    let started = std::time::Instant::now();
    let id = rt
        .spawn(&lease.id, sh(&format!("echo up; sleep 300; : {marker}")))
        .await
        .unwrap()
        .id
        .to_string();
    let first = started.elapsed();
    let started = std::time::Instant::now();
    let second = rt.spawn(&lease.id, sh("true")).await.unwrap().id.to_string();
    let again = started.elapsed();
    eprintln!("first spawn (supervisor started, forward added): {first:?}; second spawn: {again:?}");
    assert_eq!(stdout_until(&rt, &id, "up\n").await, "up\n");
    rt.wait_process(&second, None).await.unwrap();
    let agent = agent_pid(&workspace).unwrap();
    let socket = socket_of(agent);
    // The supervisor runs the copied binary.
    assert_eq!(
        std::fs::read_link(format!("/proc/{agent}/exe"))
            .unwrap()
            .to_string_lossy(),
        copied
    );
    // gc: a fresh driver reaps the lease directory with its supervisor.
    let fresh = SshDriver::new(SshConfig {
        target: Some(server.target()),
        root: relative.clone(),
        control_dir: Some(control.path().to_path_buf()),
        ..SshConfig::default()
    })
    .unwrap();
    use envrt_runtime_core::EnvironmentDriver;
    let recovery = fresh.as_recovery().unwrap();
    let items = recovery.inventory().await.unwrap();
    assert_eq!(items.len(), 1, "{items:?}");
    recovery.reap(&items[0]).await.unwrap();
    assert_eq!(survivors(&marker).await, Vec::<u32>::new());
    assert!(!alive(agent), "gc killed the supervisor");
    assert!(!std::path::Path::new(&workspace).exists());
    assert!(!socket.exists(), "gc removed the socket");
    let _ = std::fs::remove_file(&copied);
    fresh.shutdown().await;
    driver.shutdown().await;
}

/// The supervisor built in this target directory.
fn envrt_driver_agent_path() -> std::path::PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.ancestors()
        .skip(1)
        .take(2)
        .map(|d| d.join("envrt-agent"))
        .find(|p| p.is_file())
        .expect("envrt-agent is built in this target directory (cargo build -p envrt-agent)")
}

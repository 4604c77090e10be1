//! Persistent process sessions through the host and the reference worker (which starts
//! one `envrt-agent` per lease in the lease's sandbox): the lease grants
//! `persistentProcessSessions`; release leaves no process of the lease (a `setsid`
//! escapee included) and no socket directory; a link a process plants in its supervisor's
//! directory never makes the host connect elsewhere; a process outlives its worker and the
//! program that spawned it, and another program on the same store reads it whole and
//! kills it; a supervisor started again gives ids no earlier one gave; spawn's refusals
//! are exact, a missing `cwd` told from a missing program.

mod host_common;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use envrt_driver_plugin_sandbox::SandboxOptions;
use envrt_runtime_core::{LeaseStatus, ProcessStatus, SpawnRequest};
use host_common::*;

/// The supervisor built beside the reference worker (`cargo build -p envrt-agent`).
fn require_agent(worker: &str) {
    let agent = Path::new(worker).with_file_name("envrt-agent");
    assert!(
        agent.is_file(),
        "{} is not built; run `cargo build -p envrt-agent`",
        agent.display()
    );
}

/// The host's socket directory of envrt lease `lease`
/// (`$TMPDIR/envrt-sbx-supervisors-{euid}/{lease}`), when it exists.
fn socket_dirs_of(lease: &str) -> Vec<PathBuf> {
    let dir = std::env::temp_dir()
        .join(format!("envrt-sbx-supervisors-{}", rustix::process::geteuid().as_raw()))
        .join(lease);
    if dir.exists() { vec![dir] } else { Vec::new() }
}

/// The pids the worker's record of the lease's supervisor names (`bwrap`, the pid
/// namespace's init), from `{root}/.supervisor-{provider lease id}/running`.
fn supervisor_pids(root: &Path, lease: &envrt_runtime_core::Lease) -> Vec<u32> {
    let provider = lease.provider_lease_id.as_deref().unwrap();
    let text = std::fs::read_to_string(root.join(format!(".supervisor-{provider}/running"))).unwrap_or_default();
    let fields: Vec<&str> = text.split_whitespace().collect();
    [fields.get(1), fields.get(3)]
        .into_iter()
        .flatten()
        .filter_map(|pid| pid.parse().ok())
        .filter(|pid| *pid != 0)
        .collect()
}

/// Live processes whose command line contains `needle`.
fn processes_with(needle: &str) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| c.windows(needle.len()).any(|w| w == needle.as_bytes()))
                && alive(*pid)
        })
        .collect()
}

async fn eventually(mut done: impl FnMut() -> bool) -> bool {
    let until = Instant::now() + Duration::from_secs(10);
    while !done() {
        if Instant::now() > until {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    true
}

fn naps() -> (String, String) {
    let n = uuid::Uuid::new_v4().as_u128() % 1_000_000_000;
    (format!("3000.{n:09}"), format!("3001.{n:09}"))
}

#[tokio::test]
async fn release_leaves_no_process_of_the_lease_and_no_socket_directory() {
    let root = TempDir::new("processes-release");
    let Some(manifest) = reference_manifest(root.path()) else {
        return;
    };
    require_agent(reference_worker().unwrap());
    // What a killed host left: a directory of a pid that runs no more.
    let stale = std::env::temp_dir().join("envrt-sbx-agents-999999999-deadbeef");
    std::fs::create_dir_all(stale.join("some-lease")).unwrap();
    let driver = start(manifest, SandboxOptions::default()).await;
    let runtime = runtime_with(driver.clone()).await;
    let lease = acquire(&runtime).await;
    let snapshot = runtime.resolve_capabilities(&lease.id).await.unwrap().unwrap();
    assert!(snapshot.persistent_process_sessions, "{snapshot:?}");
    let (escapee, nap) = naps();
    let started = Instant::now();
    let info = bounded(
        "spawn",
        runtime.spawn(
            &lease.id,
            SpawnRequest::new(["sh", "-c", &format!("setsid sleep {escapee} & exec sleep {nap}")]),
        ),
    )
    .await
    .unwrap();
    eprintln!(
        "first spawn (supervisor start included): {} ms",
        started.elapsed().as_millis()
    );
    let started = Instant::now();
    let second = runtime.spawn(&lease.id, SpawnRequest::new(["true"])).await.unwrap();
    eprintln!("second spawn: {} ms", started.elapsed().as_millis());
    assert_eq!(info.status, ProcessStatus::Running);
    assert_ne!(info.id, second.id);
    assert!(eventually(|| processes_with(&escapee).len() == 1 && processes_with(&nap).len() == 1).await);
    let dirs = socket_dirs_of(&lease.id);
    assert_eq!(dirs.len(), 1, "{dirs:?}");
    assert!(!stale.exists(), "the directory of a host that is gone was kept");
    let meta = std::fs::metadata(&dirs[0]).unwrap();
    assert_eq!(meta.permissions().mode() & 0o7777, 0o700);
    let parent = std::fs::metadata(dirs[0].parent().unwrap()).unwrap();
    assert_eq!((parent.uid(), parent.permissions().mode() & 0o7777), (0, 0o711));
    runtime.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
    assert!(
        eventually(|| processes_with(&escapee).is_empty() && processes_with(&nap).is_empty()).await,
        "a process of the lease survived release"
    );
    assert_eq!(
        socket_dirs_of(&lease.id),
        Vec::<PathBuf>::new(),
        "the socket directory survived release"
    );
    drop(runtime);
    driver.shutdown().await;
}

#[tokio::test]
async fn a_link_planted_in_the_supervisor_directory_is_not_followed() {
    let root = TempDir::new("processes-link");
    let Some(manifest) = reference_manifest(root.path()) else {
        return;
    };
    require_agent(reference_worker().unwrap());
    let driver = start(manifest, SandboxOptions::default()).await;
    let runtime = runtime_with(driver.clone()).await;
    let lease = acquire(&runtime).await;
    // A socket of the host the lease must never make it connect to.
    let decoy_dir = TempDir::new("decoy");
    let decoy_path = decoy_dir.join("decoy.sock");
    let decoy = std::os::unix::net::UnixListener::bind(&decoy_path).unwrap();
    decoy.set_nonblocking(true).unwrap();
    let plant = format!(
        "ln -s {} /.envrt-agent/planted && mv -f /.envrt-agent/planted /.envrt-agent/sock",
        decoy_path.display()
    );
    runtime
        .spawn(&lease.id, SpawnRequest::new(["sh", "-c", &plant]))
        .await
        .unwrap();
    let dir = socket_dirs_of(&lease.id).pop().expect("the socket directory");
    assert!(
        eventually(|| std::fs::symlink_metadata(dir.join("sock")).is_ok_and(|m| m.file_type().is_symlink())).await,
        "the link was not planted"
    );
    // No supervisor answers in the directory now: the lease lists nothing.
    assert_eq!(runtime.processes(&lease.id).await.unwrap(), Vec::new());
    assert_eq!(
        decoy.accept().map(|_| ()).unwrap_err().kind(),
        std::io::ErrorKind::WouldBlock,
        "the host connected to the planted link's target"
    );
    // A spawn starts a supervisor in a fresh directory (the old one is ended), numbering
    // past every id the old one could give.
    let info = runtime.spawn(&lease.id, SpawnRequest::new(["true"])).await.unwrap();
    assert_eq!(info.id.lease_id, lease.id);
    assert_eq!(info.id.to_string(), format!("{}/4294967297", lease.id));
    assert!(
        !std::fs::symlink_metadata(dir.join("sock"))
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert_eq!(
        decoy.accept().map(|_| ()).unwrap_err().kind(),
        std::io::ErrorKind::WouldBlock,
        "the host connected to the planted link's target"
    );
    runtime.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
    driver.shutdown().await;
}

#[tokio::test]
async fn a_process_outlives_its_worker_and_program_and_another_program_reads_it_whole_and_kills_it() {
    let root = TempDir::new("processes-outlive");
    let Some(manifest) = reference_manifest(root.path()) else {
        return;
    };
    require_agent(reference_worker().unwrap());
    let db = TempDir::new("processes-outlive-store");
    let on_store = |driver: std::sync::Arc<envrt_driver_plugin_sandbox::SandboxDriver>| {
        let db = db.join("leases.db");
        async move {
            use envrt_runtime_core::EnvironmentDriver as _;
            let store = envrt_store_sqlite::SqliteStore::open(&db).await.unwrap();
            let runtime = envrt_runtime_core::EnvironmentRuntime::with_store(std::sync::Arc::new(store));
            let key = driver.key().to_owned();
            runtime.register_driver(driver);
            runtime
                .put_environment(envrt_runtime_core::Environment::new("env-1", "Sandbox", key))
                .await
                .unwrap();
            runtime
        }
    };
    let first_driver = start(manifest.clone(), SandboxOptions::default()).await;
    let first = on_store(first_driver.clone()).await;
    let lease = acquire(&first).await;
    let (escapee, nap) = naps();
    // (the escapee holds no output of the process, which then ends when `sleep` does)
    let script = format!("echo one; echo two >&2; setsid sleep {escapee} >/dev/null 2>&1 & exec sleep {nap}");
    let info = bounded(
        "spawn",
        first.spawn(&lease.id, SpawnRequest::new(["sh", "-c", &script])),
    )
    .await
    .unwrap();
    let id = info.id.to_string();
    assert!(eventually(|| processes_with(&escapee).len() == 1 && processes_with(&nap).len() == 1).await);
    let supervisor = supervisor_pids(root.path(), &lease);
    assert_eq!(supervisor.len(), 2, "bwrap and the namespace's init are recorded");
    // The worker is killed, then the program ends (its runtime and driver dropped, which
    // ends the restarted worker and its cgroup too).
    let old = first_driver.worker_pid().unwrap();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(old as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    restarted(&first_driver, old).await;
    drop(first);
    first_driver.shutdown().await;
    drop(first_driver);
    assert!(
        processes_with(&nap).len() == 1 && processes_with(&escapee).len() == 1,
        "a process ended with the program that spawned it"
    );
    assert!(
        supervisor.iter().all(|pid| alive(*pid)),
        "the supervisor ended with the worker"
    );

    // Another program on the same store finds the process by its id and reads it from 0.
    let second_driver = start(manifest, SandboxOptions::default()).await;
    let second = on_store(second_driver.clone()).await;
    let found = bounded("process", second.process(&id)).await.unwrap();
    assert_eq!((found.status, found.pid), (ProcessStatus::Running, info.pid));
    let mut output = second.output(&id, &Default::default()).await.unwrap();
    let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
    while !(stdout == b"one\n" && stderr == b"two\n") {
        match bounded("output", output.next()).await.unwrap() {
            Some(envrt_runtime_core::OutputEvent::Chunk(c)) => {
                let stream = if c.stream == envrt_runtime_core::ProcessStream::Stdout {
                    &mut stdout
                } else {
                    &mut stderr
                };
                assert_eq!(c.offset, stream.len() as u64, "a chunk out of place");
                stream.extend(c.bytes);
            }
            other => panic!("expected output, got {other:?}"),
        }
    }
    second.signal(&id, "KILL").await.unwrap();
    let status = bounded("wait", second.wait_process(&id, None)).await.unwrap();
    assert_eq!(status, ProcessStatus::Signalled { signal: 9 });
    assert!(eventually(|| processes_with(&nap).is_empty()).await);

    // Its release leaves no process of the lease, no supervisor, no socket directory.
    second.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
    assert!(
        eventually(|| processes_with(&escapee).is_empty()).await,
        "a setsid escapee survived release"
    );
    assert!(
        supervisor.iter().all(|pid| !alive(*pid)),
        "the supervisor survived release"
    );
    assert_eq!(supervisor_pids(root.path(), &lease), Vec::<u32>::new());
    assert_eq!(socket_dirs_of(&lease.id), Vec::<PathBuf>::new());
    drop(second);
    second_driver.shutdown().await;
}

#[tokio::test]
async fn a_supervisor_started_again_gives_ids_no_earlier_one_gave() {
    let root = TempDir::new("processes-ids");
    let Some(manifest) = reference_manifest(root.path()) else {
        return;
    };
    require_agent(reference_worker().unwrap());
    let driver = start(manifest, SandboxOptions::default()).await;
    let runtime = runtime_with(driver.clone()).await;
    let lease = acquire(&runtime).await;
    let first = bounded("spawn", runtime.spawn(&lease.id, SpawnRequest::new(["echo", "one"])))
        .await
        .unwrap()
        .id
        .to_string();
    assert_eq!(first, format!("{}/1", lease.id));
    bounded("wait", runtime.wait_process(&first, None)).await.unwrap();
    // The supervisor is killed (its pid namespace's init: all of it ends).
    let supervisor = supervisor_pids(root.path(), &lease);
    assert_eq!(supervisor.len(), 2);
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(supervisor[1] as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    assert!(eventually(|| supervisor.iter().all(|pid| !alive(*pid))).await);
    // The next spawn starts another, which numbers past every id the first could give.
    let second = bounded("spawn", runtime.spawn(&lease.id, SpawnRequest::new(["echo", "two"])))
        .await
        .unwrap()
        .id
        .to_string();
    assert_eq!(second, format!("{}/4294967297", lease.id));
    assert_eq!(
        runtime.process(&first).await.unwrap_err().to_string(),
        format!("Process \"{first}\" was not found.")
    );
    // A worker that ends leaves the supervisor: the next spawn goes to the same one.
    let old = driver.worker_pid().unwrap();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(old as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    restarted(&driver, old).await;
    let third = bounded("spawn", runtime.spawn(&lease.id, SpawnRequest::new(["true"])))
        .await
        .unwrap()
        .id
        .to_string();
    assert_eq!(third, format!("{}/4294967298", lease.id));
    runtime.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
    driver.shutdown().await;
}

#[tokio::test]
async fn spawn_refusals_are_exact_and_a_missing_cwd_is_told_from_a_missing_program() {
    let root = TempDir::new("processes-refusals");
    let Some(manifest) = reference_manifest(root.path()) else {
        return;
    };
    require_agent(reference_worker().unwrap());
    let driver = start(manifest, SandboxOptions::default()).await;
    let runtime = runtime_with(driver.clone()).await;
    let lease = acquire(&runtime).await;
    let refusal = |request: SpawnRequest| {
        let runtime = &runtime;
        let lease = &lease;
        async move { runtime.spawn(&lease.id, request).await.unwrap_err().to_string() }
    };
    let mut in_missing = SpawnRequest::new(["true"]);
    in_missing.cwd = Some("/nowhere/at/all".into());
    assert_eq!(
        refusal(in_missing).await,
        "Invalid input: cwd \"/nowhere/at/all\" is not a directory in the environment."
    );
    let mut relative = SpawnRequest::new(["true"]);
    relative.cwd = Some("sub".into());
    assert_eq!(
        refusal(relative).await,
        "Invalid input: cwd \"sub\" is not a directory in the environment."
    );
    let missing_program =
        "Cannot spawn the process: cannot start \"no-such-program\": No such file or directory (os error 2)";
    assert_eq!(refusal(SpawnRequest::new(["no-such-program"])).await, missing_program);
    let mut in_tmp = SpawnRequest::new(["no-such-program"]);
    in_tmp.cwd = Some("/tmp".into());
    assert_eq!(refusal(in_tmp).await, missing_program);
    assert_eq!(
        refusal(SpawnRequest::new(Vec::<String>::new())).await,
        "Cannot spawn the process: argv is empty"
    );
    // A cwd that is there, relative to the workspace or anywhere in the sandbox.
    runtime
        .execute(&lease.id, envrt_runtime_core::ExecuteRequest::new("mkdir", ["sub"]))
        .await
        .unwrap();
    for (cwd, expected) in [("sub", "/workspace/sub\n"), ("/tmp", "/tmp\n")] {
        let mut request = SpawnRequest::new(["pwd"]);
        request.cwd = Some(cwd.into());
        let info = runtime.spawn(&lease.id, request).await.unwrap();
        let id = info.id.to_string();
        runtime.wait_process(&id, None).await.unwrap();
        let mut output = runtime.output(&id, &Default::default()).await.unwrap();
        let mut text = Vec::new();
        while let Some(event) = bounded("output", output.next()).await.unwrap() {
            if let envrt_runtime_core::OutputEvent::Chunk(chunk) = event {
                text.extend_from_slice(&chunk.bytes);
            }
        }
        assert_eq!(String::from_utf8_lossy(&text), expected, "cwd {cwd}");
    }
    runtime.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
    driver.shutdown().await;
}

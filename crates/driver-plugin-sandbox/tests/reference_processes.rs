//! Persistent process sessions through the host and the reference worker (which starts
//! one `envrt-agent` per lease in the lease's sandbox): the lease grants
//! `persistentProcessSessions`; release leaves no process of the lease (a `setsid`
//! escapee included) and no socket directory; a link a process plants in its supervisor's
//! directory never makes the host connect elsewhere; a worker that ends takes the
//! lease's processes with it and the next spawn starts a new supervisor; spawn's refusals
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

/// The host's socket directory of envrt lease `lease` (`$TMPDIR/envrt-sbx-agents-*/{lease}`).
fn socket_dirs_of(lease: &str) -> Vec<PathBuf> {
    std::fs::read_dir(std::env::temp_dir())
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("envrt-sbx-agents-"))
        .map(|e| e.path().join(lease))
        .filter(|dir| dir.exists())
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
    let driver_dir = dirs[0].parent().unwrap().to_path_buf();
    drop(runtime);
    driver.shutdown().await;
    drop(driver);
    assert!(!driver_dir.exists(), "{} survived the driver", driver_dir.display());
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
    // A spawn starts a supervisor in a fresh directory (the old one is ended).
    let info = runtime.spawn(&lease.id, SpawnRequest::new(["true"])).await.unwrap();
    assert_eq!(info.id.lease_id, lease.id);
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
async fn a_worker_that_ends_takes_the_processes_and_the_next_spawn_starts_a_new_supervisor() {
    let root = TempDir::new("processes-restart");
    let Some(manifest) = reference_manifest(root.path()) else {
        return;
    };
    require_agent(reference_worker().unwrap());
    let driver = start(manifest, SandboxOptions::default()).await;
    let runtime = runtime_with(driver.clone()).await;
    let lease = acquire(&runtime).await;
    let (_, nap) = naps();
    runtime
        .spawn(&lease.id, SpawnRequest::new(["sleep", nap.as_str()]))
        .await
        .unwrap();
    assert!(eventually(|| processes_with(&nap).len() == 1).await);
    let old = driver.worker_pid().unwrap();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(old as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    restarted(&driver, old).await;
    assert!(
        eventually(|| processes_with(&nap).is_empty()).await,
        "a process outlived its worker"
    );
    assert_eq!(runtime.processes(&lease.id).await.unwrap(), Vec::new());
    let info = bounded("spawn", runtime.spawn(&lease.id, SpawnRequest::new(["echo", "again"])))
        .await
        .unwrap();
    let status = runtime.wait_process(&info.id.to_string(), None).await.unwrap();
    assert_eq!(status, ProcessStatus::Exited { code: 0 });
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

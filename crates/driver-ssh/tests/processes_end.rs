//! How a lease's end leaves nothing of its persistent processes on the SSH driver, against
//! the real test `sshd` (this machine is the server): release (ephemeral or kept for
//! reuse), and `gc` from a fresh driver, kill the supervisor and every process below it
//! and remove its socket and forwards; two programs spawning at once start one
//! supervisor; a binary missing on the host is copied once, by its hash. Needs
//! `envrt-agent` built in this target directory (`cargo build -p envrt-agent`).

mod common;

use std::time::Duration;

use envrt_driver_ssh::{SshConfig, SshDriver};
use envrt_runtime_core::{AcquireRequest, LeaseStatus, Offsets, OutputEvent};

use common::supervisor::*;
use common::{processes_with, server, survivors, unique_root};

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_release_of_a_kept_lease_ends_its_supervisor_and_keeps_its_workspace() {
    let Some(server) = server() else { return };
    let relative = unique_root("proc-kept");
    let _root = root_guard(&server, relative.clone());
    let control = control_dir();
    let marker = format!("envrt-ssh-kept-{}", common::uuid_like());
    let (driver, rt) = runtime_on(&server, &relative, control.path(), None, |_| {}).await;
    let mut request = AcquireRequest::new("env-ssh", "acme");
    request.policy = envrt_runtime_core::LeasePolicy::ReuseByEnvironment;
    let lease = rt.acquire_lease(request).await.unwrap();
    let workspace = lease.metadata["workspace"].as_str().unwrap().to_owned();
    let lease_dir = workspace.trim_end_matches("/work").to_owned();
    let id = rt
        .spawn(&lease.id, sh(&format!("echo up; sleep 300; : {marker}")))
        .await
        .unwrap()
        .id
        .to_string();
    assert_eq!(stdout_until(&rt, &id, "up\n").await, "up\n");
    let agent = agent_pid(&workspace).unwrap();
    let socket = socket_of(agent);
    rt.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
    assert_eq!(survivors(&marker).await, Vec::<u32>::new());
    assert!(!alive(agent), "the supervisor of a kept lease ends with its release");
    assert!(!socket.exists(), "its socket is removed");
    for gone in ["agent.pid", "agent.log"] {
        assert!(
            !std::path::Path::new(&format!("{lease_dir}/{gone}")).exists(),
            "{gone} is removed"
        );
    }
    assert!(std::path::Path::new(&workspace).is_dir(), "the workspace is kept");
    assert_eq!(processes_in(&lease_dir), Vec::<String>::new());
    driver.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_spawn_racing_the_release_leaves_nothing_running() {
    let Some(server) = server() else { return };
    let relative = unique_root("proc-race");
    let _root = root_guard(&server, relative.clone());
    let control = control_dir();
    let (driver, rt) = runtime_on(&server, &relative, control.path(), None, |_| {}).await;
    for round in 0..4 {
        let lease = rt.acquire_lease(AcquireRequest::new("env-ssh", "acme")).await.unwrap();
        let lease_dir = lease.metadata["workspace"]
            .as_str()
            .unwrap()
            .trim_end_matches("/work")
            .to_owned();
        let marker = format!("envrt-ssh-race-{round}-{}", common::uuid_like());
        let (spawned, released) = tokio::join!(rt.spawn(&lease.id, sh(&format!("sleep 300; : {marker}"))), async {
            // Let the spawn get as far as the supervisor's start in some rounds.
            tokio::time::sleep(Duration::from_millis(20 * round)).await;
            rt.release_lease(&lease.id, LeaseStatus::Released).await
        });
        released.unwrap();
        // The spawn wins (its process then dies with the lease), or finds the lease ended,
        // gone, or its supervisor killed under it; never anything else. A spawn that finds
        // the remote workspace already removed by the release is told the lease is not
        // active (the facade looks at the store again), never that the lease is lost.
        if let Err(error) = &spawned {
            let text = error.to_string();
            assert!(
                text.contains("is not active")
                    || text.ends_with("does not exist.")
                    || text.contains("is not reachable"),
                "round {round}: {text}"
            );
        }
        assert_eq!(survivors(&marker).await, Vec::<u32>::new(), "round {round}");
        assert_eq!(processes_in(&lease_dir), Vec::<String>::new(), "round {round}");
    }
    driver.shutdown().await;
}

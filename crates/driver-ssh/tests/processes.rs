//! Persistent process sessions on the SSH driver against the real test `sshd` (this
//! machine is the server): the supervisor runs on the remote host and outlives the program
//! that started it and its master connection (a process is read again through a new
//! forward); a cwd is resolved on the remote host; a supervisor that cannot be placed
//! withholds the capability with its exact reason. Needs `envrt-agent` built in this
//! target directory (`cargo build -p envrt-agent`). How the lease's end leaves nothing:
//! `processes_end.rs`.

mod common;

use envrt_driver_ssh::{SshConfig, SshDriver};
use envrt_runtime_core::{AcquireRequest, LeaseStatus, Offsets, OutputEvent, ProcessStatus, ProcessStream};

use common::supervisor::*;
use common::{processes_with, server, survivors, unique_root};

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
    let forwards: Vec<_> = std::fs::read_dir(control_a.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .filter(|n| n.to_string_lossy().starts_with("p-"))
        .collect();
    assert_eq!(
        forwards,
        Vec::<std::ffi::OsString>::new(),
        "the closed master's forwards are removed"
    );
    assert!(alive(agent), "the supervisor outlives the connection that started it");
    assert_eq!(processes_with(&marker).len(), 1, "the process still runs");

    let (second_driver, second) = runtime_on(&server, &relative, control_b.path(), Some(store), |_| {}).await;
    let started = std::time::Instant::now();
    let found = second.process(&id).await.unwrap();
    let first_call = started.elapsed();
    assert_eq!(found.status, ProcessStatus::Running);
    assert_eq!(found.pid, info.pid);
    // A verb is one connection through the forward (and the hello) plus the request.
    let started = std::time::Instant::now();
    for _ in 0..10 {
        assert_eq!(second.process(&id).await.unwrap().pid, info.pid);
    }
    eprintln!(
        "from a new program: first verb {first_call:?} (probe, forward), then {:?} a verb",
        started.elapsed() / 10
    );
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
    // A binary put there later is found: the refusal is not remembered.
    std::fs::copy(envrt_driver_agent_path(), &missing).unwrap();
    driver.process_support(&server.target()).await.unwrap();
    assert!(
        rt.resolve_capabilities(&lease.id)
            .await
            .unwrap()
            .unwrap()
            .persistent_process_sessions
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
    // A name with quotes, a newline and a dollar reaches the remote side as one word.
    let odd = "it's \"odd\"\n$HOME";
    rt.execute(&lease.id, envrt_runtime_core::ExecuteRequest::new("mkdir", [odd]))
        .await
        .unwrap();
    let mut request = sh("pwd");
    request.cwd = Some(odd.into());
    let id = rt.spawn(&lease.id, request).await.unwrap().id.to_string();
    assert_eq!(stdout_until(&rt, &id, "$HOME\n").await, format!("{workspace}/{odd}\n"));
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
async fn a_copied_binary_that_does_not_run_there_withholds_the_capability_and_is_removed() {
    let Some(server) = server() else { return };
    let relative = unique_root("proc-norun");
    let _root = root_guard(&server, relative.clone());
    let control = control_dir();
    // An x86_64 ELF header (this host's supervisor's) with nothing runnable behind it.
    let mut bytes = std::fs::read(envrt_driver_agent_path()).unwrap();
    bytes.truncate(64);
    bytes.extend_from_slice(common::uuid_like().as_bytes());
    let broken = control.path().join("broken-agent");
    std::fs::write(&broken, &bytes).unwrap();
    let (driver, rt) = runtime_on(&server, &relative, control.path(), None, |c| {
        c.agent = Some(broken.clone())
    })
    .await;
    let lease = rt.acquire_lease(AcquireRequest::new("env-ssh", "acme")).await.unwrap();
    let caps = rt.resolve_capabilities(&lease.id).await.unwrap().unwrap();
    assert!(!caps.persistent_process_sessions);
    let why = driver.process_support(&server.target()).await.unwrap_err();
    let prefix = format!(
        "The process supervisor copied to {} ({}/.cache/envrt-agent/envrt-agent-",
        server.target().shown(),
        server.home()
    );
    assert!(why.starts_with(&prefix), "{why}");
    let name = why[prefix.len() - "envrt-agent-".len()..]
        .split(')')
        .next()
        .unwrap()
        .to_owned();
    assert!(why.contains(") does not run there: "), "{why}");
    assert!(
        !std::path::Path::new(&format!("{}/.cache/envrt-agent/{name}", server.home())).exists(),
        "the copy that does not run is removed"
    );
    assert_eq!(
        rt.spawn(&lease.id, sh("true")).await.unwrap_err().to_string(),
        "Environment driver \"ssh\" does not support persistent process sessions."
    );
    rt.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
    driver.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn envrt_doctor_says_the_supervisor_runs_on_a_reachable_host() {
    let Some(server) = server() else { return };
    use envrt_driver_ssh::DESCRIPTOR;
    use envrt_runtime_core::descriptor::{DoctorContext, DriverDescriptor};
    let environments = [envrt_runtime_core::Environment::new("env-ssh", "Remote", "ssh").with_config(server.config())];
    let settings = SshConfig::default();
    let checks = DESCRIPTOR
        .doctor(&DoctorContext {
            environments: &environments,
            settings: &settings,
            skipped: &[],
            others: &[],
        })
        .await;
    let shown: Vec<(String, bool, bool, String)> = checks
        .into_iter()
        .map(|c| (c.name, c.required, c.ok, c.detail))
        .collect();
    assert_eq!(shown.len(), 2, "{shown:?}");
    assert_eq!(shown[0].0, "ssh host");
    assert_eq!(
        shown[1],
        (
            "ssh process supervisor".to_owned(),
            false,
            true,
            "env-ssh: envrt-agent runs there: persistent process sessions".to_owned()
        )
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_supervisor_started_again_gives_ids_no_earlier_one_gave() {
    let Some(server) = server() else { return };
    let relative = unique_root("proc-ids");
    let _root = root_guard(&server, relative.clone());
    let control = control_dir();
    let (driver, rt) = runtime_on(&server, &relative, control.path(), None, |_| {}).await;
    let lease = rt.acquire_lease(AcquireRequest::new("env-ssh", "acme")).await.unwrap();
    let first = tokio::time::timeout(BOUND, rt.spawn(&lease.id, sh("echo one")))
        .await
        .unwrap()
        .unwrap()
        .id
        .to_string();
    assert_eq!(first, format!("{}/1", lease.id));
    assert_eq!(stdout_until(&rt, &first, "one\n").await, "one\n");
    // The supervisor is killed (as a command of the lease could kill it).
    let workspace = lease.metadata["workspace"].as_str().unwrap().to_owned();
    let agent = agent_pid(&workspace).expect("the supervisor's pid is recorded");
    let killed = std::process::Command::new("kill")
        .args(["-KILL", &agent.to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    while alive(agent) {
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    // The next spawn starts another, which numbers past every id the first could give.
    let second = tokio::time::timeout(BOUND, rt.spawn(&lease.id, sh("echo two")))
        .await
        .unwrap()
        .unwrap()
        .id
        .to_string();
    assert_eq!(second, format!("{}/4294967297", lease.id));
    assert_ne!(agent_pid(&workspace), Some(agent), "another supervisor runs");
    assert_eq!(stdout_until(&rt, &second, "two\n").await, "two\n");
    assert_eq!(
        rt.process(&first).await.unwrap_err().to_string(),
        format!("Process \"{first}\" was not found.")
    );
    rt.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
    driver.shutdown().await;
}

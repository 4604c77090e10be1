//! Persistent processes on the local driver, through the facade against the real
//! supervisor (`envrt-agent` built in this target directory): output replayed from
//! absolute offsets, stdin, signals to the group, terminals, every refusal text, and no
//! survivor once the lease ends (a `setsid` grandchild that left the workspace included).

mod common;

use std::time::Duration;

use common::{Harness, bounded, survivors, unique_sleep};
use envrt_runtime_core::{
    LeaseStatus, Offsets, OutputEvent, ProcessInfo, ProcessStatus, ProcessStream, SpawnRequest, StdinMode, TtySize,
};

/// Every chunk of `id` from `from` until the exit: (stream, offset, bytes) and the final state.
async fn drain(h: &Harness, id: &str, from: &Offsets) -> (Vec<(ProcessStream, u64, Vec<u8>)>, ProcessInfo) {
    let mut output = h.runtime.output(id, from).await.expect("output");
    let mut chunks = Vec::new();
    loop {
        match bounded(output.next()).await.expect("next") {
            Some(OutputEvent::Chunk(c)) => chunks.push((c.stream, c.offset, c.bytes)),
            Some(OutputEvent::Exit(info)) => return (chunks, info),
            None => panic!("the stream ended without an exit"),
        }
    }
}

fn bytes_of(chunks: &[(ProcessStream, u64, Vec<u8>)], stream: ProcessStream) -> Vec<u8> {
    chunks
        .iter()
        .filter(|c| c.0 == stream)
        .flat_map(|c| c.2.clone())
        .collect()
}

fn sh(script: &str) -> SpawnRequest {
    SpawnRequest::new(["sh", "-c", script])
}

#[tokio::test]
async fn a_spawned_process_replays_from_zero_and_from_the_middle_then_reports_its_exit() {
    let h = Harness::new().await;
    let lease = h.lease().await;
    let caps = h.runtime.resolve_capabilities(&lease.id).await.unwrap().unwrap();
    assert!(caps.persistent_process_sessions);
    let info = h
        .runtime
        .spawn(&lease.id, sh("printf hello-world; printf oops >&2; exit 3"))
        .await
        .unwrap();
    assert_eq!(info.id.lease_id, lease.id);
    assert!(info.pid > 0);
    let id = info.id.to_string();
    let (chunks, exit) = drain(&h, &id, &Offsets::zero()).await;
    assert_eq!(bytes_of(&chunks, ProcessStream::Stdout), b"hello-world");
    assert_eq!(bytes_of(&chunks, ProcessStream::Stderr), b"oops");
    assert_eq!(exit.status, ProcessStatus::Exited { code: 3 });
    let (middle, _) = drain(&h, &id, &Offsets::default().with(ProcessStream::Stdout, 6)).await;
    assert_eq!(bytes_of(&middle, ProcessStream::Stdout), b"world");
    assert_eq!(middle.iter().find(|c| c.0 == ProcessStream::Stdout).unwrap().1, 6);
    // The status is kept after the exit, and the list has the process.
    assert_eq!(
        h.runtime.process(&id).await.unwrap().status,
        ProcessStatus::Exited { code: 3 }
    );
    assert_eq!(
        h.runtime.wait_process(&id, None).await.unwrap(),
        ProcessStatus::Exited { code: 3 }
    );
    let listed = h.runtime.processes(&lease.id).await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].id.to_string(), id);
    h.runtime.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
    h.finish();
}

#[tokio::test]
async fn a_spawned_process_inherits_no_descriptor_the_host_holds() {
    let h = Harness::new().await;
    let lease = h.lease().await;
    let marker = std::env::temp_dir().join(format!("envrt-host-only-{}", std::process::id()));
    std::fs::write(&marker, b"host only\n").unwrap();
    // No O_CLOEXEC: every child of this process inherits it unless the driver closes it.
    // The lease's supervisor starts with its first spawn, below, while it is open.
    let held = rustix::fs::open(&marker, rustix::fs::OFlags::RDONLY, rustix::fs::Mode::empty()).unwrap();
    let request = SpawnRequest::new(["ls", "-l", "/proc/self/fd/"]);
    let id = h.runtime.spawn(&lease.id, request).await.unwrap().id.to_string();
    let (chunks, exit) = drain(&h, &id, &Offsets::zero()).await;
    drop(held);
    let _ = std::fs::remove_file(&marker);
    let listing = String::from_utf8_lossy(&bytes_of(&chunks, ProcessStream::Stdout)).into_owned();
    assert_eq!(exit.status, ProcessStatus::Exited { code: 0 }, "{listing}");
    assert!(listing.contains("->"), "{listing}");
    assert!(
        !listing.contains("envrt-host-only-"),
        "a host descriptor reached the process: {listing}"
    );
    h.runtime.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
    h.finish();
}

#[tokio::test]
async fn stdin_round_trips_and_eof_ends_cat() {
    let h = Harness::new().await;
    let lease = h.lease().await;
    let mut request = SpawnRequest::new(["cat"]);
    request.stdin = StdinMode::Piped;
    let id = h.runtime.spawn(&lease.id, request).await.unwrap().id.to_string();
    h.runtime.write_stdin(&id, b"ping\n").await.unwrap();
    h.runtime.write_stdin(&id, b"pong\n").await.unwrap();
    h.runtime.close_stdin(&id).await.unwrap();
    let (chunks, exit) = drain(&h, &id, &Offsets::zero()).await;
    assert_eq!(bytes_of(&chunks, ProcessStream::Stdout), b"ping\npong\n");
    assert_eq!(exit.status, ProcessStatus::Exited { code: 0 });
    h.runtime.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
    h.finish();
}

#[tokio::test]
async fn a_signal_by_name_reaches_the_whole_group_and_is_reported() {
    let h = Harness::new().await;
    let lease = h.lease().await;
    let nap = unique_sleep();
    let id = h
        .runtime
        .spawn(&lease.id, sh(&format!("sleep {nap} & echo started; wait")))
        .await
        .unwrap()
        .id
        .to_string();
    let mut output = h.runtime.output(&id, &Offsets::zero()).await.unwrap();
    // The first chunk says the background sleeper runs.
    match bounded(output.next()).await.unwrap() {
        Some(OutputEvent::Chunk(c)) => assert_eq!(c.bytes, b"started\n"),
        other => panic!("expected the first line, got {other:?}"),
    }
    h.runtime.signal(&id, "TERM").await.unwrap();
    let status = bounded(h.runtime.wait_process(&id, None)).await.unwrap();
    assert_eq!(status, ProcessStatus::Signalled { signal: 15 });
    assert_eq!(status.exit_code(), Some(143));
    assert!(survivors(&nap).await.is_empty(), "the group's sleeper survived");
    h.runtime.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
    h.finish();
}

#[tokio::test]
async fn a_terminal_has_its_size_and_resize_changes_it() {
    let h = Harness::new().await;
    let lease = h.lease().await;
    let mut request = sh("stty size; read line; stty size");
    request.tty = Some(TtySize { rows: 24, cols: 80 });
    let info = h.runtime.spawn(&lease.id, request).await.unwrap();
    assert!(info.tty);
    let id = info.id.to_string();
    let mut output = h.runtime.output(&id, &Offsets::zero()).await.unwrap();
    let mut seen = Vec::new();
    while !String::from_utf8_lossy(&seen).contains("24 80") {
        match bounded(output.next()).await.unwrap() {
            Some(OutputEvent::Chunk(c)) => seen.extend(c.bytes),
            other => panic!("expected the size, got {other:?}"),
        }
    }
    h.runtime.resize(&id, 40, 100).await.unwrap();
    h.runtime.write_stdin(&id, b"go\r").await.unwrap();
    let (chunks, exit) = drain(&h, &id, &Offsets::zero()).await;
    let text = String::from_utf8_lossy(&bytes_of(&chunks, ProcessStream::Tty)).into_owned();
    assert!(text.contains("24 80") && text.contains("40 100"), "{text:?}");
    assert_eq!(exit.status, ProcessStatus::Exited { code: 0 });
    h.runtime.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
    h.finish();
}

#[tokio::test]
async fn every_refusal_has_its_exact_text() {
    let h = Harness::new().await;
    let lease = h.lease().await;
    let unknown = format!("{}/99", lease.id);
    let texts = |e: envrt_runtime_core::RuntimeError| e.to_string();
    assert_eq!(
        texts(h.runtime.process(&unknown).await.unwrap_err()),
        format!("Process \"{unknown}\" was not found.")
    );
    assert_eq!(
        texts(h.runtime.process("no-such-lease/1").await.unwrap_err()),
        "Process \"no-such-lease/1\" was not found."
    );
    assert_eq!(
        texts(
            h.runtime
                .spawn(&lease.id, SpawnRequest::new([""; 0]))
                .await
                .unwrap_err()
        ),
        "Cannot spawn the process: argv is empty"
    );
    let mut request = sh("head -c 100 /dev/zero");
    request.keep = Some(10);
    let id = h.runtime.spawn(&lease.id, request).await.unwrap().id.to_string();
    assert_eq!(
        bounded(h.runtime.wait_process(&id, None)).await.unwrap(),
        ProcessStatus::Exited { code: 0 }
    );
    let info = h.runtime.process(&id).await.unwrap();
    let stdout = info.stream(ProcessStream::Stdout).unwrap();
    assert_eq!((stdout.written, stdout.dropped, stdout.keep), (100, 90, 10));
    assert_eq!(
        texts(h.runtime.output(&id, &Offsets::zero()).await.unwrap_err()),
        format!(
            "Offset 0 of process \"{id}\"'s stdout is no longer held: the first offset still held is 90 (90 bytes dropped)."
        )
    );
    assert_eq!(
        texts(
            h.runtime
                .output(&id, &Offsets::default().with(ProcessStream::Stdout, 101))
                .await
                .unwrap_err()
        ),
        format!("Offset 101 of process \"{id}\"'s stdout is past its end: 100 bytes written so far.")
    );
    let (held, _) = drain(&h, &id, &Offsets::default()).await;
    assert_eq!(bytes_of(&held, ProcessStream::Stdout), vec![0u8; 10]);
    for (result, verb) in [
        (h.runtime.write_stdin(&id, b"x").await, "write to its stdin"),
        (h.runtime.close_stdin(&id).await, "close its stdin"),
        (h.runtime.signal(&id, "TERM").await.map(|_| ()), "signal it"),
    ] {
        assert_eq!(
            texts(result.unwrap_err()),
            format!("Process \"{id}\" has exited: cannot {verb}.")
        );
    }
    assert_eq!(
        texts(h.runtime.resize(&id, 10, 10).await.unwrap_err()),
        format!("Process \"{id}\" has no terminal to resize.")
    );
    let nap = unique_sleep();
    let sleeper = h
        .runtime
        .spawn(&lease.id, SpawnRequest::new(["sleep", nap.as_str()]))
        .await
        .unwrap();
    let sleeper = sleeper.id.to_string();
    assert_eq!(
        texts(h.runtime.signal(&sleeper, "NOPE").await.unwrap_err()),
        "Unknown signal \"NOPE\"."
    );
    assert_eq!(
        texts(h.runtime.write_stdin(&sleeper, b"x").await.unwrap_err()),
        format!("Process \"{sleeper}\" was not started with piped stdin.")
    );
    assert_eq!(
        h.runtime
            .wait_process(&sleeper, Some(Duration::from_millis(1)))
            .await
            .unwrap(),
        ProcessStatus::Running
    );
    h.runtime.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
    assert!(survivors(&nap).await.is_empty());
    h.finish();
}

#[tokio::test]
async fn release_and_destroy_leave_no_survivor_not_even_a_setsid_grandchild() {
    let h = Harness::new().await;
    for destroy in [false, true] {
        let lease = h.lease().await;
        let (nap, parent) = (unique_sleep(), unique_sleep());
        // With cgroups even a grandchild that drops the workspace and its HOME dies; the
        // fallback's /proc scan finds one that keeps its HOME.
        let escape = if h.driver.containment().starts_with("cgroup v2") {
            "cd / && setsid env -i"
        } else {
            "cd / && setsid"
        };
        let script = format!("{escape} sleep {nap} & echo up; sleep {parent}");
        let id = h.runtime.spawn(&lease.id, sh(&script)).await.unwrap().id.to_string();
        let mut output = h.runtime.output(&id, &Offsets::zero()).await.unwrap();
        match bounded(output.next()).await.unwrap() {
            Some(OutputEvent::Chunk(c)) => assert_eq!(c.bytes, b"up\n"),
            other => panic!("expected up, got {other:?}"),
        }
        while common::processes_with(&nap).is_empty() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        if destroy {
            h.runtime.destroy_lease(&lease.id).await.unwrap();
        } else {
            h.runtime.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
        }
        assert!(survivors(&nap).await.is_empty(), "destroy={destroy}: a survivor");
        assert!(
            survivors(&parent).await.is_empty(),
            "destroy={destroy}: the process survived"
        );
        let agent = format!(".agent-{}/sock", lease.id);
        assert!(
            survivors(&agent).await.is_empty(),
            "destroy={destroy}: the supervisor survived"
        );
    }
    h.finish();
}

#[tokio::test]
async fn a_supervisor_started_again_gives_ids_no_earlier_one_gave() {
    let h = Harness::new().await;
    let lease = h.lease().await;
    let first = h.runtime.spawn(&lease.id, sh("echo one")).await.unwrap().id.to_string();
    assert_eq!(first, format!("{}/1", lease.id));
    assert_eq!(
        bounded(h.runtime.wait_process(&first, None)).await.unwrap().exit_code(),
        Some(0)
    );
    // The supervisor is killed (as a command of the lease could kill it): its processes
    // and their records are gone with it.
    let pid_file = h.root.join(format!(".agent-{}/agent.pid", lease.id));
    let pid: i32 = std::fs::read_to_string(&pid_file).unwrap().trim().parse().unwrap();
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL).unwrap();
    let socket = format!(".agent-{}/sock", lease.id);
    assert!(survivors(&socket).await.is_empty(), "the supervisor survived SIGKILL");
    // The next spawn starts another, which numbers past every id the first could give.
    let second = h.runtime.spawn(&lease.id, sh("echo two")).await.unwrap().id.to_string();
    assert_eq!(second, format!("{}/4294967297", lease.id));
    let (chunks, _) = drain(&h, &second, &Offsets::zero()).await;
    assert_eq!(bytes_of(&chunks, ProcessStream::Stdout), b"two\n");
    assert_eq!(
        h.runtime.process(&first).await.unwrap_err().to_string(),
        format!("Process \"{first}\" was not found.")
    );
    h.runtime.destroy_lease(&lease.id).await.unwrap();
    h.finish();
}

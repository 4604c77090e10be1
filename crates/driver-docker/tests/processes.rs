//! Persistent processes on the Docker driver (contract section 9), through the facade
//! against the static supervisor mounted into the busybox test image: the verbs end to end,
//! one supervisor for concurrent first spawns, the refusals the driver gives itself, a
//! socket the container replaced by a link, honesty where no static supervisor is at hand,
//! and nothing left on the host or in the engine once the lease ends. The conformance
//! suite (`crates/conformance/tests/docker.rs`) runs every `processes_*` check on top.

mod common;

use std::time::Duration;

use common::{Harness, bounded};
use envrt_driver_docker::{DEFAULT_AGENT_DIR, META_AGENT};
use envrt_runtime_core::{
    LeasePolicy, Offsets, OutputEvent, ProcessInfo, ProcessStatus, ProcessStream, SpawnRequest, StdinMode, TtySize,
};
use serde_json::json;

async fn harness() -> Option<Harness> {
    common::harness_with(|config| config.agent = Some(envrt_test_support::docker::static_agent())).await
}

macro_rules! harness_or_skip {
    () => {
        match harness().await {
            Some(h) => h,
            None => return,
        }
    };
}

fn sh(script: &str) -> SpawnRequest {
    SpawnRequest::new(["sh", "-c", script])
}

/// Every chunk of `id` from `from` until the exit, and the final state.
async fn drain(h: &Harness, id: &str, from: &Offsets) -> (Vec<(ProcessStream, u64, Vec<u8>)>, ProcessInfo) {
    let mut output = h.runtime.output(id, from).await.expect("output");
    let mut chunks = Vec::new();
    loop {
        match bounded(60, output.next()).await.expect("next") {
            Some(OutputEvent::Chunk(c)) => chunks.push((c.stream, c.offset, c.bytes)),
            Some(OutputEvent::Exit(info)) => return (chunks, info),
            None => panic!("the stream ended without an exit"),
        }
    }
}

fn text_of(chunks: &[(ProcessStream, u64, Vec<u8>)], stream: ProcessStream) -> String {
    let bytes: Vec<u8> = chunks
        .iter()
        .filter(|c| c.0 == stream)
        .flat_map(|c| c.2.clone())
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// The host directory of a lease's supervisor.
fn lease_dir(lease: &envrt_runtime_core::Lease) -> std::path::PathBuf {
    let name = lease.metadata["containerName"].as_str().unwrap();
    std::env::temp_dir().join(DEFAULT_AGENT_DIR).join(name)
}

#[tokio::test]
async fn every_verb_works_in_the_container_and_nothing_is_left_after_release() {
    let h = harness_or_skip!();
    bounded(180, async {
        let lease = h.default_lease().await;
        assert_eq!(lease.metadata[META_AGENT], json!(true));
        let caps = h.runtime.resolve_capabilities(&lease.id).await.unwrap().unwrap();
        assert!(caps.persistent_process_sessions);
        // Nothing runs before the first spawn.
        assert_eq!(h.runtime.processes(&lease.id).await.unwrap(), Vec::new());
        assert!(h.processes_matching(&lease, "envrt-agent").await.is_empty());

        // Pipes, the workspace as cwd, the container's environment, the lease's pid.
        let info = h
            .runtime
            .spawn(&lease.id, sh("echo $$ $PWD $PATH; printf oops >&2; exit 3"))
            .await
            .unwrap();
        let id = info.id.to_string();
        assert_eq!(id, format!("{}/1", lease.id));
        let (chunks, exit) = drain(&h, &id, &Offsets::zero()).await;
        assert_eq!(
            text_of(&chunks, ProcessStream::Stdout),
            format!("{} /workspace /bin:/sbin:/usr/bin:/usr/sbin\n", info.pid)
        );
        assert_eq!(text_of(&chunks, ProcessStream::Stderr), "oops");
        assert_eq!(exit.status, ProcessStatus::Exited { code: 3 });

        // Piped stdin to its end.
        let mut request = SpawnRequest::new(["cat"]);
        request.stdin = StdinMode::Piped;
        let cat = h.runtime.spawn(&lease.id, request).await.unwrap().id.to_string();
        h.runtime.write_stdin(&cat, b"one ").await.unwrap();
        h.runtime.write_stdin(&cat, b"two").await.unwrap();
        h.runtime.close_stdin(&cat).await.unwrap();
        let (chunks, exit) = drain(&h, &cat, &Offsets::zero()).await;
        assert_eq!(text_of(&chunks, ProcessStream::Stdout), "one two");
        assert_eq!(exit.status, ProcessStatus::Exited { code: 0 });

        // A terminal of the asked size, resized.
        let mut request = sh("stty size; read line; stty size");
        request.tty = Some(TtySize { rows: 12, cols: 34 });
        let tty = h.runtime.spawn(&lease.id, request).await.unwrap().id.to_string();
        let mut output = h.runtime.output(&tty, &Offsets::zero()).await.unwrap();
        let mut seen = String::new();
        while !seen.contains("12 34\r\n") {
            match bounded(30, output.next()).await.unwrap() {
                Some(OutputEvent::Chunk(c)) => seen.push_str(&String::from_utf8_lossy(&c.bytes)),
                other => panic!("{other:?} before the size, after {seen:?}"),
            }
        }
        drop(output);
        h.runtime.resize(&tty, 40, 100).await.unwrap();
        // The terminal echoes the line, then the second `stty size` sees the new size.
        h.runtime.write_stdin(&tty, b"\n").await.unwrap();
        let (chunks, exit) = drain(&h, &tty, &Offsets::zero()).await;
        assert_eq!(text_of(&chunks, ProcessStream::Tty), "12 34\r\n\r\n40 100\r\n");
        assert_eq!(exit.status, ProcessStatus::Exited { code: 0 });

        // A signal to the whole group, and wait.
        let group = h
            .runtime
            .spawn(&lease.id, sh("sleep 300 & sleep 301 & echo ready; wait"))
            .await
            .unwrap()
            .id
            .to_string();
        assert_eq!(
            h.runtime
                .wait_process(&group, Some(Duration::from_millis(100)))
                .await
                .unwrap(),
            ProcessStatus::Running
        );
        h.runtime.signal(&group, "TERM").await.unwrap();
        assert_eq!(
            h.runtime.wait_process(&group, None).await.unwrap(),
            ProcessStatus::Signalled { signal: 15 }
        );
        assert!(h.processes_matching(&lease, "sleep 30").await.is_empty());

        // A `setsid` escapee lives until the lease ends; so does the supervisor.
        let escapee = h
            .runtime
            .spawn(&lease.id, sh("setsid sleep 302 >/dev/null 2>&1 </dev/null &"))
            .await
            .unwrap()
            .id
            .to_string();
        h.runtime.wait_process(&escapee, None).await.unwrap();
        assert_eq!(h.processes_matching(&lease, "sleep 302").await.len(), 1);
        let listed = h.runtime.processes(&lease.id).await.unwrap();
        assert_eq!(listed.len(), 5);
        let dir = lease_dir(&lease);
        assert!(dir.join("run/sock").exists(), "{}", dir.display());
        h.runtime
            .release_lease(&lease.id, envrt_runtime_core::LeaseStatus::Released)
            .await
            .unwrap();
        assert!(!dir.exists(), "{} is left", dir.display());
        h.finish().await;
    })
    .await;
}

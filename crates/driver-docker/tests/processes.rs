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
    Offsets, OutputEvent, ProcessInfo, ProcessStatus, ProcessStream, SpawnRequest, StdinMode, TtySize,
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
        // Numbered within the lease (an execute through the supervisor takes a number too).
        assert!(id.starts_with(&format!("{}/", lease.id)), "{id}");
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

#[tokio::test]
async fn first_spawns_at_once_start_one_supervisor() {
    let h = harness_or_skip!();
    bounded(120, async {
        let lease = h.default_lease().await;
        let spawns = (0..6).map(|n| h.runtime.spawn(&lease.id, sh(&format!("echo {n}"))));
        let infos: Vec<ProcessInfo> = futures::future::join_all(spawns)
            .await
            .into_iter()
            .map(Result::unwrap)
            .collect();
        let mut numbers: Vec<u64> = infos.iter().map(|i| i.id.number).collect();
        numbers.sort_unstable();
        assert_eq!(numbers, vec![1, 2, 3, 4, 5, 6]);
        assert_eq!(h.runtime.processes(&lease.id).await.unwrap().len(), 6);
        let agents = h.processes_matching(&lease, "/.envrt/agent --socket").await;
        assert_eq!(agents.len(), 1, "{agents:?}");
        h.finish().await;
    })
    .await;
}

#[tokio::test]
async fn a_missing_cwd_is_refused_with_the_execute_text_and_relative_ones_start_at_the_workspace() {
    let h = harness_or_skip!();
    bounded(120, async {
        let lease = h.default_lease().await;
        let mut request = sh("true");
        request.cwd = Some("missing".into());
        assert_eq!(
            h.runtime.spawn(&lease.id, request).await.unwrap_err().to_string(),
            "Invalid input: cwd \"missing\" is not a directory in the environment."
        );
        h.sh(&lease, "mkdir -p /workspace/sub").await;
        for (cwd, seen) in [("sub", "/workspace/sub\n"), ("/tmp", "/tmp\n")] {
            let mut request = sh("pwd");
            request.cwd = Some(cwd.into());
            let id = h.runtime.spawn(&lease.id, request).await.unwrap().id.to_string();
            let (chunks, _) = drain(&h, &id, &Offsets::zero()).await;
            assert_eq!(text_of(&chunks, ProcessStream::Stdout), seen);
        }
        h.finish().await;
    })
    .await;
}

#[tokio::test]
async fn a_socket_the_container_replaced_by_a_link_is_never_followed() {
    let h = harness_or_skip!();
    bounded(120, async {
        let lease = h.default_lease().await;
        let first = h.runtime.spawn(&lease.id, sh("sleep 300")).await.unwrap();
        // The command owns the run directory: it points the socket at the host's engine
        // (a path the container does not have, but the host does).
        let r = h
            .sh(&lease, "rm /.envrt/run/sock && ln -s /var/run/docker.sock /.envrt/run/sock")
            .await;
        assert_eq!(r.exit_code, Some(0), "{}", String::from_utf8_lossy(&r.stderr));
        let expected = format!(
            "The process supervisor of lease {} is not reachable: /.envrt/run/sock is not a socket (the container put something else there)",
            lease.id
        );
        assert_eq!(h.runtime.processes(&lease.id).await.unwrap_err().to_string(), expected);
        assert_eq!(
            h.runtime.spawn(&lease.id, sh("true")).await.unwrap_err().to_string(),
            expected
        );
        assert_eq!(
            h.runtime.process(&first.id.to_string()).await.unwrap_err().to_string(),
            expected
        );
        h.finish().await;
    })
    .await;
}

#[tokio::test]
async fn without_a_static_supervisor_no_lease_grants_processes_and_nothing_is_mounted() {
    // The dynamic shell of this host stands for a supervisor built without +crt-static.
    let Some(h) = common::harness_with(|config| config.agent = Some("/bin/sh".into())).await else {
        return;
    };
    bounded(120, async {
        assert_eq!(
            h.driver.process_sessions().unwrap_err(),
            "the process supervisor \"/bin/sh\" is not a static binary, so it cannot run in an image without a C library of its own; \
             build one with RUSTFLAGS='-C target-feature=+crt-static' cargo build -p envrt-agent --release --target x86_64-unknown-linux-gnu \
             and name it in [docker] agent or ENVRT_AGENT"
        );
        let lease = h.default_lease().await;
        assert_eq!(lease.metadata.get(META_AGENT), None);
        let caps = h.runtime.resolve_capabilities(&lease.id).await.unwrap().unwrap();
        assert!(!caps.persistent_process_sessions);
        assert_eq!(
            h.runtime.spawn(&lease.id, sh("true")).await.unwrap_err().to_string(),
            "Environment driver \"docker\" does not support persistent process sessions."
        );
        let r = h.sh(&lease, "ls -a / | grep -c envrt || true").await;
        assert_eq!(String::from_utf8_lossy(&r.stdout), "0\n");
        assert!(!lease_dir(&lease).exists());
        h.finish().await;
    })
    .await;
}

#[tokio::test]
async fn a_lease_acquired_without_the_supervisor_does_not_grant_processes_on_a_driver_that_has_one() {
    use envrt_runtime_core::{CapabilityInput, Environment, EnvironmentDriver as _};
    let Some(old) = common::harness_with(|config| config.agent = Some("/bin/sh".into())).await else {
        return;
    };
    let h = harness_or_skip!();
    bounded(120, async {
        let lease = old.default_lease().await;
        let config = json!({"image": common::image()}).as_object().cloned().unwrap();
        let environment = Environment::new("old", "old", "docker").with_config(config);
        let asked = |lease| CapabilityInput {
            environment: Some(environment.clone()),
            lease,
        };
        let caps = h
            .driver
            .resolve_capabilities(&asked(Some(lease.clone())))
            .await
            .unwrap();
        assert!(!caps.persistent_process_sessions);
        assert!(
            h.driver
                .resolve_capabilities(&asked(None))
                .await
                .unwrap()
                .persistent_process_sessions
        );
        old.finish().await;
        h.finish().await;
    })
    .await;
}

#[tokio::test]
async fn a_resumed_lease_starts_a_new_supervisor_with_fresh_ids_and_a_read_only_root_still_gets_one() {
    let h = harness_or_skip!();
    bounded(120, async {
        let lease = h
            .lease(
                json!({"readOnlyRootFs": true}),
                envrt_runtime_core::LeasePolicy::ReuseByEnvironment,
            )
            .await;
        let first = h.runtime.spawn(&lease.id, sh("sleep 300")).await.unwrap();
        h.runtime
            .release_lease(&lease.id, envrt_runtime_core::LeaseStatus::Released)
            .await
            .unwrap();
        // The stopped container ended the supervisor and its processes; the lease keeps
        // its directory, as its container keeps its mounts.
        assert!(lease_dir(&lease).join("run").is_dir());
        let resumed = h.runtime.resume_lease(&lease.id).await.unwrap();
        assert_eq!(resumed.metadata[META_AGENT], json!(true));
        assert_eq!(h.runtime.processes(&lease.id).await.unwrap(), Vec::new());
        let again = h.runtime.spawn(&lease.id, sh("echo again")).await.unwrap();
        // A new supervisor, whose ids start past every one the first could give.
        assert_eq!((first.id.number, again.id.number), (1, (1 << 32) + 1));
        let (chunks, exit) = drain(&h, &again.id.to_string(), &Offsets::zero()).await;
        assert_eq!(text_of(&chunks, ProcessStream::Stdout), "again\n");
        assert_eq!(exit.status, ProcessStatus::Exited { code: 0 });
        h.runtime.destroy_lease(&lease.id).await.unwrap();
        assert!(!lease_dir(&lease).exists());
        h.finish().await;
    })
    .await;
}

#[tokio::test]
async fn a_supervisor_that_exits_at_once_fails_the_spawn_with_its_exit_code() {
    // busybox-static is a static binary, but no supervisor: run as `agent` it finds no
    // applet of that name and exits 127.
    let Some(h) = common::harness_with(|config| config.agent = Some("/bin/busybox".into())).await else {
        return;
    };
    bounded(120, async {
        let lease = h.default_lease().await;
        assert_eq!(
            h.runtime.spawn(&lease.id, sh("true")).await.unwrap_err().to_string(),
            format!(
                "the process supervisor of lease {} did not start: it exited with code 127",
                lease.id
            )
        );
        assert_eq!(h.runtime.processes(&lease.id).await.unwrap(), Vec::new());
        h.finish().await;
    })
    .await;
}

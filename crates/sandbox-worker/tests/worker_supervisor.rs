//! The `envrtStartProcessSupervisor` extension: the worker starts one `envrt-agent` per
//! lease inside the lease's sandbox (its host uid, its own pid namespace), listening in
//! the directory the host named; a second call answers at once; release ends the agent
//! and every process it started, a `setsid` escapee included; every refusal is an exact
//! text; a worker without the agent's binary neither advertises nor serves the verb.

mod common;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::*;
use envrt_driver_agent::{AgentSpawnRequest, Client};
use serde_json::json;

const METHOD: &str = "envrtStartProcessSupervisor";

/// The supervisor built beside the worker (`cargo build -p envrt-agent`).
fn agent() -> PathBuf {
    let path = Path::new(WORKER).with_file_name("envrt-agent");
    assert!(
        path.is_file(),
        "{} is not built; run `cargo build -p envrt-agent`",
        path.display()
    );
    path
}

fn worker_with_agent() -> Worker {
    let agent = agent();
    let mut w = Worker::start_with_env(&[("ENVRT_AGENT", agent.to_str().unwrap())]);
    let r = w.call("initialize", init_params());
    let methods = r["result"]["supportedMethods"].as_array().unwrap().clone();
    assert!(methods.contains(&json!(METHOD)), "{r}");
    w
}

/// A private directory for a socket, as the host makes it.
fn socket_dir(parent: &Path) -> PathBuf {
    let dir = parent.join("sd");
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    dir
}

/// The pid namespace of `pid`.
fn pid_namespace(pid: u32) -> Option<std::ffi::OsString> {
    std::fs::read_link(format!("/proc/{pid}/ns/pid"))
        .ok()
        .map(PathBuf::into_os_string)
}

/// Host pids of the live processes in the pid namespace `ns`.
fn processes_in(ns: &std::ffi::OsStr) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
            let zombie = status.lines().any(|l| l.starts_with("State:") && l.contains('Z'));
            !zombie && pid_namespace(*pid).as_deref() == Some(ns)
        })
        .collect()
}

#[test]
fn one_supervisor_per_lease_runs_as_the_lease_and_release_ends_it_with_every_process() {
    let mut w = worker_with_agent();
    let lease = w.acquire();
    let uid = std::fs::metadata(w.root.path().join(&lease)).unwrap().uid();
    assert_ne!(
        uid, 0,
        "the worker runs as root in these tests: each lease has its own uid"
    );
    let parent = tempfile::tempdir().unwrap();
    let dir = socket_dir(parent.path());
    let params = on_lease(&lease, json!({"socketDir": dir.to_str().unwrap()}));
    let started = Instant::now();
    assert_eq!(w.ok(METHOD, params.clone()), json!({"started": true}));
    eprintln!("supervisor start: {} ms", started.elapsed().as_millis());
    assert_eq!(w.ok(METHOD, params), json!({"started": false}), "a second call");
    // The directory is the lease's now, and the socket the agent's.
    assert_eq!(std::fs::metadata(&dir).unwrap().uid(), uid);
    let socket = dir.join("sock");
    assert_eq!(std::fs::symlink_metadata(&socket).unwrap().uid(), uid);
    let mark = marker("supervisor");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let info = runtime.block_on(async {
        let client = Client::connect(&socket).await.expect("connect");
        let request = AgentSpawnRequest {
            argv: vec![
                "sh".into(),
                "-c".into(),
                "setsid sleep 300 & echo \"$(id -u) $(hostname) $PWD $HOME\"; cat /proc/net/dev | wc -l; exec sleep 301"
                    .into(),
            ],
            env: [("MARK".to_owned(), mark.clone())].into(),
            ..AgentSpawnRequest::default()
        };
        let info = client.spawn(request).await.expect("spawn");
        let mut output = client.output(info.id, Default::default()).await.expect("output");
        let mut text = Vec::new();
        while !String::from_utf8_lossy(&text).ends_with("\n1\n") && !String::from_utf8_lossy(&text).ends_with("\n3\n") {
            match tokio::time::timeout(BOUND, output.next()).await {
                Ok(Some(Ok(envrt_agent::client::Event::Chunk(chunk)))) => text.extend_from_slice(&chunk.bytes),
                other => panic!(
                    "expected output, got {other:?} after {:?}",
                    String::from_utf8_lossy(&text)
                ),
            }
        }
        (info, String::from_utf8_lossy(&text).into_owned())
    });
    // Inside: the sandbox user, the sandbox's host name, the workspace, and no network
    // but loopback (/proc/net/dev: two header lines and `lo`).
    assert_eq!(
        info.1, "65534 envrt-sandbox /workspace /workspace\n3\n",
        "what the process saw"
    );
    // The process and its setsid escapee (and, for a moment, the shell's subshells),
    // each as the lease's host uid, in a pid namespace of their own.
    let marked = wait_for_processes(&mark, 2);
    let namespace = pid_namespace(marked[0]).expect("its pid namespace");
    assert_ne!(pid_namespace(std::process::id()), Some(namespace.clone()));
    for pid in &marked {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        let host_uid = status
            .lines()
            .find(|l| l.starts_with("Uid:"))
            .and_then(|l| l.split_whitespace().nth(1).map(str::to_owned));
        assert!(
            host_uid.as_ref().is_none_or(|u| *u == uid.to_string()),
            "pid {pid} runs as {host_uid:?}, not {uid}"
        );
    }
    // The agent, its sandbox init, bwrap's own and the processes share it.
    assert!(processes_in(&namespace).len() >= 4, "{:?}", processes_in(&namespace));
    w.ok("environmentReleaseLease", json!({"providerLeaseId": lease}));
    assert_eq!(
        survivors_after_wait(&mark),
        Vec::<u32>::new(),
        "a process survived release"
    );
    let deadline = Instant::now() + Duration::from_secs(5);
    while !processes_in(&namespace).is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(
        processes_in(&namespace),
        Vec::<u32>::new(),
        "a process of the supervisor's sandbox survived release"
    );
}

#[test]
fn refusals_are_exact() {
    let mut w = worker_with_agent();
    let lease = w.acquire();
    let parent = tempfile::tempdir().unwrap();
    let relative = on_lease(&lease, json!({"socketDir": "relative/dir"}));
    assert_eq!(
        w.err(METHOD, relative),
        (-32602, "socketDir \"relative/dir\" is not an absolute path".to_owned())
    );
    let dir = socket_dir(parent.path());
    let link = parent.path().join("link");
    std::os::unix::fs::symlink(&dir, &link).unwrap();
    assert_eq!(
        w.err(METHOD, on_lease(&lease, json!({"socketDir": link.to_str().unwrap()}))),
        (
            -32602,
            format!(
                "socketDir {:?} cannot be opened as a directory: Not a directory (os error 20)",
                link.to_str().unwrap()
            )
        )
    );
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    assert_eq!(
        w.err(METHOD, on_lease(&lease, json!({"socketDir": dir.to_str().unwrap()}))),
        (
            -32602,
            format!(
                "socketDir {:?} must be a directory of the worker's user with mode 0700",
                dir.to_str().unwrap()
            )
        )
    );
    let gone = "sbx-00000000-0000-4000-8000-000000000000";
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    let (_, text) = w.err(METHOD, on_lease(gone, json!({"socketDir": dir.to_str().unwrap()})));
    assert_eq!(text, format!("Lease resource \"{gone}\" does not exist."));
}

#[test]
fn an_agent_that_does_not_listen_is_refused_with_its_words() {
    // `false` as the agent: it exits before listening.
    let mut w = Worker::start_with_env(&[("ENVRT_AGENT", "/bin/false")]);
    w.call("initialize", init_params());
    let lease = w.acquire();
    let parent = tempfile::tempdir().unwrap();
    let dir = socket_dir(parent.path());
    let (code, text) = w.err(METHOD, on_lease(&lease, json!({"socketDir": dir.to_str().unwrap()})));
    assert_eq!(
        (code, text),
        (
            -32002,
            format!("The process supervisor of lease {lease} did not start: it said \"\"")
        )
    );
}

#[test]
fn without_the_agent_the_verb_is_neither_advertised_nor_served() {
    let mut w = Worker::start_with_env(&[("ENVRT_AGENT", "/nonexistent/envrt-agent")]);
    let r = w.call("initialize", init_params());
    let methods = r["result"]["supportedMethods"].as_array().unwrap();
    assert!(!methods.contains(&json!(METHOD)), "{r}");
    let lease = w.acquire();
    assert_eq!(
        w.err(METHOD, on_lease(&lease, json!({"socketDir": "/tmp"}))),
        (-32601, format!("Unknown method: {METHOD}"))
    );
}

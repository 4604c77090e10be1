//! Shared set-up: the real `envrt-agent` binary started on a socket in a temporary
//! directory, clients to it, and helpers that read a whole output stream.

#![allow(dead_code, unreachable_pub)]

use std::collections::BTreeMap;
use std::future::Future;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use envrt_agent::client::{Client, ClientError, Event};
use envrt_agent::proto::{Offsets, ProcessInfo, SpawnRequest, Stream};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// A running agent; SIGTERMed when dropped, which SIGKILLs its process groups and ends it.
pub struct AgentProc {
    pub child: Child,
    pub socket: PathBuf,
    pub dir: tempfile::TempDir,
}

/// Runs a test body with a hard bound, so no test can hang.
pub async fn bounded<F: Future<Output = T>, T>(secs: u64, fut: F) -> T {
    tokio::time::timeout(Duration::from_secs(secs), fut)
        .await
        .unwrap_or_else(|_| panic!("test did not finish within {secs} s"))
}

/// Starts the agent with extra arguments and waits for its "listening" line.
pub async fn start(args: &[&str]) -> AgentProc {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let socket = dir.path().join("lease").join("agent.sock");
    // ENVRT_AGENT_BIN runs the tests against another build (the static release one, say).
    let binary = std::env::var("ENVRT_AGENT_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_envrt-agent").to_owned());
    let mut child = Command::new(binary)
        .arg("--socket")
        .arg(&socket)
        .args(args)
        .stdout(Stdio::piped())
        .spawn()
        .expect("start envrt-agent");
    let stdout = child.stdout.take().expect("stdout");
    let mut line = String::new();
    BufReader::new(stdout)
        .read_line(&mut line)
        .await
        .expect("read the listening line");
    assert_eq!(
        line.trim_end(),
        format!("envrt-agent listening on {}", socket.display())
    );
    AgentProc { child, socket, dir }
}

impl AgentProc {
    pub async fn client(&self) -> Client {
        Client::connect(&self.socket).await.expect("connect to the agent")
    }

    /// SIGTERMs the agent and waits for its exit status.
    pub async fn stop(mut self) -> std::process::ExitStatus {
        if let Some(pid) = self
            .child
            .id()
            .and_then(|pid| rustix::process::Pid::from_raw(pid as i32))
        {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
        }
        self.child.wait().await.expect("the agent's exit status")
    }

    pub fn pid(&self) -> i32 {
        self.child.id().expect("the agent runs") as i32
    }
}

impl Drop for AgentProc {
    fn drop(&mut self) {
        if let Some(pid) = self
            .child
            .id()
            .and_then(|pid| rustix::process::Pid::from_raw(pid as i32))
        {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
        }
    }
}

/// A request for `argv` with everything else at its default.
pub fn cmd(argv: &[&str]) -> SpawnRequest {
    SpawnRequest {
        argv: argv.iter().map(|s| s.to_string()).collect(),
        ..SpawnRequest::default()
    }
}

/// `sh -c SCRIPT`.
pub fn sh(script: &str) -> SpawnRequest {
    cmd(&["sh", "-c", script])
}

/// Reads an output stream to its end: the bytes per stream, and the exit (or the refusal).
pub async fn collect(
    client: &Client,
    id: u64,
    from: Offsets,
) -> (BTreeMap<Stream, Vec<u8>>, Result<ProcessInfo, ClientError>) {
    let mut output = client.output(id, from).await.expect("an output stream");
    let mut bytes: BTreeMap<Stream, Vec<u8>> = BTreeMap::new();
    while let Some(event) = output.next().await {
        match event {
            Ok(Event::Chunk(chunk)) => bytes.entry(chunk.stream).or_default().extend(chunk.bytes),
            Ok(Event::Exit(info)) => return (bytes, Ok(info)),
            Err(error) => return (bytes, Err(error)),
        }
    }
    panic!("the output stream ended without an exit or a refusal")
}

/// Reads output until `needle` has appeared in `stream` (all bytes so far returned).
pub async fn read_until(output: &mut envrt_agent::client::Output, needle: &str) -> String {
    let mut text = String::new();
    while !text.contains(needle) {
        match output.next().await {
            Some(Ok(Event::Chunk(chunk))) => text.push_str(&String::from_utf8_lossy(&chunk.bytes)),
            other => panic!("output ended before {needle:?} (got {text:?}): {other:?}"),
        }
    }
    text
}

/// A refusal's text.
pub fn refused<T: std::fmt::Debug>(result: Result<T, ClientError>) -> String {
    match result {
        Err(ClientError::Refused(text)) => text,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

/// A pidfd for `pid`: it turns readable when that process ends, child of ours or not.
pub fn pidfd(pid: i32) -> std::os::fd::OwnedFd {
    let pid = rustix::process::Pid::from_raw(pid).expect("a positive pid");
    rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty()).expect("pidfd_open")
}

/// Whether every process behind `pidfds` ends within 20 s (a bound, not a timing claim).
pub async fn all_end(pidfds: Vec<std::os::fd::OwnedFd>) -> bool {
    tokio::task::spawn_blocking(move || {
        let mut fds: Vec<_> = pidfds
            .iter()
            .map(|fd| rustix::event::PollFd::new(fd, rustix::event::PollFlags::IN))
            .collect();
        let bound = rustix::event::Timespec { tv_sec: 20, tv_nsec: 0 };
        while fds.iter().any(|fd| fd.revents().is_empty()) {
            if rustix::event::poll(&mut fds, Some(&bound)).expect("poll") == 0 {
                return false;
            }
        }
        true
    })
    .await
    .expect("the poll task")
}

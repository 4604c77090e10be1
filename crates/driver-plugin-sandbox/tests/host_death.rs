//! A worker never outlives its host, even when the host is killed with SIGKILL. The host
//! is this test binary re-run as a child (`host_child`), which starts a worker, reports
//! its pid and waits to be killed.

mod host_common;

use std::io::{BufRead as _, BufReader};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use envrt_driver_plugin_sandbox::{ParentDeathSignal, SandboxOptions};
use envrt_runtime_core::{ExecuteRequest, OutputStream};
use host_common::*;

/// A sleep length no other process on the machine uses, to find the sandboxed command.
const SANDBOX_SLEEP: &str = "1234.5678";

const CHILD_ENV: &str = "ENVRT_SANDBOX_HOST_DEATH_CHILD";

/// Runs only inside the child host: starts a worker (the script worker, or the SDK
/// fixture, with a long command running under `sdk-term`), prints the pids, then waits to
/// be killed.
/// In a normal test run (no child variable) it returns at once.
#[test]
fn host_child() {
    let Ok(kind) = std::env::var(CHILD_ENV) else {
        return;
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async move {
        let root = std::env::var("ENVRT_SANDBOX_HOST_DEATH_ROOT").unwrap();
        let manifest = match kind.as_str() {
            "sdk" | "sdk-term" => sdk_manifest(std::path::Path::new(&root)),
            "reference" => reference_manifest(std::path::Path::new(&root)).unwrap(),
            _ => script_manifest("", &[]),
        };
        let options = SandboxOptions {
            parent_death_signal: if kind == "sdk-term" {
                ParentDeathSignal::Term
            } else {
                ParentDeathSignal::Kill
            },
            ..SandboxOptions::default()
        };
        let driver = start(manifest, options).await;
        println!("WORKER_PID={}", driver.worker_pid().unwrap());
        if kind == "reference" {
            // a sandboxed command the parent finds by its unique argv
            let env = runtime_with(driver.clone()).await;
            let lease = acquire(&env).await;
            let request = ExecuteRequest {
                sink: Some(Arc::new(|_: OutputStream, chunk: &[u8]| {
                    if chunk.starts_with(b"started") {
                        println!("COMMAND_STARTED");
                    }
                })),
                ..ExecuteRequest::new("/bin/sh", ["-c", &format!("echo started; exec sleep {SANDBOX_SLEEP}")])
            };
            tokio::spawn(async move { env.execute(&lease.id, request).await });
        }
        if kind == "sdk-term" {
            let env = runtime_with(driver.clone()).await;
            let lease = acquire(&env).await;
            let request = ExecuteRequest {
                sink: Some(Arc::new(|stream: OutputStream, chunk: &[u8]| {
                    if stream == OutputStream::Stdout {
                        println!("COMMAND_PID={}", String::from_utf8_lossy(chunk).trim());
                    }
                })),
                ..ExecuteRequest::new("/bin/sh", ["-c", "echo $$; exec sleep 120"])
            };
            tokio::spawn(async move { env.execute(&lease.id, request).await });
        }
        tokio::time::sleep(Duration::from_secs(120)).await;
    });
}

struct KillOnDrop(Option<std::process::Child>);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn kill_host_and_check(kind: &str) {
    if kind.starts_with("sdk") {
        // install once here, not concurrently in two child hosts
        ensure_sdk_fixture();
    }
    let root = TempDir::new("host-death");
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["host_child", "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, kind)
        .env("ENVRT_SANDBOX_HOST_DEATH_ROOT", root.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    // whatever fails below, the child host does not outlive the test
    let mut child = KillOnDrop(Some(child));
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let expected = if kind == "sdk-term" { 2 } else { 1 };
    let mut pids = Vec::new();
    let mut started = kind != "reference";
    while pids.len() < expected || !started {
        let line = match rx.recv_timeout(Duration::from_secs(60)) {
            Ok(line) => line,
            Err(e) => panic!("the child host did not get ready: {e}"),
        };
        started |= line.contains("COMMAND_STARTED");
        // libtest prints "test host_child ... " on the same line as the first output
        for tag in ["WORKER_PID=", "COMMAND_PID="] {
            if let Some(at) = line.find(tag) {
                pids.push(line[at + tag.len()..].trim().parse::<u32>().unwrap());
            }
        }
    }
    if kind == "reference" {
        // the shell prints, then execs the sleep: wait (bounded) for it to appear
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        let mut sandboxed = pids_with_argv(&["sleep", SANDBOX_SLEEP]);
        while sandboxed.is_empty() && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
            sandboxed = pids_with_argv(&["sleep", SANDBOX_SLEEP]);
        }
        assert_eq!(sandboxed.len(), 1, "the sandboxed command runs while the host lives");
        pids.extend(sandboxed);
    }
    for pid in &pids {
        assert!(alive(*pid), "{pid} runs while the host lives");
    }
    let mut host = child.0.take().unwrap();
    host.kill().unwrap(); // SIGKILL
    host.wait().unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    for pid in pids {
        assert!(
            rt.block_on(wait_gone(pid, Duration::from_secs(10))),
            "process {pid} outlived its SIGKILLed host"
        );
    }
}

#[test]
fn a_sigkilled_host_leaves_no_worker_behind() {
    if std::env::var_os(CHILD_ENV).is_some() {
        return;
    }
    kill_host_and_check("script");
}

#[test]
fn a_sigkilled_host_leaves_no_sdk_worker_behind() {
    if std::env::var_os(CHILD_ENV).is_some() {
        return;
    }
    kill_host_and_check("sdk");
}

/// With SIGTERM as the parent-death signal, the SDK fixture's exit hook also kills the
/// command it was running (with SIGKILL it could not: that cleanup is the worker's own
/// sandbox's job, as `bwrap --die-with-parent` does for the reference worker).
#[test]
fn a_sigkilled_host_with_term_death_signal_leaves_no_sdk_command_behind() {
    if std::env::var_os(CHILD_ENV).is_some() {
        return;
    }
    kill_host_and_check("sdk-term");
}

/// The reference worker runs commands in `bwrap --die-with-parent` sandboxes: a SIGKILLed
/// host takes the worker and the sandboxed command with it.
#[test]
fn a_sigkilled_host_leaves_no_reference_worker_and_no_sandboxed_process_behind() {
    if std::env::var_os(CHILD_ENV).is_some() {
        return;
    }
    if reference_worker().is_none() {
        eprintln!("SKIPPED: the envrt-sandbox-worker binary is not part of this build");
        return;
    }
    kill_host_and_check("reference");
}

//! Timeouts that reach less than the whole tree. One signals the command alone (the
//! older `execute_timeout_kills_tree` catches it too). Two pass the older timeout
//! checks: one signals the command and every descendant it can find through parent links
//! in `/proc` at the moment of the timeout (a daemon that double-forked away is nobody's
//! descendant any more), the other sends only a polite SIGTERM to the command's group
//! and descendants and never follows it with a kill. The last is a naive timeout: a SIGKILL
//! to the command's process group only, so whatever moved itself out of it (a new session,
//! a job-control shell's own group) keeps running. Output so far is kept.

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use envrt_runtime_core::{DriverError, ExecuteRequest, ExecuteResult};

/// What the timeout signals.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Reach {
    /// SIGKILL to the command's process alone.
    Command,
    /// SIGKILL to the command and each of its descendants by parent link.
    Descendants,
    /// SIGTERM to the command's group and each descendant, and nothing after it.
    TermOnly,
    /// SIGKILL to the command's process group alone.
    Group,
}

/// The pids whose parent chain leads to `root` (not `root` itself).
fn descendants(root: u32) -> Vec<u32> {
    let mut parents = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // pid (comm) state ppid ...: comm may hold spaces, so read after the last ')'.
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse::<u32>().ok());
        if let Some(ppid) = ppid {
            parents.push((pid, ppid));
        }
    }
    let mut found = vec![root];
    let mut i = 0;
    while i < found.len() {
        let parent = found[i];
        found.extend(parents.iter().filter(|(_, pp)| *pp == parent).map(|(p, _)| *p));
        i += 1;
    }
    found.remove(0);
    found
}

fn signal(target: &str, name: &str) {
    let _ = Command::new("kill").args(["-s", name, "--", target]).status();
}

pub(crate) async fn reaching_execute(
    workspace: &Path,
    request: &ExecuteRequest,
    reach: Reach,
) -> Result<ExecuteResult, DriverError> {
    let started = Instant::now();
    let failed = |e: std::io::Error| DriverError::io("cannot run the command", e);
    let mut child = Command::new(&request.command)
        .args(&request.args)
        .current_dir(workspace)
        .process_group(0)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(failed)?;
    let stdout = Arc::new(Mutex::new(Vec::new()));
    let mut pipe = child.stdout.take().expect("piped");
    let sink = stdout.clone();
    // Left running: what the timeout missed holds the pipe open.
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n @ 1..) = pipe.read(&mut buf) {
            sink.lock().unwrap().extend_from_slice(&buf[..n]);
        }
    });
    let deadline = started + request.timeout.unwrap_or(Duration::from_secs(3600));
    let (exit_code, timed_out) = loop {
        if let Some(status) = child.try_wait().map_err(failed)? {
            break (status.code(), false);
        }
        if Instant::now() >= deadline {
            let below = descendants(child.id());
            match reach {
                Reach::Command => signal(&child.id().to_string(), "KILL"),
                Reach::Descendants => {
                    signal(&child.id().to_string(), "KILL");
                    for pid in below {
                        signal(&pid.to_string(), "KILL");
                    }
                }
                Reach::Group => signal(&format!("-{}", child.id()), "KILL"),
                Reach::TermOnly => {
                    signal(&format!("-{}", child.id()), "TERM");
                    for pid in below {
                        signal(&pid.to_string(), "TERM");
                    }
                }
            }
            child.wait().map_err(failed)?;
            break (None, true);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    // What the command wrote before it ended is in the pipe: wait for the reader to have it.
    let until = Instant::now() + Duration::from_secs(5);
    while stdout.lock().unwrap().is_empty() && Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let stdout = stdout.lock().unwrap().clone();
    Ok(ExecuteResult {
        exit_code,
        signal: None,
        timed_out,
        stdout,
        stderr: Vec::new(),
        stdout_truncated: false,
        stderr_truncated: false,
        duration: started.elapsed(),
        metadata: Default::default(),
    })
}

//! A naive timeout: the command runs in a process group of its own, and at the timeout a
//! SIGKILL goes to that group only, so whatever moved itself out of it (a new session, a
//! job-control shell's own group) keeps running. Its output so far is kept.

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use envrt_runtime_core::{DriverError, ExecuteRequest, ExecuteResult};

pub(crate) async fn group_only_execute(
    workspace: &Path,
    request: &ExecuteRequest,
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
    // Left running: what escaped the group holds the pipe open.
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
            let group = format!("-{}", child.id());
            let _ = Command::new("kill").args(["-s", "KILL", "--", &group]).status();
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

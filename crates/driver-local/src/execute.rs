//! Running one command on the host (contract section 5): its own process group (and
//! cgroup, see `containment`), a concurrent stdin writer, capped stdout/stderr readers
//! feeding the sink, a timeout that sends `SIGTERM` then `SIGKILL` to the whole group, and
//! a guard (`groups`) that kills the group when the call ends or its future is dropped.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{ExitStatus, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use envrt_driver_api::execute::signal_name;

use async_trait::async_trait;
use envrt_driver_api::{Execute, LeaseContext};

use crate::LocalDriver;
use crate::process::bulk::{BulkReader, Delivery};
use crate::process::containment::{self, Containment};
use crate::process::groups::{ProcessTable, reap_group, signal_group};
use crate::process::program::{SCRIPT_SHELL, find_program};
use crate::process::user;
use envrt_driver_api::{CappedBuffer, DriverError, ExecuteRequest, ExecuteResult, NameRules, OutputStream};
use nix::errno::Errno;
use nix::sys::signal::Signal;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};

/// `PATH` given to commands when the host has none.
pub(crate) const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Size of each read from a command's stdout or stderr on the supervising task (the
/// default pipe buffer's size). A read that fills it hands the stream to a reader thread
/// of its own (see `bulk`).
const READ_CHUNK: usize = 64 * 1024;

/// After the command exits, how long the readers wait for more output while the pipes
/// stay silent; each chunk restarts it. Only a process that escaped the group can keep a
/// pipe open that long.
const DRAIN_IDLE: Duration = Duration::from_millis(200);

/// Upper bound on the whole drain after the command exits.
const DRAIN_MAX: Duration = Duration::from_secs(2);

/// Aborts the task when dropped (the execute future was dropped).
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Where and how a command runs.
pub(crate) struct ExecSite<'a> {
    /// The lease's workspace (canonical); `HOME` and the default cwd.
    pub(crate) workspace: &'a Path,
    /// The working directory (already confined).
    pub(crate) cwd: &'a Path,
    /// Key in the process table.
    pub(crate) lease_key: &'a str,
    /// The process table.
    pub(crate) table: &'a Arc<ProcessTable>,
    /// Time between `SIGTERM` and `SIGKILL` on timeout.
    pub(crate) kill_grace: Duration,
    /// Host variables passed through.
    pub(crate) env_allowlist: &'a [String],
    /// Where the command's processes are contained.
    pub(crate) containment: &'a Containment,
    /// Host uid and gid to run as (see `user`); the driver's own when `None`.
    pub(crate) identity: Option<(u32, u32)>,
}

/// The command's environment: the allow-listed host variables, `PATH` (a default when the
/// host has none), `HOME` = the workspace, then the request's variables over them.
fn command_env(site: &ExecSite<'_>, request: &ExecuteRequest) -> BTreeMap<String, String> {
    let mut env = BTreeMap::new();
    for name in site.env_allowlist {
        if let Ok(value) = std::env::var(name) {
            env.insert(name.clone(), value);
        }
    }
    env.entry("PATH".to_owned()).or_insert_with(|| DEFAULT_PATH.to_owned());
    env.insert("HOME".to_owned(), site.workspace.to_string_lossy().into_owned());
    for (name, value) in &request.env {
        env.insert(name.clone(), value.expose().to_owned());
    }
    env
}

/// What a failed spawn looks like to the caller: the shell's conventions (127 for a
/// missing program, 126 for one that cannot run) and a message naming the program.
fn spawn_failure(command: &str, error: &io::Error, started: Instant) -> ExecuteResult {
    let (code, message) = match error.kind() {
        io::ErrorKind::NotFound => (127, format!("envrt: command not found: {command}\n")),
        io::ErrorKind::PermissionDenied => (126, format!("envrt: permission denied: {command}\n")),
        _ => (126, format!("envrt: cannot execute {command}: {error}\n")),
    };
    ExecuteResult {
        exit_code: Some(code),
        stderr: message.into_bytes(),
        duration: started.elapsed(),
        ..Default::default()
    }
}

/// What the call returns when the command could not be started: `ResourceGone` when the
/// workspace went away under us (a release raced this call), otherwise
/// [`spawn_failure`]'s result, whose message also goes to the sink.
fn spawn_error(
    site: &ExecSite<'_>,
    request: &ExecuteRequest,
    error: &io::Error,
    started: Instant,
) -> Result<ExecuteResult, DriverError> {
    if error.kind() == io::ErrorKind::NotFound && !site.cwd.is_dir() {
        return Err(DriverError::ResourceGone {
            id: site
                .workspace
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
        });
    }
    let result = spawn_failure(&request.command, error, started);
    if let Some(sink) = &request.sink {
        sink.on_chunk(OutputStream::Stderr, &result.stderr);
    }
    Ok(result)
}

/// One read into `buf`'s spare capacity (`buf` is empty: its bytes are never zeroed).
async fn read_some<R: AsyncRead + Unpin>(reader: Option<&mut R>, buf: &mut Vec<u8>) -> io::Result<usize> {
    match reader {
        Some(reader) => reader.read_buf(buf).await,
        None => std::future::pending().await,
    }
}

/// The read end of a command's output pipe.
trait PipeEnd: AsyncRead + Unpin {
    fn into_fd(self) -> io::Result<OwnedFd>;
}

impl PipeEnd for tokio::process::ChildStdout {
    fn into_fd(self) -> io::Result<OwnedFd> {
        self.into_owned_fd()
    }
}

impl PipeEnd for tokio::process::ChildStderr {
    fn into_fd(self) -> io::Result<OwnedFd> {
        self.into_owned_fd()
    }
}

/// One output stream being captured: read on the supervising task until it carries bulk
/// output, then by a [`BulkReader`] thread.
struct Capture<R> {
    reader: Option<R>,
    /// Empty between reads; its capacity is the size of the next read.
    buf: Vec<u8>,
    kept: CappedBuffer,
    stream: OutputStream,
    bulk: Option<BulkReader>,
}

impl<R: PipeEnd> Capture<R> {
    fn new(reader: Option<R>, stream: OutputStream, kept: CappedBuffer) -> Self {
        Capture {
            reader,
            buf: Vec::with_capacity(READ_CHUNK),
            kept,
            stream,
            bulk: None,
        }
    }

    /// Whether output may still come.
    fn open(&self) -> bool {
        self.reader.is_some() || self.bulk.is_some()
    }

    /// Hands the stream to a reader thread (see `bulk`).
    fn go_bulk(&mut self, delivery: &Arc<Delivery>) {
        let Some(reader) = self.reader.take() else { return };
        // Should the descriptor not come out of the event loop, it is gone with the
        // error: the stream is over.
        if let Ok(fd) = reader.into_fd() {
            let kept = std::mem::replace(&mut self.kept, CappedBuffer::new(0));
            self.bulk = Some(BulkReader::start(fd, self.stream, kept, Arc::clone(delivery)));
            self.buf = Vec::new();
        }
    }

    /// Applies the outcome of one read on the task; returns whether bytes came.
    fn take(&mut self, read: io::Result<usize>, delivery: &Arc<Delivery>) -> bool {
        match read {
            Ok(0) | Err(_) => {
                self.reader = None;
                false
            }
            Ok(n) => {
                let chunk = &self.buf[..];
                self.kept.push(chunk);
                delivery.deliver(self.stream, chunk);
                let full = n >= self.buf.capacity();
                self.buf.clear();
                if full {
                    self.go_bulk(delivery);
                }
                true
            }
        }
    }

    /// Bytes the reader thread has read so far (0 without one).
    fn progress(&self) -> u64 {
        self.bulk.as_ref().map_or(0, BulkReader::progress)
    }

    /// Stops the reader thread, if any, and takes back what it kept.
    async fn finish(&mut self) {
        if let Some(mut bulk) = self.bulk.take() {
            bulk.stop();
            self.kept = bulk.finish().await;
        }
    }
}

/// Waits until the stream's reader thread reached end of file; never without one.
async fn bulk_done(bulk: Option<&mut BulkReader>) -> CappedBuffer {
    match bulk {
        Some(bulk) => bulk.finish().await,
        None => std::future::pending().await,
    }
}

/// Runs `request` at `site` to completion, timeout or kill.
pub(crate) async fn run(site: &ExecSite<'_>, request: ExecuteRequest) -> Result<ExecuteResult, DriverError> {
    // What `execve` cannot take, without ever echoing an env value.
    request.validate(NameRules::Portable)?;
    let started = Instant::now();
    let env = command_env(site, &request);
    let path = env.get("PATH").map_or(DEFAULT_PATH, String::as_str);
    let program = match find_program(&request.command, path, site.cwd) {
        Ok(program) => program,
        Err(error) => return spawn_error(site, &request, &error, started),
    };
    // Contained commands start through the join script, which `exec`s the command by the
    // name given, so the shell's lookup on the command's own PATH finds the same file and
    // argv[0] is unchanged. A program that cannot run is started directly, so that its
    // failure reads as always.
    let runnable = std::fs::metadata(&program).is_ok_and(|m| m.is_file())
        && nix::unistd::access(&program, nix::unistd::AccessFlags::X_OK).is_ok();
    let cgroup = if runnable && site.identity.is_none() {
        site.containment.prepare(site.lease_key)
    } else {
        None
    };
    let procs = cgroup.as_ref().map(|c| c.join("cgroup.procs"));
    let spawn = |program: &Path, argv: &[&OsStr]| {
        let mut command = match &procs {
            // Joins the cgroup, then becomes the program (see `containment`).
            Some(procs) => {
                let mut c = tokio::process::Command::new(SCRIPT_SHELL);
                c.arg0("sh")
                    .args([
                        OsStr::new("-c"),
                        OsStr::new(containment::JOIN_SCRIPT),
                        OsStr::new("envrt-join"),
                    ])
                    .arg(procs)
                    .arg(if env.contains_key("PWD") { "keep" } else { "drop" })
                    .arg(argv[0]);
                c
            }
            None => {
                let mut c = tokio::process::Command::new(program);
                c.arg0(argv[0]);
                c
            }
        };
        if let Some((uid, gid)) = site.identity {
            command.uid(uid).gid(gid);
        }
        command
            .args(&argv[1..])
            .args(&request.args)
            .env_clear()
            .envs(&env)
            .current_dir(site.cwd)
            .stdin(if request.stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true);
        // nothing of the host program's but stdio reaches the command
        let arg0 = if procs.is_some() { OsStr::new("sh") } else { argv[0] };
        crate::process::fds::exec_with_stdio_only(command.as_std_mut(), arg0)?;
        command.spawn()
    };
    let child = match spawn(&program, &[OsStr::new(&request.command)]) {
        Ok(child) => child,
        // A file found on PATH without a `#!` line: `execvp` runs such a file with the shell
        // (`/bin/sh FILE ARGS...`), and so did the driver when it let `execvp` search.
        Err(error) if error.raw_os_error() == Some(Errno::ENOEXEC as i32) && !request.command.contains('/') => {
            let shell = Path::new(SCRIPT_SHELL);
            match spawn(shell, &[shell.as_os_str(), program.as_os_str()]) {
                Ok(child) => child,
                Err(error) => return spawn_error(site, &request, &error, started),
            }
        }
        Err(error) => {
            if let Some(cgroup) = &cgroup {
                let _ = std::fs::remove_dir(cgroup);
            }
            return spawn_error(site, &request, &error, started);
        }
    };
    let pid = child
        .id()
        .ok_or_else(|| DriverError::other("the command exited before its pid was read"))? as i32;
    let mut guard = site.table.register(site.lease_key, pid);
    guard.cgroup = cgroup.clone();
    // The command is supervised (waited for, its output read, its timeout applied) on a
    // task of its own, which runs on the runtime's worker threads whoever awaits this call:
    // awaited from a `block_on` thread, every chunk of output would otherwise be a wake-up
    // handed from the thread that polls the I/O driver to that one. This future keeps the
    // group's guard: dropped, it kills the group at once and aborts the task.
    let mut task = AbortOnDrop(tokio::spawn(supervise(
        child,
        pid,
        cgroup,
        request,
        site.kill_grace,
        started,
    )));
    match (&mut task.0).await {
        Ok(outcome) => {
            if outcome.is_ok() {
                guard.disarm();
            }
            outcome
        }
        Err(error) if error.is_panic() => std::panic::resume_unwind(error.into_panic()),
        Err(error) => Err(DriverError::other(format!("the command's supervisor ended: {error}"))),
    }
}

/// Waits for the command in process group `pgid`, feeding its stdin, capturing its output
/// and applying the request's timeout; then kills and reaps what is left of the group and
/// drains the pipes.
async fn supervise(
    mut child: tokio::process::Child,
    pgid: i32,
    cgroup: Option<std::path::PathBuf>,
    mut request: ExecuteRequest,
    kill_grace: Duration,
    started: Instant,
) -> Result<ExecuteResult, DriverError> {
    let delivery = Delivery::new(request.sink.clone());
    let sink = &delivery;
    let mut out = Capture::new(child.stdout.take(), OutputStream::Stdout, request.output_buffer());
    let mut err = Capture::new(child.stderr.take(), OutputStream::Stderr, request.output_buffer());
    let stdin_pipe = child.stdin.take();
    let stdin_data = request.stdin.take();
    let feed = async move {
        if let (Some(mut pipe), Some(data)) = (stdin_pipe, stdin_data) {
            // EPIPE (the command stopped reading) is not an error of the call.
            let _ = pipe.write_all(&data).await;
            let _ = pipe.shutdown().await;
        }
    };
    tokio::pin!(feed);
    let mut feed_done = false;

    let timer = tokio::time::sleep(Duration::ZERO);
    tokio::pin!(timer);
    let deadline = request.timeout.and_then(|t| tokio::time::Instant::now().checked_add(t));
    let mut timer_armed = deadline.is_some();
    if let Some(deadline) = deadline {
        timer.as_mut().reset(deadline);
    }
    let mut timed_out = false;

    let status: ExitStatus = loop {
        tokio::select! {
            status = child.wait() => {
                break status.map_err(|e| DriverError::io("cannot wait for the command", e))?;
            }
            () = &mut timer, if timer_armed => {
                if timed_out {
                    signal_group(pgid, Signal::SIGKILL);
                    if let Some(cgroup) = &cgroup {
                        let _ = std::fs::write(cgroup.join("cgroup.kill"), "1");
                    }
                    timer_armed = false;
                } else {
                    timed_out = true;
                    signal_group(pgid, Signal::SIGTERM);
                    match tokio::time::Instant::now().checked_add(kill_grace) {
                        Some(at) => timer.as_mut().reset(at),
                        None => timer_armed = false,
                    }
                }
            }
            read = read_some(out.reader.as_mut(), &mut out.buf) => { out.take(read, sink); }
            read = read_some(err.reader.as_mut(), &mut err.buf) => { err.take(read, sink); }
            // A reader thread ends at end of file, or with the sink's panic, resumed here.
            kept = bulk_done(out.bulk.as_mut()) => { out.kept = kept; out.bulk = None; }
            kept = bulk_done(err.bulk.as_mut()) => { err.kept = kept; err.bulk = None; }
            () = &mut feed, if !feed_done => { feed_done = true; }
        }
    };

    // The direct child is gone: kill whatever it left in its group (a background
    // grandchild holding a pipe) and in its cgroup (what left the group with `setsid`),
    // then drain what the pipes still hold.
    reap_group(pgid).await;
    if let Some(cgroup) = &cgroup {
        containment::kill_command(cgroup).await;
    }
    let drain_end = tokio::time::Instant::now() + DRAIN_MAX;
    timer.as_mut().reset(tokio::time::Instant::now() + DRAIN_IDLE);
    let mut seen = out.progress() + err.progress();
    while out.open() || err.open() {
        tokio::select! {
            biased;
            read = read_some(out.reader.as_mut(), &mut out.buf) => {
                if out.take(read, sink) {
                    timer.as_mut().reset((tokio::time::Instant::now() + DRAIN_IDLE).min(drain_end));
                }
            }
            read = read_some(err.reader.as_mut(), &mut err.buf) => {
                if err.take(read, sink) {
                    timer.as_mut().reset((tokio::time::Instant::now() + DRAIN_IDLE).min(drain_end));
                }
            }
            kept = bulk_done(out.bulk.as_mut()) => { out.kept = kept; out.bulk = None; }
            kept = bulk_done(err.bulk.as_mut()) => { err.kept = kept; err.bulk = None; }
            () = &mut timer => {
                // A reader thread that read since the last look is not idle.
                let now_seen = out.progress() + err.progress();
                if now_seen == seen || tokio::time::Instant::now() >= drain_end {
                    break;
                }
                seen = now_seen;
                timer.as_mut().reset((tokio::time::Instant::now() + DRAIN_IDLE).min(drain_end));
            }
        }
    }
    out.finish().await;
    err.finish().await;

    let mut metadata = envrt_driver_api::JsonMap::new();
    metadata.insert("pid".into(), pgid.into());
    let ending = envrt_driver_api::execute::Ending {
        exit_code: status.code(),
        signal: status.signal().map(signal_name),
        timed_out,
    };
    Ok(ExecuteResult::from_capped(
        ending,
        out.kept,
        err.kept,
        started.elapsed(),
        metadata,
    ))
}

/// Execute: resolve the user and the cwd in the lease workspace, then run the command.
#[async_trait]
impl Execute for LocalDriver {
    async fn execute(&self, context: &LeaseContext, request: ExecuteRequest) -> Result<ExecuteResult, DriverError> {
        let identity = match request.user.as_deref() {
            Some(user) => Some(user::resolve(context, user)?),
            None => None,
        };
        if identity.is_some() {
            user::open_root(self.root())?;
        }
        let workspace = self.live_workspace(context)?;
        let cwd = match &request.cwd {
            None => workspace.clone(),
            Some(cwd) => self.resolve_cwd(&workspace, cwd)?,
        };
        if !cwd.is_dir() {
            return Err(DriverError::missing_cwd(request.cwd.as_deref().unwrap_or_default()));
        }
        if let (Some(user), Some(identity)) = (request.user.as_deref(), identity) {
            user::check_reachable(user, &cwd, identity)?;
        }
        let site = ExecSite {
            workspace: &workspace,
            cwd: &cwd,
            lease_key: &context.lease.id,
            table: self.processes(),
            kill_grace: self.config().kill_grace,
            env_allowlist: &self.config().env_allowlist,
            containment: self.containment_mode(),
            identity,
        };
        run(&site, request).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use envrt_driver_api::{EnvValue, Secret};

    #[test]
    fn validation_never_echoes_env_values() {
        let mut request = ExecuteRequest::new("true", [""; 0]);
        request
            .env
            .insert("TOKEN".into(), EnvValue::from(Secret::new("hunter2\0x")));
        let err = request.validate(NameRules::Portable).unwrap_err();
        assert_eq!(
            err.to_string(),
            "Invalid input: environment variable TOKEN contains a NUL byte"
        );
        assert!(!format!("{err:?}").contains("hunter2"));
        let empty = ExecuteRequest::new("", [""; 0]);
        assert_eq!(
            empty.validate(NameRules::Portable).unwrap_err().to_string(),
            "Invalid input: the command is empty"
        );
        let mut bad_name = ExecuteRequest::new("true", [""; 0]);
        bad_name.env.insert("A=B".into(), "x".into());
        assert_eq!(
            bad_name.validate(NameRules::Portable).unwrap_err().to_string(),
            "Invalid input: environment variable name \"A=B\" is not valid"
        );
    }
}

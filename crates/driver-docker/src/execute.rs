//! `execute` (contract section 5) over the exec API.

use std::time::Duration;

use futures::StreamExt;
use tokio::io::AsyncWriteExt;
use tokio::time::Instant;

use envrt_driver_api::PathScope;
use envrt_driver_api::execute::signal_name;
use envrt_driver_api::{
    CappedBuffer, DriverError, EnvValue, ExecuteRequest, ExecuteResult, ExecuteRules, JsonMap, NameRules, OutputStream,
    Wording,
};

use async_trait::async_trait;
use envrt_driver_api::{Execute, LeaseContext};

use crate::DockerDriver;
use crate::config::EnvConfig;
use crate::engine::Engine;
use crate::process::dropkill::KillOnDrop;
use crate::process::{self, Demux, OutputFrames};

/// How long output may still be drained after the command is over or killed.
const DRAIN: Duration = Duration::from_secs(2);
/// Longest pause between two looks at whether the command has exited; well under the
/// 2 s for which the engine keeps an exec's streams open after it exits.
const MAX_POLL: Duration = Duration::from_millis(250);
/// The longest pause when many commands run at once (still under the engine's 2 s).
const MAX_POLL_BUSY: Duration = Duration::from_millis(1500);
/// Commands running at once (every Docker driver of the process) up to which each one
/// looks every [`MAX_POLL`] at most; above it the pause grows in proportion.
const POLL_SHARE: usize = 16;

/// Commands of this process between spawn and exit (the poll pause scales with it).
static RUNNING: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// One running command, counted in [`RUNNING`] while it lives.
struct Running;

impl Running {
    fn start() -> Running {
        RUNNING.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Running
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        RUNNING.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
}

/// The longest pause between two exit checks of one command while `running` commands run:
/// [`MAX_POLL`] up to [`POLL_SHARE`] of them, then growing with their number up to
/// [`MAX_POLL_BUSY`]. The checks the whole process sends the engine stay at about
/// 64 a second up to 96 running commands instead of four a second per command (at 256
/// concurrent executes on one engine the fixed 250 ms sent a thousand inspect requests a
/// second to an engine that finished about ten execs a second).
fn max_poll(running: usize) -> Duration {
    let shares = running.div_ceil(POLL_SHARE).max(1) as u32;
    (MAX_POLL * shares).min(MAX_POLL_BUSY)
}

/// A request's environment as the exec gets it: plain variables for the exec's `Env`, and
/// secret ones as shell lines the wrapper reads from stdin before the command's own input
/// (the exec-create body is logged by the Docker client at debug level; stdin is not).
#[derive(Debug, Default)]
pub(crate) struct ExecEnv {
    /// `NAME=value` of the plain variables.
    pub(crate) plain: Vec<String>,
    /// One line per secret variable, in the wrapper's format.
    pub(crate) secret_lines: Vec<u8>,
    /// How many lines `secret_lines` holds.
    pub(crate) secret_count: usize,
}

/// The wrapper line that sets secret `name` to `value`: every byte as an octal escape
/// expanded by `printf %b`, with a sentinel so trailing newlines survive the substitution.
fn secret_line(name: &str, value: &str) -> String {
    let mut escaped = String::with_capacity(value.len() * 5);
    for byte in value.bytes() {
        escaped.push_str(&format!("\\0{byte:03o}"));
    }
    format!("{name}=\"$(printf '%bx' '{escaped}')\"; {name}=\"${{{name}%x}}\"; export {name}\n")
}

/// Checks a request's program, arguments and environment; messages name variables, never
/// their values.
pub(crate) fn check_request(request: &ExecuteRequest) -> Result<ExecEnv, DriverError> {
    // Plain variables go through the exec API (any name `execve` takes); secrets through
    // the wrapper's shell lines, so each secret's name must be a shell identifier.
    request.validate(ExecuteRules::new(NameRules::ShellSecrets, Wording::Sentence))?;
    let mut env = ExecEnv::default();
    for (name, value) in &request.env {
        match value {
            EnvValue::Secret(secret) => {
                env.secret_lines
                    .extend_from_slice(secret_line(name, secret.expose()).as_bytes());
                env.secret_count += 1;
            }
            EnvValue::Plain(plain) => env.plain.push(format!("{name}={plain}")),
        }
    }
    Ok(env)
}

struct Collector<'a> {
    request: &'a ExecuteRequest,
    demux: Demux,
    stdout: CappedBuffer,
    stderr: CappedBuffer,
}

impl Collector<'_> {
    fn deliver(&mut self, item: Option<(OutputStream, Vec<u8>)>) {
        let Some((stream, bytes)) = item else { return };
        if let Some(sink) = &self.request.sink {
            sink.on_chunk(stream, &bytes);
        }
        match stream {
            OutputStream::Stdout => self.stdout.push(&bytes),
            OutputStream::Stderr => self.stderr.push(&bytes),
        }
    }

    /// Reads what is left for at most `bound`; true when the stream ended.
    async fn drain(&mut self, output: &mut OutputFrames, bound: Duration) -> bool {
        let deadline = Instant::now() + bound;
        loop {
            match tokio::time::timeout_at(deadline, output.next()).await {
                Ok(Some(Ok(frame))) => {
                    let item = self.demux.feed(frame);
                    self.deliver(item);
                }
                Ok(Some(Err(_))) | Ok(None) => return true,
                Err(_) => return false,
            }
        }
    }

    /// Reads until the wrapper has reported the pid, for at most `bound`.
    async fn await_pid(&mut self, output: &mut OutputFrames, bound: Duration) -> Option<u32> {
        let deadline = Instant::now() + bound;
        while self.demux.pid().is_none() {
            match tokio::time::timeout_at(deadline, output.next()).await {
                Ok(Some(Ok(frame))) => {
                    let item = self.demux.feed(frame);
                    self.deliver(item);
                }
                _ => break,
            }
        }
        self.demux.pid()
    }
}

/// Runs `request` in `container` with `workspace` as the default cwd (relative cwds start
/// there; absolute ones may name any directory of the container).
pub(crate) async fn execute(
    engine: &Engine,
    kill_grace: Duration,
    container: &str,
    workspace: &str,
    mut request: ExecuteRequest,
) -> Result<ExecuteResult, DriverError> {
    let env = check_request(&request)?;
    // The container is the boundary: any absolute path in it (see `PathScope`).
    let cwd = PathScope::WholeEnvironment.resolve(workspace, request.cwd.as_deref().unwrap_or(workspace))?;
    let started = std::time::Instant::now();
    let mut argv = Vec::with_capacity(request.args.len() + 1);
    argv.push(request.command.clone());
    argv.extend(request.args.iter().cloned());
    let stdin = request.stdin.take().unwrap_or_default();
    let attach_stdin = !stdin.is_empty() || env.secret_count > 0;
    // Armed before the exec is made: a call dropped while the start is under way still
    // kills what the engine starts.
    let mut guard = KillOnDrop {
        engine: engine.clone(),
        container: container.to_owned(),
        exec_id: None,
        target: None,
        output: None,
        armed: true,
    };
    let spawned = process::spawn_as(
        engine,
        container,
        &argv,
        env.plain,
        env.secret_count,
        &cwd,
        request.user.as_deref(),
        attach_stdin,
        &mut guard.exec_id,
    )
    .await?;
    let exec_id = spawned.exec_id;
    // Held by the guard, which drops it only after its kill: the engine kills the exec's
    // own process (not its tree) when the attach connection closes, and an exec it ended
    // that way before the guard asked for its pid is one whose tree cannot be found.
    let output = guard.output.insert(spawned.output);
    let mut input = spawned.input;
    let secret_lines = env.secret_lines;
    // Written beside the reader so a command that writes before it reads cannot deadlock;
    // the shutdown is the EOF. Nothing to write: stdin is `/dev/null`, not attached.
    let writer = attach_stdin.then(|| {
        tokio::spawn(async move {
            // The wrapper reads the secret lines before it runs the command.
            if !secret_lines.is_empty() {
                let _ = input.write_all(&secret_lines).await;
            }
            if !stdin.is_empty() {
                let _ = input.write_all(&stdin).await;
            }
            let _ = input.shutdown().await;
            input
        })
    });

    let mut collector = Collector {
        request: &request,
        demux: Demux::default(),
        stdout: request.output_buffer(),
        stderr: request.output_buffer(),
    };
    let deadline = request.timeout.map(|t| Instant::now() + t);
    let _running = Running::start();
    let mut poll_delay = Duration::from_millis(100);
    let mut next_poll = Instant::now() + poll_delay;
    let mut timed_out = false;
    let mut exited_with_holders = false;
    let mut stream_error = None;
    loop {
        tokio::select! {
            frame = output.next() => match frame {
                Some(Ok(frame)) => {
                    let item = collector.demux.feed(frame);
                    collector.deliver(item);
                    if guard.target.is_none() {
                        guard.target = collector.demux.target().cloned();
                    }
                }
                Some(Err(e)) => {
                    stream_error = Some(e);
                    break;
                }
                None => break,
            },
            _ = sleep_until_opt(deadline) => {
                timed_out = true;
                break;
            }
            _ = tokio::time::sleep_until(next_poll) => {
                // The stream stays open while a background process holds stdout: notice
                // the command's own exit separately.
                if !process::is_running(engine, container, &exec_id).await? {
                    exited_with_holders = true;
                    break;
                }
                poll_delay = (poll_delay * 2).min(max_poll(RUNNING.load(std::sync::atomic::Ordering::Relaxed)));
                next_poll = Instant::now() + poll_delay;
            }
        }
    }
    if let Some(error) = stream_error {
        if let Some(writer) = &writer {
            writer.abort();
        }
        return Err(engine.error("reading a command's output", error));
    }
    let mut metadata = JsonMap::new();
    metadata.insert("containerId".into(), container.into());
    metadata.insert("execId".into(), exec_id.clone().into());
    if timed_out || exited_with_holders {
        collector.await_pid(output, DRAIN).await;
        guard.target = collector.demux.target().cloned();
        match collector.demux.target().cloned() {
            Some(target) => {
                let survivors = process::kill_tree(engine, container, &target, kill_grace, timed_out).await?;
                metadata.insert("killedTree".into(), true.into());
                metadata.insert("survivors".into(), survivors.into());
            }
            None => tracing::warn!(container, exec_id, "command's pid unknown, cannot kill its tree"),
        }
        collector.drain(output, DRAIN).await;
    }
    let tail = collector.demux.flush();
    collector.deliver(tail);
    if let Some(writer) = &writer {
        writer.abort();
    }
    guard.output = None;
    if let Some(pid) = collector.demux.pid() {
        metadata.insert("pid".into(), pid.into());
    }
    let code = process::exit_code(engine, container, &exec_id).await?;
    // Over: the command ended (or was killed) while the call was awaited.
    guard.armed = false;
    let (exit_code, signal) = match code {
        Some(code) if timed_out && code > 128 => (None, Some(signal_name((code - 128) as i32))),
        None => (None, None),
        Some(code) => (Some(code as i32), None),
    };
    if collector.demux.pid().is_none() && matches!(code, Some(126) | Some(127)) {
        // The wrapper never ran: the engine could not start the exec at all.
        let text = String::from_utf8_lossy(&collector.stdout.clone().into_parts().0).into_owned();
        if text.contains("chdir to cwd") {
            return Err(DriverError::missing_cwd(request.cwd.as_deref().unwrap_or(&cwd)));
        }
        if let Some(user) = request.user.as_deref() {
            for (needle, reason) in [
                ("unable to find user", "no such user in the container."),
                ("unable to find group", "no such group in the container."),
            ] {
                if text.starts_with(needle) {
                    return Err(DriverError::UserRefused {
                        user: user.to_owned(),
                        reason: reason.to_owned(),
                    });
                }
            }
        }
        if text.contains("OCI runtime exec failed") {
            return Err(DriverError::other(format!(
                "Docker could not start a command in container {container}: {} (does the image have /bin/sh?)",
                text.trim()
            )));
        }
    }
    let ending = envrt_driver_api::execute::Ending {
        exit_code,
        signal,
        timed_out,
    };
    Ok(ExecuteResult::from_capped(
        ending,
        collector.stdout,
        collector.stderr,
        started.elapsed(),
        metadata,
    ))
}

async fn sleep_until_opt(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

#[async_trait]
impl Execute for DockerDriver {
    async fn execute(&self, context: &LeaseContext, request: ExecuteRequest) -> Result<ExecuteResult, DriverError> {
        let container = Self::container_of(context)?;
        if let Some(user) = request.user.as_deref() {
            match context.environment.as_ref() {
                Some(environment) => EnvConfig::of(environment)?.check_user(user)?,
                None => {
                    return Err(DriverError::UserRefused {
                        user: user.to_owned(),
                        reason: crate::config::USER_NOT_ALLOWED.to_owned(),
                    });
                }
            }
        }
        let workspace = Self::workspace_of(context);
        let request = match self
            .execute_through_agent(context, container, &workspace, request)
            .await?
        {
            Ok(result) => return Ok(result),
            Err(request) => request,
        };
        execute(&self.engine, self.config.kill_grace, container, &workspace, request).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use envrt_driver_api::Secret;

    #[test]
    fn the_poll_pause_grows_with_running_commands_within_the_engines_window() {
        assert_eq!(max_poll(0), MAX_POLL);
        assert_eq!(max_poll(1), MAX_POLL);
        assert_eq!(max_poll(POLL_SHARE), MAX_POLL);
        assert_eq!(max_poll(POLL_SHARE + 1), MAX_POLL * 2);
        assert_eq!(max_poll(4 * POLL_SHARE), MAX_POLL * 4);
        assert_eq!(max_poll(256), MAX_POLL_BUSY);
        assert!(MAX_POLL_BUSY < Duration::from_secs(2));
    }

    #[test]
    fn request_checks_name_variables_never_values() {
        let mut r = ExecuteRequest::new("", [""; 0]);
        assert_eq!(
            check_request(&r).unwrap_err().to_string(),
            "Invalid input: The command is empty."
        );
        r.command = "true".into();
        r.args = vec!["a\0b".into()];
        assert_eq!(
            check_request(&r).unwrap_err().to_string(),
            "Invalid input: The command or an argument contains a NUL byte."
        );
        r.args.clear();
        r.env.insert("TOKEN".into(), Secret::new("hun\0ter2").into());
        let err = check_request(&r).unwrap_err();
        assert_eq!(
            err.to_string(),
            "Invalid input: The value of environment variable \"TOKEN\" contains a NUL byte."
        );
        assert!(!format!("{err:?}").contains("hun"));
        r.env.clear();
        r.env.insert("A=B".into(), "x".into());
        assert_eq!(
            check_request(&r).unwrap_err().to_string(),
            "Invalid input: Environment variable name \"A=B\" is not valid."
        );
        r.env.clear();
        r.env.insert("OK".into(), Secret::new("v").into());
        r.env.insert("PLAIN".into(), "p".into());
        let env = check_request(&r).unwrap();
        assert_eq!(env.plain, vec!["PLAIN=p".to_string()]);
        assert_eq!(env.secret_count, 1);
        assert_eq!(
            String::from_utf8(env.secret_lines).unwrap(),
            "OK=\"$(printf '%bx' '\\0166')\"; OK=\"${OK%x}\"; export OK\n"
        );
        r.env.clear();
        r.env.insert("weird name".into(), Secret::new("v").into());
        assert_eq!(
            check_request(&r).unwrap_err().to_string(),
            "Invalid input: Secret environment variable \"weird name\" must be named with letters, digits and underscores."
        );
        // A plain variable may have any name the engine takes.
        r.env.clear();
        r.env.insert("weird name".into(), "v".into());
        assert_eq!(check_request(&r).unwrap().plain, vec!["weird name=v".to_string()]);
    }
}

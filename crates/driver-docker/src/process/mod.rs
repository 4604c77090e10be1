//! Commands inside a container through the exec API: a wrapper that reports the
//! command's process id before it runs, and killing a command's process tree from a
//! second exec (Docker has no API to kill an exec).
//!
//! Every exec is started by runc as a session and process-group leader, so the command's
//! pid is also its process-group and session id. The wrapper `sh -c` writes
//! `envrt-pid:<pid> <stdout> <stderr>` (the pid and the identities of its output pipes)
//! as the first line of stderr (stripped before anyone sees it), then `exec`s the
//! command, which keeps that pid. The killer, run in the same container as the same user,
//! takes every process whose group or session is that id, every process that still holds
//! one of those output pipes (a `setsid` escapee whose parent is gone), and every
//! descendant of those; it stops them all (so nobody forks while it looks), sends the
//! signal, and continues them.

pub(crate) mod dropkill;
pub(crate) mod hostkill;
pub(crate) mod vanished;

use std::pin::Pin;
use std::time::Duration;

use bollard::container::LogOutput;
use bollard::errors::Error as BollardError;
use bollard::exec::{StartExecOptions, StartExecResults};
use bollard::models::ExecConfig;
use futures::{Stream, StreamExt};
use tokio::io::AsyncWrite;
use tokio::time::Instant;

use envrt_driver_api::{DriverError, OutputStream};

use crate::engine::Engine;

/// The wrapper's `$0`, which is how `sh` names itself in its own messages.
const WRAPPER_NAME: &str = "envrt-exec";
/// Run by the wrapper just before its `exec` (after the environment is in place, so the
/// command's own `PATH` decides): a program that is not there gets the contract's text,
/// `envrt: command not found: {program}`, and 127, instead of the shell's own wording. A
/// name with a `/` is looked at as a path; a bare name as the shell would find it.
const NOT_FOUND: &str = "case $1 in */*) [ -e \"$1\" ] || envrt_nf=1;; *) command -v -- \"$1\" >/dev/null 2>&1 || envrt_nf=1;; esac; \
     if [ -n \"${envrt_nf:-}\" ]; then printf 'envrt: command not found: %s\\n' \"$1\" >&2; exit 127; fi";
const MARKER: &[u8] = b"envrt-pid:";
/// Longest first stderr line that is still looked at for the marker.
const MARKER_MAX: usize = 160;

/// What identifies a command's process tree inside its container.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Target {
    /// The command's pid, which is also its process group and session id.
    pub(crate) pid: u32,
    /// Its stdout and stderr pipes as `/proc/<pid>/fd` shows them (`pipe:[n]`), if known.
    pub(crate) pipes: Vec<String>,
}

impl Target {
    fn parse(line: &[u8]) -> Option<Target> {
        let text = std::str::from_utf8(line.strip_prefix(MARKER)?).ok()?;
        let mut parts = text.split(' ');
        let pid = parts.next()?.parse::<u32>().ok()?;
        let pipes = parts
            .filter(|p| p.starts_with("pipe:[") && p.ends_with(']'))
            .map(str::to_owned)
            .collect();
        Some(Target { pid, pipes })
    }
}

/// Output frames of an attached exec.
pub(crate) type OutputFrames = Pin<Box<dyn Stream<Item = Result<LogOutput, BollardError>> + Send>>;
/// The stdin side of an attached exec.
pub(crate) type InputSide = Pin<Box<dyn AsyncWrite + Send>>;

/// A started exec.
pub(crate) struct Spawned {
    pub(crate) exec_id: String,
    pub(crate) output: OutputFrames,
    pub(crate) input: InputSide,
}

/// Starts `argv` in `container` for a duplex channel, under the pid-reporting wrapper,
/// attached to stdin and stdout, with the command's stderr on its stdout (one pipe, so the
/// channel carries both in the order the command wrote them: contract section 7; only the
/// wrapper's own lines stay on the exec's stderr).
pub(crate) async fn spawn_duplex(
    engine: &Engine,
    container: &str,
    argv: &[String],
    cwd: &str,
) -> Result<Spawned, DriverError> {
    spawn_wrapped(
        engine,
        container,
        argv,
        Vec::new(),
        0,
        cwd,
        None,
        true,
        " 2>&1",
        &mut None,
    )
    .await
}

/// Starts `argv` in `container` under the pid-reporting wrapper, attached to stdout and
/// stderr, as `user` (the exec's `User`: `NAME`, `UID`, `NAME:GROUP` or `UID:GID`, as the
/// container's `/etc/passwd` and `/etc/group` know them); the container's user when `None`.
/// `env` goes into the exec's `Env`; the first `secret_lines` lines of stdin are shell
/// assignments the wrapper evaluates (and exports) before it runs the command, so secret
/// values never travel in the exec's create request. Without `attach_stdin` the command's
/// stdin is `/dev/null` (the same end of input as an attached stdin closed at once, with
/// one stream fewer for the engine to set up). `created` gets the exec's id as soon as the
/// engine made it, before it is started (so a caller dropped while the start is under way
/// still knows what to kill).
#[allow(clippy::too_many_arguments)]
pub(crate) async fn spawn_as(
    engine: &Engine,
    container: &str,
    argv: &[String],
    env: Vec<String>,
    secret_lines: usize,
    cwd: &str,
    user: Option<&str>,
    attach_stdin: bool,
    created: &mut Option<String>,
) -> Result<Spawned, DriverError> {
    spawn_wrapped(
        engine,
        container,
        argv,
        env,
        secret_lines,
        cwd,
        user,
        attach_stdin,
        "",
        created,
    )
    .await
}

/// The wrapper of [`spawn_as`] and [`spawn_duplex`]; `redirect` follows the final `exec`.
#[allow(clippy::too_many_arguments)]
async fn spawn_wrapped(
    engine: &Engine,
    container: &str,
    argv: &[String],
    env: Vec<String>,
    secret_lines: usize,
    cwd: &str,
    user: Option<&str>,
    attach_stdin: bool,
    redirect: &str,
    created: &mut Option<String>,
) -> Result<Spawned, DriverError> {
    // One command substitution (one fork) names both pipes.
    let report = "printf 'envrt-pid:%s %s\\n' \"$$\" \"$({ readlink -n /proc/$$/fd/1; printf ' '; readlink -n /proc/$$/fd/2; } 2>/dev/null)\" >&2";
    let script = if secret_lines == 0 {
        format!("{report}; {NOT_FOUND}; exec \"$@\"{redirect}")
    } else {
        // `read` takes one byte at a time from a pipe, so the command's stdin is untouched.
        format!(
            "{report}; envrt_i=0; while [ \"$envrt_i\" -lt {secret_lines} ]; do IFS= read -r envrt_l || exit 125; \
             eval \"$envrt_l\"; envrt_i=$((envrt_i + 1)); done; unset envrt_i envrt_l; {NOT_FOUND}; exec \"$@\"{redirect}"
        )
    };
    let mut cmd = vec!["sh".to_owned(), "-c".to_owned(), script, WRAPPER_NAME.to_owned()];
    cmd.extend(argv.iter().cloned());
    let config = ExecConfig {
        cmd: Some(cmd),
        env: Some(env),
        working_dir: Some(cwd.to_owned()),
        user: user.map(str::to_owned),
        attach_stdin: Some(attach_stdin),
        attach_stdout: Some(true),
        attach_stderr: Some(true),
        tty: Some(false),
        ..Default::default()
    };
    start(engine, container, config, "starting a command", created).await
}

async fn start(
    engine: &Engine,
    container: &str,
    config: ExecConfig,
    doing: &str,
    made: &mut Option<String>,
) -> Result<Spawned, DriverError> {
    let created = engine
        .call(engine.docker.create_exec(container, config))
        .await
        .map_err(|e| exec_error(engine, container, doing, e))?;
    *made = Some(created.id.clone());
    let options = StartExecOptions {
        detach: false,
        tty: false,
        output_capacity: None,
    };
    let started = engine
        .call(engine.docker.start_exec(&created.id, Some(options)))
        .await
        .map_err(|e| exec_error(engine, container, doing, e))?;
    match started {
        StartExecResults::Attached { output, input } => Ok(Spawned {
            exec_id: created.id,
            output,
            input,
        }),
        StartExecResults::Detached => Err(DriverError::other(format!(
            "Docker engine at {} started the exec detached while {doing}.",
            engine.address
        ))),
    }
}

pub(crate) fn exec_error(engine: &Engine, container: &str, doing: &str, error: BollardError) -> DriverError {
    if crate::engine::is_not_found(&error) {
        return DriverError::ResourceGone {
            id: container.to_owned(),
        };
    }
    if crate::engine::has_status(&error, 409) {
        return DriverError::other(format!(
            "Container {container} is not running, so it cannot run commands (Docker engine at {}).",
            engine.address
        ));
    }
    engine.error(doing, error)
}

/// Splits exec frames into streams and takes the wrapper's pid line off stderr.
#[derive(Debug, Default)]
pub(crate) struct Demux {
    head: Vec<u8>,
    head_done: bool,
    target: Option<Target>,
}

impl Demux {
    /// The command's pid (its process group and session id), once reported.
    pub(crate) fn pid(&self) -> Option<u32> {
        self.target.as_ref().map(|t| t.pid)
    }

    /// The command's tree identity, once reported.
    pub(crate) fn target(&self) -> Option<&Target> {
        self.target.as_ref()
    }

    /// Feeds one frame; returns the bytes to deliver, if any.
    pub(crate) fn feed(&mut self, frame: LogOutput) -> Option<(OutputStream, Vec<u8>)> {
        match frame {
            LogOutput::StdOut { message } | LogOutput::Console { message } => {
                Some((OutputStream::Stdout, message.to_vec())).filter(|(_, m)| !m.is_empty())
            }
            LogOutput::StdErr { message } => {
                if self.head_done {
                    return Some((OutputStream::Stderr, message.to_vec())).filter(|(_, m)| !m.is_empty());
                }
                self.head.extend_from_slice(&message);
                if let Some(newline) = self.head.iter().position(|b| *b == b'\n') {
                    self.head_done = true;
                    let line = &self.head[..newline];
                    let target = Target::parse(line);
                    let rest = match target {
                        Some(target) => {
                            self.target = Some(target);
                            self.head[newline + 1..].to_vec()
                        }
                        None => std::mem::take(&mut self.head),
                    };
                    self.head = Vec::new();
                    return Some((OutputStream::Stderr, rest)).filter(|(_, m)| !m.is_empty());
                }
                if self.head.len() > MARKER_MAX {
                    return self.flush();
                }
                None
            }
            LogOutput::StdIn { .. } => None,
        }
    }

    /// At the end of the stream: whatever is still held as a possible marker line.
    pub(crate) fn flush(&mut self) -> Option<(OutputStream, Vec<u8>)> {
        self.head_done = true;
        let rest = std::mem::take(&mut self.head);
        Some((OutputStream::Stderr, rest)).filter(|(_, m)| !m.is_empty())
    }
}

/// The exit code of a finished exec, waiting (bounded) for the engine to record it.
pub(crate) async fn exit_code(engine: &Engine, container: &str, exec_id: &str) -> Result<Option<i64>, DriverError> {
    let deadline = Instant::now() + engine.api_timeout;
    // The output can end a moment before the engine has recorded the exit: look again
    // soon (an inspect is a millisecond), then back off.
    let mut delay = Duration::from_millis(1);
    loop {
        let inspected = match engine.retry(|| engine.docker.inspect_exec(exec_id)).await {
            Ok(inspected) => inspected,
            Err(e) => return Err(vanished::inspect_error(engine, container, e).await),
        };
        if inspected.running != Some(true) {
            return Ok(inspected.exit_code);
        }
        if Instant::now() >= deadline {
            return Ok(None);
        }
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(Duration::from_millis(100));
    }
}

/// The host pid of the exec's own process, as the engine reports it once it runs (waiting
/// up to the API timeout for a start still under way); `None` once it exited. The engine
/// marks an exec running before it has started its process: until then the pid is 0.
pub(crate) async fn host_pid(engine: &Engine, exec_id: &str) -> Option<i32> {
    let deadline = Instant::now() + engine.api_timeout;
    loop {
        let inspected = engine.retry(|| engine.docker.inspect_exec(exec_id)).await.ok()?;
        let running = inspected.running == Some(true);
        if let Some(pid) = inspected.pid.filter(|pid| running && *pid > 0) {
            return i32::try_from(pid).ok();
        }
        if (!running && inspected.exit_code.is_some()) || Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// What the engine says of an exec.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ExecState {
    /// Not running and no exit code: not started yet. The engine answers the start
    /// request (the attach's `101`) before it marks the exec running, so right after
    /// [`spawn_as`] returns (longer under load) an exec that will run looks like this; so
    /// does one whose start the engine refused (its stream then ends).
    Starting,
    /// Its own process runs.
    Running,
    /// Over, with the exit code the engine recorded.
    Exited(i64),
}

/// The exec's state, by one inspect.
pub(crate) async fn state(engine: &Engine, container: &str, exec_id: &str) -> Result<ExecState, DriverError> {
    let inspected = match engine.retry(|| engine.docker.inspect_exec(exec_id)).await {
        Ok(inspected) => inspected,
        Err(e) => return Err(vanished::inspect_error(engine, container, e).await),
    };
    Ok(match (inspected.running, inspected.exit_code) {
        (Some(true), _) => ExecState::Running,
        (_, Some(code)) => ExecState::Exited(code),
        (_, None) => ExecState::Starting,
    })
}

/// Whether the exec has not exited yet: its own process runs, or the engine is still
/// starting it ([`ExecState::Starting`], which is not an exit).
pub(crate) async fn is_running(engine: &Engine, container: &str, exec_id: &str) -> Result<bool, DriverError> {
    Ok(!matches!(
        state(engine, container, exec_id).await?,
        ExecState::Exited(_)
    ))
}

/// The killer script: `$1` is `term`, `kill` or `list`, `$2` the command's pid, `$3` and
/// `$4` its output pipes (may be empty). Prints the number of live (non-zombie) processes
/// of the tree it saw last. POSIX `sh` builtins plus `readlink`.
const KILLER: &str = r#"mode=$1; root=$2; p1=${3:-none}; p2=${4:-none}; self=$$; ws=$IFS
snap() { S=""; for d in /proc/[0-9]*; do p=${d#/proc/}; [ "$p" = "$self" ] && continue; { read -r l < "$d/stat"; } 2>/dev/null || continue; r=${l##*) }; IFS=' '; set -- $r; IFS=$ws
  h=0; if [ "$p1$p2" != nonenone ]; then for f in 1 2; do o=$(readlink "$d/fd/$f" 2>/dev/null); [ -n "$o" ] && { [ "$o" = "$p1" ] || [ "$o" = "$p2" ]; } && h=1; done; fi
  S="$S $p:$1:$2:$3:$4:$h"; done; }
tree() { snap; T=" "; c=1; while [ $c = 1 ]; do c=0; for e in $S; do IFS=:; set -- $e; IFS=$ws
  case "$T" in *" $1 "*) continue;; esac
  if [ "$4" = "$root" ] || [ "$5" = "$root" ] || [ "$1" = "$root" ] || [ "$6" = 1 ]; then T="$T$1 "; c=1; continue; fi
  case "$T" in *" $3 "*) T="$T$1 "; c=1;; esac; done; done; }
alive() { n=0; for e in $S; do IFS=:; set -- $e; IFS=$ws; case "$T" in *" $1 "*) [ "$2" != Z ] && n=$((n+1));; esac; done; echo $n; }
sig() { for p in $T; do kill -$1 $p 2>/dev/null; done; }
case $mode in
term) tree; sig STOP; tree; sig STOP; sig TERM; sig CONT; alive;;
kill) tree; sig STOP; tree; sig STOP; sig KILL; alive;;
*) tree; alive;;
esac
"#;

async fn killer(engine: &Engine, container: &str, mode: &str, target: &Target) -> Result<u64, DriverError> {
    let pid = target.pid.to_string();
    let pipe = |i: usize| target.pipes.get(i).map(String::as_str).unwrap_or("");
    // As the container's user, like the command: only the same user may read another
    // process's open files without CAP_SYS_PTRACE.
    let (stdout, _, code) = run_repeatable_script(
        engine,
        container,
        None,
        KILLER,
        &[mode, &pid, pipe(0), pipe(1)],
        "stopping a command",
    )
    .await?;
    let text = String::from_utf8_lossy(&stdout);
    match (code, text.trim().parse::<u64>()) {
        (Some(0), Ok(n)) => Ok(n),
        _ => Err(DriverError::other(format!(
            "Could not stop a command's processes in container {container}: the killer exited with {code:?}."
        ))),
    }
}

/// Kills the process tree of the command identified by `target`: `SIGTERM` first and up
/// to `grace` to go when `graceful`, then `SIGKILL`, then checks that nothing is left.
/// Returns how many processes survived (0 unless something is very wrong).
pub(crate) async fn kill_tree(
    engine: &Engine,
    container: &str,
    target: &Target,
    grace: Duration,
    graceful: bool,
) -> Result<u64, DriverError> {
    // From the host when it sees the container's processes (a local engine); from a
    // second exec in the container only when it does not (a remote engine).
    let from_host = crate::process::hostkill::sees(container);
    let step = |mode: &'static str| async move {
        if from_host {
            let mode = match mode {
                "term" => crate::process::hostkill::Mode::Term,
                "kill" => crate::process::hostkill::Mode::Kill,
                _ => crate::process::hostkill::Mode::List,
            };
            Ok(crate::process::hostkill::apply(container, target, mode))
        } else {
            killer(engine, container, mode, target).await
        }
    };
    if graceful {
        let deadline = Instant::now() + grace;
        let mut left = step("term").await?;
        while left > 0 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
            left = step("list").await?;
        }
        if left == 0 {
            return Ok(0);
        }
    }
    let mut left = 0;
    for _ in 0..3 {
        step("kill").await?;
        let deadline = Instant::now() + Duration::from_secs(1);
        loop {
            left = step("list").await?;
            if left == 0 || Instant::now() >= deadline {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        if left == 0 {
            return Ok(0);
        }
    }
    tracing::warn!(container, pid = target.pid, left, "processes survived SIGKILL");
    Ok(left)
}

/// Runs `sh -c script args...` as the container's user with no stdin, bounded by the API
/// timeout (longer while the engine is slow but still answers pings); returns (stdout,
/// stderr, exit code). For the driver's own small steps. Sent once: see
/// [`run_repeatable_script`] for scripts that may run twice.
pub(crate) async fn run_script(
    engine: &Engine,
    container: &str,
    user: Option<&str>,
    script: &str,
    args: &[&str],
    doing: &str,
) -> Result<(Vec<u8>, Vec<u8>, Option<i64>), DriverError> {
    let mut cmd = vec!["sh".to_owned(), "-c".to_owned(), script.to_owned(), "envrt".to_owned()];
    cmd.extend(args.iter().map(|a| a.to_string()));
    let config = ExecConfig {
        cmd: Some(cmd),
        user: user.map(str::to_owned),
        attach_stdin: Some(false),
        attach_stdout: Some(true),
        attach_stderr: Some(true),
        tty: Some(false),
        ..Default::default()
    };
    let mut spawned = start(engine, container, config, doing, &mut None).await?;
    let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
    let ceiling = Instant::now() + engine.patience();
    let mut deadline = Instant::now() + engine.api_timeout;
    loop {
        match tokio::time::timeout_at(deadline, spawned.output.next()).await {
            Ok(Some(Ok(LogOutput::StdOut { message }))) => stdout.extend_from_slice(&message),
            Ok(Some(Ok(LogOutput::StdErr { message }))) => stderr.extend_from_slice(&message),
            Ok(Some(Ok(_))) => {}
            Ok(Some(Err(e))) => return Err(engine.error(doing, e)),
            Ok(None) => break,
            // Slow but alive: keep reading.
            Err(_) if Instant::now() < ceiling && engine.answers().await => {
                deadline = (Instant::now() + engine.api_timeout).min(ceiling);
            }
            Err(_) => return Err(engine.error(doing, BollardError::RequestTimeoutError)),
        }
    }
    let code = exit_code(engine, container, &spawned.exec_id).await?;
    Ok((stdout, stderr, code))
}

/// [`run_script`] for a script that may safely run more than once (it only reads, or
/// converges, like the killer): run again, with a short backoff for up to the API
/// timeout, when the engine's connection could not be made or broke on the way.
pub(crate) async fn run_repeatable_script(
    engine: &Engine,
    container: &str,
    user: Option<&str>,
    script: &str,
    args: &[&str],
    doing: &str,
) -> Result<(Vec<u8>, Vec<u8>, Option<i64>), DriverError> {
    let deadline = Instant::now() + engine.api_timeout;
    let mut delay = Duration::from_millis(10);
    loop {
        match run_script(engine, container, user, script, args, doing).await {
            Err(e) if crate::engine::is_repeatable(&e) && Instant::now() < deadline => {
                tracing::debug!(container, doing, error = %e, "a repeatable script lost its connection: running it again");
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_millis(500));
            }
            other => return other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn err(s: &'static [u8]) -> LogOutput {
        LogOutput::StdErr {
            message: Bytes::from_static(s),
        }
    }

    #[test]
    fn demux_strips_the_marker_even_when_split() {
        let mut d = Demux::default();
        assert_eq!(d.feed(err(b"envrt-p")), None);
        assert_eq!(
            d.feed(err(b"id:42\nhello")),
            Some((OutputStream::Stderr, b"hello".to_vec()))
        );
        assert_eq!(d.pid(), Some(42));
        assert_eq!(
            d.feed(err(b"envrt-pid:7\n")),
            Some((OutputStream::Stderr, b"envrt-pid:7\n".to_vec()))
        );
        assert_eq!(d.pid(), Some(42));
    }

    #[test]
    fn demux_passes_other_first_lines_through() {
        let mut d = Demux::default();
        assert_eq!(
            d.feed(err(b"oops\nmore")),
            Some((OutputStream::Stderr, b"oops\nmore".to_vec()))
        );
        assert_eq!(d.pid(), None);
        let mut d = Demux::default();
        assert_eq!(d.feed(err(b"partial")), None);
        assert_eq!(d.flush(), Some((OutputStream::Stderr, b"partial".to_vec())));
        let mut d = Demux::default();
        let long = [b'x'; 200];
        assert_eq!(
            d.feed(LogOutput::StdErr {
                message: Bytes::copy_from_slice(&long)
            })
            .unwrap()
            .1
            .len(),
            200
        );
        let out = d.feed(LogOutput::StdOut {
            message: Bytes::from_static(b"o"),
        });
        assert_eq!(out, Some((OutputStream::Stdout, b"o".to_vec())));
    }
}

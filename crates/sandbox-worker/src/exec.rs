//! `environmentExecute` and its binary-safe extension `environmentExecuteBinary`: run one
//! command in the lease's sandbox, stream `execute.log` chunks, cap each stream, kill the
//! whole sandbox on timeout.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use envrt_driver_api::DriverError;
use envrt_driver_api::execute::{CappedBuffer, signal_name};
use envrt_plugin_protocol::notifications;
use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};

use super::init::Reported;
use super::lease::resolve;
use super::rpc::{Outbound, RpcError};
use super::sandbox::{Sandbox, WORKSPACE};

use super::user::parse_user;
pub(crate) use envrt_plugin_protocol::environment::LeaseRef;

/// `environmentExecute` params as this worker reads them: the protocol's
/// `ExecuteParams` without its driver fields (ignored here), read as a plain struct so
/// params of the wrong shape get serde's plain-struct error (`expected struct LeaseRef`
/// for an array) rather than a flattened one's.
#[derive(Debug, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ExecuteParams {
    pub(crate) lease: LeaseRef,
    command: String,
    #[serde(default)]
    args: Vec<String>,
    cwd: Option<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    stdin: Option<String>,
    timeout_ms: Option<u64>,
    /// Extension: per-stream capture cap; the worker's default when absent.
    max_output_bytes: Option<usize>,
    /// Extension: `UID`, `UID:GID`, `NAME` or `NAME:GROUP` to run as inside the sandbox's
    /// user namespace.
    envrt_user: Option<String>,
    /// Extension: stdin arrives on this data plane route (see the `dataplane` module).
    pub(crate) envrt_stdin_route: Option<u64>,
}

/// A command's stdin: bytes the request carried, or a stream on the data plane.
pub(crate) enum Stdin {
    Bytes(Vec<u8>),
    Stream(super::dataplane::StdinStream),
}

/// The provider lease id of the `lease` param of a lease-bound verb.
pub(crate) fn lease_id(lease: &LeaseRef) -> Result<&str, RpcError> {
    lease
        .provider_lease_id
        .as_deref()
        .ok_or_else(|| RpcError::invalid_params("lease.providerLeaseId is required"))
}

/// How text crosses the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Encoding {
    /// `environmentExecute`: UTF-8 text (invalid bytes become U+FFFD).
    Text,
    /// `environmentExecuteBinary`: standard padded base64.
    Base64,
}

/// Checks env names and values before anything runs.
pub(crate) fn check_env(env: &BTreeMap<String, String>) -> Result<Vec<(String, String)>, DriverError> {
    env.iter()
        .map(|(k, v)| {
            if k.is_empty() || k.contains('=') || k.contains('\0') {
                Err(DriverError::invalid(format!(
                    "environment variable name {k:?} is not valid"
                )))
            } else if v.contains('\0') {
                Err(DriverError::invalid(format!(
                    "environment variable {k} contains a NUL byte"
                )))
            } else {
                Ok((k.clone(), v.clone()))
            }
        })
        .collect()
}

/// The longest single argument or `NAME=value` string `execve` takes (`MAX_ARG_STRLEN`
/// less the NUL).
pub(crate) const MAX_EXEC_STRING: usize = 128 * 1024 - 1;
/// The most bytes of arguments and environment together a command is started with,
/// counting each string, its NUL and its pointer: the kernel's `ARG_MAX` under the usual
/// 8 MiB stack (a quarter of it, 2 MiB) less 64 KiB for `bwrap`'s own options and the
/// sandbox init's arguments, which travel on the same `execve`.
pub(crate) const MAX_EXEC_BYTES: usize = 2 * 1024 * 1024 - 64 * 1024;

/// Checks an argv (and the environment) before anything runs: no NUL byte anywhere, no
/// string and no total `execve` would refuse, each refused with a clear `Invalid input`.
pub(crate) fn check_argv(argv: &[String], env: &[(String, String)]) -> Result<(), DriverError> {
    if argv.iter().any(|a| a.contains('\0')) {
        return Err(DriverError::invalid(
            "the command and its arguments must not contain NUL bytes",
        ));
    }
    let mut total = 0;
    for (i, arg) in argv.iter().enumerate() {
        let what = if i == 0 {
            "the command".to_owned()
        } else {
            format!("argument {i}")
        };
        total += check_exec_string(&what, arg.len())?;
    }
    for (k, v) in env {
        total += check_exec_string(&format!("environment variable {k}"), k.len() + 1 + v.len())?;
    }
    if total > MAX_EXEC_BYTES {
        return Err(DriverError::invalid(format!(
            "arguments and environment take {total} bytes, over the limit of {MAX_EXEC_BYTES} bytes"
        )));
    }
    Ok(())
}

fn check_exec_string(what: &str, len: usize) -> Result<usize, DriverError> {
    if len > MAX_EXEC_STRING {
        return Err(DriverError::invalid(format!(
            "{what} is {len} bytes, over the limit of {MAX_EXEC_STRING} bytes for one argument or variable"
        )));
    }
    // the string, its NUL and its pointer
    Ok(len + 1 + 8)
}

/// Resolves an execute cwd (default `/workspace`) and checks it is a directory.
pub(crate) fn check_cwd(lease_dir: &Path, cwd: Option<&str>) -> Result<String, DriverError> {
    let cwd = cwd.unwrap_or(WORKSPACE);
    let resolved = resolve(lease_dir, cwd, true)?;
    if !resolved.host.is_dir() {
        return Err(DriverError::missing_cwd(cwd));
    }
    Ok(resolved.sandbox)
}

/// An execute cwd (default `/workspace`): one under `/workspace` is resolved and checked
/// like [`check_cwd`]; any other absolute directory of the sandbox is taken as is (the
/// sandbox is the boundary, and no host path is looked at for it): `bwrap` enters it, and
/// [`run`] reports one that does not exist there.
pub(crate) fn check_exec_cwd(lease_dir: &Path, cwd: Option<&str>) -> Result<String, DriverError> {
    let Some(given) = cwd else {
        return check_cwd(lease_dir, None);
    };
    let normalized = envrt_driver_api::PathScope::CwdAnywhere.resolve_cwd(WORKSPACE, given)?;
    if envrt_driver_api::sync::is_within(WORKSPACE, &normalized) {
        check_cwd(lease_dir, Some(given))
    } else {
        Ok(normalized)
    }
}

/// How a sandbox is spawned beyond the lease's layout: `user` (uid, gid) inside the user
/// namespace (the sandbox user when `None`), and a worker directory `bind` to bind
/// read-write at the sync transfer point (sync outside `/workspace` only).
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct SpawnAs<'a> {
    pub(crate) user: Option<(u32, u32)>,
    pub(crate) bind: Option<&'a Path>,
    /// Open descriptors the worker passes to `bwrap` to bind (`--bind-fd`,
    /// `--ro-bind-fd`): bwrap mounts what the descriptor holds, whatever the path to it
    /// (the lease's process supervisor only).
    pub(crate) fd_binds: &'a [FdBind],
    /// The sandbox outlives the worker (the lease's process supervisor only): no
    /// `--die-with-parent`, a session of its own, out of the worker's cgroup, not killed
    /// when its `Child` drops, and not in the live set (the worker's end and
    /// [`super::sandbox::Sandbox::kill_lease`] leave it; its own record ends it). The
    /// tag appears in `bwrap`'s command line (as a variable set and unset again, so no
    /// environment changes): the record finds the sandbox by it even before it knows its
    /// pids.
    pub(crate) detached: Option<&'a str>,
}

/// A descriptor `bwrap` binds at `dest` inside the sandbox.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FdBind {
    pub(crate) fd: std::os::fd::RawFd,
    pub(crate) dest: &'static str,
    pub(crate) read_only: bool,
}

/// What a finished command did.
pub(crate) struct Outcome {
    pub(crate) exit_code: Option<i32>,
    pub(crate) signal: Option<String>,
    pub(crate) timed_out: bool,
    pub(crate) stdout: (Vec<u8>, bool),
    pub(crate) stderr: (Vec<u8>, bool),
    pub(crate) duration: Duration,
}

/// Where chunks go while a command runs.
pub(crate) struct LogSink<'a> {
    pub(crate) out: &'a Outbound,
    pub(crate) invocation: Option<&'a str>,
    pub(crate) encoding: Encoding,
}

/// Runs `argv` in the lease's sandbox; output is captured up to `cap` bytes per stream and
/// streamed to `sink` when given.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn run(
    sandbox: &Sandbox,
    lease_dir: &Path,
    cwd: &str,
    env: &[(String, String)],
    argv: &[String],
    stdin: Option<Stdin>,
    timeout: Option<Duration>,
    cap: usize,
    sink: Option<LogSink<'_>>,
    cancel: Option<tokio::sync::oneshot::Receiver<()>>,
    user: Option<(u32, u32)>,
) -> Result<Outcome, DriverError> {
    let started = Instant::now();
    let stdin_mode = if stdin.is_some() { Stdio::piped() } else { Stdio::null() };
    let (mut child, tracked) = sandbox
        .spawn_as(
            lease_dir,
            cwd,
            env,
            argv,
            [stdin_mode, Stdio::piped(), Stdio::piped()],
            SpawnAs {
                user,
                bind: None,
                fd_binds: &[],
                detached: None,
            },
        )
        .map_err(|e| DriverError::io("Starting bwrap", e))?;
    let feeding = match (stdin, child.stdin.take()) {
        (Some(Stdin::Bytes(bytes)), Some(mut pipe)) => Some(tokio::spawn(async move {
            // A command that exits without reading its stdin closes the pipe: not an error.
            let _ = pipe.write_all(&bytes).await;
            drop(pipe);
        })),
        (Some(Stdin::Stream(stream)), Some(pipe)) => Some(tokio::spawn(stream.feed(pipe))),
        _ => None,
    };
    // the command is gone when this call ends: a stream still waiting for frames ends too
    let _feeding = AbortOnDrop(feeding);
    let (tx, mut rx) = tokio::sync::mpsc::channel::<(Stream, Vec<u8>)>(16);
    let readers = [
        child
            .stdout
            .take()
            .map(|p| tokio::spawn(pump(p, Stream::Out, tx.clone()))),
        child
            .stderr
            .take()
            .map(|p| tokio::spawn(pump(p, Stream::Err, tx.clone()))),
    ];
    drop(tx);
    let mut capture = Capture {
        streams: [CappedBuffer::new(cap), CappedBuffer::new(cap)],
        carries: [Utf8Carry::default(), Utf8Carry::default()],
        sink,
    };
    // Wait for the exit while streaming output. The deadline covers the whole wait, even a
    // wait stuck on a host that stopped reading our stdout, so the timeout always fires.
    let mut streams_open = true;
    let wait_exit = async {
        loop {
            tokio::select! {
                chunk = rx.recv(), if streams_open => match chunk {
                    Some((stream, bytes)) => capture.take(stream, &bytes).await,
                    None => streams_open = false,
                },
                status = child.wait() => return status,
            }
        }
    };
    let limit = async {
        match timeout {
            Some(limit) => tokio::time::sleep(limit).await,
            None => std::future::pending().await,
        }
    };
    // The host gave up on the call (`envrt.cancel`): the command is stopped as on a
    // timeout. A dropped sender (the call ended otherwise) cancels nothing.
    let cancelled = async {
        let sent = match cancel {
            Some(rx) => rx.await.is_ok(),
            None => false,
        };
        if !sent {
            std::future::pending::<()>().await;
        }
    };
    let (mut status, timed_out, stopped) = tokio::select! {
        status = wait_exit => (Some(status), false, false),
        () = limit => (None, true, true),
        () = cancelled => (None, false, true),
    };
    let mut killed_by = None;
    if stopped {
        let (st, sig) = sandbox.terminate(&mut child).await;
        status = Some(st);
        killed_by = Some(sig);
    }
    // The sandbox and its pid namespace are gone, so the pipes close at once; keep the
    // (partial) output, bounded in case a pipe was passed somewhere unexpected.
    let drain = async {
        while let Some((stream, bytes)) = rx.recv().await {
            capture.take(stream, &bytes).await;
        }
    };
    let _ = tokio::time::timeout(Duration::from_secs(2), drain).await;
    for reader in readers.into_iter().flatten() {
        reader.abort();
    }
    capture.finish().await;
    let [stdout, stderr] = capture.streams;
    let status = status
        .unwrap_or_else(|| Err(std::io::Error::other("no status")))
        .map_err(|e| DriverError::io("Waiting for bwrap", e))?;
    if killed_by.is_none() && tracked.killed() {
        killed_by = Some("SIGKILL");
    }
    let (exit_code, signal) = match (killed_by, tracked.reported()) {
        (Some(sig), _) => (None, Some(sig.to_owned())),
        (None, Some(Reported::Exited(code))) => (Some(code), None),
        (None, Some(Reported::Signaled(sig))) => (None, Some(signal_name(sig))),
        (None, None)
            if status.code() == Some(1) && stderr.clone().into_parts().0.starts_with(b"bwrap: Can't chdir to ") =>
        {
            // bwrap could not enter the cwd: it is not a directory in the sandbox.
            return Err(DriverError::missing_cwd(cwd));
        }
        (None, None) => {
            // Nothing reported: bwrap itself failed, or the sandbox was killed from outside.
            use std::os::unix::process::ExitStatusExt;
            match (status.code(), status.signal()) {
                (Some(code), _) => (Some(code), None),
                (None, Some(sig)) => (None, Some(signal_name(sig))),
                (None, None) => (None, None),
            }
        }
    };
    Ok(Outcome {
        exit_code,
        signal,
        timed_out,
        stdout: stdout.into_parts(),
        stderr: stderr.into_parts(),
        duration: started.elapsed(),
    })
}

struct AbortOnDrop(Option<tokio::task::JoinHandle<()>>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        if let Some(task) = &self.0 {
            task.abort();
        }
    }
}

struct Capture<'a> {
    streams: [CappedBuffer; 2],
    carries: [Utf8Carry; 2],
    sink: Option<LogSink<'a>>,
}

impl Capture<'_> {
    async fn take(&mut self, stream: Stream, bytes: &[u8]) {
        let i = stream as usize;
        self.streams[i].push(bytes);
        if let Some(sink) = &self.sink {
            emit(sink, stream, &mut self.carries[i], bytes, false).await;
        }
    }

    async fn finish(&mut self) {
        if let Some(sink) = &self.sink {
            emit(sink, Stream::Out, &mut self.carries[0], &[], true).await;
            emit(sink, Stream::Err, &mut self.carries[1], &[], true).await;
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stream {
    Out = 0,
    Err = 1,
}

async fn pump<R: AsyncRead + Unpin>(mut pipe: R, stream: Stream, tx: tokio::sync::mpsc::Sender<(Stream, Vec<u8>)>) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match pipe.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if tx.send((stream, buf[..n].to_vec())).await.is_err() {
                    break;
                }
            }
        }
    }
}

/// Holds back an incomplete UTF-8 sequence at the end of a chunk for the next one.
#[derive(Default)]
struct Utf8Carry {
    pending: Vec<u8>,
}

impl Utf8Carry {
    fn take_text(&mut self, bytes: &[u8], last: bool) -> String {
        self.pending.extend_from_slice(bytes);
        let keep = if last { 0 } else { incomplete_tail(&self.pending) };
        let cut = self.pending.len() - keep;
        let text = String::from_utf8_lossy(&self.pending[..cut]).into_owned();
        self.pending.drain(..cut);
        text
    }
}

/// Length of an unfinished UTF-8 sequence at the end of `bytes` (0 to 3).
fn incomplete_tail(bytes: &[u8]) -> usize {
    for back in 1..=3.min(bytes.len()) {
        let b = bytes[bytes.len() - back];
        if b & 0xC0 == 0x80 {
            continue;
        }
        let need = if b >= 0xF0 {
            4
        } else if b >= 0xE0 {
            3
        } else if b >= 0xC0 {
            2
        } else {
            1
        };
        return if need > back { back } else { 0 };
    }
    0
}

async fn emit(sink: &LogSink<'_>, stream: Stream, carry: &mut Utf8Carry, bytes: &[u8], last: bool) {
    let chunk = match sink.encoding {
        Encoding::Base64 => {
            if bytes.is_empty() {
                return;
            }
            STANDARD.encode(bytes)
        }
        Encoding::Text => carry.take_text(bytes, last),
    };
    if chunk.is_empty() {
        return;
    }
    let name = match stream {
        Stream::Out => "stdout",
        Stream::Err => "stderr",
    };
    let mut params = json!({"stream": name, "chunk": chunk});
    if sink.encoding == Encoding::Base64 {
        params["encoding"] = json!("base64");
    }
    sink.out
        .notify(notifications::EXECUTE_LOG, params, sink.invocation)
        .await;
}

/// Decodes strict base64: canonical, padded, standard alphabet.
pub(crate) fn decode_strict(value: &str) -> Option<Vec<u8>> {
    let bytes = STANDARD.decode(value).ok()?;
    (STANDARD.encode(&bytes) == value).then_some(bytes)
}

/// Handles both execute verbs.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn execute(
    sandbox: &Sandbox,
    lease_dir: &Path,
    params: ExecuteParams,
    (encoding, stream): (Encoding, Option<super::dataplane::StdinStream>),
    default_cap: usize,
    out: &Outbound,
    invocation: Option<&str>,
    cancel: tokio::sync::oneshot::Receiver<()>,
) -> Result<Value, RpcError> {
    if params.command.is_empty() {
        return Err(DriverError::invalid("command must not be empty").into());
    }
    let cwd = check_exec_cwd(lease_dir, params.cwd.as_deref())?;
    let user = params.envrt_user.as_deref().map(parse_user).transpose()?;
    let env = check_env(&params.env)?;
    let stdin = match (params.stdin, encoding) {
        (Some(_), _) if stream.is_some() => {
            return Err(RpcError::invalid_params("stdin and envrtStdinRoute are exclusive"));
        }
        (None, _) => stream.map(Stdin::Stream),
        (Some(text), Encoding::Text) => Some(Stdin::Bytes(text.into_bytes())),
        (Some(b64), Encoding::Base64) if b64.is_empty() => Some(Stdin::Bytes(Vec::new())),
        (Some(b64), Encoding::Base64) => {
            Some(Stdin::Bytes(decode_strict(&b64).ok_or_else(|| {
                RpcError::invalid_params("stdin must be a well-formed base64 string")
            })?))
        }
    };
    let mut argv = vec![params.command];
    argv.extend(params.args);
    check_argv(&argv, &env)?;
    let sink = LogSink {
        out,
        invocation,
        encoding,
    };
    let outcome = run(
        sandbox,
        lease_dir,
        &cwd,
        &env,
        &argv,
        stdin,
        params.timeout_ms.map(Duration::from_millis),
        params.max_output_bytes.unwrap_or(default_cap),
        Some(sink),
        Some(cancel),
        user,
    )
    .await?;
    let render = |bytes: &[u8]| match encoding {
        Encoding::Text => String::from_utf8_lossy(bytes).into_owned(),
        Encoding::Base64 => STANDARD.encode(bytes),
    };
    Ok(json!({
        "exitCode": outcome.exit_code,
        "signal": outcome.signal,
        "timedOut": outcome.timed_out,
        "stdout": render(&outcome.stdout.0),
        "stderr": render(&outcome.stderr.0),
        "metadata": {
            "stdoutTruncated": outcome.stdout.1,
            "stderrTruncated": outcome.stderr.1,
            "durationMs": u64::try_from(outcome.duration.as_millis()).unwrap_or(u64::MAX),
        },
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utf8_carry_never_splits_a_code_point() {
        let bytes = "aé€😀".as_bytes();
        for cut in 0..bytes.len() {
            let mut carry = Utf8Carry::default();
            let mut text = carry.take_text(&bytes[..cut], false);
            text.push_str(&carry.take_text(&bytes[cut..], true));
            assert_eq!(text, "aé€😀", "cut at {cut}");
        }
    }

    #[test]
    fn strict_base64() {
        assert_eq!(decode_strict("aGk="), Some(b"hi".to_vec()));
        assert_eq!(decode_strict("aGk"), None);
        assert_eq!(decode_strict("aGl="), None);
        assert_eq!(decode_strict("not base64!!"), None);
    }
}

//! `envrt exec`: run one command, stream its output live, exit with its exit code.

use std::collections::BTreeMap;
use std::io::{IsTerminal, Write};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use clap::Args;
use envrt::sqlite::holder::Holder;
use envrt::{EnvValue, ExecuteRequest, ExecuteResult, LeasePolicy, LeaseStatus, OutputKeep, OutputSink, OutputStream};
use tokio::io::AsyncReadExt;

use crate::Target;
use crate::app::App;
use crate::error::CliError;
use envrt::config::Paths;

/// Default `--stdin-limit`: the most every built-in driver accepts (the sandbox's request
/// limit, stdin carried as base64: 47 MiB); local and Docker take more when it is raised.
pub(crate) const DEFAULT_STDIN_LIMIT: u64 = envrt::plugin_sandbox::MAX_STDIN_BYTES as u64;

/// Exit code when `--timeout` fired (as `timeout(1)`).
pub(crate) const EXIT_TIMEOUT: u8 = 124;

#[derive(Debug, Args)]
pub(crate) struct ExecArgs {
    #[command(flatten)]
    pub(crate) target: Target,
    /// Run on this existing lease instead of acquiring (and releasing) an ephemeral one.
    #[arg(long, value_name = "ID", conflicts_with_all = ["env_id", "driver"])]
    pub(crate) lease: Option<String>,
    /// Working directory in the environment.
    #[arg(long, value_name = "DIR")]
    pub(crate) cwd: Option<String>,
    /// Run as this user of the environment (`NAME`, `UID`, `NAME:GROUP` or `UID:GID`):
    /// docker takes what the image knows when it is the environment's `user` or its
    /// `allowedUsers` lists it, the sandbox a numeric `UID[:GID]`, local only as root and
    /// when the environment's `allowedUsers` lists it.
    #[arg(short = 'u', long, value_name = "USER")]
    pub(crate) user: Option<String>,
    /// An environment variable for the command (repeatable).
    #[arg(short = 'e', long = "env", value_name = "K=V")]
    pub(crate) env: Vec<String>,
    /// Read environment variables from a file of `K=V` lines (repeatable; blank lines and
    /// `#` comments are skipped). Its values are secrets: they never show in envrt's argv,
    /// errors or logs, so use it rather than `-e` for credentials.
    #[arg(long, value_name = "FILE")]
    pub(crate) env_file: Vec<std::path::PathBuf>,
    /// Kill the command's whole process tree after this long (exit 124): `90`, `1.5`,
    /// `500ms`, `1s`, `2m`, `1h30m`.
    #[arg(long, value_name = "DURATION")]
    pub(crate) timeout: Option<String>,
    /// The lease expires after this long (a new lease only; default: the environment's
    /// `ttl`): the driver ends it then even if envrt is gone.
    #[arg(long, value_name = "DURATION", conflicts_with = "lease")]
    pub(crate) ttl: Option<String>,
    /// End the new lease once it has been idle this long (no operation, no process),
    /// even if envrt is gone.
    #[arg(long, value_name = "DURATION", conflicts_with = "lease")]
    pub(crate) idle_timeout: Option<String>,
    /// What the idle timeout does to the idle lease: `release` (the default, else the
    /// environment's `on_idle`) or `pause`.
    #[arg(long, value_name = "ACTION", value_parser = ["release", "pause"], requires = "idle_timeout")]
    pub(crate) on_idle: Option<String>,
    /// Start the ephemeral lease from this template of the environment.
    #[arg(long, value_name = "TEMPLATE", conflicts_with = "lease")]
    pub(crate) template: Option<String>,
    /// Print one JSON document with the whole result (exit code, signal, timeout,
    /// output and truncation per stream, duration) instead of streaming the output; envrt
    /// then exits 0 whenever the command ran, and on its own errors prints
    /// `{"error": {"kind", "message", "exitCode"}}` and exits 1 or 2.
    #[arg(long)]
    pub(crate) json: bool,
    /// Print at most this many bytes of each stream (the rest is dropped, with a note).
    #[arg(long, value_name = "BYTES")]
    pub(crate) max_output: Option<usize>,
    /// Which bytes of a stream past --max-output are kept: the first (head, streamed as
    /// they come) or the last (tail, printed when the command ends).
    #[arg(long, value_enum, value_name = "PART", default_value_t = Keep::Head)]
    pub(crate) keep: Keep,
    /// Do not read stdin; the command gets an empty one.
    #[arg(short = 'n', long)]
    pub(crate) no_stdin: bool,
    /// Refuse a stdin longer than this (the command receives stdin as one buffer).
    #[arg(long, value_name = "BYTES", default_value_t = DEFAULT_STDIN_LIMIT)]
    pub(crate) stdin_limit: u64,
    /// The program and its arguments.
    #[arg(last = true, required = true, value_name = "PROGRAM")]
    pub(crate) command: Vec<String>,
    /// The ephemeral lease's own network policy (a new lease only).
    #[command(flatten)]
    pub(crate) network: crate::network::NetworkArgs,
}

/// Parses `K=V` pairs.
pub(crate) fn parse_env(pairs: &[String]) -> Result<BTreeMap<String, EnvValue>, CliError> {
    let mut out = BTreeMap::new();
    for pair in pairs {
        match pair.split_once('=') {
            Some((k, v)) if !k.is_empty() => {
                out.insert(k.to_owned(), EnvValue::Plain(v.to_owned()));
            }
            _ => return Err(CliError::Usage(format!("envrt: -e expects K=V, got \"{pair}\""))),
        }
    }
    Ok(out)
}

/// Reads `--env-file` files into `env` as secret values; a later file or `-e` wins.
pub(crate) fn read_env_files(
    files: &[std::path::PathBuf],
    env: &mut BTreeMap<String, EnvValue>,
) -> Result<(), CliError> {
    for file in files {
        let text = std::fs::read(file)
            .map_err(|e| CliError::Usage(format!("envrt: cannot read --env-file {}: {e}", file.display())))?;
        let text = String::from_utf8(text)
            .map_err(|_| CliError::Usage(format!("envrt: --env-file {} is not UTF-8 text", file.display())))?;
        for (index, line) in text.lines().enumerate() {
            let line = line.trim_start();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            // The line itself is never echoed: it may hold a secret.
            match line.split_once('=') {
                Some((key, value)) if !key.is_empty() && !key.contains(char::is_whitespace) => {
                    env.insert(key.to_owned(), EnvValue::Secret(envrt::Secret::new(value.to_owned())));
                }
                _ => {
                    return Err(CliError::Usage(format!(
                        "envrt: --env-file {} line {}: expected NAME=VALUE",
                        file.display(),
                        index + 1
                    )));
                }
            }
        }
    }
    Ok(())
}

/// Parses `--timeout`.
pub(crate) fn parse_timeout(raw: Option<&str>) -> Result<Option<Duration>, CliError> {
    Ok(raw
        .map(|raw| envrt::config::parse_duration("--timeout", raw))
        .transpose()?)
}

/// Writes output to our stdout/stderr as it arrives, at most `cap` bytes per stream.
pub(crate) struct Printer {
    cap: usize,
    state: Mutex<[PrintState; 2]>,
}

#[derive(Default, Clone, Copy)]
struct PrintState {
    printed: usize,
    dropped: bool,
    broken: bool,
}

impl Printer {
    pub(crate) fn new(cap: usize) -> Self {
        Printer {
            cap,
            state: Mutex::new([PrintState::default(); 2]),
        }
    }

    pub(crate) fn emit(&self, stream: OutputStream, chunk: &[u8]) {
        let mut states = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let state = &mut states[stream as usize];
        let room = self.cap.saturating_sub(state.printed);
        let take = chunk.len().min(room);
        if take < chunk.len() {
            state.dropped = true;
        }
        if take == 0 || state.broken {
            return;
        }
        let written = match stream {
            OutputStream::Stdout => {
                let mut out = std::io::stdout().lock();
                out.write_all(&chunk[..take]).and_then(|()| out.flush())
            }
            OutputStream::Stderr => {
                let mut err = std::io::stderr().lock();
                err.write_all(&chunk[..take]).and_then(|()| err.flush())
            }
        };
        state.printed += take;
        // A closed pipe (the reader went away) stops printing, not the command.
        if written.is_err() {
            state.broken = true;
        }
    }

    fn printed(&self, stream: OutputStream) -> usize {
        self.state.lock().unwrap_or_else(|e| e.into_inner())[stream as usize].printed
    }

    fn notes(&self) -> Vec<String> {
        let states = self.state.lock().unwrap_or_else(|e| e.into_inner());
        [("stdout", states[0]), ("stderr", states[1])]
            .into_iter()
            .filter(|(_, s)| s.dropped)
            .map(|(name, _)| format!("envrt: {name} was cut at {} bytes (--max-output)", self.cap))
            .collect()
    }
}

impl OutputSink for Printer {
    fn on_chunk(&self, stream: OutputStream, chunk: &[u8]) {
        self.emit(stream, chunk);
    }
}

/// One stream's output for `--json`: text when it is UTF-8, else base64.
fn output_json(bytes: &[u8]) -> (serde_json::Value, &'static str) {
    use base64::Engine as _;
    match std::str::from_utf8(bytes) {
        Ok(text) => (text.into(), "utf8"),
        Err(_) => (base64::engine::general_purpose::STANDARD.encode(bytes).into(), "base64"),
    }
}

/// The whole result as the JSON document `--json` prints.
pub(crate) fn result_json(result: &ExecuteResult) -> serde_json::Value {
    let (stdout, stdout_encoding) = output_json(&result.stdout);
    let (stderr, stderr_encoding) = output_json(&result.stderr);
    serde_json::json!({
        "exitCode": result.exit_code,
        "signal": result.signal,
        "timedOut": result.timed_out,
        "stdout": stdout,
        "stdoutEncoding": stdout_encoding,
        "stdoutTruncated": result.stdout_truncated,
        "stderr": stderr,
        "stderrEncoding": stderr_encoding,
        "stderrTruncated": result.stderr_truncated,
        "durationMs": result.duration.as_secs_f64() * 1000.0,
    })
}

/// The number of a signal name (`SIGKILL` → 9), via the core's naming.
pub(crate) fn signal_number(name: &str) -> Option<i32> {
    (1..=64).find(|&n| envrt::core::execute::signal_name(n) == name)
}

/// The exit code standing for a command's outcome.
pub(crate) fn exit_code_of(result: &ExecuteResult) -> u8 {
    if result.timed_out {
        return EXIT_TIMEOUT;
    }
    if let Some(code) = result.exit_code {
        return (code & 0xff) as u8;
    }
    match result.signal.as_deref().and_then(signal_number) {
        Some(n) => (128 + n).min(255) as u8,
        None => 1,
    }
}

/// Reads all of stdin when it is not a terminal, refusing more than `limit` bytes.
pub(crate) async fn read_stdin(limit: u64) -> Result<Option<Vec<u8>>, CliError> {
    if std::io::stdin().is_terminal() {
        return Ok(None);
    }
    let mut data = Vec::new();
    tokio::io::stdin()
        .take(limit.saturating_add(1))
        .read_to_end(&mut data)
        .await
        .map_err(|e| CliError::Failure(format!("envrt: cannot read stdin: {e}")))?;
    if data.len() as u64 > limit {
        return Err(CliError::Usage(format!(
            "envrt: stdin is longer than {limit} bytes; raise --stdin-limit or pass --no-stdin"
        )));
    }
    Ok(Some(data))
}

/// SIGINT, SIGTERM and SIGHUP, caught from the moment this is made (so a signal that
/// comes while a lease is being set up is not lost, and does not kill envrt half-way).
pub(crate) struct Interrupts {
    streams: Option<[tokio::signal::unix::Signal; 3]>,
}

impl Interrupts {
    /// Installs the handlers.
    pub(crate) fn install() -> Interrupts {
        use tokio::signal::unix::{SignalKind, signal};
        let streams = (|| {
            Some([
                signal(SignalKind::interrupt()).ok()?,
                signal(SignalKind::terminate()).ok()?,
                signal(SignalKind::hangup()).ok()?,
            ])
        })();
        Interrupts { streams }
    }

    /// The next signal's number.
    pub(crate) async fn next(&mut self) -> i32 {
        let Some([int, term, hup]) = self.streams.as_mut() else {
            return std::future::pending().await;
        };
        tokio::select! {
            _ = int.recv() => 2,
            _ = term.recv() => 15,
            _ = hup.recv() => 1,
        }
    }
}

pub(crate) async fn run(paths: &Paths, args: ExecArgs) -> Result<u8, CliError> {
    let json = args.json;
    let outcome = run_exec(paths, args).await;
    if json && let Err(error) = &outcome {
        crate::out!("{}", error.to_json());
    }
    outcome
}

async fn run_exec(paths: &Paths, args: ExecArgs) -> Result<u8, CliError> {
    let mut env = BTreeMap::new();
    read_env_files(&args.env_file, &mut env)?;
    env.extend(parse_env(&args.env)?);
    let timeout = parse_timeout(args.timeout.as_deref())?;
    let ttl = args
        .ttl
        .as_deref()
        .map(|raw| envrt::config::parse_duration("--ttl", raw))
        .transpose()?;
    let idle = crate::lease_idle::parse(args.idle_timeout.as_deref(), args.on_idle.as_deref())?;
    let network = args.network.policy()?;
    if network.is_some() && args.lease.is_some() {
        return Err(CliError::Usage(
            "envrt: --egress/--allow apply to a new lease; use `envrt lease network LEASE` for an existing one".into(),
        ));
    }
    // Before any lease exists: a refused stdin leaves nothing to clean up.
    let stdin = if args.no_stdin {
        None
    } else {
        read_stdin(args.stdin_limit).await?
    };
    let mut interrupts = Interrupts::install();
    let app = App::open_for(paths, args.target.driver.as_deref()).await?;
    let (lease, own) = match &args.lease {
        Some(id) => (app.existing_lease(id).await?, false),
        None => {
            let environment = app.environment_id(&args.target).await?;
            let holder = Holder::current().ok();
            let template = args.template.clone();
            let lease = app
                .acquire_with(
                    &environment,
                    LeasePolicy::Ephemeral,
                    None,
                    holder,
                    ttl,
                    "envrt exec",
                    template,
                    network,
                )
                .await?;
            (crate::lease_idle::arm(&app, lease, idle).await?, true)
        }
    };
    let outcome = run_on(&app, &lease.id, args, env, timeout, stdin, &mut interrupts).await;
    if own {
        app.release_own(&lease, LeaseStatus::Released).await;
    }
    outcome
}

/// `--keep`: which part of a capped stream is kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Keep {
    /// The first bytes, printed as they come.
    Head,
    /// The last bytes, printed when the command ends.
    Tail,
}

async fn run_on(
    app: &App,
    lease_id: &str,
    args: ExecArgs,
    env: BTreeMap<String, EnvValue>,
    timeout: Option<Duration>,
    stdin: Option<Vec<u8>>,
    interrupts: &mut Interrupts,
) -> Result<u8, CliError> {
    let tail = args.keep == Keep::Tail;
    // A tail is known only at the end: the driver keeps it and it is printed whole.
    let printer = Arc::new(Printer::new(if tail {
        usize::MAX
    } else {
        args.max_output.unwrap_or(usize::MAX)
    }));
    let json = args.json;
    let mut command = args.command.into_iter();
    let program = command.next().unwrap_or_default();
    let request = ExecuteRequest {
        command: program,
        args: command.collect(),
        cwd: args.cwd,
        env,
        stdin,
        timeout,
        // Output is printed through the sink; the captured copy only backs up a driver
        // that does not stream.
        max_output_bytes: Some(args.max_output.unwrap_or(envrt::core::execute::DEFAULT_OUTPUT_LIMIT)),
        keep: if tail { OutputKeep::Tail } else { OutputKeep::Head },
        sink: if json || tail { None } else { Some(printer.clone()) },
        user: args.user,
    };
    let result = tokio::select! {
        result = app.runtime.execute(lease_id, request) => result?,
        signal = interrupts.next() => {
            // Dropping the execute future stops the command; the caller releases the lease.
            crate::say!("envrt: interrupted by {}", envrt::core::execute::signal_name(signal));
            return Ok((128 + signal) as u8);
        }
    };
    Ok(report(&result, &printer, json, tail, args.max_output, timeout))
}

/// Prints what is left of a finished command (its JSON document, or the output no sink
/// printed and the notes on cuts and timeouts); the exit code that stands for it.
pub(crate) fn report(
    result: &ExecuteResult,
    printer: &Printer,
    json: bool,
    tail: bool,
    max_output: Option<usize>,
    timeout: Option<Duration>,
) -> u8 {
    if json {
        crate::out!("{}", result_json(result));
        return 0;
    }
    for (stream, captured) in [
        (OutputStream::Stdout, &result.stdout),
        (OutputStream::Stderr, &result.stderr),
    ] {
        if printer.printed(stream) == 0 && !captured.is_empty() {
            printer.emit(stream, captured);
        }
    }
    for note in printer.notes() {
        crate::say!("{note}");
    }
    if tail {
        let cap = max_output.unwrap_or(envrt::core::execute::DEFAULT_OUTPUT_LIMIT);
        for (name, cut) in [("stdout", result.stdout_truncated), ("stderr", result.stderr_truncated)] {
            if cut {
                crate::say!("envrt: {name} was cut to its last {cap} bytes (--max-output --keep tail)");
            }
        }
    }
    if result.timed_out {
        let secs = timeout.map(|t| t.as_secs_f64()).unwrap_or_default();
        crate::say!("envrt: the command timed out after {secs} s and was killed");
    }
    exit_code_of(result)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes_follow_the_outcome() {
        let mut r = ExecuteResult {
            exit_code: Some(3),
            ..Default::default()
        };
        assert_eq!(exit_code_of(&r), 3);
        r.exit_code = Some(256 + 7);
        assert_eq!(exit_code_of(&r), 7);
        r.exit_code = None;
        r.signal = Some("SIGKILL".into());
        assert_eq!(exit_code_of(&r), 137);
        r.signal = Some("SIG40".into());
        assert_eq!(exit_code_of(&r), 168);
        r.signal = Some("bogus".into());
        assert_eq!(exit_code_of(&r), 1);
        r.timed_out = true;
        assert_eq!(exit_code_of(&r), 124);
    }

    #[test]
    fn env_files_give_secret_values_and_never_echo_a_bad_line() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("vars");
        std::fs::write(&file, "# comment\n\nTOKEN=s3cr=et\n  EMPTY=\n").unwrap();
        let mut env = BTreeMap::new();
        read_env_files(std::slice::from_ref(&file), &mut env).unwrap();
        assert_eq!(env["TOKEN"].expose(), "s3cr=et");
        assert_eq!(env["EMPTY"].expose(), "");
        assert!(!format!("{:?}", env["TOKEN"]).contains("s3cr"));
        std::fs::write(&file, "A=1\nhunter2\n").unwrap();
        let err = read_env_files(std::slice::from_ref(&file), &mut env).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!("envrt: --env-file {} line 2: expected NAME=VALUE", file.display())
        );
        assert_eq!(err.exit_code(), 2);
        let missing = dir.path().join("nope");
        let err = read_env_files(std::slice::from_ref(&missing), &mut env).unwrap_err();
        assert!(
            err.to_string()
                .starts_with(&format!("envrt: cannot read --env-file {}: ", missing.display()))
        );
        std::fs::write(&file, b"A=\xff\n").unwrap();
        assert_eq!(
            read_env_files(std::slice::from_ref(&file), &mut env)
                .unwrap_err()
                .to_string(),
            format!("envrt: --env-file {} is not UTF-8 text", file.display())
        );
    }

    #[test]
    fn results_become_json_with_text_or_base64_output() {
        let result = ExecuteResult {
            exit_code: Some(3),
            stdout: b"hi\n".to_vec(),
            stderr: vec![0xff, 0x00],
            stderr_truncated: true,
            duration: Duration::from_millis(5),
            ..Default::default()
        };
        assert_eq!(
            result_json(&result),
            serde_json::json!({
                "exitCode": 3, "signal": null, "timedOut": false,
                "stdout": "hi\n", "stdoutEncoding": "utf8", "stdoutTruncated": false,
                "stderr": "/wA=", "stderrEncoding": "base64", "stderrTruncated": true,
                "durationMs": 5.0,
            })
        );
    }

    #[test]
    fn the_default_stdin_limit_is_what_every_driver_accepts() {
        // 47.25 MiB: the sandbox's 64 MiB request, less 1 MiB for the rest, as base64.
        assert_eq!(DEFAULT_STDIN_LIMIT, 49_545_216);
    }

    #[test]
    fn env_pairs_and_timeouts_are_checked() {
        let env = parse_env(&["A=1".into(), "B=x=y".into(), "C=".into()]).unwrap();
        assert_eq!(env["B"].expose(), "x=y");
        assert_eq!(env["C"].expose(), "");
        assert_eq!(
            parse_env(&["NOPE".into()]).unwrap_err().to_string(),
            "envrt: -e expects K=V, got \"NOPE\""
        );
        assert_eq!(
            parse_env(&["=v".into()]).unwrap_err().to_string(),
            "envrt: -e expects K=V, got \"=v\""
        );
        assert_eq!(parse_timeout(Some("1.5")).unwrap(), Some(Duration::from_millis(1500)));
        assert_eq!(parse_timeout(Some("1s")).unwrap(), Some(Duration::from_secs(1)));
        assert_eq!(parse_timeout(None).unwrap(), None);
        assert_eq!(
            parse_timeout(Some("0")).unwrap_err().to_string(),
            "envrt: --timeout expects a positive duration such as 90, 1.5, 500ms, 1s, 2m or 1h30m, got \"0\""
        );
    }
}

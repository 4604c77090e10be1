//! The subcommands that act through a service (`--server URL` or `ENVRT_SERVER`; see
//! [`crate::server`]): `lease acquire | list | release | destroy | network`, `exec`,
//! `spawn`, `ps`, `logs`, `attach`, `kill`, `wait` and `cp`, printing what the same subcommands print
//! on the runtime of their own. The others answer
//! `envrt: "{command}" does not work through a service (--server or ENVRT_SERVER); run it where the service runs`
//! (exit 2), and so do the options that have no meaning there, each with its own text.

use std::collections::BTreeMap;
use std::sync::Arc;

use base64::Engine as _;
use hyper::Method;
use serde_json::{Value, json};

use envrt::core::process::{ProcessInfo, ProcessStatus, ProcessStream};
use envrt::{EnvValue, ExecuteResult, Lease, LeasePolicy, LeaseStatus, OutputStream};

use crate::error::CliError;
use crate::exec::{ExecArgs, Keep, Printer, parse_env, parse_timeout, read_env_files, read_stdin, report};
use crate::lease::LeaseCommand;
use crate::server::{Lines, Server, process_path, segment};
use crate::{Command, Target};

/// `envrt: "{what}" does not work through a service (--server or ENVRT_SERVER); run it where the service runs`.
pub(crate) fn unsupported(what: &str) -> CliError {
    CliError::Usage(format!(
        "envrt: \"{what}\" does not work through a service (--server or ENVRT_SERVER); run it where the service runs"
    ))
}

fn lease_path(id: &str) -> String {
    format!("/v1/leases/{}", segment(id))
}

/// Runs `command` through `server`.
pub(crate) async fn run(server: &Server, command: Command) -> Result<u8, CliError> {
    match command {
        Command::Lease(command) => lease(server, command).await,
        Command::Exec(args) => exec(server, args).await,
        Command::Spawn(args) => spawn(server, args).await,
        Command::Ps(args) => ps(server, args).await,
        Command::Logs(args) => logs(server, args).await,
        Command::Kill(args) => {
            let path = format!("{}/signal", process_path(&args.process)?);
            let _: ProcessInfo = server
                .json(Method::POST, &path, Some(&json!({ "signal": args.signal })))
                .await?;
            Ok(0)
        }
        Command::Wait(args) => wait(server, args).await,
        Command::Cp(args) => crate::via_server_cp::run(server, args).await,
        Command::Shell(_) => Err(unsupported("shell")),
        Command::Template(_) => Err(unsupported("template")),
        Command::Gc(_) => Err(unsupported("gc")),
        Command::Caps(_) => Err(unsupported("caps")),
        Command::Doctor(_) => Err(unsupported("doctor")),
        Command::Attach(args) => crate::via_server_attach::run(server, args).await,
        Command::Serve(_) => Err(unsupported("serve")),
        Command::Token(_) => Err(unsupported("token")),
        Command::Expose(_) => Err(unsupported("expose")),
    }
}

/// The environment a target names through a service: `--env-id`, else `local`.
fn environment(target: &Target) -> Result<String, CliError> {
    if target.driver.is_some() {
        return Err(unsupported("--driver"));
    }
    Ok(target.env_id.clone().unwrap_or_else(|| "local".to_owned()))
}

/// `POST /v1/leases`.
async fn acquire(
    server: &Server,
    environment: String,
    policy: LeasePolicy,
    run_id: Option<String>,
    ttl: Option<&str>,
    template: Option<String>,
    network: &crate::network::NetworkArgs,
) -> Result<Lease, CliError> {
    let mut body = json!({ "environmentId": environment, "policy": policy });
    if let Some(run_id) = run_id {
        body["runId"] = run_id.into();
    }
    if let Some(raw) = ttl {
        let ttl = envrt::config::parse_duration("--ttl", raw)?;
        body["ttlMs"] = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).into();
    }
    if let Some(template) = template {
        body["template"] = template.into();
    }
    if network.policy()?.is_some() {
        let egress = network
            .egress
            .clone()
            .or_else(|| (!network.allow.is_empty()).then(|| "allow".to_owned()));
        body["network"] = json!({ "egress": egress, "allow": network.allow });
    }
    server.json(Method::POST, "/v1/leases", Some(&body)).await
}

async fn lease(server: &Server, command: LeaseCommand) -> Result<u8, CliError> {
    match command {
        LeaseCommand::Acquire(args) => {
            if args.holder_pid.is_some() {
                return Err(unsupported("lease acquire --holder-pid"));
            }
            if args.idle_timeout.is_some() || args.on_idle.is_some() {
                return Err(unsupported("--idle-timeout"));
            }
            if args.owner.scope.is_some() || !args.owner.labels.is_empty() {
                return Err(unsupported("lease acquire --scope/--label"));
            }
            let lease = acquire(
                server,
                environment(&args.target)?,
                args.policy,
                args.run_id,
                args.ttl.as_deref(),
                args.template,
                &args.network,
            )
            .await?;
            if args.json {
                crate::out!("{}", crate::lease::to_json(&lease));
            } else {
                crate::out!("{}", lease.id);
            }
        }
        LeaseCommand::List(args) => {
            let leases: Vec<Lease> = server
                .json(Method::GET, &format!("/v1/leases?all={}", args.all), None)
                .await?;
            if args.json {
                crate::out!("{}", crate::lease::to_json(&leases));
            } else {
                crate::lease::print_table(&leases);
            }
        }
        LeaseCommand::Release(args) => {
            let Some(id) = args.id else {
                return Err(unsupported("lease release --scope/--label"));
            };
            let path = format!("{}/release", lease_path(&id));
            let lease: Lease = server
                .json(Method::POST, &path, Some(&json!({ "status": args.status })))
                .await?;
            crate::out!("{} {}", lease.id, lease.status);
        }
        LeaseCommand::Destroy { id } => {
            let lease: Lease = server.json(Method::DELETE, &lease_path(&id), None).await?;
            crate::out!("{} {} (destroyed)", lease.id, lease.status);
        }
        LeaseCommand::Network { id, network } => {
            let policy = match network.policy()? {
                Some(_) => json!({
                    "egress": network.egress.clone().or_else(|| Some("allow".to_owned())),
                    "allow": network.allow,
                }),
                None => json!({ "egress": "none" }),
            };
            let path = format!("{}/network", lease_path(&id));
            let answer: Value = server.json(Method::PUT, &path, Some(&policy)).await?;
            crate::out!("{id} network: {}", answer["network"].as_str().unwrap_or_default());
        }
        LeaseCommand::Show { .. } => return Err(unsupported("lease show")),
        LeaseCommand::Pause { .. } => return Err(unsupported("lease pause")),
        LeaseCommand::Unpause { .. } => return Err(unsupported("lease unpause")),
        LeaseCommand::Fork(_) => return Err(unsupported("lease fork")),
        LeaseCommand::KeepAlive { .. } => return Err(unsupported("lease keep-alive")),
        LeaseCommand::Extend { .. } => return Err(unsupported("lease extend")),
        LeaseCommand::Ingress(_) => return Err(unsupported("lease ingress")),
    }
    Ok(0)
}

/// The environment of a command, as the service takes it (values as given: the service
/// passes them to the runtime as secrets).
fn env_of(pairs: &[String], files: &[std::path::PathBuf]) -> Result<BTreeMap<String, String>, CliError> {
    let mut env = BTreeMap::new();
    read_env_files(files, &mut env)?;
    env.extend(parse_env(pairs)?);
    Ok(env
        .into_iter()
        .map(|(k, v)| {
            let value = match v {
                EnvValue::Plain(text) => text,
                EnvValue::Secret(secret) => secret.expose().to_owned(),
            };
            (k, value)
        })
        .collect())
}

async fn exec(server: &Server, args: ExecArgs) -> Result<u8, CliError> {
    let json = args.json;
    let outcome = exec_on(server, args).await;
    if json && let Err(error) = &outcome {
        crate::out!("{}", error.to_json());
    }
    outcome
}

async fn exec_on(server: &Server, args: ExecArgs) -> Result<u8, CliError> {
    if args.idle_timeout.is_some() || args.on_idle.is_some() {
        return Err(unsupported("--idle-timeout"));
    }
    let env = env_of(&args.env, &args.env_file)?;
    let timeout = parse_timeout(args.timeout.as_deref())?;
    if args.network.policy()?.is_some() && args.lease.is_some() {
        return Err(CliError::Usage(
            "envrt: --egress/--allow apply to a new lease; use `envrt lease network LEASE` for an existing one".into(),
        ));
    }
    let stdin = if args.no_stdin {
        None
    } else {
        read_stdin(args.stdin_limit).await?
    };
    let (lease_id, own) = match &args.lease {
        Some(id) => (id.clone(), false),
        None => {
            let environment = environment(&args.target)?;
            let lease = acquire(
                server,
                environment,
                LeasePolicy::Ephemeral,
                None,
                args.ttl.as_deref(),
                args.template.clone(),
                &args.network,
            )
            .await?;
            (lease.id, true)
        }
    };
    let mut command = args.command.iter();
    let mut body = json!({
        "command": command.next().cloned().unwrap_or_default(),
        "args": command.cloned().collect::<Vec<_>>(),
        "env": env,
        "keep": if args.keep == Keep::Tail { "tail" } else { "head" },
    });
    if let Some(cwd) = &args.cwd {
        body["cwd"] = cwd.clone().into();
    }
    if let Some(user) = &args.user {
        body["user"] = user.clone().into();
    }
    if let Some(timeout) = timeout {
        body["timeoutMs"] = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX).into();
    }
    if let Some(max) = args.max_output {
        body["maxOutputBytes"] = max.into();
    }
    if let Some(stdin) = stdin {
        body["stdinBase64"] = base64::engine::general_purpose::STANDARD.encode(stdin).into();
    }
    let outcome = execute(server, &lease_id, &args, &body, timeout).await;
    if own {
        let path = format!("{}/release", lease_path(&lease_id));
        if let Err(e) = server.bytes(Method::POST, &path, Some(&json!({}))).await {
            crate::say!("envrt: releasing lease {lease_id} failed: {e}");
        }
    }
    outcome
}

/// The result document of the service as the runtime's result.
fn result_of(doc: &Value) -> Result<ExecuteResult, CliError> {
    let output = |stream: &str| -> Result<Vec<u8>, CliError> {
        let text = doc[stream].as_str().unwrap_or_default();
        if doc[format!("{stream}Encoding")] == "base64" {
            base64::engine::general_purpose::STANDARD
                .decode(text)
                .map_err(|e| CliError::Failure(format!("envrt: the service sent {stream} that is not base64: {e}")))
        } else {
            Ok(text.as_bytes().to_vec())
        }
    };
    Ok(ExecuteResult {
        exit_code: doc["exitCode"].as_i64().and_then(|c| i32::try_from(c).ok()),
        signal: doc["signal"].as_str().map(str::to_owned),
        timed_out: doc["timedOut"].as_bool().unwrap_or_default(),
        stdout: output("stdout")?,
        stderr: output("stderr")?,
        stdout_truncated: doc["stdoutTruncated"].as_bool().unwrap_or_default(),
        stderr_truncated: doc["stderrTruncated"].as_bool().unwrap_or_default(),
        duration: std::time::Duration::from_secs_f64(doc["durationMs"].as_f64().unwrap_or_default().max(0.0) / 1000.0),
        ..Default::default()
    })
}

async fn execute(
    server: &Server,
    lease_id: &str,
    args: &ExecArgs,
    body: &Value,
    timeout: Option<std::time::Duration>,
) -> Result<u8, CliError> {
    let tail = args.keep == Keep::Tail;
    let printer = Arc::new(Printer::new(if tail {
        usize::MAX
    } else {
        args.max_output.unwrap_or(usize::MAX)
    }));
    let path = format!("{}/execute", lease_path(lease_id));
    if args.json || tail {
        let doc: Value = server.json(Method::POST, &path, Some(body)).await?;
        return Ok(report(
            &result_of(&doc)?,
            &printer,
            args.json,
            tail,
            args.max_output,
            timeout,
        ));
    }
    let mut lines = server
        .lines(Method::POST, &format!("{path}/stream"), Some(body))
        .await?;
    while let Some(line) = lines.next().await? {
        if let Some(result) = line.get("result") {
            return Ok(report(
                &result_of(result)?,
                &printer,
                false,
                false,
                args.max_output,
                timeout,
            ));
        }
        let stream = if line["stream"] == "stderr" {
            OutputStream::Stderr
        } else {
            OutputStream::Stdout
        };
        printer.emit(stream, &chunk_bytes(&line)?);
    }
    Err(CliError::Failure(
        "envrt: the service ended the execute stream without a result".into(),
    ))
}

pub(crate) fn chunk_bytes(line: &Value) -> Result<Vec<u8>, CliError> {
    base64::engine::general_purpose::STANDARD
        .decode(line["data"].as_str().unwrap_or_default())
        .map_err(|e| CliError::Failure(format!("envrt: the service sent output that is not base64: {e}")))
}

async fn spawn(server: &Server, args: crate::spawn::SpawnArgs) -> Result<u8, CliError> {
    let env = env_of(&args.env, &args.env_file)?;
    let timeout = parse_timeout(args.timeout.as_deref())?;
    let keep = args.keep.as_deref().map(crate::spawn::parse_size).transpose()?;
    let (lease_id, own) = match &args.lease {
        Some(id) => (id.clone(), false),
        None => {
            let environment = environment(&args.target)?;
            let none = crate::network::NetworkArgs::default();
            let lease = acquire(server, environment, LeasePolicy::Ephemeral, None, None, None, &none).await?;
            (lease.id, true)
        }
    };
    let mut body = json!({
        "argv": args.command,
        "env": env,
        "stdin": if args.stdin { "piped" } else { "null" },
    });
    if args.tty {
        let size = crate::spawn::terminal_size();
        body["tty"] = json!({ "rows": size.rows, "cols": size.cols });
    }
    if let Some(keep) = keep {
        body["keep"] = keep.into();
    }
    if let Some(cwd) = args.cwd {
        body["cwd"] = cwd.into();
    }
    if let Some(user) = args.user {
        body["user"] = user.into();
    }
    if let Some(timeout) = timeout {
        body["timeoutMs"] = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX).into();
    }
    if let Some(key) = args.idempotency_key {
        body["idempotencyKey"] = key.into();
    }
    let path = format!("{}/processes", lease_path(&lease_id));
    match server.json::<ProcessInfo>(Method::POST, &path, Some(&body)).await {
        Ok(info) => {
            if own {
                crate::say!("envrt: spawned on new lease {lease_id}");
            }
            crate::out!("{}", info.id);
            Ok(0)
        }
        Err(error) => {
            // A lease made for nothing is not left behind.
            if own {
                let release = format!("{}/release", lease_path(&lease_id));
                if let Err(e) = server.bytes(Method::POST, &release, Some(&json!({}))).await {
                    crate::say!("envrt: releasing lease {lease_id} failed: {e}");
                }
            }
            Err(error)
        }
    }
}

async fn ps(server: &Server, args: crate::ps::PsArgs) -> Result<u8, CliError> {
    let mut all: Vec<ProcessInfo> = Vec::new();
    let leases: Vec<String> = match &args.lease {
        Some(id) => vec![id.clone()],
        None => {
            let leases: Vec<Lease> = server.json(Method::GET, "/v1/leases", None).await?;
            leases
                .into_iter()
                .filter(|l| l.status == LeaseStatus::Active)
                .map(|l| l.id)
                .collect()
        }
    };
    for id in &leases {
        let path = format!("{}/processes", lease_path(id));
        match server.json::<Vec<ProcessInfo>>(Method::GET, &path, None).await {
            Ok(list) => all.extend(list),
            // Listing every lease: one whose driver has no process sessions holds none.
            Err(CliError::Service { kind, .. })
                if args.lease.is_none()
                    && (kind.ends_with("_unsupported")
                        || kind == "driver_not_registered"
                        || kind == "lease_expired") => {}
            Err(error) => return Err(error),
        }
    }
    crate::ps::print(&all, args.json)
}

async fn logs(server: &Server, args: crate::logs::LogsArgs) -> Result<u8, CliError> {
    let path = process_path(&args.process)?;
    let info: ProcessInfo = server.json(Method::GET, &path, None).await?;
    let mut query: Vec<(ProcessStream, u64)> = Vec::new();
    if let Some(offset) = args.from {
        for held in &info.streams {
            if args.stream.is_none_or(|s| s == held.stream) {
                query.push((held.stream, offset));
            }
        }
        if let Some(stream) = args.stream
            && !query.iter().any(|(s, _)| *s == stream)
        {
            query.push((stream, offset));
        }
    }
    // Without --follow: stop at what each stream had written by now.
    let ends: Vec<(ProcessStream, u64)> = info.streams.iter().map(|s| (s.stream, s.written)).collect();
    let mut cursor: Vec<(ProcessStream, u64)> = info
        .streams
        .iter()
        .map(|s| {
            let from = query.iter().find(|(q, _)| *q == s.stream).map(|(_, at)| *at);
            (s.stream, from.unwrap_or(s.dropped))
        })
        .collect();
    let done = |cursor: &[(ProcessStream, u64)]| {
        ends.iter()
            .all(|(s, end)| cursor.iter().find(|(c, _)| c == s).is_some_and(|(_, at)| at >= end))
    };
    if !args.follow && done(&cursor) {
        return Ok(0);
    }
    let query: Vec<String> = query.iter().map(|(s, at)| format!("{s}={at}")).collect();
    let mut lines: Lines = server
        .lines(Method::GET, &format!("{path}/output?{}", query.join("&")), None)
        .await?;
    while let Some(line) = lines.next().await? {
        if line.get("exit").is_some() {
            break;
        }
        let stream: ProcessStream = serde_json::from_value(line["stream"].clone())
            .map_err(|e| CliError::Failure(format!("envrt: the service sent an unknown stream: {e}")))?;
        let bytes = chunk_bytes(&line)?;
        if args.stream.is_none_or(|s| s == stream) {
            crate::logs::emit(stream, &bytes);
        }
        let offset = line["offset"].as_u64().unwrap_or_default();
        if let Some(at) = cursor.iter_mut().find(|(s, _)| *s == stream) {
            at.1 = offset + bytes.len() as u64;
        }
        if !args.follow && done(&cursor) {
            break;
        }
    }
    Ok(0)
}

async fn wait(server: &Server, args: crate::signal::WaitArgs) -> Result<u8, CliError> {
    let timeout = parse_timeout(args.timeout.as_deref())?;
    let mut path = format!("{}/wait", process_path(&args.process)?);
    if let Some(timeout) = timeout {
        path.push_str(&format!("?timeoutMs={}", timeout.as_millis()));
    }
    let status: ProcessStatus = server.json(Method::GET, &path, None).await?;
    if status == ProcessStatus::Lost {
        return Err(CliError::Failure(format!(
            "envrt: process {} was lost: its supervisor no longer knows it",
            args.process
        )));
    }
    Ok(crate::signal::code_of(status))
}

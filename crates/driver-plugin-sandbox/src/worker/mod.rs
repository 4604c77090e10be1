//! The reference plugin worker (`envrt-sandbox-worker`): every environment verb of
//! `plugin-protocol.md`, duplex channels, file sync and both protocol extensions
//! (`duplexChannelCloseInput`, `environmentExecuteBinary`), with every command run inside
//! a `bwrap` sandbox.
//!
//! # Usage
//!
//! ```text
//! envrt-sandbox-worker [--root DIR] [--bwrap PATH] [--kill-grace-ms N] [--max-output-bytes N] [--no-duplex]
//! ```
//!
//! - `--root DIR` (or `ENVRT_SANDBOX_ROOT`): where lease directories live, one per lease
//!   (`sbx-<uuid>`); default `$TMPDIR/envrt-sandbox-leases`. Leases survive a worker
//!   restart (resume finds them by id).
//! - `--bwrap PATH` (or `ENVRT_BWRAP`): the `bwrap` binary; default: `bwrap` on `PATH`.
//! - `--kill-grace-ms N`: time between SIGTERM and SIGKILL when a timeout, a stop or a
//!   close ends a sandbox (default 1000).
//! - `--max-output-bytes N`: per-stream capture cap of execute (default 16 MiB; a request
//!   may lower or raise it with the extension param `maxOutputBytes`).
//! - `--no-duplex`: offer no duplex channels: the `duplexChannel*` verbs are neither
//!   advertised nor served (`-32601`), so the host refuses them before calling.
//!
//! Hardening flags (not in the short usage line; defaults in the `policy` module):
//! - `--sandbox-uid N`, `--sandbox-gid N` (worker running as root only): the host user
//!   `bwrap` and the command run as (default 65534 / 65534); `--sandbox-uid 0
//!   --sandbox-gid 0` restores running sandboxes as the host's root (unsafe);
//! - `--tmp-size BYTES` (256 MiB), `--shm-size BYTES` (64 MiB): tmpfs sizes of `/tmp` and
//!   `/dev/shm`;
//! - `--max-processes N` (1024) and `--max-memory BYTES` (8 GiB, address space per
//!   process): the command's `RLIMIT_NPROC` and `RLIMIT_AS`, 0 for none;
//! - `--max-line-bytes N` (64 MiB): the longest request line read; a longer one is
//!   dropped and answered `-32600` with `id: null` (the host refuses such requests before
//!   sending them, see `SandboxOptions::max_request_bytes`).
//!
//! Extension notification: `envrt.cancel {id}` from the host (it gave up on request
//! `id`) stops that request's command as a timeout would; the answer still follows.
//!
//! At start the worker checks that `bwrap` exists and can build a sandbox; if not it
//! prints why on stderr (naming `apt-get install bubblewrap` when it is missing) and exits
//! with status 2 before reading any request.
//!
//! # Commands
//!
//! Each command runs in its own `bwrap` sandbox (see the `sandbox` module for the exact
//! layout: read-only system dirs, a minimal `/etc`, private `/tmp`, `/proc` and `/dev`,
//! no network, own pid namespace, no capabilities) with the lease directory as the only
//! writable place at `/workspace`. Inside, the worker binary itself (bound read-only at
//! `/.envrt-init`, run with the hidden first argument `--sandbox-init`) starts the program
//! and reports on a status pipe whether it exited or was killed by a signal, so results
//! carry `signal` exactly (bwrap alone folds a signal death into exit code 128+n). The
//! environment is only what the request sets, plus `PATH` (default
//! `/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin`) and `PWD` (set by bwrap).
//! A missing program is exit code 127 with `PROGRAM: command not found` on stderr.
//! Timeout, stop and close send SIGTERM to every process of the sandbox, then after the
//! grace SIGKILL its pid namespace; the reply is sent only once no process of it is left.
//!
//! Duplex channels carry the command's stdout; its stderr is passed through to the
//! worker's stderr (which the host logs), never mixed into the channel.
//!
//! # Protocol
//!
//! Newline-delimited JSON-RPC 2.0 on stdin/stdout; stderr carries logs only. Requests are
//! served concurrently (replies may come out of order), except that duplex writes and
//! half-closes are queued in arrival order. Notifications sent while a request runs carry
//! its `paperclipInvocation.id` as `paperclipInvocationId`, as the SDK does. The worker
//! exits when stdin closes (the host is gone) or after answering `shutdown`, and kills
//! every sandbox first; each `bwrap` also runs with `--die-with-parent`.
//!
//! # Leases
//!
//! Acquire creates the lease directory, seen as `/workspace` inside the sandbox. Release
//! stops the lease's running work and keeps its files (`state: "stopped"`, resumable);
//! destroy also deletes them (`state: "destroyed"`). Both are idempotent; an unknown or
//! malformed id gives `null`. Resume of a lease whose directory is gone answers
//! `providerLeaseId: null`.
//!
//! Acquire honours `requestedExpiresAt` (RFC 3339) exactly and returns it as `expiresAt`:
//! at that time the lease's sandboxes are killed and its directory removed, by this worker
//! or, should it be gone, by the next one started over the same root (see the `expiry`
//! module). A malformed `requestedExpiresAt` is refused as invalid params.
//!
//! Templates (`environmentCaptureTemplate`, `environmentDeleteTemplate`, and the extension
//! `environmentListTemplates`) snapshot a lease's workspace; acquire with
//! `sourceTemplateRef` starts from one (see the `template` module).

mod args;
mod duplex;
mod exec;
mod expiry;
mod init;
mod lease;
mod policy;
mod rpc;
mod sandbox;
mod template;
mod view;

pub use sandbox::{INIT_PATH, SANDBOX_PATH, bwrap_options};
mod sync;

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use envrt_runtime_core::sync::confine_to_workspace;
use envrt_runtime_core::{DriverError, Timestamp};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use args::{Config, parse_args};
use duplex::Channels;
use exec::Encoding;
use lease::Leases;
use rpc::{Incoming, Line, Outbound, RpcError, code};
use sandbox::{Sandbox, WORKSPACE};

/// Largest request line accepted (a longer one is dropped and answered with an error).
const MAX_LINE: usize = 64 * 1024 * 1024;

/// Every method the worker implements, as advertised in `supportedMethods`.
const SUPPORTED_METHODS: &[&str] = &[
    "health",
    "shutdown",
    "environmentValidateConfig",
    "environmentProbe",
    "environmentAcquireLease",
    "environmentResumeLease",
    "environmentReleaseLease",
    "environmentDestroyLease",
    "environmentRealizeWorkspace",
    "environmentExecute",
    "environmentExecuteBinary",
    "environmentSyncIn",
    "environmentSyncOut",
    "duplexChannelOpen",
    "duplexChannelWrite",
    "duplexChannelStop",
    "duplexChannelClose",
    "duplexChannelCloseInput",
    template::CAPTURE,
    template::DELETE,
    template::LIST,
    template::SETUP_START,
    template::SETUP_GET,
    template::SETUP_CANCEL,
];

/// Methods an SDK worker knows but this worker does not implement: answered `-32004`
/// `"{method} is not implemented by this plugin"`, as an SDK worker without the hook does.
const KNOWN_NOT_IMPLEMENTED: &[&str] = &[
    "validateConfig",
    "environmentRunnerIngressEndpoint",
    "loginPtyOpen",
    "loginPtyInput",
    "loginPtyStop",
    "loginPtyClose",
];

/// Runs the worker until stdin closes or `shutdown`; the exit code of the process.
pub fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some(init::INIT_FLAG) {
        return init::run(&args[1..]);
    }
    let mut config = match parse_args(args.into_iter()) {
        Ok(c) => c,
        Err(message) => {
            eprintln!("{message}");
            return ExitCode::from(2);
        }
    };
    if config.policy.identity == Some((0, 0)) {
        // uid 0 in the sandbox is the host's root: the old, unsafe layout, on request only
        config.policy.identity = None;
    }
    let leases = match Leases::open(config.root.clone(), config.policy.clone()) {
        Ok(l) => l,
        Err(e) => {
            eprintln!(
                "envrt-sandbox-worker: cannot create the lease root {}: {e}",
                config.root.display()
            );
            return ExitCode::from(2);
        }
    };
    // A sync walk in a lease holds one descriptor per directory level: soft limit up to
    // the hard one (best effort; the depth bound keeps the walk below it).
    {
        use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
        let nofile = getrlimit(Resource::Nofile);
        let _ = setrlimit(
            Resource::Nofile,
            Rlimit {
                current: nofile.maximum,
                maximum: nofile.maximum,
            },
        );
    }
    // before any thread starts (it may enter a private mount namespace)
    let view = std::env::current_exe()
        .map_err(|e| format!("envrt-sandbox-worker: cannot find its own binary: {e}"))
        .and_then(|exe| view::View::prepare(&leases.root, &exe, config.policy.identity));
    let view = match view {
        Ok(v) => v,
        Err(message) => {
            eprintln!("{message}");
            return ExitCode::from(2);
        }
    };
    let sandbox = match Sandbox::detect(config.bwrap.clone(), config.grace, config.policy.clone(), view.clone()) {
        Ok(s) => s,
        Err(message) => {
            view.remove();
            eprintln!("{message}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("envrt-sandbox-worker: cannot start the async runtime: {e}");
            return ExitCode::from(2);
        }
    };
    let sandbox = Arc::new(sandbox);
    runtime.block_on(serve(Arc::clone(&sandbox), leases, &config));
    sandbox.kill_all();
    view.remove();
    runtime.shutdown_timeout(Duration::from_millis(100));
    ExitCode::SUCCESS
}

struct Worker {
    sandbox: Arc<Sandbox>,
    leases: Leases,
    channels: Arc<Channels>,
    initialized: AtomicBool,
    max_output: usize,
    no_duplex: bool,
    out: Outbound,
    /// Pending lease expiries.
    expiries: expiry::Expiries,
    /// Running requests the host may cancel (`envrt.cancel`), by request id.
    cancels: std::sync::Mutex<std::collections::HashMap<String, tokio::sync::oneshot::Sender<()>>>,
}

impl Worker {
    /// The methods this worker serves and advertises.
    fn serves(&self, method: &str) -> bool {
        !(self.no_duplex && method.starts_with("duplexChannel"))
    }
}

async fn serve(sandbox: Arc<Sandbox>, leases: Leases, config: &Config) {
    let (max_output, no_duplex) = (config.max_output, config.no_duplex);
    eprintln!(
        "envrt-sandbox-worker: ready ({}, leases under {})",
        sandbox.version,
        leases.root.display()
    );
    let (out, writer) = Outbound::start();
    let worker = Arc::new(Worker {
        sandbox,
        leases,
        channels: Arc::default(),
        initialized: AtomicBool::new(false),
        max_output,
        no_duplex,
        out: out.clone(),
        cancels: Default::default(),
        expiries: Default::default(),
    });
    worker.expiries.rearm(&worker.sandbox, &worker.leases.root);
    let mut stdin = tokio::io::BufReader::with_capacity(64 * 1024, tokio::io::stdin());
    loop {
        let line = match rpc::read_line(&mut stdin, config.max_line).await {
            Ok(Line::Eof) | Err(_) => break,
            Ok(Line::Rejected(message, id)) => {
                let code = if message.starts_with("Parse") {
                    code::PARSE_ERROR
                } else {
                    code::INVALID_REQUEST
                };
                out.respond(id.unwrap_or(Value::Null), Err(RpcError { code, message }))
                    .await;
                continue;
            }
            Ok(Line::Text(text)) => text,
        };
        if line.trim().is_empty() {
            continue;
        }
        match rpc::classify(&line) {
            Incoming::Ignored => {}
            Incoming::Cancel(id) => {
                let cancel = worker
                    .cancels
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .remove(&id.to_string());
                if let Some(cancel) = cancel {
                    let _ = cancel.send(());
                }
            }
            Incoming::Invalid(error) => out.respond(Value::Null, Err(error)).await,
            Incoming::Request {
                id,
                method,
                params,
                invocation,
            } => {
                if method == "shutdown" {
                    out.respond(id, Ok(Value::Null)).await;
                    break;
                }
                dispatch(&worker, id, method, params, invocation).await;
            }
        }
    }
    // Stop every sandbox before the queue closes, then let the writer flush what is queued.
    worker.sandbox.kill_all();
    drop(worker);
    drop(out);
    let _ = tokio::time::timeout(Duration::from_secs(2), writer).await;
}

fn parse<T: DeserializeOwned>(method: &str, params: Value) -> Result<T, RpcError> {
    let params = if params.is_null() { json!({}) } else { params };
    serde_json::from_value(params).map_err(|e| RpcError::invalid_params(format!("Invalid params for {method}: {e}")))
}

/// Answers one request. Ordered verbs (duplex write, half-close) are queued here, before
/// the next line is read; everything else runs on its own task.
async fn dispatch(worker: &Arc<Worker>, id: Value, method: String, params: Value, invocation: Option<String>) {
    if !worker.serves(&method) {
        let error = RpcError {
            code: code::METHOD_NOT_FOUND,
            message: format!("Unknown method: {method}"),
        };
        worker.out.respond(id, Err(error)).await;
        return;
    }
    let queued = match method.as_str() {
        "duplexChannelWrite" => Some(parse(&method, params.clone()).and_then(|p| worker.channels.write(p))),
        "duplexChannelCloseInput" => Some(parse(&method, params.clone()).and_then(|p| worker.channels.close_input(p))),
        "initialize" => {
            let result = if worker.initialized.swap(true, Ordering::SeqCst) {
                Err(RpcError::worker("Worker already initialized"))
            } else {
                let methods: Vec<&str> = SUPPORTED_METHODS.iter().copied().filter(|m| worker.serves(m)).collect();
                Ok(json!({"ok": true, "supportedMethods": methods}))
            };
            worker.out.respond(id, result).await;
            return;
        }
        _ => None,
    };
    let worker = Arc::clone(worker);
    match queued {
        Some(Ok(pending)) => {
            tokio::spawn(async move {
                let result = pending
                    .await
                    .unwrap_or_else(|_| Err(RpcError::worker(DriverError::ChannelClosed.to_string())));
                worker.out.respond(id, result.map(|()| Value::Null)).await;
            });
        }
        Some(Err(error)) => worker.out.respond(id, Err(error)).await,
        None => {
            let key = id.to_string();
            let (cancel_tx, cancel_rx) = tokio::sync::oneshot::channel();
            worker
                .cancels
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(key.clone(), cancel_tx);
            tokio::spawn(async move {
                let result = handle(&worker, &method, params, invocation.as_deref(), cancel_rx).await;
                worker.cancels.lock().unwrap_or_else(|p| p.into_inner()).remove(&key);
                worker.out.respond(id, result).await;
            });
        }
    }
}

fn lease_dir(worker: &Worker, lease: &exec::LeaseRef) -> Result<PathBuf, RpcError> {
    Ok(worker.leases.existing(lease.id()?)?)
}

#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct LeaseIdParams {
    provider_lease_id: Option<String>,
}

#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct AcquireParams {
    requested_expires_at: Option<String>,
    #[serde(default)]
    source_template_ref: Option<String>,
}

#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct RealizeParams {
    lease: exec::LeaseRef,
    #[serde(default)]
    workspace: RealizeWorkspace,
}

#[derive(serde::Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct RealizeWorkspace {
    remote_path: Option<String>,
}

#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct ValidateParams {
    #[serde(default)]
    config: Value,
}

fn lease_metadata() -> Value {
    json!({"remoteCwd": WORKSPACE, "sandbox": "bwrap"})
}

async fn handle(
    worker: &Worker,
    method: &str,
    params: Value,
    invocation: Option<&str>,
    cancel: tokio::sync::oneshot::Receiver<()>,
) -> Result<Value, RpcError> {
    match method {
        "health" => Ok(json!({
            "status": "ok",
            "details": {
                "leasesRoot": worker.leases.root.display().to_string(),
                "bwrap": worker.sandbox.version,
                "openChannels": worker.channels.count(),
                "runningSandboxes": worker.sandbox.live_count(),
            }
        })),
        "environmentValidateConfig" => {
            let p: ValidateParams = parse(method, params)?;
            match p.config {
                Value::Object(_) | Value::Null => {
                    Ok(json!({"ok": true, "normalizedConfig": p.config.as_object().cloned().unwrap_or_default()}))
                }
                _ => Ok(json!({"ok": false, "errors": ["config must be a JSON object"]})),
            }
        }
        "environmentProbe" => Ok(json!({
            "ok": true,
            "summary": format!("bubblewrap sandbox ready ({}, leases under {})", worker.sandbox.version, worker.leases.root.display()),
            "metadata": {"root": worker.leases.root.display().to_string(), "bwrap": worker.sandbox.version},
        })),
        "environmentAcquireLease" => {
            let p: AcquireParams = parse(method, params.clone())?;
            let requested = match p.requested_expires_at.as_deref() {
                None => None,
                Some(text) => Some(Timestamp::parse_rfc3339(text).ok_or_else(|| {
                    RpcError::invalid_params(format!("requestedExpiresAt {text:?} is not an RFC 3339 time"))
                })?),
            };
            let (id, dir) = worker.leases.create()?;
            if let Some(reference) = &p.source_template_ref
                && let Err(e) = template::seed(worker, &id, &dir, &params, reference).await
            {
                let _ = std::fs::remove_dir_all(&dir);
                return Err(e);
            }
            let Some(at) = requested else {
                return Ok(json!({"providerLeaseId": id, "metadata": lease_metadata()}));
            };
            if let Err(e) = worker.expiries.watch(&worker.sandbox, &dir, at) {
                let _ = std::fs::remove_dir_all(&dir);
                return Err(e.into());
            }
            Ok(json!({"providerLeaseId": id, "metadata": lease_metadata(), "expiresAt": at.to_rfc3339()}))
        }
        "environmentResumeLease" => {
            let p: LeaseIdParams = parse(method, params)?;
            match p.provider_lease_id.as_deref().map(|id| worker.leases.existing(id)) {
                Some(Ok(dir)) => {
                    // a lease made by an older worker (files owned by root) becomes the
                    // sandbox user's, so its workspace stays writable
                    let leases = worker.leases.clone();
                    tokio::task::spawn_blocking(move || leases.adopt(&dir))
                        .await
                        .map_err(|e| DriverError::other(format!("adopting the lease failed: {e}")))??;
                    Ok(json!({"providerLeaseId": p.provider_lease_id, "metadata": lease_metadata()}))
                }
                _ => Ok(json!({"providerLeaseId": null, "metadata": {"gone": true}})),
            }
        }
        "environmentReleaseLease" | "environmentDestroyLease" => {
            let p: LeaseIdParams = parse(method, params)?;
            let Some(id) = p.provider_lease_id else {
                return Ok(Value::Null);
            };
            let Some(dir) = worker.leases.path_of(&id) else {
                return Ok(Value::Null);
            };
            // Every sandbox over the lease directory is killed: its calls end (killed) and
            // its channels send their exit frames. Destroy also removes the directory.
            worker.expiries.forget(&dir);
            worker.sandbox.kill_lease(&dir);
            if method == "environmentDestroyLease" {
                match std::fs::remove_dir_all(&dir) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => {
                        return Err(DriverError::io(format!("Removing lease directory {}", dir.display()), e).into());
                    }
                }
                Ok(json!({"providerLeaseId": id, "state": "destroyed"}))
            } else {
                Ok(json!({"providerLeaseId": id, "state": "stopped"}))
            }
        }
        "environmentRealizeWorkspace" => {
            let p: RealizeParams = parse(method, params)?;
            let dir = lease_dir(worker, &p.lease)?;
            let wanted = p.workspace.remote_path.as_deref().unwrap_or(WORKSPACE);
            confine_to_workspace(WORKSPACE, wanted)?;
            let resolved = lease::resolve(&dir, wanted, true)?;
            // Created one component at a time without following links, so a link swapped in
            // by a running command cannot make the worker create directories elsewhere.
            lease::Beneath::open(
                &dir,
                &lease::components_below_workspace(&resolved.sandbox),
                Some(&worker.leases.policy),
            )
            .map_err(|e| lease::beneath_error(wanted, e))?;
            Ok(json!({"cwd": resolved.sandbox, "metadata": {"remoteCwd": resolved.sandbox}}))
        }
        "environmentExecute" | "environmentExecuteBinary" => {
            let p: exec::ExecuteParams = parse(method, params)?;
            let dir = lease_dir(worker, &p.lease)?;
            let encoding = if method == "environmentExecute" {
                Encoding::Text
            } else {
                Encoding::Base64
            };
            exec::execute(
                &worker.sandbox,
                &dir,
                p,
                encoding,
                worker.max_output,
                &worker.out,
                invocation,
                cancel,
            )
            .await
        }
        "environmentSyncIn" | "environmentSyncOut" => {
            let p: sync::SyncParams = parse(method, params)?;
            let dir = lease_dir(worker, &p.lease)?;
            let direction = if method == "environmentSyncIn" {
                sync::Direction::In
            } else {
                sync::Direction::Out
            };
            Ok(sync::sync(&worker.sandbox, &dir, p, direction).await?)
        }
        "duplexChannelOpen" => {
            let p: duplex::OpenParams = parse(method, params)?;
            let dir = worker.leases.existing(&p.provider_lease_id)?;
            worker.channels.open(
                Arc::clone(&worker.sandbox),
                dir,
                p,
                worker.out.clone(),
                invocation.map(str::to_owned),
            )
        }
        "duplexChannelStop" => worker.channels.stop(parse(method, params)?),
        "duplexChannelClose" => Ok(worker.channels.close(parse(method, params)?)),
        m if template::handles(m) => template::handle(worker, method, params).await,
        other if KNOWN_NOT_IMPLEMENTED.contains(&other) => Err(RpcError {
            code: code::METHOD_NOT_IMPLEMENTED,
            message: format!("{other} is not implemented by this plugin"),
        }),
        other => Err(RpcError {
            code: code::METHOD_NOT_FOUND,
            message: format!("Unknown method: {other}"),
        }),
    }
}

//! The reference plugin worker (`envrt-sandbox-worker`): every environment verb of
//! `plugin-protocol.md`, duplex channels, file sync and envrt's protocol extensions
//! (`duplexChannelCloseInput`, `environmentExecuteBinary`, `envrtStartProcessSupervisor`,
//! ...), with every command run inside a `bwrap` sandbox.
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
//! - `--sandbox-uids BASE:COUNT` (worker running as root only; default
//!   `2100000000:65536`): the range of host uids the leases' sandboxes run as, one uid
//!   (gid the same number) per lease, so no two leases share a host user, a process limit
//!   or `/proc` access (see the `uids` module); inside, the command is uid/gid 65534. A
//!   range holding uid 0, 65534, 65535 or 4294967295, or an id of `/etc/passwd` or
//!   `/etc/group`, is refused at start (exit status 2, the reason on stderr); acquire
//!   with every uid of the range held is refused with
//!   `No sandbox uid is free: all {count} uids from {base} are held by leases.`;
//! - `--sandbox-uid N`, `--sandbox-gid N` (worker running as root only; not with
//!   `--sandbox-uids`): one fixed host user for every lease instead (either alone takes
//!   65534 for the other); `--sandbox-uid 0 --sandbox-gid 0` restores running sandboxes
//!   as the host's root (unsafe);
//! - `--fresh-tmp`: a fresh tmpfs `/tmp` for every command instead of the lease's own
//!   `/tmp`, which otherwise lives beside the lease directory (`.tmp-<lease id>`) and is
//!   kept across the lease's commands;
//! - `--tmp-size BYTES` (256 MiB, with `--fresh-tmp`), `--shm-size BYTES` (64 MiB): tmpfs
//!   sizes of `/tmp` and `/dev/shm`;
//! - `--max-processes N` (1024) and `--max-memory BYTES` (8 GiB, address space per
//!   process): the command's `RLIMIT_NPROC` and `RLIMIT_AS`, 0 for none;
//! - `--max-line-bytes N` (64 MiB): the longest request line read; a longer one is
//!   dropped and answered `-32600` with `id: null` (the host refuses such requests before
//!   sending them, see `SandboxOptions::max_request_bytes`);
//! - `--no-data-plane`: decline the host's `envrt.dataPlane` offer, so duplex bytes stay
//!   on the JSON frames (see the `dataplane` module).
//!
//! Extension notification: `envrt.cancel {id}` from the host (it gave up on request
//! `id`) stops that request's command as a timeout would; the answer still follows.
//!
//! Extension `envrt.dataPlane`: when `initialize` offers it (naming a socket the worker
//! inherited), the worker advertises it and every duplex channel's bytes move over that
//! socket in binary frames with credit-based flow control (the `dataplane` module).
//!
//! Extension `envrtStartProcessSupervisor`: the lease's process supervisor
//! (`envrt-agent`, which holds the lease's persistent processes) started in a long-lived
//! sandbox of the lease, built as a command's, listening in a directory the host made (see
//! the `supervisor` module). Advertised only when the worker finds `envrt-agent`
//! (`ENVRT_AGENT`, beside its own binary or one directory up, `PATH`); the supervisor
//! lives until the lease is released, destroyed or expires, or the worker ends.
//!
//! At start the worker checks that `bwrap` exists and can build a sandbox; if not it
//! prints why on stderr (naming `apt-get install bubblewrap` when it is missing) and exits
//! with status 2 before reading any request.
//!
//! # Commands
//!
//! Each command runs in its own `bwrap` sandbox (see the `sandbox` module for the exact
//! layout: read-only system dirs, a minimal `/etc`, private `/proc` and `/dev`,
//! no network, own pid namespace, no capabilities) with the lease directory as the
//! writable place at `/workspace` and the lease's own `/tmp` and `/var/tmp` beside it (all
//! kept across the lease's commands; `/etc` holds the host's `os-release`). `cwd` may be any absolute directory of the sandbox (the sandbox
//! is the boundary: `/tmp`, `/usr/bin`); one that does not exist there is refused with
//! `cwd "{cwd}" is not a directory in the environment.` (the one text of every driver). Sync takes any absolute path of the
//! sandbox too (marker `envrtFilesAnywhere`): inside `/workspace` the worker copies from
//! the host side (links read in sandbox terms), anywhere else `cp` copies inside a sandbox
//! of the lease (see the `sync_sandboxed` module); nothing else of the host is ever
//! touched for a request. With the extension param `envrtUser` (`UID`, `UID:GID`, `NAME`
//! or `NAME:GROUP`, names as the sandbox's read-only `/etc/passwd` and `/etc/group` know
//! them) the command runs as that uid and gid inside the sandbox's user namespace
//! (`bwrap --uid --gid`; outside, it is still the sandbox's unprivileged host user).
//! Inside, the worker binary itself (bound read-only at
//! `/.envrt-init`, run with the hidden first argument `--sandbox-init`) starts the program
//! and reports on a status pipe whether it exited or was killed by a signal, so results
//! carry `signal` exactly (bwrap alone folds a signal death into exit code 128+n). The
//! environment is only what the request sets, plus `PATH` (default
//! `/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin`) and `PWD` (set by bwrap).
//! A missing program is exit code 127 with `envrt: command not found: PROGRAM` on stderr.
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
//! every sandbox first; each `bwrap` also runs with `--die-with-parent`, but for the
//! lease's process supervisor, which outlives the worker (see `supervisor`).
//!
//! # Leases
//!
//! Acquire creates the lease directory, seen as `/workspace` inside the sandbox, and (a
//! worker running as root) claims the lease's own host uid, recorded as the directory's
//! owner (see the `uids` module). Release stops the lease's running work, gives the uid
//! back and keeps its files (`state: "stopped"`, resumable: resume claims a uid again);
//! destroy also deletes them (`state: "destroyed"`). Both are idempotent; an unknown or
//! malformed id gives `null`. Resume of a lease whose directory is gone answers
//! `providerLeaseId: null`.
//!
//! Acquire honours `requestedExpiresAt` (RFC 3339) exactly and returns it as `expiresAt`:
//! at that time the lease's sandboxes are killed and its directory removed, by this worker
//! or, should it be gone, by the next one started over the same root (see the `expiry`
//! module). A malformed `requestedExpiresAt` is refused as invalid params.
//!
//! Templates (`environmentCaptureTemplate`, `environmentDeleteTemplate`, the extension
//! `environmentListTemplates`) snapshot a lease's workspace; acquire with
//! `sourceTemplateRef` starts from one; interactive setup (`environmentStartInteractiveSetup`
//! / `Get` / `Cancel`) serves a setup lease (see the `template` module).

mod args;
mod dataplane;
mod duplex;
mod egress;
mod exec;
mod expiry;
mod fds;
mod ingress;
mod init;
mod inventory;
mod lease;
mod lease_tmp;
mod lifecycle;
mod policy;
mod rpc;
mod sandbox;
mod served;
mod supervisor;
mod template;
mod uids;
mod user;
mod view;

pub use sandbox::{INIT_PATH, SANDBOX_PATH, bwrap_options};
mod staging;
mod sync;
mod sync_file;
mod sync_sandboxed;

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use envrt_driver_api::DriverError;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use args::{Config, parse_args};
use duplex::Channels;
use envrt_plugin_protocol::codes as code;
use envrt_plugin_protocol::handshake::{HealthResult, InitializeResult};
use envrt_plugin_protocol::{HostMessage, RequestId, methods, to_value};
use exec::Encoding;
use lease::Leases;
use rpc::{Line, Outbound, RpcError};
use sandbox::Sandbox;
use served::{SUPPORTED_METHODS, known_not_implemented};

/// Largest request line accepted (a longer one is dropped and answered with an error).
const MAX_LINE: usize = 64 * 1024 * 1024;

/// Runs the worker until stdin closes or `shutdown`; the exit code of the process.
pub fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some(init::INIT_FLAG) {
        return init::run(&args[1..]);
    }
    if args.first().map(String::as_str) == Some(egress::EGRESS_FLAG) {
        return egress::run_role(&args[1..]);
    }
    let mut config = match parse_args(args.into_iter()) {
        Ok(c) => c,
        Err(message) => {
            eprintln!("{message}");
            return ExitCode::from(2);
        }
    };
    dataplane::adopt_inherited_sockets(!config.no_data_plane);
    if config.policy.ids == uids::Ids::Fixed(0, 0) {
        // uid 0 in the sandbox is the host's root: the old, unsafe layout, on request only
        config.policy.ids = uids::Ids::Own;
    }
    let read = |file: &str| std::fs::read_to_string(file).unwrap_or_default();
    if let Err(message) = config.policy.ids.check(&read("/etc/passwd"), &read("/etc/group")) {
        eprintln!("envrt-sandbox-worker: {message}");
        return ExitCode::from(2);
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
        .and_then(|exe| view::View::prepare(&leases.root, &exe, config.policy.ids.representative()));
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
    // The lease's process supervisor, found as every driver finds it (beside this binary
    // first); without one the extension is not advertised.
    let agent = match envrt_driver_agent::locate() {
        Ok(path) => Some(path),
        Err(why) => {
            eprintln!("envrt-sandbox-worker: no process supervisor, so no persistent process sessions: {why}");
            None
        }
    };
    let sandbox = Arc::new(sandbox);
    runtime.block_on(serve(Arc::clone(&sandbox), leases, agent, &config));
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
    /// The process supervisor's binary (`envrt-agent`), when found.
    agent: Option<PathBuf>,
    /// The leases' running supervisors.
    supervisors: supervisor::Supervisors,
    /// The leases' runner ingress endpoints.
    ingresses: ingress::Ingresses,
}

impl Worker {
    /// The methods this worker serves and advertises.
    fn serves(&self, method: &str) -> bool {
        !(self.no_duplex && methods::is_duplex(method))
            && (!matches!(method, methods::START_PROCESS_SUPERVISOR | methods::START_EGRESS) || self.agent.is_some())
    }
}

async fn serve(sandbox: Arc<Sandbox>, leases: Leases, agent: Option<PathBuf>, config: &Config) {
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
        agent,
        supervisors: Default::default(),
        ingresses: Default::default(),
    });
    worker.expiries.rearm(&worker.sandbox, &worker.leases.root);
    // a sync in a killed worker was staging beside the lease directories
    staging::sweep_dead(&worker.leases.root);
    let mut stdin = rpc::line_reader(tokio::io::stdin(), config.max_line);
    loop {
        let line = match rpc::read_line(&mut stdin, config.max_line).await {
            Ok(Line::Eof) | Err(_) => break,
            Ok(Line::Rejected(message, id)) => {
                let code = if message.starts_with("Parse") {
                    code::PARSE_ERROR
                } else {
                    code::INVALID_REQUEST
                };
                out.respond(id.as_ref(), Err(RpcError::new(code, message))).await;
                continue;
            }
            Ok(Line::Text(text)) => text,
        };
        if line.trim().is_empty() {
            continue;
        }
        match HostMessage::classify(&line) {
            HostMessage::Ignored => {}
            HostMessage::Cancel(id) => {
                let cancel = worker
                    .cancels
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .remove(&id.to_string());
                if let Some(cancel) = cancel {
                    let _ = cancel.send(());
                }
            }
            HostMessage::Invalid(error) => {
                let error = RpcError::new(error.code, error.message);
                out.respond(None, Err(error)).await;
            }
            HostMessage::Request {
                id,
                method,
                params,
                invocation,
            } => {
                if method == methods::SHUTDOWN {
                    out.respond(Some(&id), Ok(Value::Null)).await;
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
async fn dispatch(worker: &Arc<Worker>, id: RequestId, method: String, params: Value, invocation: Option<String>) {
    if !worker.serves(&method) {
        let error = RpcError::new(code::METHOD_NOT_FOUND, format!("Unknown method: {method}"));
        worker.out.respond(Some(&id), Err(error)).await;
        return;
    }
    let queued = match method.as_str() {
        methods::DUPLEX_WRITE => Some(parse(&method, params.clone()).and_then(|p| worker.channels.write(p))),
        methods::DUPLEX_CLOSE_INPUT => {
            Some(parse(&method, params.clone()).and_then(|p| worker.channels.close_input(p)))
        }
        methods::INITIALIZE => {
            let result = if worker.initialized.swap(true, Ordering::SeqCst) {
                Err(RpcError::worker("Worker already initialized"))
            } else {
                let mut methods: Vec<&str> = SUPPORTED_METHODS
                    .iter()
                    .copied()
                    .filter(|m| worker.advertises(m))
                    .collect();
                if !worker.no_duplex && dataplane::accept(&params, &worker.channels) {
                    methods.push(envrt_plugin_protocol::dataplane::EXTENSION);
                }
                let supported_methods = methods.into_iter().map(str::to_owned).collect();
                Ok(to_value(&InitializeResult {
                    ok: true,
                    supported_methods,
                }))
            };
            worker.out.respond(Some(&id), result).await;
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
                    .unwrap_or_else(|_| Err(RpcError::from(DriverError::ChannelClosed)));
                worker.out.respond(Some(&id), result.map(|()| Value::Null)).await;
            });
        }
        Some(Err(error)) => worker.out.respond(Some(&id), Err(error)).await,
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
                worker.out.respond(Some(&id), result).await;
            });
        }
    }
}

fn lease_dir(worker: &Worker, lease: &exec::LeaseRef) -> Result<PathBuf, RpcError> {
    Ok(worker.leases.existing(exec::lease_id(lease)?)?)
}

async fn handle(
    worker: &Worker,
    method: &str,
    params: Value,
    invocation: Option<&str>,
    cancel: tokio::sync::oneshot::Receiver<()>,
) -> Result<Value, RpcError> {
    match method {
        methods::HEALTH => Ok(to_value(&HealthResult {
            status: "ok".into(),
            details: Some(json!({
                "leasesRoot": worker.leases.root.display().to_string(),
                "bwrap": worker.sandbox.version,
                "openChannels": worker.channels.count(),
                "runningSandboxes": worker.sandbox.live_count(),
            })),
        })),
        methods::VALIDATE_CONFIG => lifecycle::validate(params),
        methods::PROBE => Ok(lifecycle::probe(worker)),
        methods::ACQUIRE_LEASE => template::acquire(worker, params).await,
        methods::RESUME_LEASE => lifecycle::resume(worker, params).await,
        methods::RELEASE_LEASE | methods::DESTROY_LEASE => lifecycle::end(worker, method, params),
        methods::REALIZE_WORKSPACE => lifecycle::realize(worker, params),
        methods::EXECUTE | methods::EXECUTE_BINARY => {
            let p: exec::ExecuteParams = parse(method, params)?;
            let dir = lease_dir(worker, &p.lease)?;
            let encoding = if method == methods::EXECUTE {
                Encoding::Text
            } else {
                Encoding::Base64
            };
            let stdin = match p.envrt_stdin_route {
                Some(route) => Some(
                    worker
                        .channels
                        .plane
                        .get()
                        .and_then(|plane| plane.take_stdin(route))
                        .ok_or_else(|| {
                            RpcError::invalid_params(format!(
                                "envrtStdinRoute {route} is not an unused stdin route of the data plane"
                            ))
                        })?,
                ),
                None => None,
            };
            exec::execute(
                &worker.sandbox,
                &dir,
                p,
                (encoding, stdin),
                worker.max_output,
                &worker.out,
                invocation,
                cancel,
            )
            .await
        }
        methods::SYNC_IN | methods::SYNC_OUT => {
            let p: sync::SyncParams = parse(method, params)?;
            let dir = lease_dir(worker, &p.lease)?;
            let direction = if method == methods::SYNC_IN {
                sync::Direction::In
            } else {
                sync::Direction::Out
            };
            Ok(sync::sync(&worker.sandbox, &dir, p, direction).await?)
        }
        methods::DUPLEX_OPEN => {
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
        methods::START_PROCESS_SUPERVISOR => {
            let p: envrt_plugin_protocol::environment::StartProcessSupervisorParams = parse(method, params)?;
            let dir = lease_dir(worker, &p.lease)?;
            let Some(agent) = worker.agent.as_deref() else {
                return Err(RpcError::new(
                    code::METHOD_NOT_FOUND,
                    format!("Unknown method: {method}"),
                ));
            };
            let owner = worker.leases.owner(&dir)?;
            worker.supervisors.start(&worker.sandbox, agent, &dir, owner, p).await
        }
        methods::START_EGRESS => egress::handle(worker, params).await,
        methods::RUNNER_INGRESS_ENDPOINT => ingress::handle(worker, method, params).await,
        methods::LIST_LEASES => Ok(envrt_plugin_protocol::to_value(&inventory::list(&worker.leases)?)),
        methods::DUPLEX_STOP => worker.channels.stop(parse(method, params)?),
        methods::DUPLEX_CLOSE => Ok(worker.channels.close(parse(method, params)?)),
        m if template::handles(m) => template::handle(worker, m, params).await,
        other if known_not_implemented(other) => Err(RpcError::new(
            code::METHOD_NOT_IMPLEMENTED,
            format!("{other} is not implemented by this plugin"),
        )),
        other => Err(RpcError::new(
            code::METHOD_NOT_FOUND,
            format!("Unknown method: {other}"),
        )),
    }
}

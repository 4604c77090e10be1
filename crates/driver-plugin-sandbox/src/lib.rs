//! # envrt-driver-plugin-sandbox
//!
//! The host side ([`host`], the `sandbox` driver). The reference worker that runs every
//! command inside bubblewrap is the `envrt-sandbox-worker` binary of its own crate,
//! `crates/sandbox-worker`.
//!
//! The `sandbox` driver: a sandbox provider runs as a plugin worker process and the host
//! talks to it with the Paperclip plugin worker protocol (newline-delimited JSON-RPC 2.0
//! on the worker's stdin and stdout; see `docs/plugin-protocol.md` in the repository). A worker
//! written with `@paperclipai/plugin-sdk` runs under this driver unchanged.
//!
//! What the host does, in short (details on each item's docs):
//! - one worker per [`SandboxDriver`], started from a [`PluginManifest`] with only `PATH`,
//!   `TZ` and the manifest's variables, forked with `PR_SET_PDEATHSIG` so it never
//!   outlives the host ([`ParentDeathSignal`]), and with its stdin closing when the host
//!   goes; where cgroup v2 is writable the worker runs in a cgroup of its own, and
//!   whatever it leaves there (however detached) is killed when it exits, crashes or is
//!   retired;
//! - an execute without a timeout of its own is bound by the worker's life, not by the
//!   RPC timeout; a call the host gives up on (dropped, timed out) is followed by the
//!   `envrt.cancel {id}` extension notification, which the reference worker answers by
//!   stopping the command;
//! - a request line over [`SandboxOptions::max_request_bytes`] (64 MiB) is refused before
//!   sending, with an `Invalid input` error naming the limit; an execute's stdin over
//!   [`STREAM_STDIN_OVER`] (1 MiB) streams over the `envrt.dataPlane` socket instead when
//!   the worker accepted it, so it is bounded by neither;
//! - worker errors whose text is a runtime-core contract text (`Path "…" is outside the
//!   lease workspace.`, …) come back as that typed `DriverError` variant;
//! - `initialize` (15 s); `supportedMethods` is read live by every accessor (`as_execute`,
//!   `as_duplex`, ...), by the capability classifier and before every lifecycle verb, and
//!   replaced when a restarted worker answers;
//! - each request carries `paperclipInvocation {id, scope: {companyId}, traceparent}`; `execute.log`
//!   notifications whose `paperclipInvocationId` names a running execute reach its sink
//!   (others are dropped). An `execute.log` may say `"encoding": "base64"` (used by
//!   workers answering `environmentExecuteBinary`);
//! - stdout lines that do not parse are logged (first 200 characters) and ignored, lines
//!   over [`SandboxOptions::max_line_bytes`] are skipped unread, and `id: null` answers
//!   never disturb calls;
//! - the worker's own requests (`ctx.config`, `ctx.state`, `ctx.secrets`, `ctx.http`, the
//!   telemetry methods: [`SUPPORTED_WORKER_METHODS`]) are answered on tasks of their own
//!   under the manifest's `capabilities` and [`SandboxOptions::worker_calls`]; any other
//!   is refused -32601 `Host does not handle method "{method}"` (docs/plugin-protocol.md);
//! - a worker exit fails every pending call at once with
//!   `Worker process exited (code=…, signal=…)` plus the stderr tail, ends every duplex
//!   route (exit code none, `transport_closed` true), and restarts the worker after
//!   `1 s · 2^(n-1)` ± 25 % (cap 5 min); after 10 crashes in a row it stays down (a
//!   worker that ran 60 s resets the count); calls made meanwhile wait for the restart
//!   within their own timeout, except after a restart attempt failed: until the next
//!   attempt they fail at once with the error that ended the worker;
//! - duplex routes follow the protocol page: see [`DuplexLimits`] and [`RouteSlots`].
//!   A worker that accepts the `envrt.dataPlane` offer (the reference worker does) moves
//!   duplex bytes over a socket pair made at spawn, in binary frames with per-route credit
//!   ([`envrt_plugin_protocol::dataplane`]): writes are pipelined and a slow reader slows the command
//!   instead of losing the route; other workers keep the JSON frames
//!   ([`SandboxOptions::data_plane`] turns the offer off);
//! - a requested lease expiry goes to `environmentAcquireLease` as `requestedExpiresAt`
//!   (RFC 3339); the worker's `expiresAt` (RFC 3339 or milliseconds) becomes the lease's,
//!   and a worker that returns none, or a later one, is refused by the facade
//!   (`Environment driver "{key}" does not support lease expiry.`).
//!
//! - while the worker advertises the `envrtListLeases` extension the driver offers the
//!   recovery group (`as_recovery`): inventory is the worker's own lease list, each lease
//!   tied to the envrt lease id the host sent at acquire (`envrtLeaseId`), and reaping
//!   destroys it at the worker; a worker without the extension has no recovery group;
//! - while the worker advertises the `envrtStartProcessSupervisor` extension the driver
//!   has the process group (`as_processes`: contract section 9's spawn, ps, output from a
//!   byte offset, stdin, signals, terminals, resize, wait) and grants
//!   `persistentProcessSessions`: the worker starts one `envrt-agent` per lease inside the
//!   lease's isolation, listening in a private directory the host chose, and the host
//!   speaks to it directly over its unix socket (opened without following links). A
//!   lease's processes end with its release, destroy or expiry, and with the worker (so
//!   with the program that holds the driver); a worker without the extension (the SDK's)
//!   gets neither the group nor the grant;
//! - the reference worker's manifest is [`reference_manifest`], and the key a driver
//!   registers under is [`PluginManifest::driver_key`] ([`DEFAULT_DRIVER_KEY`] is
//!   runtime-core's fallback key).
//!
//! The wire vocabulary (envelopes, names, codes, typed params and results) is the
//! `envrt-plugin-protocol` crate, re-exported as [`protocol`].
//!
//! Errors are [`SandboxError`]s carried inside
//! [`DriverError::Other`](envrt_driver_api::DriverError::Other); find them with
//! [`SandboxError::of`].
//!
//! ```no_run
//! use envrt_driver_plugin_sandbox::{PluginManifest, SandboxDriver, SandboxOptions};
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let manifest = PluginManifest::load("plugin.json")?;
//! let driver = SandboxDriver::start(manifest, SandboxOptions::default()).await?;
//! println!("worker serves {:?}", driver.supported_methods());
//! driver.shutdown().await;
//! # Ok(()) }
//! ```

mod descriptor;
pub mod host;

/// The wire protocol (the `envrt-plugin-protocol` crate), shared with the reference worker.
pub use envrt_plugin_protocol as protocol;

pub use descriptor::{
    DESCRIPTOR, PluginFile, SandboxDescriptor, SandboxSettings, add_worker_search_dir, locate_reference_worker,
    reference_worker,
};
pub use host::{
    DEFAULT_DRIVER_KEY, DEFAULT_MAX_REQUEST_BYTES, DuplexLimits, MAX_STDIN_BYTES, ParentDeathSignal, PluginManifest,
    REFERENCE_WORKER_BINARY, RestartPolicy, RouteSlots, STREAM_STDIN_OVER, SUPPORTED_WORKER_METHODS, SandboxDriver,
    SandboxError, SandboxOptions, WorkerCallLimits, WorkerCallOptions, reference_manifest,
};

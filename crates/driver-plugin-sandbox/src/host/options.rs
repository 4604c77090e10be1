//! Options of the sandbox driver and its worker manager.

use std::sync::Arc;
use std::time::Duration;

use envrt_driver_api::JsonMap;

use crate::host::duplex::routes::{DuplexLimits, RouteSlots};

/// Crash restarts: `base · 2^(n-1)` ± 25 %, capped, at most `max_crashes` in a row.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RestartPolicy {
    /// Delay before the first restart (1 s).
    pub base: Duration,
    /// Longest delay (5 min).
    pub cap: Duration,
    /// Crashes in a row after which the worker stays down (10).
    pub max_crashes: u32,
    /// A worker that ran this long before crashing resets the count (60 s).
    pub stable_after: Duration,
}

impl Default for RestartPolicy {
    fn default() -> Self {
        RestartPolicy {
            base: Duration::from_secs(1),
            cap: Duration::from_secs(300),
            max_crashes: 10,
            stable_after: Duration::from_secs(60),
        }
    }
}

/// The signal a worker gets when its host dies (`PR_SET_PDEATHSIG`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ParentDeathSignal {
    /// SIGKILL (the default): the worker cannot survive its host, but it cannot clean up
    /// either, so processes it started in other process groups are its own sandbox's
    /// business (the reference worker's `bwrap --die-with-parent` sandboxes die with it;
    /// its leases' process supervisors outlive it, ended from their records).
    #[default]
    Kill,
    /// SIGTERM: a worker that handles it (as the SDK fixture does) can kill what it
    /// started before exiting; a worker that ignores it still exits on stdin EOF if it
    /// follows the SDK, and otherwise survives.
    Term,
}

/// Options of [`SandboxDriver::start`](super::SandboxDriver::start). Start from
/// `SandboxOptions::default()` and change fields. `Debug` shows the plugin config's keys
/// only (values may be secrets).
#[derive(Clone)]
pub struct SandboxOptions {
    /// Which `environmentDrivers[]` entry this driver is; `None` picks the entry keyed
    /// `sandbox`, else the first. The driver's key is the entry's `driverKey` (`sandbox`
    /// when the manifest has no entry).
    pub driver_key: Option<String>,
    /// Plugin configuration sent in `initialize`.
    pub config: JsonMap,
    /// `instanceInfo.instanceId` sent in `initialize`.
    pub instance_id: String,
    /// Default per-call timeout (30 s). An execute without a timeout of its own is not
    /// bound by it: it runs as long as the worker lives (this bounds only the wait for a
    /// restarting worker).
    pub rpc_timeout: Duration,
    /// `initialize` timeout (15 s).
    pub initialize_timeout: Duration,
    /// Added to an execute's own timeout for the RPC timeout (30 s).
    pub execute_grace: Duration,
    /// Duplex open, write and stop timeout (30 s).
    pub duplex_timeout: Duration,
    /// Duplex close timeout (10 s).
    pub duplex_close_timeout: Duration,
    /// How long shutdown waits for pending calls (10 s).
    pub drain_timeout: Duration,
    /// Grace between shutdown steps: SIGTERM, then SIGKILL after it (5 s).
    pub kill_grace: Duration,
    /// A worker stdout line longer than this is dropped unread (64 MiB).
    pub max_line_bytes: usize,
    /// The largest request line the host sends (64 MiB, the reference worker's own
    /// limit): a longer one (large stdin, argv or environment) is refused before
    /// anything is sent, with an `Invalid input` error naming the limit.
    pub max_request_bytes: usize,
    /// Crash restarts.
    pub restart: RestartPolicy,
    /// What the worker gets when the host dies (SIGKILL).
    pub parent_death_signal: ParentDeathSignal,
    /// Bounds of each duplex route.
    pub duplex_limits: DuplexLimits,
    /// The ceiling on open duplex routes ([`RouteSlots::global`], 128, by default).
    pub route_slots: Arc<RouteSlots>,
    /// Offer the `envrt.dataPlane` extension at `initialize` (true): a worker that accepts
    /// it moves duplex bytes over a socket of its own in binary frames with flow control;
    /// one that does not keeps the JSON frames.
    pub data_plane: bool,
    /// What the worker's own calls to the host (`ctx.state`, `ctx.secrets`, `ctx.http`,
    /// ...) may reach: state store, secret references, HTTP allowlist, bounds.
    pub worker_calls: super::WorkerCallOptions,
    /// The egress proxy binary (`envrt-egress`) the host runs for each lease under a
    /// network policy; found as the supervisor is (`ENVRT_EGRESS`, beside the running
    /// executable, `PATH`) when `None`. Without one the reference worker's leases have no
    /// network and `"allow"` / `"open"` are refused.
    pub egress: Option<std::path::PathBuf>,
    /// The DNS server the egress proxy resolves names through; the first `nameserver` of
    /// the host's `/etc/resolv.conf` when `None`.
    pub egress_dns: Option<std::net::SocketAddr>,
    /// PEM roots the egress proxy also trusts when it re-originates TLS to a brokered
    /// credential's host (besides the system's roots); `None`: the system's only.
    pub egress_roots: Option<std::path::PathBuf>,
}

/// The default [`SandboxOptions::max_request_bytes`]: 64 MiB, the reference worker's own
/// line limit.
pub const DEFAULT_MAX_REQUEST_BYTES: usize = 64 * 1024 * 1024;

/// The most stdin an execute can carry under the default request limit: stdin travels as
/// base64 (4 bytes per 3), and 1 MiB is left for the command, its arguments and its
/// environment. Front ends (the `envrt` CLI) use it as their default stdin limit so that
/// they accept exactly what every built-in driver accepts.
pub const MAX_STDIN_BYTES: usize = (DEFAULT_MAX_REQUEST_BYTES - 1024 * 1024) / 4 * 3;

impl Default for SandboxOptions {
    fn default() -> Self {
        SandboxOptions {
            driver_key: None,
            config: JsonMap::new(),
            instance_id: "envrt".to_owned(),
            rpc_timeout: Duration::from_secs(30),
            initialize_timeout: Duration::from_secs(15),
            execute_grace: Duration::from_secs(30),
            duplex_timeout: Duration::from_secs(30),
            duplex_close_timeout: Duration::from_secs(10),
            drain_timeout: Duration::from_secs(10),
            kill_grace: Duration::from_secs(5),
            max_line_bytes: 64 * 1024 * 1024,
            max_request_bytes: DEFAULT_MAX_REQUEST_BYTES,
            restart: RestartPolicy::default(),
            parent_death_signal: ParentDeathSignal::Kill,
            duplex_limits: DuplexLimits::default(),
            route_slots: RouteSlots::global(),
            data_plane: true,
            worker_calls: super::WorkerCallOptions::default(),
            egress: None,
            egress_dns: None,
            egress_roots: None,
        }
    }
}

impl std::fmt::Debug for SandboxOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SandboxOptions")
            .field("driver_key", &self.driver_key)
            .field("config_keys", &self.config.keys().collect::<Vec<_>>())
            .field("instance_id", &self.instance_id)
            .field("rpc_timeout", &self.rpc_timeout)
            .field("initialize_timeout", &self.initialize_timeout)
            .field("execute_grace", &self.execute_grace)
            .field("duplex_timeout", &self.duplex_timeout)
            .field("duplex_close_timeout", &self.duplex_close_timeout)
            .field("drain_timeout", &self.drain_timeout)
            .field("kill_grace", &self.kill_grace)
            .field("max_line_bytes", &self.max_line_bytes)
            .field("max_request_bytes", &self.max_request_bytes)
            .field("egress", &self.egress)
            .field("egress_dns", &self.egress_dns)
            .field("egress_roots", &self.egress_roots)
            .field("restart", &self.restart)
            .field("parent_death_signal", &self.parent_death_signal)
            .field("duplex_limits", &self.duplex_limits)
            .field("route_slots", &self.route_slots)
            .field("data_plane", &self.data_plane)
            .field("worker_calls", &self.worker_calls)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_does_not_show_config_values() {
        let mut options = SandboxOptions::default();
        options.config.insert("apiToken".into(), "s3cr3t".into());
        let text = format!("{options:?}");
        assert!(text.contains("apiToken") && !text.contains("s3cr3t"), "{text}");
    }
}

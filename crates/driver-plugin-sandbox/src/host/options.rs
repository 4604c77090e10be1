//! Options of the sandbox driver and its worker manager.

use std::sync::Arc;
use std::time::Duration;

use envrt_runtime_core::JsonMap;

use super::routes::{DuplexLimits, RouteSlots};

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
    /// business (the reference worker's `bwrap --die-with-parent` sandboxes die with it).
    #[default]
    Kill,
    /// SIGTERM: a worker that handles it (as the SDK fixture does) can kill what it
    /// started before exiting; a worker that ignores it still exits on stdin EOF if it
    /// follows the SDK, and otherwise survives.
    Term,
}

/// Options of [`SandboxDriver::start`](super::SandboxDriver::start). Start from
/// `SandboxOptions::default()` and change fields.
#[derive(Clone, Debug)]
pub struct SandboxOptions {
    /// Which `environmentDrivers[]` entry this driver is; `None` picks the entry keyed
    /// `sandbox`, else the first. The driver's key is the entry's `driverKey` (`sandbox`
    /// when the manifest has no entry).
    pub driver_key: Option<String>,
    /// Plugin configuration sent in `initialize`.
    pub config: JsonMap,
    /// `instanceInfo.instanceId` sent in `initialize`.
    pub instance_id: String,
    /// Default per-call timeout (30 s).
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
    /// Crash restarts.
    pub restart: RestartPolicy,
    /// What the worker gets when the host dies (SIGKILL).
    pub parent_death_signal: ParentDeathSignal,
    /// Bounds of each duplex route.
    pub duplex_limits: DuplexLimits,
    /// The ceiling on open duplex routes ([`RouteSlots::global`], 128, by default).
    pub route_slots: Arc<RouteSlots>,
}

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
            restart: RestartPolicy::default(),
            parent_death_signal: ParentDeathSignal::Kill,
            duplex_limits: DuplexLimits::default(),
            route_slots: RouteSlots::global(),
        }
    }
}

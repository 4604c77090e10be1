//! The worker manager: starts the worker and runs the `initialize` handshake, keeps the
//! live `supportedMethods`, restarts a crashed worker with backoff, and shuts it down.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use envrt_driver_api::capability::VerbSet;
use nix::sys::signal::Signal;
use serde_json::Value;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use crate::host::duplex::routes::{RouteShared, RouteTable};
use crate::host::error::SandboxError;
use crate::host::manifest::PluginManifest;
use crate::host::options::{ParentDeathSignal, SandboxOptions};
use crate::host::worker::connection::{Connection, ConnectionEvents, ExecSink};
use crate::host::worker::process::spawn_worker;
use crate::host::worker_calls::WorkerCalls;
use crate::protocol::handshake::{InitializeParams, InitializeResult, InstanceInfo, NoParams};
use crate::protocol::{methods, to_value};

#[derive(Clone)]
enum Slot {
    Starting,
    Live {
        connection: Arc<Connection>,
        since: Instant,
    },
    Down(SandboxError),
    /// The worker crashed (or a restart attempt failed) and the host waits until
    /// `retry_at` before starting it again. Calls fail at once with a retryable
    /// [`SandboxError::WorkerRestarting`] instead of waiting out a backoff that can be
    /// longer than their own timeout.
    Backoff {
        reason: String,
        retry_at: Instant,
    },
}

/// Owns one plugin's worker.
pub(crate) struct Supervisor {
    manifest: PluginManifest,
    options: SandboxOptions,
    routes: Arc<RouteTable>,
    slot: watch::Sender<Slot>,
    supported: Mutex<Arc<VerbSet>>,
    generation: AtomicU64,
    crashes: Mutex<u32>,
    shutting_down: AtomicBool,
    me: Weak<Supervisor>,
}

struct Events {
    supervisor: Weak<Supervisor>,
    routes: Arc<RouteTable>,
    calls: Arc<WorkerCalls>,
}

impl ConnectionEvents for Events {
    fn on_duplex_frame(&self, generation: u64, method: &str, params: Value) -> bool {
        self.routes.on_frame(generation, method, params)
    }

    fn worker_calls(&self) -> Option<Arc<WorkerCalls>> {
        Some(self.calls.clone())
    }

    fn on_exit(&self, generation: u64, error: SandboxError) {
        self.routes.end_generation(generation, &error);
        if let Some(supervisor) = self.supervisor.upgrade() {
            supervisor.on_exit(generation, error);
        }
    }
}

impl Supervisor {
    /// The plugin's manifest.
    pub(crate) fn manifest(&self) -> &PluginManifest {
        &self.manifest
    }

    /// The options the worker was started with.
    pub(crate) fn options(&self) -> &SandboxOptions {
        &self.options
    }

    /// The worker's duplex route table.
    pub(crate) fn routes(&self) -> &Arc<RouteTable> {
        &self.routes
    }

    /// Starts the worker and completes the handshake.
    pub(crate) async fn start(
        manifest: PluginManifest,
        options: SandboxOptions,
    ) -> Result<Arc<Supervisor>, SandboxError> {
        manifest.validate()?;
        let (routes, closes) = RouteTable::new(options.duplex_limits.clone());
        let supervisor = Arc::new_cyclic(|me| Supervisor {
            manifest,
            options,
            routes,
            slot: watch::Sender::new(Slot::Starting),
            supported: Mutex::new(Arc::new(VerbSet::new())),
            generation: AtomicU64::new(0),
            crashes: Mutex::new(0),
            shutting_down: AtomicBool::new(false),
            me: me.clone(),
        });
        let connection = supervisor.start_connection().await?;
        supervisor.slot.send_replace(Slot::Live {
            connection,
            since: Instant::now(),
        });
        tokio::spawn(close_ended_routes(Arc::downgrade(&supervisor), closes));
        Ok(supervisor)
    }

    fn plugin_id(&self) -> &str {
        &self.manifest.id
    }

    async fn start_connection(&self) -> Result<Arc<Connection>, SandboxError> {
        let failed = |message: String| SandboxError::InitializeFailed {
            plugin_id: self.manifest.id.clone(),
            message,
        };
        let death_signal = match self.options.parent_death_signal {
            ParentDeathSignal::Kill => Signal::SIGKILL,
            ParentDeathSignal::Term => Signal::SIGTERM,
        };
        let spawned = spawn_worker(&self.manifest.worker, death_signal, self.options.data_plane)
            .await
            .map_err(|e| {
                failed(format!(
                    "cannot start worker command {:?}: {e}",
                    self.manifest
                        .worker
                        .command
                        .first()
                        .map(String::as_str)
                        .unwrap_or_default()
                ))
            })?;
        let generation = self.generation.fetch_add(1, Ordering::SeqCst) + 1;
        let events = Arc::new(Events {
            supervisor: self.me.clone(),
            routes: self.routes.clone(),
            calls: Arc::new(WorkerCalls::for_manifest(&self.manifest, &self.options)),
        });
        let connection = Connection::start(
            spawned,
            generation,
            self.manifest.id.clone(),
            (self.options.max_line_bytes, self.options.max_request_bytes),
            events,
        );
        let params = to_value(&InitializeParams {
            manifest: self.manifest.to_wire(),
            config: self.options.config.clone(),
            instance_info: InstanceInfo {
                instance_id: self.options.instance_id.clone(),
                host_version: env!("CARGO_PKG_VERSION").to_owned(),
            },
            api_version: 1,
            database_namespace: None,
            envrt_data_plane: connection.plane.offer(&self.options.duplex_limits),
        });
        let timeout = self.options.initialize_timeout;
        let answer = connection
            .call(
                methods::INITIALIZE,
                params,
                timeout,
                Instant::now() + timeout,
                None,
                None,
            )
            .await;
        let result = answer.and_then(|value| {
            let result: InitializeResult = serde_json::from_value(value).map_err(|e| SandboxError::InvalidResult {
                method: methods::INITIALIZE.into(),
                message: e.to_string(),
            })?;
            if result.ok {
                Ok(result)
            } else {
                Err(SandboxError::InvalidResult {
                    method: methods::INITIALIZE.into(),
                    message: "ok is false".into(),
                })
            }
        });
        match result {
            Ok(result) => {
                crate::host::duplex::dataplane::settle(
                    &connection,
                    &result.supported_methods,
                    &self.options,
                    &self.routes,
                );
                *self.supported.lock().unwrap_or_else(|e| e.into_inner()) =
                    Arc::new(result.supported_methods.into_iter().collect());
                tracing::info!(plugin = %self.manifest.id, pid = connection.pid(), generation, "worker ready");
                Ok(connection)
            }
            Err(error) => {
                connection.close_stdin();
                connection.kill();
                Err(failed(error.to_string()))
            }
        }
    }

    /// The live worker's `supportedMethods` (replaced on each restart).
    pub(crate) fn supported(&self) -> Arc<VerbSet> {
        self.supported.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Whether the live worker advertises `method`.
    pub(crate) fn advertises(&self, method: &str) -> bool {
        self.supported().contains(method)
    }

    /// The live worker's pid, if one is running.
    pub(crate) fn pid(&self) -> Option<u32> {
        match &*self.slot.borrow() {
            Slot::Live { connection, .. } if !connection.has_exited() => Some(connection.pid()),
            _ => None,
        }
    }

    /// The live connection, waiting until `deadline` for a start in progress (a restart
    /// backoff is not waited for: see [`Slot::Backoff`]).
    pub(crate) async fn connection(
        &self,
        method: &str,
        timeout: Duration,
        deadline: Instant,
    ) -> Result<Arc<Connection>, SandboxError> {
        let mut slot = self.slot.subscribe();
        loop {
            match &*slot.borrow_and_update() {
                Slot::Live { connection, .. } if !connection.has_exited() => return Ok(connection.clone()),
                Slot::Down(error) => return Err(error.clone()),
                Slot::Backoff { reason, retry_at } => {
                    return Err(SandboxError::WorkerRestarting {
                        plugin_id: self.plugin_id().to_owned(),
                        reason: reason.clone(),
                        retry_in_ms: retry_at.saturating_duration_since(Instant::now()).as_millis() as u64,
                    });
                }
                _ => {}
            }
            match tokio::time::timeout_at(deadline, slot.changed()).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) => {
                    return Err(SandboxError::WorkerUnavailable {
                        plugin_id: self.plugin_id().to_owned(),
                        reason: "the worker manager is gone".into(),
                    });
                }
                Err(_) => {
                    return Err(SandboxError::Timeout {
                        method: method.to_owned(),
                        ms: timeout.as_millis() as u64,
                    });
                }
            }
        }
    }

    /// Calls `method` on the live worker (waiting for a start in progress).
    pub(crate) async fn call(
        &self,
        method: &str,
        params: Value,
        timeout: Duration,
        company_id: Option<&str>,
        sink: Option<ExecSink>,
    ) -> Result<Value, SandboxError> {
        let deadline = Instant::now() + timeout;
        let connection = self.connection(method, timeout, deadline).await?;
        connection
            .call(method, params, timeout, deadline, company_id, sink)
            .await
    }

    fn on_exit(&self, generation: u64, error: SandboxError) {
        let since = match &*self.slot.borrow() {
            Slot::Live { connection, since } if connection.generation() == generation => *since,
            _ => return,
        };
        if self.shutting_down.load(Ordering::SeqCst) {
            return;
        }
        if since.elapsed() >= self.options.restart.stable_after {
            *self.crashes.lock().unwrap_or_else(|e| e.into_inner()) = 0;
        }
        tracing::warn!(plugin = %self.manifest.id, "worker crashed: {error}");
        if self.back_off(error.down_reason()) {
            tokio::spawn(restart_loop(self.me.clone()));
        }
    }

    /// Counts one more crash in a row and, below the limit, enters the backoff before the
    /// next restart (true); at the limit the worker stays down (false).
    fn back_off(&self, reason: String) -> bool {
        let n = {
            let mut crashes = self.crashes.lock().unwrap_or_else(|e| e.into_inner());
            *crashes += 1;
            *crashes
        };
        if n >= self.options.restart.max_crashes {
            let error = SandboxError::WorkerUnavailable {
                plugin_id: self.manifest.id.clone(),
                reason: format!("it crashed {n} times in a row; not restarting"),
            };
            tracing::error!("{error}");
            self.slot.send_replace(Slot::Down(error));
            return false;
        }
        let retry_at = Instant::now() + self.backoff(n);
        self.slot.send_replace(Slot::Backoff { reason, retry_at });
        true
    }

    /// The backoff before restart number `n` (1-based): `base · 2^(n-1)` ± 25 %, capped.
    fn backoff(&self, n: u32) -> Duration {
        let policy = &self.options.restart;
        let exp = policy.base.saturating_mul(1u32 << (n.saturating_sub(1)).min(20));
        let capped = exp.min(policy.cap);
        let jitter = (uuid::Uuid::new_v4().as_u128() % 1001) as f64 / 1000.0; // 0..=1
        capped.mul_f64(0.75 + 0.5 * jitter)
    }

    /// The graceful stop: refuse new calls, drain pending ones, send `shutdown`, close
    /// stdin, then SIGTERM and SIGKILL after the grace.
    pub(crate) async fn shutdown(&self) {
        self.shutting_down.store(true, Ordering::SeqCst);
        let previous = self.slot.send_replace(Slot::Down(SandboxError::WorkerUnavailable {
            plugin_id: self.plugin_id().to_owned(),
            reason: "the worker was shut down".into(),
        }));
        let Slot::Live { connection, .. } = previous else {
            return;
        };
        let drain_until = Instant::now() + self.options.drain_timeout;
        while connection.pending_calls() > 0 && Instant::now() < drain_until && !connection.has_exited() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        if !connection.has_exited() {
            let timeout = self.options.kill_grace;
            let _ = connection
                .call(
                    methods::SHUTDOWN,
                    to_value(&NoParams {}),
                    timeout,
                    Instant::now() + timeout,
                    None,
                    None,
                )
                .await;
        }
        connection.close_stdin();
        if connection.wait_exit(self.options.kill_grace).await {
            return;
        }
        connection.signal(Signal::SIGTERM);
        if connection.wait_exit(self.options.kill_grace).await {
            return;
        }
        connection.kill();
        connection.wait_exit(self.options.kill_grace).await;
    }
}

impl Drop for Supervisor {
    fn drop(&mut self) {
        if let Slot::Live { connection, .. } = &*self.slot.borrow() {
            connection.close_stdin();
            connection.kill();
        }
    }
}

/// Starts the worker again once each backoff has passed, until one start succeeds or the
/// crash limit is reached.
async fn restart_loop(me: Weak<Supervisor>) {
    loop {
        let retry_at = {
            let Some(supervisor) = me.upgrade() else { return };
            match &*supervisor.slot.borrow() {
                Slot::Backoff { retry_at, .. } => *retry_at,
                _ => return,
            }
        };
        tokio::time::sleep_until(retry_at).await;
        let Some(supervisor) = me.upgrade() else { return };
        if supervisor.shutting_down.load(Ordering::SeqCst) {
            return;
        }
        supervisor.slot.send_if_modified(|slot| {
            let backing_off = matches!(slot, Slot::Backoff { .. });
            if backing_off {
                *slot = Slot::Starting;
            }
            backing_off
        });
        match supervisor.start_connection().await {
            Ok(connection) => {
                if supervisor.shutting_down.load(Ordering::SeqCst) {
                    connection.close_stdin();
                    connection.kill();
                    return;
                }
                supervisor.slot.send_replace(Slot::Live {
                    connection,
                    since: Instant::now(),
                });
                return;
            }
            Err(error) => {
                tracing::warn!("worker restart failed: {error}");
                if supervisor.shutting_down.load(Ordering::SeqCst) || !supervisor.back_off(error.down_reason()) {
                    return;
                }
            }
        }
    }
}

/// Sends `duplexChannelClose` for routes the host ended while the worker had them open.
async fn close_ended_routes(me: Weak<Supervisor>, mut closes: mpsc::UnboundedReceiver<Arc<RouteShared>>) {
    while let Some(route) = closes.recv().await {
        let Some(supervisor) = me.upgrade() else { return };
        let timeout = supervisor.options.duplex_close_timeout;
        let Ok(connection) = supervisor
            .connection(methods::DUPLEX_CLOSE, timeout, Instant::now())
            .await
        else {
            continue;
        };
        if connection.generation() != route.generation {
            continue;
        }
        tokio::spawn(async move {
            let _ = crate::host::duplex::channel::send_close(&connection, &route, timeout).await;
        });
    }
}

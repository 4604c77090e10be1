//! The worker's own calls to its host (the SDK's `WorkerToHostMethods`): the subset a
//! sandbox provider uses — `config.get`, `state.*`, `secrets.resolve`, `http.fetch` and
//! the telemetry methods — answered under the capability each needs, with bounds; every
//! other method is refused with an exact text naming it.

mod http;
mod secrets;
mod state;
mod telemetry;
mod tls;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use envrt_driver_api::{JsonMap, MemoryStateStore, PluginStateStore, Secret};
use serde_json::Value;
use tokio::sync::mpsc;

use crate::protocol::{self, ErrorObject, RequestId, codes};

/// The worker-to-host methods this host answers, with the manifest capability each needs
/// (`None`: always allowed), as the SDK's own test harness (`createTestHarness`) enforces
/// them. `docs/plugin-protocol.md` lists the same table (a test holds them in step).
pub const SUPPORTED_WORKER_METHODS: &[(&str, Option<&str>)] = &[
    ("config.get", None),
    ("state.get", Some("plugin.state.read")),
    ("state.set", Some("plugin.state.write")),
    ("state.delete", Some("plugin.state.write")),
    ("secrets.resolve", Some("secrets.read-ref")),
    ("http.fetch", Some("http.outbound")),
    ("activity.log", Some("activity.log.write")),
    ("metrics.write", Some("metrics.write")),
    ("telemetry.track", Some("telemetry.track")),
    ("log", None),
    ("span.record", None),
];

/// Bounds on what a worker may ask of its host.
#[derive(Clone, Debug)]
pub struct WorkerCallLimits {
    /// The largest `state.set` value, as JSON text (64 KiB).
    pub max_state_value_bytes: usize,
    /// The most state records one plugin may hold (1024).
    pub max_state_keys: u64,
    /// The most worker-to-host calls answered at once; one more is refused (16).
    pub max_in_flight: usize,
    /// The largest `http.fetch` request body (1 MiB).
    pub max_http_request_bytes: usize,
    /// The largest `http.fetch` response body (4 MiB).
    pub max_http_response_bytes: usize,
    /// How long one `http.fetch` may take, connect to last byte (30 s).
    pub http_timeout: Duration,
}

impl Default for WorkerCallLimits {
    fn default() -> Self {
        WorkerCallLimits {
            max_state_value_bytes: 64 * 1024,
            max_state_keys: 1024,
            max_in_flight: 16,
            max_http_request_bytes: 1024 * 1024,
            max_http_response_bytes: 4 * 1024 * 1024,
            http_timeout: Duration::from_secs(30),
        }
    }
}

/// What the host gives a worker that calls it ([`SandboxOptions::worker_calls`](super::SandboxOptions::worker_calls)).
#[derive(Clone)]
pub struct WorkerCallOptions {
    /// Where `ctx.state` lives (in memory by default; pass envrt's sqlite store to keep it
    /// across host restarts).
    pub state: Arc<dyn PluginStateStore>,
    /// The secret references the plugin may resolve, exactly as the worker names them:
    /// `env:NAME` (the host's environment variable) or `file:/absolute/path` (the file's
    /// contents, one trailing newline removed). None by default: every reference is refused.
    pub secrets: Vec<String>,
    /// The hosts `http.fetch` may reach, as `host` (any port) or `host:port`. None by
    /// default: every fetch is refused.
    pub http_allow: Vec<String>,
    /// PEM files of certificate authorities `http.fetch` trusts for `https://` besides the
    /// system's CA bundle (a private CA of the plugin's backend). None by default.
    pub http_roots: Vec<std::path::PathBuf>,
    /// Bounds.
    pub limits: WorkerCallLimits,
}

impl Default for WorkerCallOptions {
    fn default() -> Self {
        WorkerCallOptions {
            state: Arc::new(MemoryStateStore::default()),
            secrets: Vec::new(),
            http_allow: Vec::new(),
            http_roots: Vec::new(),
            limits: WorkerCallLimits::default(),
        }
    }
}

impl std::fmt::Debug for WorkerCallOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // references only: never a resolved value
        f.debug_struct("WorkerCallOptions")
            .field("secrets", &self.secrets)
            .field("http_allow", &self.http_allow)
            .field("http_roots", &self.http_roots)
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

/// Answers one plugin's worker-to-host calls.
pub(crate) struct WorkerCalls {
    plugin_id: String,
    capabilities: Vec<String>,
    config: JsonMap,
    options: WorkerCallOptions,
    in_flight: AtomicUsize,
    /// Values `secrets.resolve` handed out: redacted from logs and error texts.
    resolved: Mutex<Vec<Secret>>,
    /// Serialises `state.set`, so the key-count bound holds under concurrent writes.
    state_writes: tokio::sync::Mutex<()>,
    /// The TLS client of `http.fetch`, built on the first `https://` fetch.
    tls: std::sync::OnceLock<Result<Arc<rustls::ClientConfig>, String>>,
}

/// A refusal or failure answered to the worker.
pub(crate) fn refuse(code: i64, message: impl Into<String>) -> ErrorObject {
    ErrorObject::new(code, message.into())
}

/// An `INVALID_PARAMS` refusal.
pub(crate) fn invalid(method: &str, what: &str) -> ErrorObject {
    refuse(codes::INVALID_PARAMS, format!("\"{method}\": {what}"))
}

impl WorkerCalls {
    /// The calls of the plugin `plugin_id` whose manifest declares `capabilities`.
    pub(crate) fn new(plugin_id: &str, capabilities: Vec<String>, config: JsonMap, options: WorkerCallOptions) -> Self {
        WorkerCalls {
            plugin_id: plugin_id.to_owned(),
            capabilities,
            config,
            options,
            in_flight: AtomicUsize::new(0),
            resolved: Mutex::new(Vec::new()),
            state_writes: tokio::sync::Mutex::new(()),
            tls: std::sync::OnceLock::new(),
        }
    }

    fn remember(&self, secret: Secret) {
        let mut resolved = self.resolved.lock().unwrap_or_else(|e| e.into_inner());
        if !resolved.iter().any(|s| s.expose() == secret.expose()) {
            resolved.push(secret);
        }
    }

    /// `text` with every value `secrets.resolve` handed out replaced by `***`.
    pub(crate) fn redact(&self, text: &str) -> String {
        let resolved = self.resolved.lock().unwrap_or_else(|e| e.into_inner());
        let mut out = text.to_owned();
        for secret in resolved.iter() {
            out = out.replace(secret.expose(), "***");
        }
        out
    }

    /// A `log` notification from the worker.
    pub(crate) fn log_notification(&self, params: &Value) {
        if let Err(error) = telemetry::log(self, params) {
            tracing::debug!(plugin = %self.plugin_id, "log notification dropped: {}", error.message);
        }
    }

    /// The calls of `manifest`'s plugin under `options`.
    pub(crate) fn for_manifest(manifest: &super::PluginManifest, options: &super::SandboxOptions) -> Self {
        let capabilities = manifest
            .extra
            .get("capabilities")
            .and_then(Value::as_array)
            .map(|list| list.iter().filter_map(Value::as_str).map(str::to_owned).collect())
            .unwrap_or_default();
        WorkerCalls::new(
            &manifest.id,
            capabilities,
            options.config.clone(),
            options.worker_calls.clone(),
        )
    }

    /// Answers request `id` on its own task; the response goes to `writer`. A call over
    /// the in-flight bound is refused at once, so a flood never queues without bound.
    pub(crate) fn spawn_answer(
        self: &Arc<Self>,
        id: RequestId,
        method: String,
        params: Value,
        parent: Option<String>,
        writer: Option<mpsc::UnboundedSender<Vec<u8>>>,
    ) {
        let Some(writer) = writer else { return };
        let limit = self.options.limits.max_in_flight;
        if self.in_flight.fetch_add(1, Ordering::SeqCst) >= limit {
            self.in_flight.fetch_sub(1, Ordering::SeqCst);
            let error = refuse(
                codes::WORKER_UNAVAILABLE,
                format!("\"{method}\" refused: {limit} worker-to-host calls are already in flight (the limit)"),
            );
            let _ = writer.send(protocol::error_response_line(Some(&id), &error));
            return;
        }
        let calls = self.clone();
        tokio::spawn(async move {
            let answer = calls.answer(&method, params, parent.as_deref()).await;
            calls.in_flight.fetch_sub(1, Ordering::SeqCst);
            let line = match answer {
                Ok(result) => protocol::response_line(&id, result),
                Err(mut error) => {
                    error.message = calls.redact(&error.message);
                    protocol::error_response_line(Some(&id), &error)
                }
            };
            let _ = writer.send(line);
        });
    }

    /// The answer to one call; `parent` is the `traceparent` of the host request it was
    /// made in, from the host's own record (a `span.record` is parented under it).
    pub(crate) async fn answer(&self, method: &str, params: Value, parent: Option<&str>) -> Result<Value, ErrorObject> {
        let Some((_, capability)) = SUPPORTED_WORKER_METHODS.iter().find(|(m, _)| *m == method) else {
            return Err(refuse(
                codes::METHOD_NOT_FOUND,
                format!("Host does not handle method \"{method}\""),
            ));
        };
        if let Some(capability) = capability
            && !self.capabilities.iter().any(|c| c == capability)
        {
            return Err(refuse(
                codes::CAPABILITY_DENIED,
                format!(
                    "Plugin '{}' is missing required capability '{capability}'",
                    self.plugin_id
                ),
            ));
        }
        let params = match params {
            Value::Null => Value::Object(Default::default()),
            Value::Object(_) => params,
            _ => return Err(invalid(method, "params must be an object")),
        };
        match method {
            "config.get" => Ok(Value::Object(self.config.clone())),
            "state.get" | "state.set" | "state.delete" => state::answer(self, method, &params).await,
            "secrets.resolve" => secrets::resolve(self, &params).await,
            "http.fetch" => http::fetch(self, &params).await,
            _ => telemetry::record(self, method, &params, parent),
        }
    }
}

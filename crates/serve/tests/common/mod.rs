//! A real service on a unix socket in a scratch directory, over the local driver, a
//! call-counting probe driver and a probe behind a (pretend) egress proxy, with a small
//! HTTP client for the tests.

#![allow(dead_code, unreachable_pub)]

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use envrt::core::network::{NetworkBoundary, Policy};
use envrt::core::testkit::{ProbeDriver, ProbeShape};
use envrt::core::{AcquireInput, CapabilityInput, CapabilitySnapshot, LeaseContext, LeaseGrant, ReleaseInput};
use envrt::local::{LocalConfig, LocalDriver};
use envrt::sqlite::SqliteStore;
use envrt::{DriverError, EnvironmentDriver};
use envrt::{Environment, EnvironmentRuntime};
use envrt_serve::{Bound, Endpoint, Limits, Service};
use http_body_util::{BodyExt as _, Full};
use hyper::Request;
use hyper_util::rt::TokioIo;
use serde_json::Value;

/// A running service.
pub struct Harness {
    pub dir: tempfile::TempDir,
    pub socket: PathBuf,
    pub store: SqliteStore,
    pub probe: Arc<ProbeDriver>,
    pub proxied: Arc<ProxiedDriver>,
    pub audit: Arc<Mutex<Vec<Value>>>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    served: Option<tokio::task::JoinHandle<bool>>,
}

/// A probe whose leases are behind an egress proxy of its own (it runs none): it records
/// the policy each lease was acquired under and each update, so a test sees what reached
/// the driver.
pub struct ProxiedDriver {
    probe: ProbeDriver,
    /// `(lease id, policy)` per acquire (`null` without one) and per update, in order.
    pub policies: Mutex<Vec<(String, Value)>>,
}

impl Default for ProxiedDriver {
    fn default() -> Self {
        ProxiedDriver {
            probe: ProbeDriver::new("proxied", ProbeShape::full(), None),
            policies: Mutex::default(),
        }
    }
}

#[async_trait::async_trait]
impl EnvironmentDriver for ProxiedDriver {
    fn key(&self) -> &str {
        "proxied"
    }

    async fn acquire_lease(&self, input: &AcquireInput) -> Result<LeaseGrant, DriverError> {
        let policy = serde_json::to_value(&input.network).unwrap();
        self.policies.lock().unwrap().push((input.lease_id.clone(), policy));
        self.probe.acquire_lease(input).await
    }

    async fn release_lease(&self, input: &ReleaseInput) -> Result<(), DriverError> {
        self.probe.release_lease(input).await
    }

    async fn resolve_capabilities(&self, input: &CapabilityInput) -> Result<CapabilitySnapshot, DriverError> {
        self.probe.resolve_capabilities(input).await
    }

    fn network_boundary(&self, _environment: &Environment) -> NetworkBoundary {
        NetworkBoundary::Proxied
    }

    async fn update_network_policy(&self, context: &LeaseContext, policy: &Policy) -> Result<(), DriverError> {
        let policy = serde_json::to_value(policy).unwrap();
        self.policies.lock().unwrap().push((context.lease.id.clone(), policy));
        Ok(())
    }
}

/// A response: status, content type and body.
pub struct Answer {
    pub status: u16,
    pub body: Bytes,
}

impl Answer {
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&self.body)))
    }
}

impl Harness {
    pub async fn start() -> Harness {
        Self::start_with(Limits::default()).await
    }

    pub async fn start_with(limits: Limits) -> Harness {
        let dir = tempfile::tempdir().unwrap();
        Self::start_in(dir, limits).await
    }

    /// A service over the store and workspaces in `dir` (kept from an earlier one).
    pub async fn start_in(dir: tempfile::TempDir, limits: Limits) -> Harness {
        Self::start_full(dir, limits, std::time::Duration::from_secs(10)).await
    }

    /// Like [`start_in`](Self::start_in), draining for at most `drain` on stop.
    pub async fn start_full(dir: tempfile::TempDir, limits: Limits, drain: std::time::Duration) -> Harness {
        let store = SqliteStore::open(dir.path().join("envrt.db")).await.unwrap();
        let runtime = EnvironmentRuntime::with_store(Arc::new(store.clone()));
        let local = LocalDriver::new(LocalConfig {
            root: Some(dir.path().join("workspaces")),
            ..Default::default()
        })
        .unwrap();
        runtime.register_driver(Arc::new(local));
        // Duplex declared, so a probe lease grants the duplex channel.
        let declaration = envrt::core::capability::CapabilityDeclaration {
            duplex_command_stream: Some(true),
            ..Default::default()
        };
        let probe = Arc::new(ProbeDriver::new("probe", ProbeShape::full(), Some(declaration)));
        runtime.register_driver(probe.clone());
        let proxied = Arc::new(ProxiedDriver::default());
        runtime.register_driver(proxied.clone());
        runtime
            .put_environment(Environment::new("local", "Local", "local"))
            .await
            .unwrap();
        runtime
            .put_environment(Environment::new("probe", "Probe", "probe"))
            .await
            .unwrap();
        let mut fenced = Environment::new("proxied", "Proxied", "proxied");
        fenced.network = Some(
            serde_json::from_value(serde_json::json!({ "egress": "none", "grantable": ["example.org:443"] })).unwrap(),
        );
        runtime.put_environment(fenced).await.unwrap();
        let audit = Arc::new(Mutex::new(Vec::new()));
        let lines = Arc::clone(&audit);
        let sink: envrt_serve::AuditSink = Arc::new(move |line| lines.lock().unwrap().push(line.clone()));
        let service = Service::with_audit(Arc::new(runtime), store.clone(), limits, Some(sink));
        let socket = dir.path().join("serve.sock");
        let bound = Bound::bind(&Endpoint::Unix(socket.clone())).await.unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let stopping = Arc::clone(&service);
        let served = tokio::spawn(bound.serve(
            envrt_serve::app(service),
            async move {
                let _ = stopped.await;
                stopping.stop();
            },
            drain,
        ));
        Harness {
            dir,
            socket,
            store,
            probe,
            proxied,
            audit,
            stop: Some(stop),
            served: Some(served),
        }
    }

    /// Stops the service and waits for it; returns the scratch directory.
    pub async fn stop(self) -> tempfile::TempDir {
        let (drained, dir) = self.stop_drained().await;
        assert!(drained, "the service did not drain");
        dir
    }

    /// Stops the service; whether every request ended within the drain bound.
    pub async fn stop_drained(mut self) -> (bool, tempfile::TempDir) {
        let _ = self.stop.take().unwrap().send(());
        let drained = self.served.take().unwrap().await.unwrap();
        (drained, self.dir)
    }

    /// Signals the stop without waiting; [`stopped`](Self::stopped) waits.
    pub fn signal_stop(&mut self) {
        let _ = self.stop.take().unwrap().send(());
    }

    /// Waits for a signalled stop; whether every request ended within the drain bound.
    pub async fn stopped(&mut self) -> bool {
        self.served.take().unwrap().await.unwrap()
    }

    /// Starts a request and answers its response head, its body still to read.
    pub async fn open(
        &self,
        method: &str,
        path: &str,
        token: &str,
        body: String,
    ) -> hyper::Response<hyper::body::Incoming> {
        let stream = tokio::net::UnixStream::connect(&self.socket).await.unwrap();
        let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .unwrap();
        tokio::spawn(connection);
        let request = Request::builder()
            .method(method)
            .uri(format!("http://serve{path}"))
            .header("host", "serve")
            .header("authorization", format!("Bearer {token}"))
            .body(Full::new(Bytes::from(body)))
            .unwrap();
        sender.send_request(request).await.unwrap()
    }

    /// A token for `tenant` allowing `ops` (every operation when empty).
    pub async fn token(&self, tenant: &str, ops: &[&str]) -> (String, String) {
        let ops: Vec<String> = ops.iter().map(|o| (*o).to_owned()).collect();
        let ops = envrt_serve::auth::parse_ops(&ops).unwrap();
        let made = envrt_serve::auth::new_token(tenant, ops, 1).unwrap();
        self.store.put_token(made.record.clone()).await.unwrap();
        (made.record.id, made.token)
    }

    /// One request with an optional `Authorization` header value.
    pub async fn send(&self, method: &str, path: &str, auth: Option<&str>, body: impl Into<Bytes>) -> Answer {
        let stream = tokio::net::UnixStream::connect(&self.socket).await.unwrap();
        let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .unwrap();
        tokio::spawn(connection);
        let mut request = Request::builder().method(method).uri(format!("http://serve{path}"));
        request = request.header("host", "serve");
        if let Some(auth) = auth {
            request = request.header("authorization", auth);
        }
        let request = request.body(Full::new(body.into())).unwrap();
        let response = sender.send_request(request).await.unwrap();
        let status = response.status().as_u16();
        let body = response.into_body().collect().await.unwrap().to_bytes();
        Answer { status, body }
    }

    /// A request with bearer `token` and a JSON body (none for `Value::Null`).
    pub async fn call(&self, method: &str, path: &str, token: &str, body: Value) -> Answer {
        let bytes = if body.is_null() {
            Bytes::new()
        } else {
            Bytes::from(body.to_string())
        };
        self.send(method, path, Some(&format!("Bearer {token}")), bytes).await
    }

    /// Acquires a lease on `environment` with `token`; returns its id.
    pub async fn acquire(&self, token: &str, environment: &str) -> String {
        let answer = self
            .call(
                "POST",
                "/v1/leases",
                token,
                serde_json::json!({ "environmentId": environment }),
            )
            .await;
        assert_eq!(answer.status, 201, "{}", String::from_utf8_lossy(&answer.body));
        answer.json()["id"].as_str().unwrap().to_owned()
    }

    /// How many local workspaces exist (one per live local lease).
    pub fn local_workspaces(&self) -> usize {
        std::fs::read_dir(self.dir.path().join("workspaces"))
            .map(|d| {
                d.filter_map(Result::ok)
                    .filter(|e| e.file_name().to_string_lossy().starts_with("lease-"))
                    .count()
            })
            .unwrap_or(0)
    }
}

/// The error body `{"kind", "message"}`.
pub fn error(kind: &str, message: &str) -> Value {
    serde_json::json!({ "kind": kind, "message": message })
}

/// The route of process `id` (`{lease}/{n}`, as the service answers it), with `rest`
/// appended (`""`, `"/output"`, ...).
pub fn process_path(id: &str, rest: &str) -> String {
    let (lease, n) = id.rsplit_once('/').expect("a process id is {lease}/{n}");
    format!("/v1/leases/{lease}/processes/{n}{rest}")
}

/// The lines of an NDJSON body.
pub fn ndjson(body: &[u8]) -> Vec<Value> {
    String::from_utf8(body.to_vec())
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The bytes of `stream` in output chunk lines, checking each chunk starts where the
/// previous one of its stream ended (from `from`).
pub fn stream_bytes(lines: &[Value], stream: &str, from: u64) -> Vec<u8> {
    use base64::Engine as _;
    let mut out = Vec::new();
    for line in lines.iter().filter(|l| l["stream"] == stream) {
        assert_eq!(line["offset"], from + out.len() as u64, "{line}");
        let data = base64::engine::general_purpose::STANDARD
            .decode(line["data"].as_str().unwrap())
            .unwrap();
        out.extend_from_slice(&data);
    }
    out
}

/// Reads NDJSON lines of a live body until one satisfies `done`; returns every line read.
pub async fn read_lines_until(body: &mut hyper::body::Incoming, done: impl Fn(&Value) -> bool) -> Vec<Value> {
    let mut pending = Vec::new();
    let mut lines = Vec::new();
    loop {
        while let Some(at) = pending.iter().position(|b| *b == b'\n') {
            let line: Value = serde_json::from_slice(&pending[..at]).unwrap();
            pending.drain(..=at);
            let stop = done(&line);
            lines.push(line);
            if stop {
                return lines;
            }
        }
        let frame = tokio::time::timeout(std::time::Duration::from_secs(30), body.frame())
            .await
            .expect("no line within 30 s")
            .expect("the body ended")
            .unwrap();
        if let Some(data) = frame.data_ref() {
            pending.extend_from_slice(data);
        }
    }
}

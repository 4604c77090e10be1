//! A real service on a unix socket in a scratch directory, over the local driver and a
//! call-counting probe driver, with a small HTTP client for the tests.

#![allow(dead_code, unreachable_pub)]

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use envrt::core::testkit::{ProbeDriver, ProbeShape};
use envrt::local::{LocalConfig, LocalDriver};
use envrt::sqlite::SqliteStore;
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
    pub audit: Arc<Mutex<Vec<Value>>>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    served: Option<tokio::task::JoinHandle<bool>>,
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
        runtime
            .put_environment(Environment::new("local", "Local", "local"))
            .await
            .unwrap();
        runtime
            .put_environment(Environment::new("probe", "Probe", "probe"))
            .await
            .unwrap();
        let audit = Arc::new(Mutex::new(Vec::new()));
        let lines = Arc::clone(&audit);
        let sink: envrt_serve::AuditSink = Arc::new(move |line| lines.lock().unwrap().push(line.clone()));
        let service = Service::with_audit(Arc::new(runtime), store.clone(), limits, Some(sink));
        let socket = dir.path().join("serve.sock");
        let bound = Bound::bind(&Endpoint::Unix(socket.clone())).await.unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let served = tokio::spawn(bound.serve(
            envrt_serve::app(service),
            async move {
                let _ = stopped.await;
            },
            drain,
        ));
        Harness {
            dir,
            socket,
            store,
            probe,
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

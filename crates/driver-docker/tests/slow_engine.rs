//! A slow engine is not an unreachable one: behind a proxy that holds every answer of the
//! real engine for longer than the API timeout, a whole lease cycle still completes; an
//! engine whose socket is gone or refuses fails each call at once with the exact text.

mod common;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use envrt_driver_docker::{DockerConfig, DockerDriver};
use envrt_runtime_core::{AcquireRequest, DriverError, EnvironmentRuntime, ExecuteRequest, LeaseStatus, RuntimeError};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{UnixListener, UnixStream};
use tokio::task::JoinHandle;

/// Which request, once, has its connection cut instead of being forwarded.
type Cut = fn(&[u8]) -> bool;

/// A unix-socket front for the real engine. With a `hold`, the first bytes of every answer
/// (anything the engine sends after the client last sent something) wait that long. With
/// a `cut`, the first request it matches is never forwarded: its connection closes.
struct Proxy {
    path: PathBuf,
    tasks: Arc<Mutex<Vec<JoinHandle<()>>>>,
    /// How many requests the `cut` matched.
    cuts: Arc<AtomicU64>,
}

/// What the request side of one connection shares.
struct Pump {
    sent: Arc<AtomicU64>,
    cut: Option<Cut>,
    cuts: Arc<AtomicU64>,
    answers: tokio::task::AbortHandle,
}

async fn pump_requests(
    mut from: tokio::net::unix::OwnedReadHalf,
    mut to: tokio::net::unix::OwnedWriteHalf,
    pump: Pump,
) {
    let Pump {
        sent,
        cut,
        cuts,
        answers,
    } = pump;
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match from.read(&mut buf).await {
            Ok(0) | Err(_) => {
                let _ = to.shutdown().await;
                return;
            }
            Ok(n) => {
                if cut.is_some_and(|cut| cut(&buf[..n])) && cuts.fetch_add(1, Ordering::SeqCst) == 0 {
                    answers.abort();
                    return;
                }
                // Counted before it leaves, so the answer cannot overtake the count.
                sent.fetch_add(1, Ordering::SeqCst);
                if to.write_all(&buf[..n]).await.is_err() {
                    return;
                }
            }
        }
    }
}

async fn pump_answers(
    mut from: tokio::net::unix::OwnedReadHalf,
    mut to: tokio::net::unix::OwnedWriteHalf,
    sent: Arc<AtomicU64>,
    hold: Duration,
) {
    let mut buf = vec![0u8; 64 * 1024];
    let mut answered = 0;
    loop {
        match from.read(&mut buf).await {
            Ok(0) | Err(_) => {
                let _ = to.shutdown().await;
                return;
            }
            Ok(n) => {
                let now = sent.load(Ordering::SeqCst);
                if now != answered {
                    answered = now;
                    tokio::time::sleep(hold).await;
                }
                if to.write_all(&buf[..n]).await.is_err() {
                    return;
                }
            }
        }
    }
}

impl Proxy {
    async fn start(dir: &Path, engine: String, hold: Duration, cut: Option<Cut>) -> Proxy {
        let path = dir.join("engine.sock");
        let listener = UnixListener::bind(&path).unwrap();
        let tasks: Arc<Mutex<Vec<JoinHandle<()>>>> = Arc::default();
        let cuts: Arc<AtomicU64> = Arc::default();
        let inner = tasks.clone();
        let counted = cuts.clone();
        let accept = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(upstream) = UnixStream::connect(&engine).await else {
                    continue;
                };
                let (client_read, client_write) = client.into_split();
                let (up_read, up_write) = upstream.into_split();
                let sent = Arc::new(AtomicU64::new(0));
                let answers = tokio::spawn(pump_answers(up_read, client_write, sent.clone(), hold));
                let pump = Pump {
                    sent,
                    cut,
                    cuts: counted.clone(),
                    answers: answers.abort_handle(),
                };
                let requests = tokio::spawn(pump_requests(client_read, up_write, pump));
                inner.lock().unwrap().extend([requests, answers]);
            }
        });
        tasks.lock().unwrap().push(accept);
        Proxy { path, tasks, cuts }
    }

    fn address(&self) -> String {
        format!("unix://{}", self.path.display())
    }

    /// Closes the listener and every open connection.
    fn stop(&self) {
        for task in self.tasks.lock().unwrap().drain(..) {
            task.abort();
        }
    }
}

fn engine_socket() -> Option<String> {
    let host = DockerConfig::default().resolved_host();
    match host.strip_prefix("unix://") {
        Some(path) => Some(path.to_owned()),
        None => {
            eprintln!("SKIPPED: the engine is not on a unix socket ({host})");
            None
        }
    }
}

fn driver_error(error: RuntimeError) -> DriverError {
    match error {
        RuntimeError::Driver(d) => d,
        other => panic!("not a driver error: {other:?}"),
    }
}

fn assert_unreachable(error: &DriverError, address: &str, doing: &str) {
    assert!(matches!(error, DriverError::Unavailable { .. }), "{error:?}");
    assert_eq!(
        error.to_string(),
        format!("Docker engine at {address} is not reachable ({doing}).")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_engine_is_waited_for_through_a_whole_lease() {
    let h = harness_or_skip!();
    let Some(socket) = engine_socket() else {
        h.finish().await;
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    common::bounded(600, async {
        // Every answer takes 1.5 s; the API timeout is 0.5 s.
        let proxy = Proxy::start(dir.path(), socket, Duration::from_millis(1500), None).await;
        let mut cfg = common::scoped_config(&h.run);
        cfg.host = Some(proxy.address());
        cfg.api_timeout = Duration::from_millis(500);
        cfg.connect_timeout = Duration::from_secs(20);
        let driver = Arc::new(DockerDriver::connect(cfg).await.unwrap());
        let runtime = EnvironmentRuntime::new();
        runtime.register_driver(driver.clone());
        let env_id = h.environment(serde_json::json!({})).await;
        runtime
            .put_environment(h.runtime.environment(&env_id).await.unwrap().unwrap())
            .await
            .unwrap();
        let lease = runtime
            .acquire_lease(AcquireRequest::new(&env_id, "acme"))
            .await
            .unwrap();
        let mut request = ExecuteRequest::new("sh", ["-c", "cat; echo done >&2"]);
        request.stdin = Some(b"through a slow engine".to_vec());
        let result = runtime.execute(&lease.id, request).await.unwrap();
        assert_eq!(result.exit_code, Some(0));
        assert_eq!(result.stdout, b"through a slow engine");
        assert_eq!(result.stderr, b"done\n");
        assert_eq!(driver.managed_containers().await.unwrap().len(), 1);
        runtime.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
        assert_eq!(
            runtime.lease(&lease.id).await.unwrap().unwrap().status,
            LeaseStatus::Released
        );
        assert_eq!(driver.managed_containers().await.unwrap(), Vec::new());
        proxy.stop();
    })
    .await;
    h.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_engine_gone_or_refusing_fails_each_call_at_once() {
    let h = harness_or_skip!();
    let Some(socket) = engine_socket() else {
        h.finish().await;
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let proxy = Proxy::start(dir.path(), socket, Duration::ZERO, None).await;
    let address = proxy.address();
    let mut cfg = common::scoped_config(&h.run);
    cfg.host = Some(address.clone());
    // Far longer than the liveness bound below: waiting or retrying would show.
    cfg.api_timeout = Duration::from_secs(120);
    let driver = Arc::new(DockerDriver::connect(cfg).await.unwrap());
    let runtime = EnvironmentRuntime::new();
    runtime.register_driver(driver.clone());
    let env_id = h.environment(serde_json::json!({})).await;
    runtime
        .put_environment(h.runtime.environment(&env_id).await.unwrap().unwrap())
        .await
        .unwrap();
    let lease = runtime
        .acquire_lease(AcquireRequest::new(&env_id, "acme"))
        .await
        .unwrap();

    common::bounded(60, async {
        // Refused: the socket file is there, nobody listens.
        proxy.stop();
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(proxy.path.exists());
        let e = driver_error(
            runtime
                .execute(&lease.id, ExecuteRequest::new("true", [""; 0]))
                .await
                .unwrap_err(),
        );
        assert_unreachable(&e, &address, "starting a command");
        assert_unreachable(
            &driver.reap_orphans(&[]).await.unwrap_err(),
            &address,
            "listing containers",
        );

        // Gone: no socket file at all.
        std::fs::remove_file(&proxy.path).unwrap();
        let e = driver_error(
            runtime
                .execute(&lease.id, ExecuteRequest::new("true", [""; 0]))
                .await
                .unwrap_err(),
        );
        assert_unreachable(&e, &address, "starting a command");
        let e = driver_error(
            runtime
                .release_lease(&lease.id, LeaseStatus::Released)
                .await
                .unwrap_err(),
        );
        assert_unreachable(&e, &address, "inspecting a container");
        let e = DockerDriver::connect(DockerConfig {
            host: Some(address.clone()),
            ..Default::default()
        })
        .await
        .unwrap_err();
        assert_unreachable(&e, &address, "connecting");
    })
    .await;
    h.finish().await;
}

/// `GET .../containers/<id>/json`: inspecting one container (not listing them).
fn is_inspect(request: &[u8]) -> bool {
    let head = String::from_utf8_lossy(&request[..request.len().min(200)]);
    let path = head
        .strip_prefix("GET ")
        .and_then(|r| r.split(' ').next())
        .unwrap_or("");
    path.contains("/containers/") && path.ends_with("/json") && !path.contains("/containers/json")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idempotent_request_whose_connection_breaks_is_sent_again() {
    let h = harness_or_skip!();
    let Some(socket) = engine_socket() else {
        h.finish().await;
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    common::bounded(120, async {
        let proxy = Proxy::start(dir.path(), socket, Duration::ZERO, Some(is_inspect)).await;
        let mut cfg = common::scoped_config(&h.run);
        cfg.host = Some(proxy.address());
        let driver = Arc::new(DockerDriver::connect(cfg).await.unwrap());
        let runtime = EnvironmentRuntime::new();
        runtime.register_driver(driver.clone());
        let env_id = h.environment(serde_json::json!({})).await;
        runtime
            .put_environment(h.runtime.environment(&env_id).await.unwrap().unwrap())
            .await
            .unwrap();
        let lease = runtime
            .acquire_lease(AcquireRequest::new(&env_id, "acme"))
            .await
            .unwrap();
        // Releasing inspects the container first: that request's connection is cut once.
        runtime.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
        assert_eq!(
            proxy.cuts.load(Ordering::SeqCst),
            2,
            "the inspect was cut once, then sent again"
        );
        assert_eq!(
            runtime.lease(&lease.id).await.unwrap().unwrap().status,
            LeaseStatus::Released
        );
        assert_eq!(driver.managed_containers().await.unwrap(), Vec::new());
        proxy.stop();
    })
    .await;
    h.finish().await;
}

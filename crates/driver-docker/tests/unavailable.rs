//! An engine that is absent, silent or stops: every operation fails fast with an error
//! that names the address.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use envrt_driver_docker::{DockerConfig, DockerDriver};
use envrt_runtime_core::{
    DriverError, EnvironmentRuntime, ExecuteRequest, LeaseStatus, RuntimeError, SyncFile, SyncOperation,
    WorkspaceRequest,
};
use tokio::task::JoinHandle;

fn config(host: &str) -> DockerConfig {
    DockerConfig {
        host: Some(host.to_owned()),
        connect_timeout: Duration::from_secs(1),
        ..Default::default()
    }
}

fn assert_unreachable(error: &DriverError, address: &str, doing: &str) {
    assert!(matches!(error, DriverError::Unavailable { .. }), "{error:?}");
    assert_eq!(
        error.to_string(),
        format!("Docker engine at {address} is not reachable ({doing}).")
    );
}

#[tokio::test]
async fn a_missing_socket_is_unavailable_at_once() {
    let err = common::bounded(10, DockerDriver::connect(config("unix:///nonexistent.sock")))
        .await
        .unwrap_err();
    assert_unreachable(&err, "unix:///nonexistent.sock", "connecting");
}

#[tokio::test]
async fn a_tcp_port_nobody_listens_on_is_unavailable() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = format!("tcp://{}", listener.local_addr().unwrap());
    drop(listener);
    let err = common::bounded(10, DockerDriver::connect(config(&address)))
        .await
        .unwrap_err();
    assert_unreachable(&err, &address, "connecting");
}

#[tokio::test]
async fn a_silent_engine_is_unavailable_after_the_connect_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("silent.sock");
    // Bound but never accepted from: the kernel queues the connection, nobody answers.
    let _listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
    let address = format!("unix://{}", path.display());
    let err = common::bounded(10, DockerDriver::connect(config(&address)))
        .await
        .unwrap_err();
    assert_unreachable(&err, &address, "connecting");
    let source = std::error::Error::source(&err).unwrap().to_string();
    assert_eq!(source, "no answer within 1000 ms");
}

#[tokio::test]
async fn an_unsupported_scheme_is_invalid_input() {
    let err = DockerDriver::connect(config("ssh://somewhere")).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "Invalid input: Docker host \"ssh://somewhere\" is not supported: use unix:///path, tcp://host:port or http://host:port."
    );
}

/// A TCP front for the local engine socket that can be cut off.
struct Proxy {
    address: String,
    tasks: Arc<Mutex<Vec<JoinHandle<()>>>>,
}

impl Proxy {
    async fn start(socket: String) -> Proxy {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = format!("tcp://{}", listener.local_addr().unwrap());
        let tasks: Arc<Mutex<Vec<JoinHandle<()>>>> = Arc::default();
        let inner = tasks.clone();
        let accept = tokio::spawn(async move {
            while let Ok((mut tcp, _)) = listener.accept().await {
                let socket = socket.clone();
                let conn = tokio::spawn(async move {
                    if let Ok(mut unix) = tokio::net::UnixStream::connect(&socket).await {
                        let _ = tokio::io::copy_bidirectional(&mut tcp, &mut unix).await;
                    }
                });
                inner.lock().unwrap().push(conn);
            }
        });
        tasks.lock().unwrap().push(accept);
        Proxy { address, tasks }
    }

    /// The engine "stops": the port closes and every open connection drops.
    fn stop(&self) {
        for task in self.tasks.lock().unwrap().drain(..) {
            task.abort();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_operation_fails_fast_and_clearly_once_the_engine_stops() {
    let h = harness_or_skip!();
    let host = DockerConfig::default().resolved_host();
    let Some(socket) = host.strip_prefix("unix://").map(str::to_owned) else {
        eprintln!("SKIPPED: the engine is not on a unix socket ({host})");
        h.finish().await;
        return;
    };
    common::bounded(120, async {
        let proxy = Proxy::start(socket).await;
        let mut cfg = common::scoped_config(&h.run);
        cfg.host = Some(proxy.address.clone());
        cfg.api_timeout = Duration::from_secs(5);
        let driver = Arc::new(DockerDriver::connect(cfg).await.unwrap());
        assert_eq!(driver.address(), proxy.address);
        let runtime = EnvironmentRuntime::new();
        runtime.register_driver(driver.clone());
        let env_id = h.environment(serde_json::json!({})).await;
        let env = h.runtime.environment(&env_id).await.unwrap().unwrap();
        runtime.put_environment(env).await.unwrap();
        let lease = runtime
            .acquire_lease(envrt_runtime_core::AcquireRequest::new(&env_id, "acme"))
            .await
            .unwrap();
        let other = runtime
            .acquire_lease(envrt_runtime_core::AcquireRequest::new(&env_id, "acme"))
            .await
            .unwrap();
        assert_eq!(
            runtime
                .execute(&lease.id, ExecuteRequest::new("true", [""; 0]))
                .await
                .unwrap()
                .exit_code,
            Some(0)
        );

        proxy.stop();
        let address = proxy.address.clone();
        let driver_error = |e: RuntimeError| match e {
            RuntimeError::Driver(d) => d,
            other => panic!("not a driver error: {other:?}"),
        };
        let host_dir = tempfile::tempdir().unwrap();
        std::fs::write(host_dir.path().join("f"), b"x").unwrap();
        let sync = |source: &str, target: &str| SyncOperation {
            operation_id: "o".into(),
            files: vec![SyncFile::file(source, target)],
            post_upload_commands: Vec::new(),
        };

        let e = driver_error(
            runtime
                .execute(&lease.id, ExecuteRequest::new("true", [""; 0]))
                .await
                .unwrap_err(),
        );
        assert_unreachable(&e, &address, "starting a command");
        let e = driver_error(
            runtime
                .sync_in(&lease.id, &[sync(host_dir.path().join("f").to_str().unwrap(), "f")])
                .await
                .unwrap_err(),
        );
        assert_unreachable(&e, &address, "creating sync target directories");
        let e = driver_error(
            runtime
                .sync_out(&lease.id, &[sync("f", host_dir.path().join("g").to_str().unwrap())])
                .await
                .unwrap_err(),
        );
        assert_unreachable(&e, &address, "reading a sync source");
        let e = driver_error(
            runtime
                .open_duplex_channel(&lease.id, &["cat".into()])
                .await
                .err()
                .unwrap(),
        );
        assert_unreachable(&e, &address, "starting a command");
        let e = driver_error(
            runtime
                .realize_workspace(&lease.id, &WorkspaceRequest::default())
                .await
                .unwrap_err(),
        );
        assert_unreachable(&e, &address, "realizing a workspace");
        let e = driver_error(
            runtime
                .release_lease(&lease.id, LeaseStatus::Released)
                .await
                .unwrap_err(),
        );
        assert_unreachable(&e, &address, "inspecting a container");
        assert_eq!(
            runtime.lease(&lease.id).await.unwrap().unwrap().status,
            LeaseStatus::PendingCleanup
        );
        let e = driver_error(runtime.destroy_lease(&other.id).await.unwrap_err());
        assert_unreachable(&e, &address, "inspecting a container");
        let e = driver_error(
            runtime
                .acquire_lease(envrt_runtime_core::AcquireRequest::new(&env_id, "acme"))
                .await
                .unwrap_err(),
        );
        assert_unreachable(&e, &address, "creating a container");
        assert_unreachable(
            &driver.reap_orphans(&[]).await.unwrap_err(),
            &address,
            "listing containers",
        );
        // A fresh connect fails the same way.
        assert_unreachable(
            &DockerDriver::connect(config(&address)).await.unwrap_err(),
            &address,
            "connecting",
        );
    })
    .await;
    // The containers made through the proxy are removed through the real socket.
    h.finish().await;
}

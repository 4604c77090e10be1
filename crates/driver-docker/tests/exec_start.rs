//! An exec the engine has answered the start of but not yet marked running (the engine
//! writes the attach's `101` before it starts the process, a window that grows under
//! load) is not an exec that ended: a duplex channel's wait still gets the exit code, an
//! execute is not taken for one whose command exited (and then killed), and a duplex
//! `stop` still kills the command. The window is widened here by a proxy in front of the
//! real engine that answers an exec start with the engine's own `101` at once and hands
//! the request to the engine a second later; every other byte passes unchanged.

mod common;

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use envrt_driver_docker::{DockerConfig, DockerDriver};
use envrt_runtime_core::{AcquireRequest, EnvironmentRuntime, ExecuteRequest, Lease};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::unix::OwnedWriteHalf;
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::Mutex;

/// How long the proxy keeps an exec start from the engine after answering it.
const HOLD: Duration = Duration::from_secs(1);
/// What the engine answers an attached exec start with (Engine API, hijacked stream).
const UPGRADED: &[u8] =
    b"HTTP/1.1 101 UPGRADED\r\nContent-Type: application/vnd.docker.multiplexed-stream\r\nConnection: Upgrade\r\nUpgrade: tcp\r\n\r\n";

fn is_exec_start(chunk: &[u8]) -> bool {
    let head = String::from_utf8_lossy(&chunk[..chunk.len().min(256)]);
    head.starts_with("POST ") && head.contains("/exec/") && head.contains("/start ")
}

/// Client to engine; an exec start is answered at once and sent on after [`HOLD`].
async fn requests(
    mut from: tokio::net::unix::OwnedReadHalf,
    mut to: OwnedWriteHalf,
    client: Arc<Mutex<OwnedWriteHalf>>,
    strip: Arc<AtomicBool>,
) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        if is_exec_start(&buf[..n]) {
            strip.store(true, Ordering::SeqCst);
            if client.lock().await.write_all(UPGRADED).await.is_err() {
                return;
            }
            tokio::time::sleep(HOLD).await;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

/// Engine to client, less the engine's own `101` head after a start answered early.
async fn answers(
    mut from: tokio::net::unix::OwnedReadHalf,
    client: Arc<Mutex<OwnedWriteHalf>>,
    strip: Arc<AtomicBool>,
) {
    let mut buf = vec![0u8; 64 * 1024];
    let mut held = Vec::new();
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => {
                let _ = client.lock().await.shutdown().await;
                return;
            }
            Ok(n) => n,
        };
        let mut out = &buf[..n];
        if strip.load(Ordering::SeqCst) {
            held.extend_from_slice(out);
            let Some(end) = held.windows(4).position(|w| w == b"\r\n\r\n") else {
                continue;
            };
            strip.store(false, Ordering::SeqCst);
            let rest = held.split_off(end + 4);
            held = rest;
            out = &held;
        }
        if client.lock().await.write_all(out).await.is_err() {
            return;
        }
        held.clear();
    }
}

async fn proxy(dir: &Path, engine: String) -> String {
    let path = dir.join("engine.sock");
    let listener = UnixListener::bind(&path).unwrap();
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let Ok(upstream) = UnixStream::connect(&engine).await else {
                continue;
            };
            let (client_read, client_write) = client.into_split();
            let (up_read, up_write) = upstream.into_split();
            let client_write = Arc::new(Mutex::new(client_write));
            let strip = Arc::new(AtomicBool::new(false));
            tokio::spawn(answers(up_read, client_write.clone(), strip.clone()));
            tokio::spawn(requests(client_read, up_write, client_write, strip));
        }
    });
    format!("unix://{}", path.display())
}

/// A runtime whose driver talks to the engine through the proxy, and a lease on it.
async fn behind_proxy(h: &common::Harness, dir: &Path) -> Option<(EnvironmentRuntime, Lease)> {
    let host = DockerConfig::default().resolved_host();
    let Some(socket) = host.strip_prefix("unix://") else {
        envrt_test_support::Component::Docker.skip_or_fail(
            format_args!("ENVRT_REQUIRE_DOCKER=1 but the engine is not on a unix socket ({host})"),
            format_args!("SKIPPED: the engine is not on a unix socket ({host})"),
        );
        return None;
    };
    let mut config = common::scoped_config(&h.run);
    config.host = Some(proxy(dir, socket.to_owned()).await);
    let driver = Arc::new(DockerDriver::connect(config).await.unwrap());
    let runtime = EnvironmentRuntime::new();
    runtime.register_driver(driver);
    let env = h.environment(serde_json::json!({})).await;
    runtime
        .put_environment(h.runtime.environment(&env).await.unwrap().unwrap())
        .await
        .unwrap();
    let lease = runtime.acquire_lease(AcquireRequest::new(&env, "acme")).await.unwrap();
    Some((runtime, lease))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_duplex_wait_right_after_the_start_gets_the_exit_code() {
    let h = harness_or_skip!();
    let dir = tempfile::tempdir().unwrap();
    common::bounded(120, async {
        let Some((runtime, lease)) = behind_proxy(&h, dir.path()).await else {
            return;
        };
        let argv = [
            "sh".to_owned(),
            "-c".to_owned(),
            "echo out; echo err >&2; exit 3".to_owned(),
        ];
        let channel = runtime.open_duplex_channel(&lease.id, &argv).await.unwrap();
        let exit = channel.wait().await.unwrap();
        assert_eq!(exit.exit_code, Some(3), "{exit:?}");
        assert!(!exit.transport_closed);
        let mut got = Vec::new();
        while let Some(chunk) = channel.read().await.unwrap() {
            got.extend(chunk);
        }
        assert_eq!(String::from_utf8_lossy(&got), "out\nerr\n");
        channel.close().await.unwrap();
    })
    .await;
    h.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_execute_not_yet_marked_running_is_not_taken_for_an_exited_one() {
    let h = harness_or_skip!();
    let dir = tempfile::tempdir().unwrap();
    common::bounded(120, async {
        let Some((runtime, lease)) = behind_proxy(&h, dir.path()).await else {
            return;
        };
        let r = runtime
            .execute(&lease.id, ExecuteRequest::new("sh", ["-c", "sleep 1; echo done"]))
            .await
            .unwrap();
        // Taken for exited at the first look (100 ms), it was killed before its echo.
        assert_eq!((r.exit_code, r.signal.as_deref()), (Some(0), None));
        assert_eq!(r.stdout, b"done\n");
    })
    .await;
    h.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_duplex_stop_right_after_the_start_still_kills_the_command() {
    let h = harness_or_skip!();
    let dir = tempfile::tempdir().unwrap();
    common::bounded(120, async {
        let Some((runtime, lease)) = behind_proxy(&h, dir.path()).await else {
            return;
        };
        let argv = ["sleep".to_owned(), "3001".to_owned()];
        let channel = runtime.open_duplex_channel(&lease.id, &argv).await.unwrap();
        channel.stop().await.unwrap();
        // Returns once the command is over (the bound of the test only catches a hang).
        let exit = channel.wait().await.unwrap();
        assert_eq!(exit.exit_code, None, "{exit:?}");
        let ps = runtime
            .execute(&lease.id, ExecuteRequest::new("ps", ["-o", "stat,args"]))
            .await
            .unwrap();
        let left: Vec<String> = String::from_utf8_lossy(&ps.stdout)
            .lines()
            .filter(|l| l.contains("sleep 3001") && !l.starts_with('Z'))
            .map(str::to_owned)
            .collect();
        assert_eq!(left, Vec::<String>::new());
        channel.close().await.unwrap();
    })
    .await;
    h.finish().await;
}

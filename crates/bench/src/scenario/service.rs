//! Row 15 (`service`): `envrt serve`, the real binary (`envrt` beside `envrt-bench`, or
//! `$ENVRT_BIN`), started on a state directory of its own with a token of its own:
//!
//! - execute `true` p50 through the service over its unix socket (one keep-alive HTTP/1.1
//!   connection, the request and its JSON answer timed here) against the in-process facade
//!   on the local driver, and against SWE-ReX's `RemoteRuntime.execute` over its own
//!   `swerex-remote` HTTP server on loopback (timed inside SWE-ReX's interpreter,
//!   `peers_driver.py`), interleaved in one run;
//! - 1,000 WebSocket terminal streams at once on one service (`.../terminal?from=0` of one
//!   `tty` process that keeps writing), each having received output: the service's VmRSS
//!   against its VmRSS before they opened;
//! - lease listing (`GET /v1/leases`, 20 leases) over TCP loopback from 16 keep-alive
//!   connections for a fixed time, against a bare hyper server answering the same body
//!   (the HTTP floor of the machine), loaded by `wrk` (`scripts/setup.sh` installs it; its
//!   token header comes from a `0600` script file, never its argv); without `wrk`, by this
//!   bench's own generator, and the row says which.

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::StreamExt as _;
use http_body_util::{BodyExt as _, Full};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::io::AsyncBufReadExt as _;

use crate::Config;
use crate::measure::{interleave_reported, rss_of};
use crate::report::{Figure, Row, Target};
use crate::scenario::peers::{Peer, SWEREX};
use crate::targets::local::Local;

/// The row number.
pub(crate) const NUMBER: u8 = 15;
const GROUP: &str = "service";
const STREAMS: usize = 1_000;
const LISTING_CONNECTIONS: usize = 16;
const LISTED_LEASES: usize = 20;

/// The `envrt` binary: `$ENVRT_BIN`, else beside this executable.
fn envrt_bin() -> Result<PathBuf, String> {
    if let Some(bin) = std::env::var_os("ENVRT_BIN") {
        return Ok(PathBuf::from(bin));
    }
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let bin = exe.with_file_name("envrt");
    if bin.is_file() {
        Ok(bin)
    } else {
        Err(format!(
            "SKIPPED: no envrt binary at {} (cargo build --release --bin envrt, or set ENVRT_BIN)",
            bin.display()
        ))
    }
}

/// A running `envrt serve`, killed when dropped.
struct Served {
    _dir: tempfile::TempDir,
    child: tokio::process::Child,
    pid: String,
    token: String,
    /// `unix:PATH` or `http://ADDR`.
    url: String,
}

impl Served {
    async fn start(listen: Option<&str>) -> Result<Served, String> {
        let bin = envrt_bin()?;
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let command = |args: &[&str]| {
            let mut c = tokio::process::Command::new(&bin);
            c.args(args)
                .current_dir(dir.path())
                .env("ENVRT_STATE_DIR", dir.path().join("state"))
                .env_remove("ENVRT_CONFIG");
            c
        };
        let made = command(&["token", "create", "--tenant", "bench"])
            .output()
            .await
            .map_err(|e| format!("envrt token create: {e}"))?;
        let token = String::from_utf8_lossy(&made.stdout)
            .lines()
            .last()
            .unwrap_or_default()
            .to_owned();
        let socket = dir.path().join("serve.sock");
        let socket_arg = socket.to_string_lossy().into_owned();
        let args = match listen {
            Some(addr) => vec!["serve", "--listen", addr],
            None => vec!["serve", "--socket", socket_arg.as_str()],
        };
        let mut child = command(&args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("envrt serve: {e}"))?;
        let mut lines = tokio::io::BufReader::new(child.stderr.take().ok_or("no stderr")?).lines();
        let url = loop {
            let line = lines
                .next_line()
                .await
                .map_err(|e| e.to_string())?
                .ok_or("envrt serve exited before it listened")?;
            if let Some(url) = line.strip_prefix("envrt serve: listening on ") {
                break url.to_owned();
            }
        };
        // Audit lines keep coming: read them so the pipe never fills.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        let pid = child.id().ok_or("envrt serve has no pid")?.to_string();
        Ok(Served {
            _dir: dir,
            child,
            pid,
            token,
            url,
        })
    }

    /// A new keep-alive HTTP/1.1 connection.
    async fn connect(&self) -> Result<SendRequest<Full<Bytes>>, String> {
        if let Some(path) = self.url.strip_prefix("unix:") {
            let stream = tokio::net::UnixStream::connect(path).await.map_err(|e| e.to_string())?;
            handshake(stream).await
        } else {
            let addr = self.url.trim_start_matches("http://");
            let stream = tokio::net::TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
            stream.set_nodelay(true).map_err(|e| e.to_string())?;
            handshake(stream).await
        }
    }

    async fn stop(mut self) {
        let _ = self.child.kill().await;
    }
}

async fn handshake<S>(stream: S) -> Result<SendRequest<Full<Bytes>>, String>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(connection);
    Ok(sender)
}

/// One request on `sender`; the answer's body, refusing a status other than `expect`.
async fn call(
    sender: &mut SendRequest<Full<Bytes>>,
    token: &str,
    method: &str,
    path: &str,
    body: Option<&Value>,
    expect: u16,
) -> Result<Bytes, String> {
    sender.ready().await.map_err(|e| e.to_string())?;
    let request = hyper::Request::builder()
        .method(method)
        .uri(path)
        .header("host", "bench")
        .header("authorization", format!("Bearer {token}"))
        .header("content-type", "application/json")
        .body(Full::new(body.map_or_else(Bytes::new, |b| Bytes::from(b.to_string()))))
        .map_err(|e| e.to_string())?;
    let response = sender.send_request(request).await.map_err(|e| e.to_string())?;
    let status = response.status().as_u16();
    let bytes = response
        .into_body()
        .collect()
        .await
        .map_err(|e| e.to_string())?
        .to_bytes();
    if status != expect {
        return Err(format!("{method} {path}: {status} {}", String::from_utf8_lossy(&bytes)));
    }
    Ok(bytes)
}

async fn acquire(served: &Served, sender: &mut SendRequest<Full<Bytes>>) -> Result<String, String> {
    let body = call(
        sender,
        &served.token,
        "POST",
        "/v1/leases",
        Some(&json!({ "environmentId": "local" })),
        201,
    )
    .await?;
    let lease: Value = serde_json::from_slice(&body).map_err(|e| e.to_string())?;
    lease["id"]
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| format!("no lease id in {lease}"))
}

/// Row 15, every figure.
pub(crate) async fn rows(config: &Config) -> Vec<Row> {
    let mut rows = execute_rows(config).await;
    rows.push(streams_row().await);
    rows.push(listing_row(config).await);
    rows
}

async fn execute_rows(config: &Config) -> Vec<Row> {
    let name = "execute `true` p50 through envrt serve (unix socket)";
    let served_owned = match Served::start(None).await {
        Ok(s) => s,
        Err(e) => return vec![Row::missing(GROUP, NUMBER, name, e)],
    };
    let served = &served_owned;
    let result = async {
        let mut sender = served.connect().await?;
        let lease = acquire(served, &mut sender).await?;
        let local = Local::open(None).await?;
        let peer = Peer::start(&SWEREX, "swerex")
            .await
            .ok()
            .filter(|p| p.has("swerex-remote"));
        let path = format!("/v1/leases/{lease}/execute");
        let body = json!({ "command": "true" });
        let sender = tokio::sync::Mutex::new(sender);
        let contenders = if peer.is_some() { 3 } else { 2 };
        let (l, p, s, token) = (&local.leased, peer.as_ref(), &sender, served.token.as_str());
        let measured = interleave_reported(contenders, 30, config.exec_rounds(), |i| {
            let (path, body) = (&path, &body);
            async move {
                match i {
                    0 => {
                        let mut sender = s.lock().await;
                        let start = Instant::now();
                        let answer = call(&mut sender, token, "POST", path, Some(body), 200).await?;
                        let elapsed = start.elapsed();
                        let doc: Value = serde_json::from_slice(&answer).map_err(|e| e.to_string())?;
                        if doc["exitCode"] != 0 {
                            return Err(format!("`true` through the service: {doc}"));
                        }
                        Ok(elapsed)
                    }
                    1 => {
                        let start = Instant::now();
                        l.run(&["true"]).await?;
                        Ok(start.elapsed())
                    }
                    _ => match p {
                        Some(p) => p.time("swerex-remote", &["true"], None).await,
                        None => Err("no SWE-ReX".into()),
                    },
                }
            }
        })
        .await;
        local.leased.close().await;
        if let Some(peer) = peer {
            peer.stop().await;
        }
        let mut sender = s.lock().await;
        call(
            &mut sender,
            token,
            "POST",
            &format!("/v1/leases/{lease}/release"),
            Some(&json!({})),
            200,
        )
        .await?;
        measured
    }
    .await;
    served_owned.stop().await;
    let m = match result {
        Ok(m) => m,
        Err(e) => return vec![Row::missing(GROUP, NUMBER, name, format!("error: {e}"))],
    };
    let facade = Row::new(GROUP, NUMBER, name, Figure::ms(m.p(0, 50.0)))
        .baseline("in-process facade (local driver)", Figure::ms(m.p(1, 50.0)))
        .target(Target::RatioAtMost(0, 1.3))
        .note("one keep-alive HTTP/1.1 connection on the unix socket, request to parsed answer; the facade on the same driver in this process");
    let swerex = if m.samples.len() > 2 {
        Row::new(GROUP, NUMBER, format!("{name} vs SWE-ReX remote"), Figure::ms(m.p(0, 50.0)))
            .baseline("SWE-ReX RemoteRuntime.execute (swerex-remote, loopback HTTP)", Figure::ms(m.p(2, 50.0)))
            .target(Target::RatioAtMost(0, 0.5))
            .note("SWE-ReX timed inside its own interpreter: RemoteRuntime.execute(Command([\"true\"], shell=False)) against its server on 127.0.0.1")
    } else {
        Row::missing(
            GROUP,
            NUMBER,
            format!("{name} vs SWE-ReX remote"),
            "SKIPPED: no SWE-ReX venv with swerex-remote (bash scripts/swerex-venv.sh)",
        )
    };
    vec![facade, swerex]
}

/// Opens `STREAMS` terminal WebSockets on one process and waits until each has output.
async fn streams_row() -> Row {
    let name = format!("{STREAMS} WebSocket terminal streams on one service: VmRSS");
    let served = match Served::start(None).await {
        Ok(s) => s,
        Err(e) => return Row::missing(GROUP, NUMBER, name, e),
    };
    let result = async {
        let mut sender = served.connect().await?;
        let lease = acquire(&served, &mut sender).await?;
        let spawn = json!({ "argv": ["sh", "-c", "while :; do echo tick; sleep 0.2; done"], "tty": { "rows": 24, "cols": 80 } });
        let info = call(&mut sender, &served.token, "POST", &format!("/v1/leases/{lease}/processes"), Some(&spawn), 201).await?;
        let info: Value = serde_json::from_slice(&info).map_err(|e| e.to_string())?;
        let number = info["id"].as_str().and_then(|id| id.rsplit('/').next()).unwrap_or("1").to_owned();
        let before = rss_of(&served.pid);
        let socket = served.url.trim_start_matches("unix:").to_owned();
        let path = format!("/v1/leases/{lease}/processes/{number}/terminal?from=0");
        let seen = Arc::new(AtomicU64::new(0));
        let (ready_tx, mut ready) = tokio::sync::mpsc::channel::<Result<(), String>>(STREAMS);
        let stop = tokio_util_stop();
        for _ in 0..STREAMS {
            let (socket, path, token, seen, ready_tx, stop) =
                (socket.clone(), path.clone(), served.token.clone(), Arc::clone(&seen), ready_tx.clone(), stop.clone());
            tokio::spawn(async move {
                let opened = async {
                    let stream = tokio::net::UnixStream::connect(&socket).await.map_err(|e| e.to_string())?;
                    let mut request = tokio_tungstenite::tungstenite::client::IntoClientRequest::into_client_request(
                        format!("ws://bench{path}"),
                    )
                    .map_err(|e| e.to_string())?;
                    request
                        .headers_mut()
                        .insert("authorization", format!("Bearer {token}").parse().map_err(|_| "token")?);
                    let (ws, _) = tokio_tungstenite::client_async(request, stream).await.map_err(|e| e.to_string())?;
                    Ok::<_, String>(ws)
                }
                .await;
                let mut ws = match opened {
                    Ok(ws) => ws,
                    Err(e) => {
                        let _ = ready_tx.send(Err(e)).await;
                        return;
                    }
                };
                let mut told = false;
                loop {
                    tokio::select! {
                        message = ws.next() => match message {
                            Some(Ok(tokio_tungstenite::tungstenite::Message::Binary(data))) => {
                                seen.fetch_add(data.len() as u64, Ordering::Relaxed);
                                if !told {
                                    told = true;
                                    let _ = ready_tx.send(Ok(())).await;
                                }
                            }
                            Some(Ok(_)) => {}
                            _ => {
                                if !told {
                                    let _ = ready_tx.send(Err("a stream ended before its output".into())).await;
                                }
                                return;
                            }
                        },
                        () = stop.notified() => return,
                    }
                }
            });
        }
        drop(ready_tx);
        for _ in 0..STREAMS {
            ready.recv().await.ok_or("the streams ended")??;
        }
        let during = rss_of(&served.pid);
        stop.notify_waiters();
        // The process and the lease end here, so its supervisor is not left behind.
        let signal = json!({ "signal": "KILL" });
        call(&mut sender, &served.token, "POST", &format!("/v1/leases/{lease}/processes/{number}/signal"), Some(&signal), 200).await?;
        call(&mut sender, &served.token, "POST", &format!("/v1/leases/{lease}/release"), Some(&json!({})), 200).await?;
        Ok::<_, String>((before, during, seen.load(Ordering::Relaxed)))
    }
    .await;
    served.stop().await;
    match result {
        Ok((before, during, bytes)) => Row::new(GROUP, NUMBER, name, Figure::kib(during))
            .baseline("the same service before the streams", Figure::kib(before))
            .target(Target::PlusAtMost(0, 64.0 * 1024.0))
            .note(format!(
                "all {STREAMS} open at once, each having received output ({bytes} bytes in all); {:.1} KiB per stream; the bound is ours: 64 MiB over the idle service",
                (during - before) / STREAMS as f64
            )),
        Err(e) => Row::missing(GROUP, NUMBER, name, format!("error: {e}")),
    }
}

fn tokio_util_stop() -> Arc<tokio::sync::Notify> {
    Arc::new(tokio::sync::Notify::new())
}

/// Requests per second of `GET path` from `LISTING_CONNECTIONS` keep-alive connections.
async fn rate(
    connect: impl Fn() -> futures::future::BoxFuture<'static, Result<SendRequest<Full<Bytes>>, String>>,
    token: &str,
    path: &str,
    seconds: f64,
) -> Result<f64, String> {
    let done = Arc::new(AtomicU64::new(0));
    let mut senders = Vec::new();
    for _ in 0..LISTING_CONNECTIONS {
        senders.push(connect().await?);
    }
    let until = Instant::now() + Duration::from_secs_f64(seconds);
    let mut tasks = Vec::new();
    for mut sender in senders {
        let (done, token, path) = (Arc::clone(&done), token.to_owned(), path.to_owned());
        tasks.push(tokio::spawn(async move {
            while Instant::now() < until {
                call(&mut sender, &token, "GET", &path, None, 200).await?;
                done.fetch_add(1, Ordering::Relaxed);
            }
            Ok::<(), String>(())
        }));
    }
    let start = Instant::now();
    for task in tasks {
        task.await.map_err(|e| e.to_string())??;
    }
    Ok(done.load(Ordering::Relaxed) as f64 / start.elapsed().as_secs_f64())
}

/// A bare hyper server on loopback answering `body` to every request.
async fn bare_server(body: Bytes) -> Result<std::net::SocketAddr, String> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| e.to_string())?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let _ = stream.set_nodelay(true);
            let body = body.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |_request| {
                    let body = body.clone();
                    async move {
                        Ok::<_, std::convert::Infallible>(
                            hyper::Response::builder()
                                .header("content-type", "application/json")
                                .body(Full::new(body))
                                .unwrap_or_default(),
                        )
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    Ok(addr)
}

async fn listing_row(config: &Config) -> Row {
    let name = format!("lease listing ({LISTED_LEASES} leases) through envrt serve, TCP loopback");
    let served = match Served::start(Some("127.0.0.1:0")).await {
        Ok(s) => s,
        Err(e) => return Row::missing(GROUP, NUMBER, name, e),
    };
    let seconds = if config.quick { 2.0 } else { 5.0 };
    let result = async {
        let mut sender = served.connect().await?;
        let mut leases = Vec::new();
        for _ in 0..LISTED_LEASES {
            leases.push(acquire(&served, &mut sender).await?);
        }
        let listed = call(&mut sender, &served.token, "GET", "/v1/leases", None, 200).await?;
        let addr = served.url.trim_start_matches("http://").to_owned();
        let ours = rate(
            || {
                let addr = addr.clone();
                Box::pin(async move {
                    let stream = tokio::net::TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
                    stream.set_nodelay(true).map_err(|e| e.to_string())?;
                    handshake(stream).await
                })
            },
            &served.token,
            "/v1/leases",
            seconds,
        )
        .await?;
        let bare = bare_server(listed).await?;
        let floor = rate(
            || {
                Box::pin(async move {
                    let stream = tokio::net::TcpStream::connect(bare).await.map_err(|e| e.to_string())?;
                    stream.set_nodelay(true).map_err(|e| e.to_string())?;
                    handshake(stream).await
                })
            },
            "-",
            "/v1/leases",
            seconds,
        )
        .await?;
        // The figures that count are wrk's, on both servers, when it is there.
        let url = format!("http://{addr}/v1/leases");
        let wrk = match super::wrk::rate(&url, &served.token, LISTING_CONNECTIONS, seconds).await {
            Some(ours) => Some((
                ours?,
                super::wrk::rate(&format!("http://{bare}/v1/leases"), "-", LISTING_CONNECTIONS, seconds)
                    .await
                    .unwrap_or_else(|| Err("wrk went away".into()))?,
            )),
            None => None,
        };
        for lease in leases {
            call(
                &mut sender,
                &served.token,
                "POST",
                &format!("/v1/leases/{lease}/release"),
                Some(&json!({})),
                200,
            )
            .await?;
        }
        Ok::<_, String>((ours, floor, wrk))
    }
    .await;
    served.stop().await;
    match result {
        Ok((_, _, Some((ours, floor)))) => Row::new(GROUP, NUMBER, name, Figure::ops(ours))
            .baseline("bare hyper server, same body, under wrk", Figure::ops(floor))
            .note(format!(
                "wrk, 2 threads, {LISTING_CONNECTIONS} keep-alive connections for {seconds} s; each request authenticated and read from the store"
            )),
        Ok((ours, floor, None)) => Row::new(GROUP, NUMBER, name, Figure::ops(ours))
            .baseline("bare hyper server, same body, same client", Figure::ops(floor))
            .note(format!(
                "{LISTING_CONNECTIONS} keep-alive connections for {seconds} s (this bench's own load generator: no `wrk` on the PATH); each request authenticated and read from the store"
            )),
        Err(e) => Row::missing(GROUP, NUMBER, name, format!("error: {e}")),
    }
}

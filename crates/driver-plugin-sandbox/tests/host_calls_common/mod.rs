//! Helpers of the worker-to-host call tests: the host-calls fixture (a real SDK worker),
//! its SDK-harness twin, a local HTTP server on 127.0.0.1, and a tracing capture.
#![allow(dead_code, unreachable_pub)]

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock, mpsc};

use envrt_driver_plugin_sandbox::{PluginManifest, SandboxDriver};
use envrt_runtime_core::{EnvironmentRuntime, ExecuteRequest, Lease};
use serde_json::Value;

use crate::host_common::{ensure_sdk_fixture, fixtures};

/// The fixture's directory.
pub fn dir() -> PathBuf {
    ensure_sdk_fixture();
    fixtures().join("sdk-host-calls")
}

/// The fixture's manifest JSON, `capabilities` replaced when given.
pub fn manifest_json(capabilities: Option<&[&str]>) -> Value {
    let mut value: Value =
        serde_json::from_str(&std::fs::read_to_string(dir().join("manifest.json")).unwrap()).unwrap();
    if let Some(capabilities) = capabilities {
        value["capabilities"] = serde_json::json!(capabilities);
    }
    value
}

/// The fixture's manifest with how to start it.
pub fn manifest(capabilities: Option<&[&str]>) -> PluginManifest {
    let mut value = manifest_json(capabilities);
    value["worker"] = serde_json::json!({"command": ["node", dir().join("worker.mjs").to_str().unwrap()]});
    PluginManifest::from_json(&value.to_string()).unwrap()
}

/// Runs `calls` in the worker (one execute) and returns its outcomes.
pub async fn run(runtime: &EnvironmentRuntime, lease: &Lease, calls: &Value) -> Vec<Value> {
    let result = runtime
        .execute(&lease.id, ExecuteRequest::new("calls", [calls.to_string()]))
        .await
        .unwrap();
    assert_eq!(result.exit_code, Some(0), "{}", String::from_utf8_lossy(&result.stderr));
    serde_json::from_slice(&result.stdout).unwrap()
}

/// Runs `calls` under the SDK's own `createTestHarness` (harness.mjs).
pub fn run_in_harness(config: &Value, calls: &Value, capabilities: Option<&[&str]>) -> Vec<Value> {
    let manifest = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(manifest.path(), manifest_json(capabilities).to_string()).unwrap();
    let mut command = std::process::Command::new("node");
    command
        .arg(dir().join("harness.mjs"))
        .arg(manifest.path())
        .arg(config.to_string())
        .arg(calls.to_string());
    if let Some(capabilities) = capabilities {
        command.arg(serde_json::json!(capabilities).to_string());
    }
    let out = command.output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// One request the local server saw.
#[derive(Clone, Debug)]
pub struct Seen {
    pub method: String,
    pub path: String,
    pub authorization: Option<String>,
    pub body: String,
}

/// A local HTTP/1.1 server on 127.0.0.1. `/echo` answers 200 with `x-echo: METHOD PATH`
/// and the request body; `/big` answers `big_bytes` bytes; `/hold` answers only after
/// `hold` connections are open and the test sends on `release`.
pub struct Server {
    pub port: u16,
    pub seen: Arc<Mutex<Vec<Seen>>>,
    pub held: mpsc::Receiver<()>,
    pub release: mpsc::Sender<()>,
}

fn read_request(stream: &mut TcpStream) -> Option<Seen> {
    let mut reader = BufReader::new(stream.try_clone().ok()?);
    let mut line = String::new();
    reader.read_line(&mut line).ok()?;
    let mut parts = line.split_whitespace();
    let (method, path) = (parts.next()?.to_owned(), parts.next()?.to_owned());
    let (mut length, mut authorization) = (0usize, None);
    loop {
        let mut header = String::new();
        reader.read_line(&mut header).ok()?;
        let header = header.trim_end();
        if header.is_empty() {
            break;
        }
        let (name, value) = header.split_once(':')?;
        match name.to_ascii_lowercase().as_str() {
            "content-length" => length = value.trim().parse().ok()?,
            "authorization" => authorization = Some(value.trim().to_owned()),
            _ => {}
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body).ok()?;
    Some(Seen {
        method,
        path,
        authorization,
        body: String::from_utf8_lossy(&body).into_owned(),
    })
}

fn respond(stream: &mut TcpStream, extra: &str, body: &[u8]) {
    let head = format!(
        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n{extra}Connection: close\r\n\r\n",
        body.len()
    );
    let _ = stream.write_all(head.as_bytes());
    let _ = stream.write_all(body);
}

impl Server {
    pub fn start(hold: usize, big_bytes: usize) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (held_tx, held) = mpsc::channel();
        let (release, release_rx) = mpsc::channel::<()>();
        let release_rx = Arc::new(Mutex::new(release_rx));
        let recorded = seen.clone();
        std::thread::spawn(move || {
            let mut holding = Vec::new();
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                let Some(request) = read_request(&mut stream) else {
                    continue;
                };
                recorded.lock().unwrap().push(request.clone());
                if request.path.starts_with("/hold") {
                    holding.push(stream);
                    if holding.len() == hold {
                        let _ = held_tx.send(());
                        let _ = release_rx.lock().unwrap().recv();
                        for mut s in holding.drain(..) {
                            respond(&mut s, "", b"held");
                        }
                    }
                } else if request.path.starts_with("/big") {
                    respond(&mut stream, "", &vec![b'b'; big_bytes]);
                } else {
                    let echo = format!("X-Echo: {} {}\r\n", request.method, request.path);
                    respond(&mut stream, &echo, request.body.as_bytes());
                }
            }
        });
        Server {
            port,
            seen,
            held,
            release,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }
}

/// Every tracing event and span of the process, as text (installed once, globally).
pub fn captured() -> &'static Mutex<String> {
    static TEXT: OnceLock<Mutex<String>> = OnceLock::new();
    TEXT.get_or_init(|| {
        let _ = tracing::subscriber::set_global_default(Capture);
        Mutex::new(String::new())
    })
}

struct Capture;

struct Text<'a>(&'a mut String);

impl tracing::field::Visit for Text<'_> {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        self.0.push_str(&format!(" {}={:?}", field.name(), value));
    }
    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        self.0.push_str(&format!(" {}={}", field.name(), value));
    }
}

fn capture_text(target: &str, record: impl FnOnce(&mut Text<'_>)) {
    let mut line = format!("{target}:");
    record(&mut Text(&mut line));
    line.push('\n');
    if let Some(text) = CAPTURED.get() {
        text.lock().unwrap().push_str(&line);
    }
}

static CAPTURED: OnceLock<&'static Mutex<String>> = OnceLock::new();

/// Starts the capture (call before anything logs).
pub fn start_capture() -> &'static Mutex<String> {
    let text = captured();
    let _ = CAPTURED.set(text);
    text
}

impl tracing::Subscriber for Capture {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, span: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        capture_text(span.metadata().target(), |t| span.record(t));
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, values: &tracing::span::Record<'_>) {
        capture_text("span-record", |t| values.record(t));
    }
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        capture_text(event.metadata().target(), |t| event.record(t));
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

/// Starts a driver on `manifest` with `options`, a runtime over it and one lease.
pub async fn lease_on(
    manifest: PluginManifest,
    options: envrt_driver_plugin_sandbox::SandboxOptions,
) -> (Arc<SandboxDriver>, EnvironmentRuntime, Lease) {
    let driver = crate::host_common::start(manifest, options).await;
    let runtime = crate::host_common::runtime_with(driver.clone()).await;
    let lease = crate::host_common::acquire(&runtime).await;
    (driver, runtime, lease)
}

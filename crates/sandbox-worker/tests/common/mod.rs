//! Drives the real `envrt-sandbox-worker` binary over raw JSON lines (no host library).
#![allow(dead_code, unreachable_pub)]

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// Upper bound of any single wait in these tests.
pub const BOUND: Duration = Duration::from_secs(30);

pub const WORKER: &str = env!("CARGO_BIN_EXE_envrt-sandbox-worker");

pub struct Worker {
    pub child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<Value>,
    next_id: u64,
    /// Every notification seen so far, in order.
    pub notes: Vec<Value>,
    pub root: tempfile::TempDir,
}

impl Worker {
    /// Starts a worker with its own lease root, an environment of `PATH` plus `extra_env`.
    pub fn start_with_env(extra_env: &[(&str, &str)]) -> Worker {
        Worker::start_with(&[], extra_env)
    }

    /// Started with extra worker flags and environment.
    pub fn start_with(args: &[&str], extra_env: &[(&str, &str)]) -> Worker {
        Worker::start_under(&[], args, extra_env)
    }

    /// Started through `wrapper` (a program and its arguments that run the worker, such as
    /// `prlimit --nproc=64 --`), with extra worker flags and environment.
    pub fn start_under(wrapper: &[&str], args: &[&str], extra_env: &[(&str, &str)]) -> Worker {
        let root = tempfile::tempdir().expect("temp root");
        let mut command = match wrapper {
            [] => Command::new(WORKER),
            [program, rest @ ..] => {
                let mut c = Command::new(program);
                c.args(rest).arg(WORKER);
                c
            }
        };
        command
            .arg("--root")
            .arg(root.path())
            .arg("--kill-grace-ms")
            .arg("300")
            .args(args)
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        for (k, v) in extra_env {
            command.env(k, v);
        }
        let mut child = command.spawn().expect("spawn worker");
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let value: Value =
                    serde_json::from_str(&line).unwrap_or_else(|_| panic!("worker wrote a non-JSON line: {line}"));
                if tx.send(value).is_err() {
                    break;
                }
            }
        });
        let stdin = child.stdin.take();
        Worker {
            child,
            stdin,
            lines: rx,
            next_id: 0,
            notes: Vec::new(),
            root,
        }
    }

    pub fn start() -> Worker {
        Worker::start_with_env(&[])
    }

    /// Started and initialized.
    pub fn ready() -> Worker {
        Worker::ready_with(&[])
    }

    /// Started with extra worker flags, and initialized.
    pub fn ready_with(args: &[&str]) -> Worker {
        let mut w = Worker::start_with(args, &[]);
        let r = w.call("initialize", init_params());
        assert_eq!(r["result"]["ok"], json!(true), "{r}");
        w
    }

    /// Sends raw bytes as one line (they need not be UTF-8).
    pub fn send_raw_bytes(&mut self, line: &[u8]) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        stdin.write_all(line).unwrap();
        stdin.write_all(b"\n").unwrap();
        stdin.flush().unwrap();
    }

    pub fn send_raw(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        stdin.write_all(line.as_bytes()).unwrap();
        stdin.write_all(b"\n").unwrap();
        stdin.flush().unwrap();
    }

    /// Sends a request with an invocation id `inv-<id>`; returns its id.
    pub fn send(&mut self, method: &str, params: Value) -> u64 {
        self.next_id += 1;
        let id = self.next_id;
        let msg = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params,
            "paperclipInvocation": {"id": format!("inv-{id}"), "scope": {"companyId": "co-1"}}});
        self.send_raw(&msg.to_string());
        id
    }

    /// Next line from the worker (bounded).
    pub fn next_line(&mut self) -> Value {
        match self.lines.recv_timeout(BOUND) {
            Ok(v) => v,
            Err(RecvTimeoutError::Timeout) => panic!("no line from the worker within {BOUND:?}"),
            Err(RecvTimeoutError::Disconnected) => panic!("worker stdout closed"),
        }
    }

    /// Waits for the response to `id`, keeping notifications in `notes`.
    pub fn wait_response(&mut self, id: u64) -> Value {
        let is_response =
            |v: &Value| v.get("id") == Some(&json!(id)) && (v.get("result").is_some() || v.get("error").is_some());
        if let Some(i) = self.notes.iter().position(is_response) {
            return self.notes.remove(i);
        }
        let deadline = Instant::now() + BOUND;
        loop {
            assert!(Instant::now() < deadline, "no response to {id}");
            let v = self.next_line();
            if is_response(&v) {
                return v;
            }
            self.notes.push(v);
        }
    }

    pub fn call(&mut self, method: &str, params: Value) -> Value {
        let id = self.send(method, params);
        self.wait_response(id)
    }

    /// The `result` of a call, panicking with the whole response otherwise.
    pub fn ok(&mut self, method: &str, params: Value) -> Value {
        let r = self.call(method, params);
        assert!(r.get("error").is_none(), "{method} failed: {r}");
        r["result"].clone()
    }

    /// The `error` of a call as (code, message).
    pub fn err(&mut self, method: &str, params: Value) -> (i64, String) {
        let r = self.call(method, params);
        let e = r.get("error").unwrap_or_else(|| panic!("{method} should fail: {r}"));
        (e["code"].as_i64().unwrap(), e["message"].as_str().unwrap().to_owned())
    }

    /// Waits for a notification matching `pred` (from `notes` first, then new lines).
    pub fn wait_note(&mut self, pred: impl Fn(&Value) -> bool) -> Value {
        if let Some(i) = self.notes.iter().position(&pred) {
            return self.notes.remove(i);
        }
        let deadline = Instant::now() + BOUND;
        loop {
            assert!(Instant::now() < deadline, "notification not seen");
            let v = self.next_line();
            if pred(&v) {
                return v;
            }
            self.notes.push(v);
        }
    }

    pub fn acquire(&mut self) -> String {
        let r = self.ok(
            "environmentAcquireLease",
            json!({"driverKey": "sandbox", "companyId": "co-1", "environmentId": "env-1", "config": {}, "runId": "run-1"}),
        );
        r["providerLeaseId"].as_str().unwrap().to_owned()
    }

    /// Closes stdin (the host is gone).
    pub fn close_stdin(&mut self) {
        self.stdin = None;
    }

    /// Waits (bounded) for the worker to exit; its exit code.
    pub fn wait_exit(&mut self) -> Option<i32> {
        let deadline = Instant::now() + BOUND;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status.code();
            }
            assert!(Instant::now() < deadline, "worker did not exit");
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.stdin = None;
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn init_params() -> Value {
    json!({"manifest": {"id": "envrt.sandbox"}, "config": {}, "instanceInfo": {"instanceId": "i-1", "hostVersion": "0"}, "apiVersion": 1, "databaseNamespace": null})
}

/// Common params of a lease-bound verb.
pub fn on_lease(lease: &str, extra: Value) -> Value {
    let mut p = json!({"driverKey": "sandbox", "companyId": "co-1", "environmentId": "env-1", "config": {},
        "lease": {"providerLeaseId": lease}});
    for (k, v) in extra.as_object().unwrap() {
        p[k] = v.clone();
    }
    p
}

/// A marker unique to this test run.
pub fn marker(tag: &str) -> String {
    format!("envrt-test-{tag}-{}-{}", std::process::id(), uuid_like())
}

fn uuid_like() -> String {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("{t:x}")
}

/// Host pids whose environment or command line contains `marker`.
pub fn processes_with(marker: &str) -> Vec<u32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if pid == std::process::id() {
            continue;
        }
        let status = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        if status
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z'))
        {
            continue;
        }
        for file in ["environ", "cmdline"] {
            let bytes = std::fs::read(format!("/proc/{pid}/{file}")).unwrap_or_default();
            if bytes.windows(marker.len()).any(|w| w == marker.as_bytes()) {
                found.push(pid);
                break;
            }
        }
    }
    found
}

/// Waits (bounded) until no process carries `marker`; the survivors if some remain.
pub fn survivors_after_wait(marker: &str) -> Vec<u32> {
    survivors_within(marker, Duration::from_secs(5))
}

/// Waits up to `bound` until no process carries `marker`; the survivors if some remain.
pub fn survivors_within(marker: &str, bound: Duration) -> Vec<u32> {
    let deadline = Instant::now() + bound;
    loop {
        let found = processes_with(marker);
        if found.is_empty() || Instant::now() > deadline {
            return found;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits (bounded) until some process carries `marker`.
pub fn wait_for_process(marker: &str) -> Vec<u32> {
    wait_for_processes(marker, 1)
}

/// Waits (bounded) until at least `n` processes carry `marker`.
pub fn wait_for_processes(marker: &str, n: usize) -> Vec<u32> {
    let deadline = Instant::now() + BOUND;
    loop {
        let found = processes_with(marker);
        if found.len() >= n {
            return found;
        }
        assert!(Instant::now() < deadline, "no process with marker {marker} appeared");
        std::thread::sleep(Duration::from_millis(20));
    }
}

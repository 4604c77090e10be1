//! `schemathesis` (PyPI) against `envrt serve` in `cargo xtask ci`: a service on a
//! loopback port with a state directory of its own and a token of its own, then
//! `schemathesis run crates/serve/openapi.json` with the checks that no request gets a
//! server error, no status, content type or body falls outside the document, and no
//! request hangs (a per-request timeout). Before the run, the tenant gets one local lease
//! with one process that has exited, and the routes of one process (and the lease's
//! process list and network) are given that lease and process (`schemathesis.toml`), so
//! their answers are checked against the document past the 404 of an unknown id; spawn
//! keeps random leases, so schemathesis starts no process of its own. The lease is
//! released after the run. Schemathesis lives in its own virtual environment
//! (`$ENVRT_SCHEMATHESIS_VENV`, default `/opt/envrt-venv-schemathesis`), made with a
//! pinned version when missing.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::util::{cargo, root, run, target_dir};

/// The variable carrying the service's token to schemathesis (its configuration names it).
const TOKEN_VAR: &str = "ENVRT_SCHEMATHESIS_TOKEN";

/// The schemathesis release the run was written against.
const VERSION: &str = "4.32.5";

fn venv() -> PathBuf {
    std::env::var_os("ENVRT_SCHEMATHESIS_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/opt/envrt-venv-schemathesis"))
}

fn ensure_venv() -> Result<PathBuf, String> {
    let venv = venv();
    let bin = venv.join("bin/schemathesis");
    if !bin.is_file() {
        let mut make = Command::new("python3");
        make.args(["-m", "venv"]).arg(&venv);
        run(make)?;
        let mut install = Command::new(venv.join("bin/pip"));
        install.args(["install", "--quiet", &format!("schemathesis=={VERSION}")]);
        run(install)?;
    }
    Ok(bin)
}

/// Runs schemathesis against a fresh service; `Ok(false)` when it found a failure.
pub(crate) fn run_schemathesis() -> Result<bool, String> {
    let schemathesis = ensure_venv()?;
    // The supervisor too: the local driver grants process sessions only where it finds it.
    let mut build = cargo();
    build.args(["build", "--quiet", "--bin", "envrt", "--bin", "envrt-agent"]);
    run(build)?;
    let envrt = target_dir().join("debug/envrt");
    let state = std::env::temp_dir().join(format!("envrt-schemathesis-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&state);
    let outcome = against_service(&schemathesis, &envrt, &state);
    let _ = std::fs::remove_dir_all(&state);
    outcome
}

fn against_service(schemathesis: &Path, envrt: &Path, state: &Path) -> Result<bool, String> {
    let created = Command::new(envrt)
        .args(["token", "create", "--tenant", "schemathesis"])
        .env("ENVRT_STATE_DIR", state)
        .env_remove("ENVRT_CONFIG")
        .current_dir(std::env::temp_dir())
        .output()
        .map_err(|e| format!("envrt token create: {e}"))?;
    let text = String::from_utf8_lossy(&created.stdout).into_owned();
    let token = text
        .lines()
        .last()
        .filter(|_| created.status.success())
        .ok_or("envrt token create failed")?;
    let mut serve = Command::new(envrt)
        .args(["serve", "--listen", "127.0.0.1:0"])
        .env("ENVRT_STATE_DIR", state)
        .env_remove("ENVRT_CONFIG")
        .current_dir(std::env::temp_dir())
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("envrt serve: {e}"))?;
    let mut stderr = BufReader::new(serve.stderr.take().expect("piped"));
    let mut line = String::new();
    let _ = stderr.read_line(&mut line);
    // Keep reading its audit lines so the pipe never fills.
    std::thread::spawn(move || for _ in stderr.lines() {});
    let Some(url) = line
        .trim()
        .strip_prefix("envrt serve: listening on ")
        .map(str::to_owned)
    else {
        let _ = serve.kill();
        let _ = serve.wait();
        return Err(format!("envrt serve did not start: {line}"));
    };
    let outcome = acquire(&url, token).and_then(|lease| {
        let ran = seed(&url, token, state, &lease).map(|()| check(schemathesis, &url, token, state));
        // Released whatever happened: its supervisor would outlive the service otherwise.
        let released = release(&url, token, &lease);
        ran.and_then(|ok| released.map(|()| ok))
    });
    let _ = Command::new("kill").args(["-TERM", &serve.id().to_string()]).status();
    let _ = serve.wait();
    outcome
}

/// One request to the service at `url` (`http://ADDR`); its status and JSON body.
fn call(url: &str, token: &str, method: &str, path: &str, body: &str) -> Result<(u16, serde_json::Value), String> {
    let addr = url
        .strip_prefix("http://")
        .ok_or_else(|| format!("not an http URL: {url}"))?;
    let failed = |e: std::io::Error| format!("{method} {path}: {e}");
    let mut stream = TcpStream::connect(addr).map_err(failed)?;
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .map_err(failed)?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer).map_err(failed)?;
    let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("{method} {path}: no status in {head:?}"))?;
    let json = serde_json::from_str(body).unwrap_or(serde_json::Value::Null);
    Ok((status, json))
}

/// The answer's JSON when its status is `want`.
fn expect((status, json): (u16, serde_json::Value), want: u16, what: &str) -> Result<serde_json::Value, String> {
    if status == want {
        Ok(json)
    } else {
        Err(format!("schemathesis seed: {what} answered {status}: {json}"))
    }
}

/// A local lease of the tenant's; answers its id.
fn acquire(url: &str, token: &str) -> Result<String, String> {
    let lease = expect(
        call(url, token, "POST", "/v1/leases", r#"{"environmentId":"local"}"#)?,
        201,
        "acquire",
    )?;
    Ok(lease["id"]
        .as_str()
        .ok_or("schemathesis seed: a lease without an id")?
        .to_owned())
}

/// One exited process on `lease`, and `schemathesis.toml` in `state` naming both for the
/// routes of one process.
fn seed(url: &str, token: &str, state: &Path, lease: &str) -> Result<(), String> {
    let spawn = r#"{"argv":["sh","-c","printf out; printf err >&2"],"stdin":"piped"}"#;
    let spawned = call(url, token, "POST", &format!("/v1/leases/{lease}/processes"), spawn)?;
    let spawned = expect(spawned, 201, "spawn")?;
    let n = spawned["id"]
        .as_str()
        .and_then(|id| id.rsplit_once('/'))
        .map(|(_, n)| n.to_owned())
        .ok_or("schemathesis seed: a process without an id")?;
    expect(
        call(url, token, "GET", &format!("/v1/leases/{lease}/processes/{n}/wait"), "")?,
        200,
        "wait",
    )?;
    // The token reaches schemathesis through its environment, never its command line
    // (which `run` echoes into the CI log, and which `ps` shows).
    let config = format!(
        "headers = {{ Authorization = \"Bearer ${{{TOKEN_VAR}}}\" }}\n\
         [[operations]]\n\
         include-operation-id-regex = \"^(listProcesses|getProcess|processOutput|writeProcessStdin|\
         closeProcessStdin|signalProcess|resizeProcess|waitProcess|updateNetworkPolicy)$\"\n\
         parameters = {{ \"path.id\" = \"{lease}\", \"path.n\" = \"{n}\" }}\n"
    );
    std::fs::write(state.join("schemathesis.toml"), config).map_err(|e| format!("schemathesis.toml: {e}"))
}

fn release(url: &str, token: &str, lease: &str) -> Result<(), String> {
    match call(url, token, "POST", &format!("/v1/leases/{lease}/release"), "{}")? {
        (200, _) => Ok(()),
        (status, json) => Err(format!("schemathesis: releasing {lease} answered {status}: {json}")),
    }
}

/// Runs schemathesis with the seeded configuration; whether it found nothing.
fn check(schemathesis: &Path, url: &str, token: &str, state: &Path) -> bool {
    let mut check = Command::new(schemathesis);
    check
        .arg("--config-file")
        .arg(state.join("schemathesis.toml"))
        .arg("run")
        .arg(root().join("crates/serve/openapi.json"))
        .args(["--url", url])
        .env(TOKEN_VAR, token)
        .args([
            "--checks",
            "not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance",
        ])
        .args([
            "--phases",
            "examples,coverage,fuzzing",
            "--max-examples",
            "15",
            "--workers",
            "1",
        ])
        .args(["--request-timeout", "60", "--seed", "1"])
        // Its cache of crashes goes to the scratch directory, not into the repository.
        .current_dir(state);
    run(check).is_ok()
}

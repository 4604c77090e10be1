//! `schemathesis` (PyPI) against `envrt serve` in `cargo xtask ci`: a service on a
//! loopback port with a state directory of its own and a token of its own, then
//! `schemathesis run crates/serve/openapi.json` with the checks that no request gets a
//! server error, no status, content type or body falls outside the document, and no
//! request hangs (a per-request timeout). Schemathesis lives in its own virtual
//! environment (`$ENVRT_SCHEMATHESIS_VENV`, default `/opt/envrt-venv-schemathesis`),
//! made with a pinned version when missing.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Stdio};

use crate::util::{cargo, root, run, target_dir};

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
    let mut build = cargo();
    build.args(["build", "--quiet", "--bin", "envrt"]);
    run(build)?;
    let envrt = target_dir().join("debug/envrt");
    let state = std::env::temp_dir().join(format!("envrt-schemathesis-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&state);
    let outcome = against_service(&schemathesis, &envrt, &state);
    let _ = std::fs::remove_dir_all(&state);
    outcome
}

fn against_service(schemathesis: &PathBuf, envrt: &PathBuf, state: &PathBuf) -> Result<bool, String> {
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
    let mut check = Command::new(schemathesis);
    check
        .arg("run")
        .arg(root().join("crates/serve/openapi.json"))
        .args(["--url", &url])
        .args(["--header", &format!("Authorization: Bearer {token}")])
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
    let ok = run(check).is_ok();
    let _ = Command::new("kill").args(["-TERM", &serve.id().to_string()]).status();
    let _ = serve.wait();
    Ok(ok)
}

//! The Python package's tests (`crates/envrt-python/tests`, pytest) in `cargo xtask ci`:
//! the extension module is rebuilt in place (debug) into the virtual environment that
//! `scripts/python-venv.sh` makes, the sandbox worker, the process supervisor and the CLI
//! are built,
//! then pytest runs as this user; as root, Inspect's self-checks run once more on the
//! local driver as `nobody` (permission checks mean nothing to root).
//!
//! A missing virtual environment skips loudly, and fails instead in CI (`CI=true`) or with
//! `ENVRT_REQUIRE_PYTHON=1`, as `ENVRT_REQUIRE_DOCKER` does for the Docker tests.

use std::path::PathBuf;
use std::process::Command;

use crate::util::{cargo, root, run, target_dir};

/// The virtual environment: `ENVRT_VENV`, else `/opt/envrt-venv`.
fn venv() -> PathBuf {
    std::env::var_os("ENVRT_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/opt/envrt-venv"))
}

/// Whether a missing virtual environment is a failure rather than a skip.
fn required() -> bool {
    std::env::var("ENVRT_REQUIRE_PYTHON").is_ok_and(|v| v == "1") || std::env::var("CI").is_ok_and(|v| v == "true")
}

/// Builds the module and runs pytest; `Ok(false)` when pytest failed.
pub(crate) fn run_pytest() -> Result<bool, String> {
    let venv = venv();
    let python = venv.join("bin/python");
    if !python.is_file() {
        let message = format!(
            "no Python virtual environment at {} (bash scripts/python-venv.sh makes it)",
            venv.display()
        );
        if required() {
            return Err(format!(
                "{message}; it is required here (CI=true or ENVRT_REQUIRE_PYTHON=1)"
            ));
        }
        println!("SKIPPED: the envrt Python package's tests: {message}");
        return Ok(true);
    }
    let package = root().join("crates/envrt-python");

    let mut worker = cargo();
    // The sandbox worker for the sandbox driver, the supervisor for the local driver's
    // processes, the CLI for connection().
    worker.args([
        "build",
        "--quiet",
        "--bin",
        "envrt-sandbox-worker",
        "--bin",
        "envrt-agent",
        "--bin",
        "envrt",
    ]);
    run(worker)?;
    // The package looks for the worker and the supervisor in its own directory first,
    // where a wheel carries them (crates/envrt-python/build-wheel.sh); put the ones just
    // built there, as develop.sh does, so the tests see the layout users get.
    for binary in ["envrt-sandbox-worker", "envrt-agent"] {
        place_beside_the_package(&package, binary)?;
    }

    let mut develop = Command::new(venv.join("bin/maturin"));
    develop
        .args(["develop", "--quiet", "--skip-install"])
        .current_dir(&package)
        .env("VIRTUAL_ENV", &venv)
        .env("CARGO_TARGET_DIR", target_dir());
    run(develop)?;

    let mut pytest = Command::new(&python);
    pytest
        .args(["-m", "pytest", "-p", "no:cacheprovider", "-rfE", "tests"])
        .current_dir(&package)
        .env("CARGO_TARGET_DIR", target_dir());
    let mut ok = run(pytest).is_ok();

    if is_root() {
        ok &= run_local_checks_as_nobody(&python, &package)?;
    }
    Ok(ok)
}

/// Copies `target/debug/{binary}` to `python/envrt/` (git ignores it there). The old file
/// is removed first, so a worker or supervisor still running from it is not disturbed.
fn place_beside_the_package(package: &std::path::Path, binary: &str) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    let built = target_dir().join("debug").join(binary);
    let beside = package.join("python/envrt").join(binary);
    let _ = std::fs::remove_file(&beside);
    std::fs::copy(&built, &beside)
        .map_err(|e| format!("cannot copy {} to {}: {e}", built.display(), beside.display()))?;
    std::fs::set_permissions(&beside, std::fs::Permissions::from_mode(0o755))
        .map_err(|e| format!("cannot make {} executable: {e}", beside.display()))
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

/// Inspect's self-checks on the local driver (and Inspect's own local provider) as
/// `nobody`, when `nobody` can read the package; skipped loudly otherwise.
fn run_local_checks_as_nobody(python: &std::path::Path, package: &std::path::Path) -> Result<bool, String> {
    let tests = package.join("tests/test_inspect_self_check.py");
    let readable = Command::new("runuser")
        .args(["-u", "nobody", "--", "test", "-r"])
        .arg(&tests)
        .status()
        .is_ok_and(|s| s.success());
    if !readable {
        println!(
            "SKIPPED: the self-checks as nobody: nobody cannot read {}",
            tests.display()
        );
        return Ok(true);
    }
    let home = tempfile_dir()?;
    let mut pytest = Command::new("runuser");
    pytest
        .args(["-u", "nobody", "--", "env"])
        .arg(format!("HOME={}", home.display()))
        .arg(format!("CARGO_TARGET_DIR={}", target_dir().display()))
        .arg(python)
        .args(["-m", "pytest", "-p", "no:cacheprovider", "-rfE", "-k", "local"])
        .arg(&tests)
        .current_dir(std::env::temp_dir())
        .env_remove("ENVRT_REQUIRE_DOCKER")
        .env_remove("ENVRT_REQUIRE_SANDBOX");
    let ok = run(pytest).is_ok();
    let _ = std::fs::remove_dir_all(&home);
    Ok(ok)
}

/// A fresh directory `nobody` may write to, for its HOME.
fn tempfile_dir() -> Result<PathBuf, String> {
    use std::os::unix::fs::PermissionsExt;
    let dir = std::env::temp_dir().join(format!("envrt-pytest-nobody-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777))
        .map_err(|e| format!("cannot open {} to nobody: {e}", dir.display()))?;
    Ok(dir)
}

/// The Python row of `cargo xtask bench` (also `--only python`): the module built in
/// release mode into the virtual environment, then `crates/envrt-python/bench/exec_true.py`,
/// whose table goes to `target/bench/python.json`. Skipped loudly without the venv.
pub(crate) fn run_bench(quick: bool) -> Result<(), String> {
    let venv = venv();
    let python = venv.join("bin/python");
    if !python.is_file() {
        println!(
            "SKIPPED: the Python bench row: no virtual environment at {} (bash scripts/python-venv.sh)",
            venv.display()
        );
        return Ok(());
    }
    let package = root().join("crates/envrt-python");
    develop_release(&venv)?;
    let out = root().join("target/bench/python.json");
    let mut bench = Command::new(&python);
    bench
        .arg("bench/exec_true.py")
        .args(["--rounds", if quick { "500" } else { "2000" }])
        .arg("--json")
        .arg(&out)
        .current_dir(&package);
    run(bench)?;
    eprintln!(
        "xtask: wrote {} (the venv now holds a release build; pytest in ci rebuilds debug)",
        out.display()
    );
    Ok(())
}

/// `maturin develop --release` of the envrt package into `venv`, so that a bench row timing
/// the package times an optimised build.
fn develop_release(venv: &std::path::Path) -> Result<(), String> {
    let mut develop = Command::new(venv.join("bin/maturin"));
    develop
        .args(["develop", "--quiet", "--skip-install", "--release"])
        .current_dir(root().join("crates/envrt-python"))
        .env("VIRTUAL_ENV", venv)
        .env("CARGO_TARGET_DIR", target_dir());
    run(develop)
}

/// Before the `peers` rows (whose Inspect row times the package in the virtual
/// environment): the package built in release mode there; nothing without the venv (the
/// row then skips loudly itself).
pub(crate) fn prepare_peers() -> Result<(), String> {
    let venv = venv();
    if venv.join("bin/maturin").is_file() {
        develop_release(&venv)?;
    }
    Ok(())
}

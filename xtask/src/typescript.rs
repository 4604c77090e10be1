//! The TypeScript client's tests (`clients/typescript`, `node --test`) in `cargo xtask
//! ci`: the `envrt` binary and the supervisor beside it (`envrt-agent`, for the process
//! tests on the local driver) are built, then `npm ci && npm test` runs there with
//! `ENVRT_BIN` naming it, so the tests start a real `envrt serve`. Node 20 and npm come
//! from `scripts/setup.sh`. One test reads a process through the Python package too
//! (`test/crossclient.test.ts`): it runs after the pytest step, which built the package
//! in place, with the venv's Python.

use std::process::Command;

use crate::util::{cargo, root, run, target_dir};

/// Builds the CLI and runs the client's tests; `Ok(false)` when they failed.
pub(crate) fn run_tests() -> Result<bool, String> {
    let mut build = cargo();
    build.args(["build", "--quiet", "--bin", "envrt", "--bin", "envrt-agent"]);
    run(build)?;
    let package = root().join("clients/typescript");
    let mut install = Command::new("npm");
    install.args(["ci", "--no-audit", "--no-fund"]).current_dir(&package);
    run(install)?;
    let mut test = Command::new("npm");
    test.arg("test")
        .current_dir(&package)
        .env("ENVRT_BIN", target_dir().join("debug/envrt"));
    Ok(run(test).is_ok())
}

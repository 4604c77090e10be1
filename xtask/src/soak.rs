//! `cargo xtask soak [--leases N] [--driver local|docker|sandbox|ssh|all] [...]`: builds the
//! `envrt` CLI, the reference sandbox worker and the soak binary (crates/soak, package `envrt-soak`), then runs
//! the soak, which exits non-zero on any leak or error.

use crate::util::{cargo, run};

pub(crate) fn run_soak(args: &[String]) -> Result<(), String> {
    // The soak finds these beside itself, in the same target directory.
    let mut cli = cargo();
    cli.args(["build", "--quiet", "-p", "envrt-cli", "--bin", "envrt"]);
    run(cli)?;
    let mut worker = cargo();
    worker.args([
        "build",
        "--quiet",
        "-p",
        "envrt-sandbox-worker",
        "--bin",
        "envrt-sandbox-worker",
    ]);
    run(worker)?;
    let mut soak = cargo();
    soak.args(["run", "--quiet", "-p", "envrt-soak", "--bin", "soak", "--"])
        .args(args);
    run(soak)
}

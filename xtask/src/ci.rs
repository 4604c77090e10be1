//! `cargo xtask ci`: if it passes locally, CI is green.

use crate::util::{cargo, run, run_counting};

pub(crate) fn run_all() -> Result<(), String> {
    let mut fmt = cargo();
    fmt.args(["fmt", "--all", "--", "--check"]);
    run(fmt)?;

    let mut clippy = cargo();
    clippy.args([
        "clippy",
        "--workspace",
        "--all-targets",
        "--all-features",
        "--",
        "-D",
        "warnings",
    ]);
    run(clippy)?;

    let mut doc = cargo();
    doc.args(["doc", "--workspace", "--no-deps", "--all-features"])
        .env("RUSTDOCFLAGS", "-Dwarnings");
    run(doc)?;

    let mut test = cargo();
    test.args(["test", "--workspace", "--all-features"]);
    let (ok, (passed, failed, ignored)) = run_counting(test)?;
    // One plain closing line over every test binary of the workspace.
    println!("tests: {passed} passed, {failed} failed, {ignored} skipped");
    if ok { Ok(()) } else { Err("cargo test failed".into()) }
}

//! `cargo xtask ci`: if it passes locally, CI is green. Every test binary runs even after
//! a failure, and every failure is listed at the end. The fuzz corpora are replayed on
//! stable by the crates' `fuzz_corpus_replay` tests (no nightly needed).

use crate::testlog;
use crate::util::{cargo, run};

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

    // The fuzz corpora are replayed by stable tests in the crates they fuzz; make sure
    // every target has one (and a corpus), so no target drops out of the replay unseen.
    crate::fuzz::check_corpora()?;

    let mut test = cargo();
    test.args(["test", "--workspace", "--all-features", "--no-fail-fast"]);
    let (ok, output) = testlog::run_merged(&test, true)?;
    // The Python package's tests (pytest prints its own closing line).
    let python_ok = crate::python::run_pytest()?;
    // The TypeScript client's tests against a real `envrt serve`.
    let typescript_ok = crate::typescript::run_tests()?;
    // schemathesis against the served OpenAPI document.
    let schemathesis_ok = crate::schemathesis::run_schemathesis()?;
    let report = testlog::parse(&output);
    if !report.failures.is_empty() {
        println!("\nfailed tests, by test binary:");
        testlog::print_failures(&report.failures);
    }
    // One plain closing line over every test binary of the workspace.
    println!(
        "tests: {} passed, {} failed, {} skipped",
        report.passed, report.failed, report.ignored
    );
    match (ok, python_ok, typescript_ok, schemathesis_ok) {
        (true, true, true, true) => Ok(()),
        (false, ..) => Err("cargo test failed".into()),
        (true, false, ..) => Err("pytest failed (crates/envrt-python/tests)".into()),
        (true, true, false, _) => Err("npm test failed (clients/typescript)".into()),
        (true, true, true, false) => Err("schemathesis failed (crates/serve/openapi.json)".into()),
    }
}

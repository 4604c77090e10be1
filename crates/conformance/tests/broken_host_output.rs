//! The kit catches drivers that print a secret on the host process's own standard output
//! or standard error. `harness = false`, as every driver's conformance target is: nothing
//! captures `print!` here, so what a faulty driver prints reaches descriptors 1 and 2 the
//! way it does in a real suite (under libtest's capture the check reports "not checked";
//! `broken_drivers.rs` shows that).

#[allow(dead_code, reason = "the other faults' helpers serve broken_drivers.rs")]
mod broken;

use broken::processes::ProcessFault;
use broken::{Fault, suite};
use envrt_conformance::Status;
use libtest_mimic::{Arguments, Failed, Trial};

const CHECK: &str = "execute_secrets_not_printed";

/// Runs the check against `fault` and returns how it ended and its message.
fn outcome_of(fault: Fault) -> (Status, String) {
    let root = tempfile::tempdir().unwrap();
    let suite = suite(fault, root.path());
    let outcome = suite.run_check_outcome(CHECK).expect("registered");
    (outcome.status, outcome.message.unwrap_or_default())
}

fn caught(fault: Fault, expected: &'static str) -> Result<(), Failed> {
    let (status, message) = outcome_of(fault);
    if status != Status::Failed {
        return Err(format!("{fault:?}: {CHECK} ended {status:?} against a printing driver: {message}").into());
    }
    if message != expected {
        return Err(format!("{fault:?}: expected {expected:?}, got {message:?}").into());
    }
    Ok(())
}

fn main() {
    let args = Arguments::from_args();
    let trials = vec![
        Trial::test("a_driver_that_println_s_the_env_is_caught", || {
            caught(
                Fault::PrintsEnv,
                "a secret env value reached the host process's standard output",
            )
        }),
        Trial::test("a_driver_that_eprintln_s_the_env_is_caught", || {
            caught(
                Fault::EprintsEnv,
                "a secret env value reached the host process's standard error",
            )
        }),
        Trial::test("a_supervisor_that_eprintln_s_a_spawn_s_env_is_caught", || {
            caught(
                Fault::Process(ProcessFault::PrintsSpawnEnv),
                "a secret env value reached the host process's standard error",
            )
        }),
        Trial::test("the_honest_driver_passes_and_is_really_looked_at", || {
            let (status, message) = outcome_of(Fault::Honest);
            if status != Status::Passed {
                return Err(format!("{CHECK} ended {status:?} for the honest driver: {message}").into());
            }
            Ok(())
        }),
    ];
    libtest_mimic::run(&args, trials).exit();
}

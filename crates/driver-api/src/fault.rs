//! A test hook that kills the host program at one step of a lease operation, so the
//! fault-injection tests can prove `envrt gc` collects whatever a crash at that step left
//! (contract section 3, "Fault points"; docs/security.md says why it is safe).
//!
//! `ENVRT_TEST_ABORT_AT=OPERATION:N` (`OPERATION` one of [`OPERATIONS`], `N` from 1) makes
//! the process abort (`std::process::abort`: no destructor, no drop guard and no clean-up
//! runs, as after a SIGKILL) when it reaches the `N`-th fault point of that operation,
//! counted from the start of the process. Before aborting it writes one line to its
//! stderr, [`ABORT_LINE`] with `{operation}` and `{n}` filled in. Unset, or set to
//! anything else, the variable does nothing: every [`point`] is one relaxed atomic load
//! after the first. A test raises `N` from 1 until the operation completes without
//! aborting, so it covers every step the code has without knowing how many there are.
//!
//! The points sit between the side effects of an operation: in the facade (before the
//! driver is asked, after it answered and before the store records it, after that) and in
//! drivers where one operation makes several things (a container created, then started).

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};

/// The variable naming the operation and step to abort at.
pub const ABORT_VAR: &str = "ENVRT_TEST_ABORT_AT";

/// The operations with fault points.
/// `sync_in` and `sync_out` come after each file a sync copies: in the sandbox worker (it
/// kills itself with SIGKILL there, see [`reached`]), in the local driver's copy, and in
/// the tar extractor behind Docker's and ssh's sync out; `sync_place` comes after each
/// target is put in place (the sandbox host's placing of what the worker wrote out, the
/// local driver's commit, the extractor's `Staging::place` in `envrt-driver-files`).
pub const OPERATIONS: &[&str] = &[
    "acquire",
    "release",
    "destroy",
    "capture",
    "pool_refill",
    "sync_in",
    "sync_out",
    "sync_place",
];

/// The line written to stderr just before the abort.
pub const ABORT_LINE: &str = "envrt: test hook ENVRT_TEST_ABORT_AT: aborting at fault point {n} of {operation}";

/// The operation and step asked for, when the variable names one.
fn target() -> Option<&'static (&'static str, u32)> {
    static TARGET: OnceLock<Option<(&'static str, u32)>> = OnceLock::new();
    TARGET.get_or_init(|| parse(&std::env::var(ABORT_VAR).ok()?)).as_ref()
}

/// `OPERATION:N` with a known operation and `N` ≥ 1; anything else is `None`.
fn parse(value: &str) -> Option<(&'static str, u32)> {
    let (operation, n) = value.split_once(':')?;
    let operation = OPERATIONS.iter().find(|o| **o == operation)?;
    let n: u32 = n.parse().ok().filter(|n| *n >= 1)?;
    Some((operation, n))
}

/// A fault point of `operation`: aborts the process when it is the `N`-th point of the
/// operation [`ABORT_VAR`] names; otherwise does nothing.
pub fn point(operation: &'static str) {
    if reached(operation) {
        std::process::abort();
    }
}

/// A fault point of `operation` for a caller that ends itself its own way (the sandbox
/// worker raises SIGKILL): `true`, after writing [`ABORT_LINE`] to stderr, when this is
/// the `N`-th point of the operation [`ABORT_VAR`] names; otherwise `false`.
pub fn reached(operation: &'static str) -> bool {
    static REACHED: AtomicU32 = AtomicU32::new(0);
    let Some((wanted, n)) = target() else { return false };
    if *wanted != operation || REACHED.fetch_add(1, Ordering::SeqCst) + 1 != *n {
        return false;
    }
    let line = ABORT_LINE
        .replace("{n}", &n.to_string())
        .replace("{operation}", operation);
    eprintln!("{line}");
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_known_operation_and_a_positive_step_arm_the_hook() {
        assert_eq!(parse("acquire:3"), Some(("acquire", 3)));
        assert_eq!(parse("pool_refill:1"), Some(("pool_refill", 1)));
        assert_eq!(parse("sync_out:7"), Some(("sync_out", 7)));
        for inert in [
            "",
            "acquire",
            "acquire:0",
            "acquire:-1",
            "acquire:x",
            "execute:1",
            "ACQUIRE:1",
        ] {
            assert_eq!(parse(inert), None, "{inert}");
        }
    }
}

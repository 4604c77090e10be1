//! Runs one check guarded: on its own thread, with a deadline and a panic catcher, so a
//! check that hangs or panics becomes a failure naming the check and the suite goes on.
//! A check past its deadline is abandoned (its thread is left to finish or to die with
//! the process); whatever it held (a lease, a process) shows up in the clean-up checks.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::mpsc::RecvTimeoutError;
use std::time::{Duration, Instant};

use crate::checks::{Check, Checked};
use crate::context::Ctx;
use crate::report::{Status, TrialOutcome};

/// The deadline of a check when neither the target nor `ENVRT_CONFORMANCE_DEADLINE` sets
/// one.
pub(crate) const DEFAULT_DEADLINE: Duration = Duration::from_secs(300);

/// Runs `check` against `ctx` within `ctx.deadline` and returns its outcome under
/// `trial_name`.
pub(crate) fn run_guarded(ctx: &Arc<Ctx>, check: Check, trial_name: String) -> TrialOutcome {
    let deadline = ctx.deadline;
    let started = Instant::now();
    let (tx, rx) = std::sync::mpsc::channel();
    let thread_ctx = ctx.clone();
    let spawned = std::thread::Builder::new()
        .name(format!("check {}", check.name))
        .spawn(move || {
            let result = std::panic::catch_unwind(AssertUnwindSafe(|| check.call(&thread_ctx)));
            let _ = tx.send(result);
        });
    let (status, message) = match spawned {
        Err(e) => (
            Status::Failed,
            Some(format!("{}: cannot start a thread for the check: {e}", check.name)),
        ),
        Ok(_) => match rx.recv_timeout(deadline) {
            Ok(Ok(Ok(Checked::Yes))) => (Status::Passed, None),
            Ok(Ok(Ok(Checked::NotChecked(why)))) => (Status::NotChecked, Some(why)),
            Ok(Ok(Err(message))) => (Status::Failed, Some(message)),
            Ok(Err(panic)) => (
                Status::Failed,
                Some(format!("{} panicked: {}", check.name, panic_text(panic.as_ref()))),
            ),
            Err(RecvTimeoutError::Timeout) => (
                Status::Failed,
                Some(format!(
                    "{} did not finish within its deadline of {} s; it was abandoned",
                    check.name,
                    deadline.as_secs_f64()
                )),
            ),
            Err(RecvTimeoutError::Disconnected) => {
                (Status::Failed, Some(format!("{} ended without a result", check.name)))
            }
        },
    };
    let elapsed = started.elapsed().as_millis().min(u128::from(u64::MAX)) as u64;
    TrialOutcome::new(trial_name, status, message, elapsed).with_promise(check.promise)
}

fn panic_text(panic: &(dyn std::any::Any + Send)) -> String {
    if let Some(text) = panic.downcast_ref::<&str>() {
        (*text).to_owned()
    } else if let Some(text) = panic.downcast_ref::<String>() {
        text.clone()
    } else {
        "a panic without a message".to_owned()
    }
}

/// The deadline from `ENVRT_CONFORMANCE_DEADLINE` (seconds, fractions allowed), if set and
/// valid.
pub(crate) fn deadline_from_env() -> Result<Option<Duration>, String> {
    match std::env::var("ENVRT_CONFORMANCE_DEADLINE") {
        Err(_) => Ok(None),
        Ok(text) => parse_deadline(&text).map(Some),
    }
}

/// Parses a deadline in seconds (`90`, `2.5`); zero, negative or non-numbers are refused.
pub(crate) fn parse_deadline(text: &str) -> Result<Duration, String> {
    text.trim()
        .parse::<f64>()
        .ok()
        .filter(|s| s.is_finite() && *s > 0.0)
        .map(Duration::from_secs_f64)
        .ok_or_else(|| format!("ENVRT_CONFORMANCE_DEADLINE takes a positive number of seconds, not {text:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deadlines_parse_or_say_why() {
        assert_eq!(parse_deadline("90"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_deadline("2.5"), Ok(Duration::from_millis(2500)));
        for bad in ["0", "-1", "soon", "", "inf"] {
            assert_eq!(
                parse_deadline(bad),
                Err(format!(
                    "ENVRT_CONFORMANCE_DEADLINE takes a positive number of seconds, not {bad:?}"
                ))
            );
        }
    }

    #[test]
    fn panic_payloads_become_text() {
        assert_eq!(panic_text(&"boom"), "boom");
        assert_eq!(panic_text(&String::from("bang")), "bang");
        assert_eq!(panic_text(&7u8), "a panic without a message");
    }
}

//! Timeouts against commands that leave their process group on purpose: a child that
//! moves itself into a new session (`setsid`) and one a job-control shell puts in a
//! process group of its own (`set -m`). A driver that kills only the command's process
//! group at a timeout passes `execute_timeout_kills_tree` and leaves these running. And
//! two shapes a driver that signals only what it can reach from the command misses: a
//! daemon that double-forks into a new session (its parent exits, so it is no longer
//! anybody's descendant in the tree), and a child that ignores SIGTERM (a polite signal
//! with no kill after it leaves it running).

use std::time::Duration;

use envrt_runtime_core::{ExecuteRequest, LeasePolicy};

use super::execute::{marked_loop, no_survivor};
use super::{Check, Checked, has_execute};
use crate::context::{Ctx, ensure, ensure_eq};

pub(super) const CHECKS: &[Check] = &[
    Check::maybe(
        "execute_timeout_kills_new_session",
        has_execute,
        timeout_kills_new_session,
    )
    .promise("A timeout also kills what the command moved into a new session or process group."),
    Check::maybe(
        "execute_timeout_kills_orphans_and_term_ignorers",
        has_execute,
        timeout_kills_orphans,
    )
    .promise(
        "A timeout also kills a daemon the command double-forked into a new session and a child that ignores SIGTERM.",
    ),
];

/// The exit code of the script when the lease has no `setsid`.
const NO_SETSID: i32 = 97;

fn timeout_kills_new_session(ctx: &Ctx) -> Result<Checked, String> {
    ctx.with_lease(LeasePolicy::Ephemeral, |lease| async move {
        let marker = ctx.marker("session");
        let script = format!(
            "command -v setsid >/dev/null || exit {NO_SETSID}; echo partial; \
             setsid {l} & sh -c \"set -m; sh -c 'while :; do sleep 1; done' {marker} & wait\" & wait",
            l = marked_loop(&marker),
        );
        let mut request = ExecuteRequest::new("sh", ["-c".to_string(), script]);
        request.timeout = Some(Duration::from_millis(1500));
        let result = ctx.exec(&lease, request).await?;
        if !result.timed_out && result.exit_code == Some(NO_SETSID) {
            return Ok(Checked::NotChecked("the lease has no setsid".into()));
        }
        ensure(result.timed_out, || "timed_out is false".into())?;
        ensure_eq(result.exit_code, None, "exit code of a killed command")?;
        ensure(result.stdout.starts_with(b"partial"), || {
            format!("partial output lost: {:?}", String::from_utf8_lossy(&result.stdout))
        })?;
        no_survivor(ctx, &marker).await
    })
}

/// A double-forked daemon in a new session (the subshell that started it exits at once,
/// so it is reparented away from the command's tree) and a loop that ignores SIGTERM; both
/// keep the command's stdout, as a daemon started without redirections does.
fn timeout_kills_orphans(ctx: &Ctx) -> Result<Checked, String> {
    ctx.with_lease(LeasePolicy::Ephemeral, |lease| async move {
        let marker = ctx.marker("orphan");
        let script = format!(
            "command -v setsid >/dev/null || exit {NO_SETSID}; \
             (setsid {l} &); \
             sh -c \"trap '' TERM; while :; do sleep 1; done\" {marker} & \
             echo partial; wait",
            l = marked_loop(&marker),
        );
        let mut request = ExecuteRequest::new("sh", ["-c".to_string(), script]);
        request.timeout = Some(Duration::from_millis(1500));
        let result = ctx.exec(&lease, request).await?;
        if !result.timed_out && result.exit_code == Some(NO_SETSID) {
            return Ok(Checked::NotChecked("the lease has no setsid".into()));
        }
        ensure(result.timed_out, || "timed_out is false".into())?;
        ensure_eq(result.exit_code, None, "exit code of a killed command")?;
        ensure(result.stdout.starts_with(b"partial"), || {
            format!("partial output lost: {:?}", String::from_utf8_lossy(&result.stdout))
        })?;
        no_survivor(ctx, &marker).await
    })
}

//! Timeouts against commands that leave their process group on purpose: a child that
//! moves itself into a new session (`setsid`) and one a job-control shell puts in a
//! process group of its own (`set -m`). A driver that kills only the command's process
//! group at a timeout passes `execute_timeout_kills_tree` and leaves these running.

use std::time::Duration;

use envrt_runtime_core::{ExecuteRequest, LeasePolicy};

use super::execute::{marked_loop, no_survivor};
use super::{Check, Checked, has_execute};
use crate::context::{Ctx, ensure, ensure_eq};

pub(super) const CHECKS: &[Check] = &[Check::maybe(
    "execute_timeout_kills_new_session",
    has_execute,
    timeout_kills_new_session,
)
.promise("A timeout also kills what the command moved into a new session or process group.")];

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

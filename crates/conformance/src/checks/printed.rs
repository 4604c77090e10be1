//! The host process's own standard output and standard error: a secret env value of an
//! execute or a spawn must never reach them (a driver that `println!`s or `eprintln!`s a
//! request, or lets a helper it starts write to the host's descriptors). The tracing and
//! `log` side is `execute_secrets_not_logged`'s.

use std::time::Duration;

use envrt_runtime_core::{LeasePolicy, SpawnRequest};

use super::observe::{exercise_secret, secret_env};
use super::processes::granted;
use super::{Check, Checked, has_execute};
use crate::context::{Ctx, ensure};
use crate::host_output::Tee;

pub(super) const CHECKS: &[Check] = &[Check::maybe(
    "execute_secrets_not_printed",
    has_execute,
    secrets_not_printed,
)
.promise("A secret env value of an execute or a spawn never reaches the host process's standard output or standard error.")];

fn secrets_not_printed(ctx: &Ctx) -> Result<Checked, String> {
    ctx.with_lease(LeasePolicy::Ephemeral, |lease| async move {
        let secret = ctx.marker("printed-secret");
        let probe_out = ctx.marker("stdout-probe");
        let probe_err = ctx.marker("stderr-probe");
        let tee = match Tee::open(
            vec![secret.clone(), probe_out.clone(), probe_err.clone()],
            ctx.marker("host-output-end"),
        ) {
            Ok(tee) => tee,
            Err(why) => return Ok(Checked::NotChecked(why)),
        };
        // The probes, printed the way a driver's code would (from a task of the suite's
        // runtime): unseen, the capture sees nothing of what a driver prints.
        let printed = tokio::spawn(async move {
            println!("envrt-conformance: looking at this process's standard output ({probe_out})");
            eprintln!("envrt-conformance: looking at this process's standard error ({probe_err})");
        })
        .await;
        let ran = async {
            exercise_secret(ctx, &lease, &secret).await?;
            if granted(&ctx.profile) {
                let mut spawn = SpawnRequest::new(["sh", "-c", "printf %s \"$TOKEN\" | wc -c"]);
                spawn.env.extend(secret_env(&secret));
                let info = ctx
                    .runtime
                    .spawn(&lease.id, spawn)
                    .await
                    .map_err(|e| format!("spawn: {e}"))?;
                let id = info.id.to_string();
                ctx.runtime
                    .wait_process(&id, Some(Duration::from_secs(60)))
                    .await
                    .map_err(|e| format!("wait_process: {e}"))?;
            }
            Ok::<(), String>(())
        }
        .await;
        let seen = tee.close();
        ran?;
        printed.map_err(|e| format!("the probe task failed: {e}"))?;
        let seen = match seen {
            Ok(seen) => seen,
            Err(why) => return Ok(Checked::NotChecked(format!("cannot read the host's output: {why}"))),
        };
        ensure(seen.of(0).is_empty(), || {
            format!(
                "a secret env value reached the host process's {}",
                seen.of(0).join(" and ")
            )
        })?;
        if seen.of(1).is_empty() || seen.of(2).is_empty() {
            return Ok(Checked::NotChecked(
                "what this process prints does not reach its descriptors 1 and 2 (a test harness \
                 captures it; run under harness = false or with --nocapture)"
                    .into(),
            ));
        }
        Ok(Checked::Yes)
    })
}

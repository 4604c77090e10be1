//! The refusals of the process verbs (contract section 9), each an exact text, and the
//! gate under `persistentProcessSessions` checked in both directions: a driver that grants
//! it spawns, one that lacks the group or the grant is refused with the one text.

use envrt_runtime_core::{LeasePolicy, Offsets, ProcessStatus, ProcessStream, SpawnRequest};

use super::processes::{drain, granted, sh, spawn};
use super::{Check, always};
use crate::context::{Ctx, ensure_eq};

pub(super) const CHECKS: &[Check] = &[
    Check::new("processes_refusal_texts", granted, refusal_texts)
        .promise("An unknown or exited process, a resize without a terminal, and an offset no longer held or past the end are each refused with the contract's exact text."),
    Check::new("honesty_processes", always, honesty)
        .promise("A lease granting persistentProcessSessions spawns; without the group or the grant the exact refusal comes; a driver without the group never grants it."),
];

fn text<T: std::fmt::Debug>(result: Result<T, envrt_runtime_core::RuntimeError>) -> String {
    match result {
        Ok(value) => format!("accepted: {value:?}"),
        Err(error) => error.to_string(),
    }
}

fn refusal_texts(ctx: &Ctx) -> Result<(), String> {
    ctx.with_lease(LeasePolicy::Ephemeral, |lease| async move {
        let rt = &ctx.runtime;
        let unknown = format!("{}/9999", lease.id);
        ensure_eq(
            text(rt.process(&unknown).await),
            format!("Process \"{unknown}\" was not found."),
            "an unknown process",
        )?;
        let mut request = sh("head -c 64 /dev/zero");
        request.keep = Some(16);
        let id = spawn(rt, &lease, request).await?;
        let status = rt.wait_process(&id, None).await.map_err(|e| format!("wait: {e}"))?;
        ensure_eq(status, ProcessStatus::Exited { code: 0 }, "the exit")?;
        let (_, exit) = drain(rt, &id, &Offsets::default()).await?;
        ensure_eq(exit.status, ProcessStatus::Exited { code: 0 }, "the exit after the drain")?;
        for (got, verb) in [
            (text(rt.write_stdin(&id, b"x").await), "write to its stdin"),
            (text(rt.close_stdin(&id).await), "close its stdin"),
            (text(rt.signal(&id, "TERM").await), "signal it"),
        ] {
            ensure_eq(got, format!("Process \"{id}\" has exited: cannot {verb}."), verb)?;
        }
        ensure_eq(
            text(rt.resize(&id, 10, 10).await),
            format!("Process \"{id}\" has no terminal to resize."),
            "resize without a terminal",
        )?;
        ensure_eq(
            text(rt.output(&id, &Offsets::zero()).await),
            format!(
                "Offset 0 of process \"{id}\"'s stdout is no longer held: the first offset still held is 48 (48 bytes dropped)."
            ),
            "an offset no longer held",
        )?;
        ensure_eq(
            text(rt.output(&id, &Offsets::default().with(ProcessStream::Stdout, 65)).await),
            format!("Offset 65 of process \"{id}\"'s stdout is past its end: 64 bytes written so far."),
            "an offset past the end",
        )
    })
}

fn honesty(ctx: &Ctx) -> Result<(), String> {
    ctx.with_lease(LeasePolicy::Ephemeral, |lease| async move {
        // The other direction: a grant the driver cannot serve (no process group) is a lie
        // even though the gate then refuses every spawn.
        if !ctx.profile.has_processes && ctx.profile.ephemeral.persistent_process_sessions {
            return Err("the lease grants persistentProcessSessions but the driver has no process group".into());
        }
        let result = ctx.runtime.spawn(&lease.id, SpawnRequest::new(["true"])).await;
        if granted(&ctx.profile) {
            let info = result.map_err(|e| format!("spawn despite the capability: {e}"))?;
            let status = ctx
                .runtime
                .wait_process(&info.id.to_string(), None)
                .await
                .map_err(|e| format!("wait: {e}"))?;
            return ensure_eq(status, ProcessStatus::Exited { code: 0 }, "`true`");
        }
        ensure_eq(
            text(result),
            format!(
                "Environment driver \"{}\" does not support persistent process sessions.",
                ctx.key
            ),
            "spawn without the capability",
        )
    })
}

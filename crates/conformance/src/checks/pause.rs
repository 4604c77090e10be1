//! Pause and unpause (contract section 8): a paused lease's processes make no progress
//! (a busy counter's CPU time, read from the host's `/proc`, stands still while the same
//! counter on an unpaused lease runs on), the lease refuses execute, spawn, sync and
//! duplex with the exact text, and the counter goes on after unpause. A driver without the
//! group must be refused with the facade's exact text; that is reported as "not checked".

use std::path::Path;
use std::time::Duration;

use envrt_runtime_core::{ExecuteRequest, Lease, LeasePolicy, RuntimeError, SpawnRequest, UnsupportedOperation};

use super::{Check, Checked, has_execute};
use crate::context::{Ctx, ensure, ensure_eq};

pub(super) const CHECKS: &[Check] = &[Check::maybe(
    "pause_stops_progress_refuses_and_unpause_continues",
    has_execute,
    stops_progress,
)
.promise(
    "A paused lease's processes make no progress, its operations are refused with the paused text, and they go on after unpause.",
)];

/// How much CPU time (clock ticks) the unpaused lease's counter must use while the paused
/// one is watched: the window is an event, not a clock.
const WINDOW_TICKS: u64 = 50;

/// How much CPU time the unpaused lease's counter uses after the pause returned and before
/// the paused one's CPU time is taken: the kernel accounts a stopping task's last slice
/// when it leaves the CPU, which may be just after the driver saw it stopped.
const SETTLE_TICKS: u64 = 5;

/// Bound on every wait of the check.
const BOUND: Duration = Duration::from_secs(60);

/// Bound on the wait for a thawed busy counter to use its next clock tick.
const CONTINUE_BOUND: Duration = Duration::from_secs(30);

/// The fields of `/proc/PID/stat` after the command name (state first); `None` when the
/// process is gone.
fn stat_fields(proc_root: &Path, pid: u32) -> Option<Vec<String>> {
    let stat = std::fs::read_to_string(proc_root.join(pid.to_string()).join("stat")).ok()?;
    let rest = stat.get(stat.rfind(')')? + 1..)?;
    Some(rest.split_whitespace().map(str::to_owned).collect())
}

/// The CPU time (user + system clock ticks) of the processes carrying `marker`.
fn ticks(proc_root: &Path, pids: &[u32]) -> u64 {
    pids.iter()
        .filter_map(|pid| stat_fields(proc_root, *pid))
        .filter_map(|fields| {
            let user: u64 = fields.get(11)?.parse().ok()?;
            let system: u64 = fields.get(12)?.parse().ok()?;
            Some(user + system)
        })
        .sum()
}

/// What `/proc` says of each process: its state and its cgroup, for a failure's message.
fn states(proc_root: &Path, pids: &[u32]) -> String {
    pids.iter()
        .map(|pid| {
            let state = stat_fields(proc_root, *pid)
                .and_then(|fields| fields.into_iter().next())
                .unwrap_or_else(|| "gone".into());
            let cgroup = std::fs::read_to_string(proc_root.join(pid.to_string()).join("cgroup"))
                .ok()
                .and_then(|c| c.lines().find_map(|l| l.strip_prefix("0::").map(str::to_owned)))
                .unwrap_or_default();
            format!("{pid}: state {state}, cgroup {cgroup:?}")
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// Waits (bounded by [`BOUND`]) until the processes `pids` have used `ticks` more clock
/// ticks than `from`.
async fn until_used(root: &Path, pids: &[u32], from: u64, ticks_more: u64) -> Result<(), String> {
    let until = tokio::time::Instant::now() + BOUND;
    while ticks(root, pids) < from + ticks_more {
        ensure(tokio::time::Instant::now() < until, || {
            format!(
                "the unpaused lease's counter made no progress either ({})",
                states(root, pids)
            )
        })?;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

/// Starts a busy counter carrying `marker` on the lease, on a task of its own (it runs
/// until its lease ends); waits (bounded) until it can be seen.
async fn start_counter(ctx: &Ctx, lease: &Lease, marker: &str) -> Result<Option<Vec<u32>>, String> {
    let script = format!("i=0; while :; do i=$((i+1)); done; : {marker}");
    let mut request = ExecuteRequest::new("sh", ["-c", script.as_str()]);
    request.timeout = Some(Duration::from_secs(300));
    let runtime = ctx.runtime.clone();
    let id = lease.id.clone();
    tokio::spawn(async move { runtime.execute(&id, request).await });
    let until = tokio::time::Instant::now() + BOUND;
    loop {
        match ctx.processes(marker) {
            Ok(pids) if !pids.is_empty() => return Ok(Some(pids)),
            Ok(_) if tokio::time::Instant::now() < until => tokio::time::sleep(Duration::from_millis(20)).await,
            Ok(_) => return Err("the counter never started".into()),
            Err(_) => return Ok(None),
        }
    }
}

fn stops_progress(ctx: &Ctx) -> Result<Checked, String> {
    ctx.block_on(async {
        let paused = ctx.acquire(LeasePolicy::Ephemeral).await?;
        let reference = match ctx.acquire(LeasePolicy::Ephemeral).await {
            Ok(lease) => lease,
            Err(e) => {
                ctx.finish(&paused).await;
                return Err(e);
            }
        };
        let outcome = round_trip(ctx, &paused, &reference).await;
        ctx.finish(&paused).await;
        ctx.finish(&reference).await;
        outcome
    })
}

async fn round_trip(ctx: &Ctx, lease: &Lease, reference: &Lease) -> Result<Checked, String> {
    let marker = ctx.marker("pause");
    let reference_marker = ctx.marker("pause-ref");
    let Some(pids) = start_counter(ctx, lease, &marker).await? else {
        return Ok(Checked::NotChecked(
            "the lease's processes cannot be seen from this host".into(),
        ));
    };
    let Some(reference_pids) = start_counter(ctx, reference, &reference_marker).await? else {
        return Ok(Checked::NotChecked(
            "the lease's processes cannot be seen from this host".into(),
        ));
    };
    match ctx.runtime.pause_lease(&lease.id).await {
        Ok(_) => {}
        Err(
            error @ RuntimeError::Unsupported {
                operation: UnsupportedOperation::Pause,
                ..
            },
        ) => {
            ensure_eq(
                error.to_string(),
                format!("Environment driver \"{}\" does not support pause.", ctx.key),
                "the refusal of a driver that cannot pause",
            )?;
            return Ok(Checked::NotChecked(
                "the driver cannot pause (refused with the exact text)".into(),
            ));
        }
        Err(error) => return Err(format!("pause_lease failed: {error}")),
    }
    let root = ctx.proc_root.as_path();
    let at_pause = ticks(root, &pids);
    until_used(root, &reference_pids, ticks(root, &reference_pids), SETTLE_TICKS).await?;
    let frozen = ticks(root, &pids);
    until_used(root, &reference_pids, ticks(root, &reference_pids), WINDOW_TICKS).await?;
    let now = ticks(root, &pids);
    ensure(now == frozen, || {
        format!(
            "a paused lease's process made progress: its CPU time went from {frozen} to {now} ticks \
             ({at_pause} when the pause returned; {})",
            states(root, &pids)
        )
    })?;

    let text = format!("Lease \"{}\" is paused.", lease.id);
    let refused = ctx
        .runtime
        .execute(&lease.id, ExecuteRequest::new("true", Vec::<String>::new()))
        .await
        .err()
        .ok_or("a paused lease ran a command")?;
    ensure_eq(refused.to_string(), text.clone(), "the refusal of execute while paused")?;
    if ctx.profile.has_processes {
        let refused = ctx
            .runtime
            .spawn(&lease.id, SpawnRequest::new(["true"]))
            .await
            .err()
            .ok_or("a paused lease spawned a process")?;
        ensure_eq(refused.to_string(), text.clone(), "the refusal of spawn while paused")?;
    }
    if ctx.profile.has_sync {
        let refused = ctx
            .runtime
            .sync_in(&lease.id, &[])
            .await
            .err()
            .ok_or("a paused lease took a sync")?;
        ensure_eq(refused.to_string(), text.clone(), "the refusal of sync while paused")?;
    }
    if ctx.profile.has_duplex {
        let refused = match ctx.runtime.open_duplex_channel(&lease.id, &["true".to_owned()]).await {
            Ok(channel) => {
                let _ = channel.close().await;
                return Err("a paused lease opened a duplex channel".into());
            }
            Err(error) => error,
        };
        ensure_eq(refused.to_string(), text, "the refusal of duplex while paused")?;
    }

    ctx.runtime
        .unpause_lease(&lease.id)
        .await
        .map_err(|e| format!("unpause_lease failed: {e}"))?;
    let until = tokio::time::Instant::now() + CONTINUE_BOUND;
    while ticks(root, &pids) <= frozen {
        ensure(tokio::time::Instant::now() < until, || {
            format!(
                "the paused lease's process did not go on after unpause: its CPU time stayed at {frozen} ticks ({})",
                states(root, &pids)
            )
        })?;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(Checked::Yes)
}

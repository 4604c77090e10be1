//! Idle timeouts (contract section 8, "Idle timeout and keep-alive"): a lease armed with
//! a short idle timeout that nobody touches is ended by its driver (its resources leave
//! the driver's inventory, seen without touching the lease), and then refuses an operation
//! with the ended text; a lease kept alive by `keep_alive` through several timeouts is
//! still there. A driver without the group must be refused with the facade's exact text;
//! that is reported as "not checked", as is a driver without an inventory to look at.

use std::time::Duration;

use envrt_runtime_core::{ExecuteRequest, Lease, LeasePolicy, RuntimeError, UnsupportedOperation};

use super::{Check, Checked, has_execute};
use crate::context::{Ctx, ensure, ensure_eq};

pub(super) const CHECKS: &[Check] = &[
    Check::maybe("idle_lease_ends_and_kept_alive_one_stays", has_execute, idle).promise(
        "A lease nobody touches for its idle timeout is ended by its driver with no holder, and one kept alive is not.",
    ),
];

/// The idle timeout the check arms (the shortest a driver is asked to take).
const IDLE: Duration = Duration::from_secs(1);

/// How long the kept-alive lease is kept alive after the idle one ended: several
/// timeouts.
const KEPT: Duration = Duration::from_secs(5);

/// Bound on the wait for the idle lease to end.
const BOUND: Duration = Duration::from_secs(60);

/// Whether the driver's inventory still holds something of the lease (`None`: the
/// driver has no inventory).
async fn held(ctx: &Ctx, lease: &Lease) -> Result<Option<bool>, String> {
    let Some(driver) = ctx.runtime.driver(&ctx.key) else {
        return Err(format!("driver {:?} is not registered", ctx.key));
    };
    let Some(recovery) = driver.as_recovery() else {
        return Ok(None);
    };
    let items = recovery
        .inventory()
        .await
        .map_err(|e| format!("inventory failed: {e}"))?;
    Ok(Some(
        items
            .iter()
            .any(|item| item.lease_id.as_deref() == Some(lease.id.as_str())),
    ))
}

fn idle(ctx: &Ctx) -> Result<Checked, String> {
    ctx.block_on(async {
        let idle = ctx.acquire(LeasePolicy::Ephemeral).await?;
        let kept = match ctx.acquire(LeasePolicy::Ephemeral).await {
            Ok(lease) => lease,
            Err(e) => {
                ctx.finish(&idle).await;
                return Err(e);
            }
        };
        let outcome = round_trip(ctx, &idle, &kept).await;
        ctx.finish(&idle).await;
        ctx.finish(&kept).await;
        outcome
    })
}

async fn round_trip(ctx: &Ctx, idle: &Lease, kept: &Lease) -> Result<Checked, String> {
    match ctx.runtime.set_idle_timeout(&idle.id, IDLE).await {
        Ok(_) => {}
        Err(
            error @ RuntimeError::Unsupported {
                operation: UnsupportedOperation::IdleTimeout,
                ..
            },
        ) => {
            ensure_eq(
                error.to_string(),
                format!("Environment driver \"{}\" does not support idle timeouts.", ctx.key),
                "the refusal of a driver without idle timeouts",
            )?;
            return Ok(Checked::NotChecked(
                "the driver has no idle timeouts (refused with the exact text)".into(),
            ));
        }
        Err(error) => return Err(format!("set_idle_timeout failed: {error}")),
    }
    if held(ctx, idle).await? != Some(true) {
        return Ok(Checked::NotChecked(
            "the driver's inventory does not show the lease".into(),
        ));
    }
    ctx.runtime
        .set_idle_timeout(&kept.id, IDLE)
        .await
        .map_err(|e| format!("set_idle_timeout failed: {e}"))?;
    // Nobody touches the idle one: its driver ends it. The other one is kept alive
    // meanwhile, and for several timeouts more.
    let until = tokio::time::Instant::now() + BOUND;
    let mut ended_at = None;
    loop {
        ctx.runtime
            .keep_alive(&kept.id)
            .await
            .map_err(|e| format!("a kept-alive lease was refused: {e}"))?;
        let now = tokio::time::Instant::now();
        match ended_at {
            None if held(ctx, idle).await? != Some(true) => ended_at = Some(now),
            None => ensure(now < until, || {
                format!("a lease untouched for its idle timeout of {IDLE:?} was still held after {BOUND:?}")
            })?,
            Some(at) if now.duration_since(at) >= KEPT => break,
            Some(_) => {}
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    ensure(held(ctx, kept).await? == Some(true), || {
        "the driver ended a lease that was kept alive".into()
    })?;
    let refused = ctx
        .runtime
        .execute(&idle.id, ExecuteRequest::new("true", Vec::<String>::new()))
        .await
        .err()
        .ok_or("a lease its idle timeout ended ran a command")?;
    ensure_eq(
        refused.to_string(),
        format!("Lease \"{}\" ended after its idle timeout.", idle.id),
        "the refusal of a lease its idle timeout ended",
    )?;
    Ok(Checked::Yes)
}

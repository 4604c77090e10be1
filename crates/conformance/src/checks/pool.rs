//! Warm pools: N concurrent acquires from a full pool of N get the N ready leases, each
//! once, and every one is clean: a file written in one handed-out lease is visible in no
//! other, nor in a pooled lease handed out after them. The pool runs for a tenant of its
//! own, so the suite's other checks never take its leases.

use std::collections::BTreeSet;
use std::time::Duration;

use envrt_runtime_core::{AcquireRequest, Lease, LeaseFilter, LeasePolicy, LeaseStatus, POOLED_KEY, PoolSpec};

use super::{Check, has_execute};
use crate::context::{Ctx, ensure, ensure_eq};

pub(super) const CHECKS: &[Check] = &[Check::new(
    "pool_concurrent_acquires_get_distinct_clean_leases",
    has_execute,
    distinct_clean_leases,
)
.promise("Concurrent acquires from a pool get distinct, clean leases, and the pool refills.")];

/// The pool's size and the number of concurrent acquires.
const SIZE: usize = 3;

/// How long the pool may take to fill (cold starts of a slow driver, on a loaded machine).
const FILL: Duration = Duration::from_secs(90);

fn distinct_clean_leases(ctx: &Ctx) -> Result<(), String> {
    ctx.block_on(async {
        let company = format!("{}-pool", ctx.company_id);
        let mut spec = PoolSpec::new(&ctx.environment_id, &company, SIZE);
        // No health rounds: their resumes would land in other checks' call counts (checks
        // run in parallel), and this check does not look at health.
        spec.health_interval = Duration::from_secs(3600);
        ctx.runtime
            .start_pool(spec)
            .map_err(|e| format!("start_pool failed: {e}"))?;
        let mut taken: Vec<Lease> = Vec::new();
        let outcome = on_pool(ctx, &company, &mut taken).await;
        let _ = ctx.runtime.stop_pools().await;
        for lease in &taken {
            ctx.finish(lease).await;
        }
        outcome
    })
}

async fn on_pool(ctx: &Ctx, company: &str, taken: &mut Vec<Lease>) -> Result<(), String> {
    let ready = wait_full(ctx, company).await?;
    // N acquires at once, all from the pool.
    let acquires = (0..SIZE).map(|_| ctx.runtime.acquire_lease(request(ctx, company)));
    let results = futures::future::join_all(acquires).await;
    let mut failures = Vec::new();
    for result in results {
        match result {
            Ok(lease) => taken.push(lease),
            Err(error) => failures.push(error.to_string()),
        }
    }
    ensure(failures.is_empty(), || {
        format!("concurrent acquires failed: {failures:?}")
    })?;
    let ids: BTreeSet<String> = taken.iter().map(|l| l.id.clone()).collect();
    ensure_eq(ids.len(), SIZE, "distinct leases among the concurrent acquires")?;
    ensure_eq(
        &ids,
        &ready,
        "the leases handed out vs the ready leases of the full pool",
    )?;
    for lease in taken.iter() {
        ensure(!lease.metadata.contains_key(POOLED_KEY), || {
            format!("lease {} was handed out still marked {POOLED_KEY}", lease.id)
        })?;
    }
    // Clean and apart: each lease sees no file of the others, then writes its own.
    let file = format!("{}.pool", ctx.marker("pool"));
    for lease in taken.iter() {
        let script = format!("test ! -e {file} && echo {} > {file}", lease.id);
        ctx.sh(lease, &script)
            .await
            .map_err(|e| format!("lease {} sees a file written in another lease: {e}", lease.id))?;
    }
    for lease in taken.iter() {
        let seen = ctx.sh(lease, &format!("cat {file}")).await?;
        ensure_eq(
            String::from_utf8_lossy(&seen).trim().to_owned(),
            lease.id.clone(),
            "the file a lease wrote, read back in it",
        )?;
    }
    // Give the written-in leases back; a pooled lease handed out later is clean too.
    for lease in taken.iter() {
        ctx.finish(lease).await;
    }
    let refilled = wait_full(ctx, company).await?;
    ensure(refilled.is_disjoint(&ids), || {
        format!("the refilled pool holds a lease already handed out: {refilled:?} vs {ids:?}")
    })?;
    let later = ctx
        .runtime
        .acquire_lease(request(ctx, company))
        .await
        .map_err(|e| format!("acquire after the refill failed: {e}"))?;
    taken.push(later.clone());
    ensure(refilled.contains(&later.id), || {
        format!(
            "the later acquire did not come from the pool: {} not in {refilled:?}",
            later.id
        )
    })?;
    ctx.sh(&later, &format!("test ! -e {file}"))
        .await
        .map_err(|e| format!("a later pooled lease sees a file written in an earlier one: {e}"))?;
    Ok(())
}

fn request(ctx: &Ctx, company: &str) -> AcquireRequest {
    let mut request = AcquireRequest::new(&ctx.environment_id, company);
    request.run_id = Some(format!("{}-run", ctx.marker_prefix));
    request
}

/// Waits until the pool holds `SIZE` ready leases and returns their ids (the active leases
/// of `company` still marked as pooled).
async fn wait_full(ctx: &Ctx, company: &str) -> Result<BTreeSet<String>, String> {
    let until = tokio::time::Instant::now() + FILL;
    loop {
        let status = ctx
            .runtime
            .pool_status(&ctx.environment_id, company, LeasePolicy::Ephemeral)
            .ok_or("the pool is not running")?;
        if status.ready == SIZE {
            break;
        }
        ensure(tokio::time::Instant::now() < until, || {
            format!(
                "the pool did not fill within {FILL:?}: {} of {SIZE} ready, last error {:?}",
                status.ready, status.last_error
            )
        })?;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let filter = LeaseFilter {
        environment_id: Some(ctx.environment_id.clone()),
        statuses: vec![LeaseStatus::Active],
        ..LeaseFilter::default()
    };
    let leases = ctx.runtime.leases(&filter).await.map_err(|e| e.to_string())?;
    let ready: BTreeSet<String> = leases
        .into_iter()
        .filter(|l| l.company_id == company && l.metadata.contains_key(POOLED_KEY))
        .map(|l| l.id)
        .collect();
    ensure_eq(ready.len(), SIZE, "pooled active leases in the store of a full pool")?;
    Ok(ready)
}

//! Lease life cycle: acquire, idempotent release and destroy, resume of reusable leases,
//! release of a run's leases in isolation.

use envrt_runtime_core::{AcquireRequest, LeasePolicy, LeaseStatus};

use super::{Check, always, has_destroy, has_reuse, has_sync_and_execute};
use crate::context::{Ctx, ensure, ensure_eq};

pub(super) const CHECKS: &[Check] = &[
    Check::new("lifecycle_acquire_writes_driver_key", always, acquire_metadata)
        .promise("An acquired lease records its driver key in metadata.driver."),
    Check::new("lifecycle_release_is_idempotent", always, release_idempotent)
        .promise("Releasing a lease again succeeds and it stays released."),
    Check::new("lifecycle_destroy_is_idempotent", has_destroy, destroy_idempotent)
        .promise("Destroying a lease again succeeds."),
    Check::new("lifecycle_resume_returns_the_same_resource", has_reuse, resume_same)
        .promise("Resuming a reusable lease hands back the same resource."),
    Check::new("lifecycle_release_run_leases", always, release_run)
        .promise("release_leases releases every active lease of a run, each in isolation."),
    Check::new(
        "lifecycle_ephemeral_release_drops_files",
        has_sync_and_execute,
        ephemeral_fresh,
    )
    .promise("A new ephemeral lease does not see files an earlier, released one wrote."),
];

fn acquire_metadata(ctx: &Ctx) -> Result<(), String> {
    ctx.with_lease(LeasePolicy::Ephemeral, |lease| async move {
        ensure_eq(lease.status, LeaseStatus::Active, "status")?;
        ensure_eq(
            lease.metadata.get("driver").and_then(|v| v.as_str()),
            Some(ctx.key.as_str()),
            "metadata.driver",
        )?;
        ensure_eq(lease.company_id.as_str(), ctx.company_id.as_str(), "company id")
    })
}

fn release_idempotent(ctx: &Ctx) -> Result<(), String> {
    ctx.block_on(async {
        let lease = ctx.acquire(LeasePolicy::Ephemeral).await?;
        for attempt in 1..=3 {
            let released = ctx
                .runtime
                .release_lease(&lease.id, LeaseStatus::Released)
                .await
                .map_err(|e| format!("release #{attempt}: {e}"))?;
            ensure_eq(released.status, LeaseStatus::Released, "status after release")?;
        }
        ctx.finish(&lease).await;
        Ok(())
    })
}

fn destroy_idempotent(ctx: &Ctx) -> Result<(), String> {
    ctx.block_on(async {
        let lease = ctx.acquire(LeasePolicy::ReuseByEnvironment).await?;
        ctx.runtime
            .release_lease(&lease.id, LeaseStatus::Released)
            .await
            .map_err(|e| format!("release: {e}"))?;
        for attempt in 1..=2 {
            ctx.runtime
                .destroy_lease(&lease.id)
                .await
                .map_err(|e| format!("destroy #{attempt}: {e}"))?;
        }
        if ctx.profile.has_resume && ctx.profile.reusable.reusable_leases {
            // The resource is gone: resume must say so instead of handing out a lease.
            let resumed = ctx.runtime.resume_lease(&lease.id).await;
            ensure(resumed.is_err(), || "a destroyed lease was resumed".into())?;
        }
        Ok(())
    })
}

fn resume_same(ctx: &Ctx) -> Result<(), String> {
    ctx.with_lease(LeasePolicy::ReuseByEnvironment, |lease| async move {
        let marker = ctx.marker("resume");
        if ctx.profile.has_execute {
            ctx.sh(&lease, &format!("printf '{marker}' > resume-marker.txt"))
                .await?;
        }
        ctx.runtime
            .release_lease(&lease.id, LeaseStatus::Released)
            .await
            .map_err(|e| format!("release: {e}"))?;
        let resumed = ctx
            .runtime
            .resume_lease(&lease.id)
            .await
            .map_err(|e| format!("resume: {e}"))?;
        ensure_eq(resumed.status, LeaseStatus::Active, "status after resume")?;
        ensure_eq(
            &resumed.provider_lease_id,
            &lease.provider_lease_id,
            "provider lease id",
        )?;
        if ctx.profile.has_execute {
            let got = ctx.sh(&resumed, "cat resume-marker.txt").await?;
            ensure_eq(
                String::from_utf8_lossy(&got).as_ref(),
                marker.as_str(),
                "file kept across resume",
            )?;
        }
        Ok(())
    })
}

fn release_run(ctx: &Ctx) -> Result<(), String> {
    ctx.block_on(async {
        let run = ctx.marker("run");
        let mut ids = Vec::new();
        for _ in 0..3 {
            let mut request = AcquireRequest::new(&ctx.environment_id, &ctx.company_id);
            request.run_id = Some(run.clone());
            let lease = ctx.runtime.acquire_lease(request).await.map_err(|e| e.to_string())?;
            ids.push(lease.id);
        }
        let report = ctx
            .runtime
            .release_leases(&run, LeaseStatus::Released)
            .await
            .map_err(|e| e.to_string())?;
        let failures: Vec<String> = report.failures.iter().map(|f| f.error.to_string()).collect();
        ensure(failures.is_empty(), || format!("release failures: {failures:?}"))?;
        ensure_eq(report.released.len(), 3, "released leases")?;
        for id in &ids {
            let lease = ctx
                .runtime
                .lease(id)
                .await
                .map_err(|e| e.to_string())?
                .ok_or("lease vanished")?;
            ensure_eq(lease.status, LeaseStatus::Released, "status")?;
            ctx.finish(&lease).await;
        }
        Ok(())
    })
}

fn ephemeral_fresh(ctx: &Ctx) -> Result<(), String> {
    ctx.block_on(async {
        let first = ctx.acquire(LeasePolicy::Ephemeral).await?;
        let marker = ctx.marker("fresh");
        ctx.sh(&first, &format!("printf x > '{marker}'")).await?;
        ctx.finish(&first).await;
        let second = ctx.acquire(LeasePolicy::Ephemeral).await?;
        let out = ctx
            .sh(&second, &format!("test -e '{marker}' && echo leaked || echo fresh"))
            .await;
        ctx.finish(&second).await;
        ensure_eq(
            String::from_utf8_lossy(&out?).trim(),
            "fresh",
            "a new lease's workspace",
        )
    })
}

//! Lease life cycle v2 (contract section 8: "Fork", "Scope reuse", "Readiness"): a fork's
//! copies each hold the fork point and not each other's (or the source's) later writes;
//! an acquire with scope reuse hands back the same lease with its files, replaces it on a
//! changed fingerprint and gives concurrent acquirers one lease; a readiness command that
//! fails leaves nothing of the half-made lease behind; an acquire returns only once the
//! lease runs a command: the very first execute and the very first spawn succeed.

use envrt_runtime_core::{
    AcquireRequest, Environment, Lease, LeasePolicy, LeaseStatus, Readiness, Reuse, RuntimeError, ScopeOutcome,
};

use super::{Check, Checked};
use crate::context::{Ctx, ensure, ensure_eq};

pub(super) const CHECKS: &[Check] = &[
    Check::new("fork_copies_hold_the_fork_point_and_stay_apart", has_fork_and_execute, copies_apart)
        .promise("Each fork copy holds the source's state at the fork; later writes reach no other lease."),
    Check::maybe("scope_reuse_resumes_replaces_and_serialises", super::has_execute, scope_reuse)
        .promise("A scoped acquire resumes its lease with its files, replaces it on a changed fingerprint, and concurrent acquirers get one lease."),
    Check::maybe("ready_failure_leaves_nothing_behind", super::has_execute, ready_failure)
        .promise("A failed readiness command fails the acquire with its text and leaves no resource behind."),
    Check::new("acquire_is_ready_for_execute_and_spawn", super::has_execute, ready_at_once)
        .promise("An acquire returns a lease that runs a command: the first execute, and the first spawn where processes are granted, succeed with no retry and no wait."),
];

fn has_fork_and_execute(p: &crate::Profile) -> bool {
    p.has_fork && p.has_execute
}

async fn text(ctx: &Ctx, lease: &Lease, script: &str) -> Result<String, String> {
    Ok(String::from_utf8_lossy(&ctx.sh(lease, script).await?).into_owned())
}

fn copies_apart(ctx: &Ctx) -> Result<(), String> {
    ctx.block_on(async {
        let source = ctx.acquire(LeasePolicy::Ephemeral).await?;
        let m = ctx.marker("fork");
        let mut copies: Vec<Lease> = Vec::new();
        let outcome = async {
            ctx.sh(&source, &format!("echo base > {m}")).await?;
            copies = ctx
                .runtime
                .fork_lease(&source.id, 2)
                .await
                .map_err(|e| format!("fork_lease failed: {e}"))?;
            ensure_eq(copies.len(), 2, "the number of copies")?;
            ctx.sh(&source, &format!("echo source > {m}")).await?;
            ctx.sh(&copies[0], &format!("echo copy0 > {m} && echo extra > {m}-extra"))
                .await?;
            ensure_eq(
                text(
                    ctx,
                    &copies[1],
                    &format!("cat {m}; test -e {m}-extra && echo seen || echo apart"),
                )
                .await?,
                "base\napart\n".to_owned(),
                "the second copy after the source and the first copy wrote",
            )?;
            ensure_eq(
                text(ctx, &copies[0], &format!("cat {m}")).await?,
                "copy0\n".to_owned(),
                "the first copy",
            )?;
            ensure_eq(
                text(
                    ctx,
                    &source,
                    &format!("cat {m}; test -e {m}-extra && echo seen || echo apart"),
                )
                .await?,
                "source\napart\n".to_owned(),
                "the source after the copies wrote",
            )
        }
        .await;
        for lease in copies.iter().chain([&source]) {
            ctx.finish(lease).await;
        }
        outcome
    })
}

fn scoped(ctx: &Ctx, scope: &str) -> AcquireRequest {
    let mut request = AcquireRequest::new(&ctx.environment_id, &ctx.company_id);
    request.run_id = Some(format!("{}-run", ctx.marker_prefix));
    request.scope = Some(scope.to_owned());
    request.reuse = Reuse::Scope;
    request.policy = LeasePolicy::ReuseByEnvironment;
    request
}

fn scope_reuse(ctx: &Ctx) -> Result<Checked, String> {
    if !super::has_reuse(&ctx.profile) {
        return Ok(Checked::NotChecked(
            "the driver has no reusable leases to hand back".into(),
        ));
    }
    ctx.block_on(async {
        let scope = ctx.marker("scope");
        let mut made: Vec<Lease> = Vec::new();
        let outcome = async {
            let first = ctx
                .runtime
                .acquire_lease(scoped(ctx, &scope))
                .await
                .map_err(|e| format!("scoped acquire: {e}"))?;
            made.push(first.clone());
            ensure_eq(
                ScopeOutcome::of(&first),
                Some(ScopeOutcome::Created),
                "the first scoped acquire",
            )?;
            ctx.sh(&first, "echo warm > scope-state").await?;
            ctx.runtime
                .release_lease(&first.id, LeaseStatus::Released)
                .await
                .map_err(|e| format!("release: {e}"))?;
            let resumed = ctx
                .runtime
                .acquire_lease(scoped(ctx, &scope))
                .await
                .map_err(|e| format!("scoped acquire: {e}"))?;
            ensure_eq(
                resumed.id.as_str(),
                first.id.as_str(),
                "the lease a scoped acquire hands back",
            )?;
            ensure_eq(
                ScopeOutcome::of(&resumed),
                Some(ScopeOutcome::Resumed),
                "the second scoped acquire",
            )?;
            ensure_eq(
                text(ctx, &resumed, "cat scope-state").await?,
                "warm\n".to_owned(),
                "the resumed lease's files",
            )?;

            // Concurrent acquirers of a new scope get one lease.
            let other = ctx.marker("scope-race");
            let racers: Vec<_> = (0..6).map(|_| ctx.runtime.acquire_lease(scoped(ctx, &other))).collect();
            let mut ids = Vec::new();
            for result in futures::future::join_all(racers).await {
                let lease = result.map_err(|e| format!("a concurrent scoped acquire: {e}"))?;
                if !made.iter().any(|l| l.id == lease.id) {
                    made.push(lease.clone());
                }
                ids.push(lease.id);
            }
            ids.sort();
            ids.dedup();
            ensure(ids.len() == 1, || {
                format!("concurrent acquires of one scope got {} leases: {ids:?}", ids.len())
            })?;

            // A changed fingerprint (now from a template) replaces the lease, where the
            // driver has templates to change it with.
            if !ctx.profile.has_templates {
                return Ok(Checked::NotChecked(
                    "resume and one lease per scope checked; replacement needs templates".into(),
                ));
            }
            // A worker may have the group and refuse capture in Paperclip's words.
            let Some(template) = super::templates::capture(ctx, &first, "scope").await? else {
                return Ok(Checked::NotChecked(
                    "resume and one lease per scope checked; replacement needs a template the driver captures".into(),
                ));
            };
            let mut changed = scoped(ctx, &scope);
            changed.template = Some(template.id.clone());
            let replaced = ctx
                .runtime
                .acquire_lease(changed)
                .await
                .map_err(|e| format!("scoped acquire: {e}"));
            let _ = ctx
                .runtime
                .delete_template(&ctx.environment_id, &ctx.company_id, &template.id)
                .await;
            let replaced = replaced?;
            made.push(replaced.clone());
            ensure(replaced.id != first.id, || {
                "a changed fingerprint handed back the old lease".into()
            })?;
            ensure_eq(
                ScopeOutcome::of(&replaced),
                Some(ScopeOutcome::Replaced {
                    reason: "the fingerprint changed: template".into(),
                }),
                "the outcome on a changed fingerprint",
            )?;
            Ok(Checked::Yes)
        }
        .await;
        for lease in &made {
            ctx.finish(lease).await;
        }
        outcome
    })
}

fn ready_failure(ctx: &Ctx) -> Result<Checked, String> {
    let Some(probe) = ctx.resource.clone() else {
        return Ok(Checked::NotChecked(
            "the target has no resource probe (Target::with_resource_probe)".into(),
        ));
    };
    ctx.block_on(async {
        let base = ctx
            .runtime
            .environment(&ctx.environment_id)
            .await
            .map_err(|e| e.to_string())?
            .ok_or("the suite's environment is gone")?;
        let id = format!("{}-not-ready", ctx.environment_id);
        let environment = Environment {
            id: id.clone(),
            readiness: Some(Readiness {
                command: vec!["sh".into(), "-c".into(), "exit 7".into()],
                timeout_ms: 60_000,
            }),
            ..base
        };
        ctx.runtime
            .put_environment(environment)
            .await
            .map_err(|e| format!("put_environment: {e}"))?;
        let refused = ctx
            .runtime
            .acquire_lease(AcquireRequest::new(&id, &ctx.company_id))
            .await;
        let lease_id = match refused {
            Err(RuntimeError::NotReady { id, reason }) => {
                ensure_eq(
                    reason.as_str(),
                    "its readiness command exited with code 7",
                    "the readiness refusal",
                )?;
                id
            }
            Err(other) => return Err(format!("expected the readiness refusal, got {other}")),
            Ok(lease) => {
                ctx.finish(&lease).await;
                return Err("a lease whose readiness command failed was handed out".into());
            }
        };
        let lease = ctx
            .runtime
            .lease(&lease_id)
            .await
            .map_err(|e| e.to_string())?
            .ok_or("the refused lease's record is gone")?;
        ensure_eq(lease.status, LeaseStatus::Failed, "the refused lease's status")?;
        let left = probe(&lease)
            .await
            .map_err(|e| format!("the resource probe failed: {e}"))?;
        if left {
            ctx.finish(&lease).await;
        }
        ensure(!left, || "the half-made lease's resource is still there".into())?;
        Ok(Checked::Yes)
    })
}

/// How many fresh leases the readiness check tries, for each of execute and spawn.
const READY_ROUNDS: usize = 2;

fn ready_at_once(ctx: &Ctx) -> Result<(), String> {
    ctx.block_on(async {
        for round in 0..READY_ROUNDS {
            let lease = ctx.acquire(LeasePolicy::Ephemeral).await?;
            let first = ctx.sh(&lease, "echo ready").await;
            ctx.finish(&lease).await;
            let first = first.map_err(|e| format!("the first execute right after acquire {round} failed: {e}"))?;
            ensure_eq(
                String::from_utf8_lossy(&first).into_owned(),
                "ready\n".to_owned(),
                "the first execute's stdout",
            )?;
        }
        if !super::processes::granted(&ctx.profile) {
            return Ok(());
        }
        for round in 0..READY_ROUNDS {
            let lease = ctx.acquire(LeasePolicy::Ephemeral).await?;
            let outcome = async {
                let id = super::processes::spawn(&ctx.runtime, &lease, super::processes::sh("echo spawned"))
                    .await
                    .map_err(|e| format!("the first spawn right after acquire {round} failed: {e}"))?;
                let (chunks, info) =
                    super::processes::drain(&ctx.runtime, &id, &envrt_runtime_core::process::Offsets::zero()).await?;
                let stdout = super::processes::joined(&chunks, envrt_runtime_core::process::ProcessStream::Stdout, 0)?;
                ensure_eq(
                    String::from_utf8_lossy(&stdout).into_owned(),
                    "spawned\n".to_owned(),
                    "the first spawn's stdout",
                )?;
                ensure_eq(info.status.exit_code(), Some(0), "the first spawn's exit code")
            }
            .await;
            ctx.finish(&lease).await;
            outcome?;
        }
        Ok(())
    })
}

//! The lease life cycle behind the facade: the facade short-circuits a second release and
//! the other checks always destroy their leases, so here the DRIVER is called directly the
//! way a recovering host would (release and destroy of an ended or unknown lease, resume
//! after release), and the backend's real state is inspected with the target's resource
//! probe after an ephemeral release, before any destroy.

use envrt_runtime_core::driver::{LeaseContext, ReleaseInput};
use envrt_runtime_core::{ExecuteRequest, Lease, LeasePolicy, LeaseStatus};

use super::{Check, Checked, always, has_destroy};
use crate::context::{Ctx, ensure, ensure_eq};

pub(super) const CHECKS: &[Check] = &[
    Check::new("lifecycle_driver_release_after_end", always, release_after_end)
        .promise("The driver's release and destroy of an ended lease succeed when repeated."),
    Check::new("lifecycle_driver_unknown_lease", always, unknown_lease)
        .promise("Release, destroy and resume of a lease never issued succeed or say gone, and spare live leases."),
    Check::new(
        "lifecycle_driver_resume_after_release",
        has_resume,
        resume_after_release,
    )
    .promise("After a release, resume gives the same resource for a reusable lease, none for an ephemeral one."),
    Check::maybe(
        "lifecycle_ephemeral_release_frees_resource",
        always,
        ephemeral_release_frees,
    )
    .promise("An ephemeral release frees the backend resource by itself, before any destroy."),
    Check::maybe(
        "lifecycle_reusable_release_keeps_resource",
        has_destroy,
        reusable_release_keeps,
    )
    .promise("A reusable release keeps the backend resource; destroy then removes it."),
];

fn has_resume(p: &crate::Profile) -> bool {
    p.has_resume
}

/// The lease record as the store has it now, with its environment.
async fn context_of(ctx: &Ctx, id: &str) -> Result<LeaseContext, String> {
    let lease = ctx
        .runtime
        .lease(id)
        .await
        .map_err(|e| e.to_string())?
        .ok_or_else(|| format!("lease {id} vanished from the store"))?;
    let environment = ctx
        .runtime
        .environment(&ctx.environment_id)
        .await
        .map_err(|e| e.to_string())?;
    Ok(LeaseContext { lease, environment })
}

async fn driver_release(ctx: &Ctx, context: &LeaseContext, what: &str) -> Result<(), String> {
    let input = ReleaseInput {
        context: context.clone(),
        status: LeaseStatus::Released,
    };
    ctx.recorder
        .inner()
        .release_lease(&input)
        .await
        .map_err(|e| format!("the driver's release_lease of {what} failed: {e}"))
}

async fn driver_destroy(ctx: &Ctx, context: &LeaseContext, what: &str) -> Result<(), String> {
    let Some(destroy) = ctx.recorder.inner().as_destroy() else {
        return Ok(());
    };
    destroy
        .destroy_lease(context)
        .await
        .map_err(|e| format!("the driver's destroy_lease of {what} failed: {e}"))
}

/// Release (and destroy) of a lease that already ended succeed when repeated on the driver.
fn release_after_end(ctx: &Ctx) -> Result<(), String> {
    ctx.block_on(async {
        let lease = ctx.acquire(LeasePolicy::Ephemeral).await?;
        ctx.finish(&lease).await;
        let context = context_of(ctx, &lease.id).await?;
        for attempt in 1..=2 {
            driver_release(ctx, &context, &format!("an ended lease (#{attempt})")).await?;
        }
        for attempt in 1..=2 {
            driver_destroy(ctx, &context, &format!("an ended lease (#{attempt})")).await?;
        }
        Ok(())
    })
}

/// An id of the same shape that was never issued: the last hex digit changed.
fn sibling_id(id: &str) -> String {
    let mut chars: Vec<char> = id.chars().collect();
    if let Some(c) = chars.iter_mut().rev().find(|c| c.is_ascii_hexdigit()) {
        *c = if *c == '0' { '1' } else { '0' };
    } else {
        chars.extend("-0".chars());
    }
    chars.into_iter().collect()
}

/// Release, destroy and resume of a lease the driver never issued (ids of the right shape)
/// succeed or say "gone", and leave a live lease of the suite alone.
fn unknown_lease(ctx: &Ctx) -> Result<(), String> {
    ctx.with_lease(LeasePolicy::Ephemeral, |live| async move {
        let mut context = context_of(ctx, &live.id).await?;
        let mut ghost: Lease = context.lease.clone();
        ghost.id = sibling_id(&live.id);
        ghost.provider_lease_id = live.provider_lease_id.as_deref().map(sibling_id);
        // Metadata naming the live lease (a workspace path, a container id) names the
        // ghost instead, so nothing of the call can reach the live resource by accident.
        let mut swaps = vec![(live.id.clone(), ghost.id.clone())];
        if let (Some(live_provider), Some(ghost_provider)) = (&live.provider_lease_id, &ghost.provider_lease_id) {
            swaps.push((live_provider.clone(), ghost_provider.clone()));
        }
        for value in ghost.metadata.values_mut() {
            if let Some(text) = value.as_str() {
                let swapped = swaps.iter().fold(text.to_owned(), |t, (from, to)| t.replace(from, to));
                *value = swapped.into();
            }
        }
        context.lease = ghost;
        driver_release(ctx, &context, "a lease it never issued").await?;
        driver_destroy(ctx, &context, "a lease it never issued").await?;
        if let Some(resume) = ctx.recorder.inner().as_resume() {
            if let Ok(Some(grant)) = resume.resume_lease(&context).await {
                return Err(format!(
                    "the driver resumed a lease it never issued (provider lease id {:?})",
                    grant.provider_lease_id
                ));
            }
        }
        if ctx.profile.has_execute {
            let result = ctx
                .exec(&live, ExecuteRequest::new("true", Vec::<String>::new()))
                .await
                .map_err(|e| format!("the suite's live lease broke after calls on an unknown one: {e}"))?;
            ensure_eq(result.exit_code, Some(0), "exit code on the live lease")?;
        }
        Ok(())
    })
}

/// After a release, the driver's resume hands back the same resource for a reusable lease
/// (twice in a row) and never a resource for an ephemeral one (it is gone).
fn resume_after_release(ctx: &Ctx) -> Result<(), String> {
    let resume = || ctx.recorder.inner().as_resume().ok_or("the driver withdrew resume");
    ctx.block_on(async {
        if ctx.profile.reusable.reusable_leases {
            let lease = ctx.acquire(LeasePolicy::ReuseByEnvironment).await?;
            let outcome = async {
                ctx.runtime
                    .release_lease(&lease.id, LeaseStatus::Released)
                    .await
                    .map_err(|e| format!("release: {e}"))?;
                let context = context_of(ctx, &lease.id).await?;
                for attempt in 1..=2 {
                    let grant = resume()?
                        .resume_lease(&context)
                        .await
                        .map_err(|e| format!("resume #{attempt} of a released reusable lease: {e}"))?
                        .ok_or(format!(
                            "resume #{attempt} of a released reusable lease says its resource is gone"
                        ))?;
                    ensure_eq(
                        grant.provider_lease_id.as_ref().or(lease.provider_lease_id.as_ref()),
                        lease.provider_lease_id.as_ref(),
                        "provider lease id on resume",
                    )?;
                }
                Ok::<(), String>(())
            }
            .await;
            ctx.finish(&lease).await;
            outcome?;
        }
        let lease = ctx.acquire(LeasePolicy::Ephemeral).await?;
        ctx.runtime
            .release_lease(&lease.id, LeaseStatus::Released)
            .await
            .map_err(|e| format!("release: {e}"))?;
        let context = context_of(ctx, &lease.id).await?;
        let resumed = resume()?.resume_lease(&context).await;
        ctx.finish(&lease).await;
        match resumed {
            Ok(Some(grant)) => Err(format!(
                "the driver resumed a released ephemeral lease (provider lease id {:?}): \
                 its resource should be gone",
                grant.provider_lease_id
            )),
            Ok(None) | Err(_) => Ok(()),
        }
    })
}

async fn exists(ctx: &Ctx, lease: &Lease, when: &str) -> Result<bool, String> {
    let probe = ctx.resource.clone().ok_or("no resource probe")?;
    probe(lease)
        .await
        .map_err(|e| format!("the resource probe failed {when}: {e}"))
}

fn no_probe() -> Checked {
    Checked::NotChecked("the target has no resource probe (Target::with_resource_probe)".into())
}

/// An ephemeral release frees the backend resource by itself, before any destroy.
fn ephemeral_release_frees(ctx: &Ctx) -> Result<Checked, String> {
    if ctx.resource.is_none() {
        return Ok(no_probe());
    }
    ctx.block_on(async {
        let lease = ctx.acquire(LeasePolicy::Ephemeral).await?;
        let outcome = async {
            ensure(exists(ctx, &lease, "on a live lease").await?, || {
                "the resource probe does not see a live lease's resource".into()
            })?;
            ctx.runtime
                .release_lease(&lease.id, LeaseStatus::Released)
                .await
                .map_err(|e| format!("release: {e}"))?;
            ensure(!exists(ctx, &lease, "after release").await?, || {
                "an ephemeral lease's resource still exists after its release (before any destroy)".into()
            })
        }
        .await;
        ctx.finish(&lease).await;
        outcome.map(|()| Checked::Yes)
    })
}

/// A reusable release keeps the resource; destroy then removes it.
fn reusable_release_keeps(ctx: &Ctx) -> Result<Checked, String> {
    if ctx.resource.is_none() {
        return Ok(no_probe());
    }
    if !ctx.profile.reusable.reusable_leases {
        return Ok(Checked::NotChecked(
            "the driver grants no reusable leases: nothing is kept".into(),
        ));
    }
    ctx.block_on(async {
        let lease = ctx.acquire(LeasePolicy::ReuseByEnvironment).await?;
        let outcome = async {
            ctx.runtime
                .release_lease(&lease.id, LeaseStatus::Released)
                .await
                .map_err(|e| format!("release: {e}"))?;
            ensure(exists(ctx, &lease, "after a reusable release").await?, || {
                "a reusable lease's resource is gone after its release".into()
            })?;
            ctx.runtime
                .destroy_lease(&lease.id)
                .await
                .map_err(|e| format!("destroy: {e}"))?;
            ensure(!exists(ctx, &lease, "after destroy").await?, || {
                "a destroyed lease's resource still exists".into()
            })
        }
        .await;
        ctx.finish(&lease).await;
        outcome.map(|()| Checked::Yes)
    })
}

#[cfg(test)]
mod tests {
    use super::sibling_id;

    #[test]
    fn sibling_ids_keep_the_shape() {
        assert_eq!(sibling_id("fxl-1234-abcd"), "fxl-1234-abc0");
        assert_eq!(sibling_id("ab0"), "ab1");
        assert_eq!(sibling_id("zzz"), "zzz-0");
    }
}

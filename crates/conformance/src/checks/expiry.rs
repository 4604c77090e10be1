//! Lease expiry: a lease acquired with a requested expiry is bounded by the driver, refuses
//! every command after it with the exact text, and has its running command and backend
//! resource ended by the driver itself (no release is called before the look). A driver that
//! cannot bound a lease must be refused with the exact text; that is reported as "not
//! checked" for the rest.

use std::time::Duration;

use envrt_runtime_core::{AcquireRequest, ExecuteRequest, LeaseStatus, RuntimeError, Timestamp, UnsupportedOperation};

use super::{Check, Checked, has_execute};
use crate::context::{Ctx, ensure, ensure_eq};

pub(super) const CHECKS: &[Check] = &[Check::maybe(
    "expiry_lease_ends_by_itself_and_refuses_with_its_text",
    has_execute,
    ends_by_itself,
)
.promise("A lease with an expiry ends by itself at it and then refuses with its expiry text.")];

/// How long after the expiry the driver may take to end the command and the resource.
const GRACE: Duration = Duration::from_secs(20);

fn ends_by_itself(ctx: &Ctx) -> Result<Checked, String> {
    ctx.block_on(async {
        let mut request = AcquireRequest::new(&ctx.environment_id, &ctx.company_id);
        request.run_id = Some(format!("{}-run", ctx.marker_prefix));
        let requested = Timestamp::now().after(Duration::from_secs(3));
        request.requested_expires_at = Some(requested);
        let lease = match ctx.runtime.acquire_lease(request).await {
            Ok(lease) => lease,
            Err(
                error @ RuntimeError::Unsupported {
                    operation: UnsupportedOperation::Expiry,
                    ..
                },
            ) => {
                ensure_eq(
                    error.to_string(),
                    format!("Environment driver \"{}\" does not support lease expiry.", ctx.key),
                    "the refusal of an unbounded lease",
                )?;
                return Ok(Checked::NotChecked(
                    "the driver bounds no lease (refused with the exact text)".into(),
                ));
            }
            Err(error) => return Err(format!("acquire with an expiry failed: {error}")),
        };
        let outcome = async {
            let at = lease.expires_at.ok_or("the lease has no expiry")?;
            ensure(at <= requested, || {
                format!("expiry {at} is later than the requested {requested}")
            })?;
            let marker = ctx.marker("expiry");
            let script = format!("sleep 3600; : {marker}");
            let running = ctx.exec(&lease, ExecuteRequest::new("sh", ["-c", script.as_str()]));
            let watch = async {
                // The command starts, then dies at the expiry without anyone releasing.
                let until = tokio::time::Instant::now() + GRACE;
                while ctx.processes(&marker).is_ok_and(|p| p.is_empty()) && tokio::time::Instant::now() < until {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            };
            let (ran, ()) = tokio::join!(tokio::time::timeout(Duration::from_secs(3) + GRACE, running), watch);
            let ran = ran.map_err(|_| "a command running at the expiry was not ended by it".to_owned())?;
            if let Ok(result) = ran {
                ensure(result.exit_code != Some(0), || {
                    "the command finished instead of dying".into()
                })?;
            }
            let left = ctx.processes(&marker).unwrap_or_default();
            ensure(left.is_empty(), || format!("processes outlived the expiry: {left:?}"))?;
            if let Some(probe) = ctx.resource.clone() {
                let until = tokio::time::Instant::now() + GRACE;
                while probe(&lease).await? {
                    ensure(tokio::time::Instant::now() < until, || {
                        "the lease's resource outlived its expiry (nothing was released)".into()
                    })?;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
            let refused = ctx
                .runtime
                .execute(&lease.id, ExecuteRequest::new("true", Vec::<String>::new()))
                .await
                .err()
                .ok_or("an expired lease ran a command")?;
            ensure_eq(
                refused.to_string(),
                format!("Lease \"{}\" expired at {}.", lease.id, at.to_rfc3339()),
                "the refusal of an expired lease",
            )?;
            let report = ctx.runtime.release_expired().await.map_err(|e| e.to_string())?;
            let ours = report.released.iter().find(|l| l.id == lease.id);
            ensure_eq(
                ours.map(|l| l.status),
                Some(LeaseStatus::Expired),
                "status after release_expired",
            )?;
            Ok(Checked::Yes)
        }
        .await;
        ctx.finish(&lease).await;
        outcome
    })
}

//! Moving a lease's expiry (contract section 8, "Idle timeout and keep-alive", `extend`):
//! the facade checks the new expiry against the lease and its environment's `max_ttl`,
//! then the driver's [`ExtendLease`](crate::driver::ExtendLease) group re-arms what ends
//! the lease, and the store records the expiry the driver now guarantees. An environment's
//! `max_ttl` also bounds the expiry of every new lease (one that asks for none gets it).

use std::time::Duration;

use crate::error::{DriverError, RuntimeError};
use crate::model::{Environment, Lease, Timestamp};

use super::EnvironmentRuntime;
use super::gate::{Operation, gate};

/// Whole seconds and milliseconds as `90 s` / `1500 ms`, for refusals.
fn shown(duration: Duration) -> String {
    if duration.subsec_millis() == 0 {
        format!("{} s", duration.as_secs())
    } else {
        format!("{} ms", duration.as_millis())
    }
}

/// The expiry a new lease of `environment` asks its driver for: the requested one, or,
/// under a `max_ttl`, at most that long from now (a lease with no requested expiry gets
/// exactly that). A requested expiry past it is refused with
/// `Invalid input: the requested expiry {t} is past environment "{env}"'s max_ttl of {d}`.
pub(super) fn bounded_by_max_ttl(
    environment: &Environment,
    requested: Option<Timestamp>,
) -> Result<Option<Timestamp>, RuntimeError> {
    let Some(max) = environment.max_ttl_ms else {
        return Ok(requested);
    };
    let latest = Timestamp::now().after(Duration::from_millis(max));
    match requested {
        None => Ok(Some(latest)),
        Some(at) if at <= latest => Ok(Some(at)),
        Some(at) => Err(DriverError::invalid(format!(
            "the requested expiry {at} is past environment \"{}\"'s max_ttl of {}",
            environment.id,
            shown(Duration::from_millis(max))
        ))
        .into()),
    }
}

impl EnvironmentRuntime {
    /// Moves the lease's expiry to `expires_at` (later or earlier) and returns the lease
    /// with the expiry its driver now guarantees. Through the gate (the lease must be
    /// active and within its expiry; a paused lease may be extended). Refusals:
    /// `Invalid input: lease "{id}" has no expiry to move`,
    /// `Invalid input: the new expiry {t} is not in the future`,
    /// `Invalid input: the new expiry {t} is past environment "{env}"'s max_ttl of {d} from the lease's acquire at {acquired}`,
    /// and without the driver's group
    /// `Environment driver "{key}" does not support moving a lease's expiry.`
    pub async fn extend(&self, lease_id: &str, expires_at: Timestamp) -> Result<Lease, RuntimeError> {
        self.traced("extend", lease_id, async {
            let resolved = self.resolve(lease_id).await?;
            let group = gate(&resolved, Operation::Extend, |d| d.as_extend(), |_| true).await?;
            let mut lease = super::idle::current(&resolved).await?;
            if lease.expires_at.is_none() {
                return Err(DriverError::invalid(format!("lease \"{lease_id}\" has no expiry to move")).into());
            }
            if expires_at <= Timestamp::now() {
                return Err(DriverError::invalid(format!("the new expiry {expires_at} is not in the future")).into());
            }
            if let Some(environment) = &resolved.context.environment
                && let Some(max) = environment.max_ttl_ms
                && expires_at.0 > lease.acquired_at.0.saturating_add(max)
            {
                return Err(DriverError::invalid(format!(
                    "the new expiry {expires_at} is past environment \"{}\"'s max_ttl of {} from the lease's acquire at {}",
                    environment.id,
                    shown(Duration::from_millis(max)),
                    lease.acquired_at
                ))
                .into());
            }
            let attested = group.extend_lease(&resolved.context, expires_at).await?;
            if attested > expires_at {
                return Err(DriverError::other(format!(
                    "driver \"{}\" attested the expiry {attested}, later than the {expires_at} asked for",
                    resolved.key
                ))
                .into());
            }
            lease.expires_at = Some(attested);
            lease.last_used_at = Timestamp::now();
            self.store.put_lease(&lease).await?;
            Ok(lease)
        })
        .await
    }
}

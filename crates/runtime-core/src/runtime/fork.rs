//! The facade's fork: a live lease copied into `count` new leases that start from its
//! state (contract section 8, "Fork"). All or nothing: when a copy cannot be made or
//! recorded, every copy is ended again before the error returns.

use crate::driver::{AcquireInput, FORKED_FROM_KEY, LeaseContext, MAX_FORK_COUNT, ReleaseInput};
use crate::error::{DriverError, RuntimeError};
use crate::model::{Environment, Lease, LeaseStatus, Timestamp};

use super::EnvironmentRuntime;
use super::gate::{Operation, gate};
use super::lifecycle::apply_grant;

/// The refusal of a fork count outside `1..=MAX_FORK_COUNT`, before any driver is called.
fn check_count(count: usize) -> Result<(), DriverError> {
    if count == 0 {
        return Err(DriverError::invalid("a fork needs a count of at least 1"));
    }
    if count > MAX_FORK_COUNT {
        return Err(DriverError::invalid(format!(
            "a fork makes at most {MAX_FORK_COUNT} copies, not {count}"
        )));
    }
    Ok(())
}

impl EnvironmentRuntime {
    /// Forks the active lease `lease_id` into `count` new leases (1 to
    /// [`MAX_FORK_COUNT`]) of the same tenant, environment, scopes, policy and expiry,
    /// each starting from the source's workspace as it is now; the source is unchanged
    /// and its processes are not copied. Refused like every lease operation (the driver
    /// has no fork group: `Environment driver "{key}" does not support lease fork.`; the
    /// lease expired or not active), then for a count out of bounds
    /// (`Invalid input: a fork needs a count of at least 1`,
    /// `Invalid input: a fork makes at most 16 copies, not {count}`), and for a lease
    /// under a network policy (`Invalid input: lease "{id}" runs under a network policy, which a fork does not copy yet`).
    /// Each copy's metadata records `forkedFrom`.
    pub async fn fork_lease(&self, lease_id: &str, count: usize) -> Result<Vec<Lease>, RuntimeError> {
        self.traced("fork_lease", lease_id, async {
            let resolved = self.resolve(lease_id).await?;
            let fork = gate(&resolved, Operation::Fork, |d| d.as_fork(), |_| true).await?;
            check_count(count)?;
            let source = &resolved.context.lease;
            let environment = match &resolved.context.environment {
                Some(environment) => environment.clone(),
                None => {
                    return Err(RuntimeError::EnvironmentNotFound {
                        id: source.environment_id.clone().unwrap_or_default(),
                    });
                }
            };
            // The store does not record a policy a lease asked for or was updated to, so a
            // copy could be given a wider one: refuse rather than widen.
            if super::network::proxied_policy(&environment, resolved.driver.as_ref(), None)?.is_some() {
                return Err(DriverError::invalid(format!(
                    "lease \"{}\" runs under a network policy, which a fork does not copy yet",
                    source.id
                ))
                .into());
            }
            let inputs: Vec<AcquireInput> = (0..count).map(|_| copy_input(source, &environment)).collect();
            let grants = fork.fork_lease(&resolved.context, &inputs).await?;
            let now = Timestamp::now();
            let mut copies: Vec<Lease> = Vec::with_capacity(inputs.len());
            for (input, grant) in inputs.iter().zip(grants) {
                let mut lease = Lease {
                    id: input.lease_id.clone(),
                    acquired_at: now,
                    last_used_at: now,
                    released_at: None,
                    failure_reason: None,
                    cleanup_status: None,
                    provider: None,
                    provider_lease_id: None,
                    expires_at: None,
                    status: LeaseStatus::Active,
                    metadata: input.metadata.clone(),
                    ..source.clone()
                };
                apply_grant(&mut lease, grant, &resolved.key);
                copies.push(lease);
            }
            let unbounded = source
                .expires_at
                .is_some_and(|at| copies.iter().any(|c| c.expires_at.is_none_or(|e| e > at)));
            let stored = if unbounded {
                Err(RuntimeError::Unsupported {
                    key: resolved.key.clone(),
                    operation: crate::error::UnsupportedOperation::Expiry,
                })
            } else if copies.len() != count {
                Err(DriverError::other(format!(
                    "driver \"{}\" made {} copies of lease \"{}\" where {count} were asked",
                    resolved.key,
                    copies.len(),
                    source.id
                ))
                .into())
            } else {
                self.store_copies(&copies).await
            };
            if let Err(error) = stored {
                // Do not leak copies nobody can find again.
                for lease in copies {
                    let context = LeaseContext {
                        lease,
                        environment: Some(environment.clone()),
                    };
                    let _ = match resolved.driver.as_destroy() {
                        Some(destroy) => destroy.destroy_lease(&context).await,
                        None => {
                            let input = ReleaseInput {
                                context,
                                status: LeaseStatus::Released,
                            };
                            resolved.driver.release_lease(&input).await
                        }
                    };
                }
                return Err(error);
            }
            Ok(copies)
        })
        .await
    }

    async fn store_copies(&self, copies: &[Lease]) -> Result<(), RuntimeError> {
        for lease in copies {
            self.store.put_lease(lease).await?;
        }
        Ok(())
    }
}

/// The acquire input of one copy of `source`: a new id, the source's scopes, policy and
/// expiry, and its metadata with `forkedFrom` set (the driver's own keys are written again
/// by its grant).
fn copy_input(source: &Lease, environment: &Environment) -> AcquireInput {
    let mut metadata = source.metadata.clone();
    metadata.insert(FORKED_FROM_KEY.into(), source.id.clone().into());
    AcquireInput {
        lease_id: uuid::Uuid::new_v4().to_string(),
        environment: environment.clone(),
        company_id: source.company_id.clone(),
        run_id: source.run_id.clone(),
        issue_id: source.issue_id.clone(),
        execution_workspace_id: source.execution_workspace_id.clone(),
        policy: source.lease_policy,
        requested_cwd: None,
        metadata,
        requested_expires_at: source.expires_at,
        template: None,
        network: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_count_out_of_bounds_is_refused_with_its_text() {
        assert_eq!(
            check_count(0).unwrap_err().to_string(),
            "Invalid input: a fork needs a count of at least 1"
        );
        assert_eq!(
            check_count(17).unwrap_err().to_string(),
            "Invalid input: a fork makes at most 16 copies, not 17"
        );
        assert!(check_count(1).is_ok() && check_count(MAX_FORK_COUNT).is_ok());
    }
}

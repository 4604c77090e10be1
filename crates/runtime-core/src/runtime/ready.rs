//! Ready, not just started (contract section 8, "Readiness"): an environment may declare
//! a readiness command that must exit 0 on every new lease, within its timeout, before the
//! acquire returns; otherwise the half-made lease is ended (destroyed where the driver
//! can, else released), recorded `failed` with `not_ready`, and the acquire fails.

use std::time::Duration;

use crate::error::{DriverError, RuntimeError};
use crate::execute::ExecuteRequest;
use crate::model::{CleanupStatus, Environment, Lease, LeaseStatus, Readiness};

use super::EnvironmentRuntime;

/// The longest readiness timeout an environment may declare.
pub const MAX_READY_TIMEOUT: Duration = Duration::from_secs(600);
/// The most words a readiness command may have.
pub const MAX_READY_WORDS: usize = 64;
/// Output kept from a readiness command per stream (it is not shown; the bound keeps a
/// hostile command from filling memory).
const READY_OUTPUT_LIMIT: usize = 4096;

/// Refuses a readiness declaration before the environment is stored.
pub(super) fn check_readiness(readiness: Option<&Readiness>) -> Result<(), DriverError> {
    let Some(readiness) = readiness else {
        return Ok(());
    };
    if readiness.command.is_empty() || readiness.command[0].is_empty() {
        return Err(DriverError::invalid("ready_command needs a program"));
    }
    if readiness.command.len() > MAX_READY_WORDS {
        return Err(DriverError::invalid(format!(
            "ready_command has more than {MAX_READY_WORDS} words"
        )));
    }
    if readiness.timeout_ms == 0 || readiness.timeout_ms > MAX_READY_TIMEOUT.as_millis() as u64 {
        return Err(DriverError::invalid(format!(
            "ready_timeout must be from 1 ms to {} s",
            MAX_READY_TIMEOUT.as_secs()
        )));
    }
    Ok(())
}

impl EnvironmentRuntime {
    /// Runs the environment's readiness command on the new (stored, active) `lease`; on
    /// anything but exit 0 in time, ends the lease and returns [`RuntimeError::NotReady`].
    pub(super) async fn await_ready(&self, lease: Lease, environment: &Environment) -> Result<Lease, RuntimeError> {
        let Some(readiness) = &environment.readiness else {
            return Ok(lease);
        };
        let mut request = ExecuteRequest::new(readiness.command[0].clone(), readiness.command[1..].iter().cloned());
        request.timeout = Some(Duration::from_millis(readiness.timeout_ms));
        request.max_output_bytes = Some(READY_OUTPUT_LIMIT);
        let reason = match self.execute(&lease.id, request).await {
            Ok(result) if result.timed_out => format!(
                "its readiness command did not finish within {} ms",
                readiness.timeout_ms
            ),
            Ok(result) if result.exit_code == Some(0) => return Ok(lease),
            Ok(result) => match (result.exit_code, result.signal) {
                (Some(code), _) => format!("its readiness command exited with code {code}"),
                (None, Some(signal)) => format!("its readiness command was ended by signal {signal}"),
                (None, None) => "its readiness command ended without an exit code".to_owned(),
            },
            Err(error) => {
                self.end_unready(&lease).await;
                return Err(error);
            }
        };
        self.end_unready(&lease).await;
        Err(RuntimeError::NotReady { id: lease.id, reason })
    }

    /// Ends a lease that never became ready and records it `failed` (`not_ready`); a
    /// failed clean-up leaves it `pending_cleanup` for `gc`, as a failed release does.
    async fn end_unready(&self, lease: &Lease) {
        let ended = match self.destroy_lease(&lease.id).await {
            Err(RuntimeError::Unsupported { .. }) => self.release_lease(&lease.id, LeaseStatus::Failed).await,
            other => other,
        };
        if let Ok(Some(mut record)) = self.store.get_lease(&lease.id).await {
            if ended.is_ok() {
                record.status = LeaseStatus::Failed;
                record.cleanup_status = Some(CleanupStatus::Success);
            }
            record.failure_reason = Some("not_ready".into());
            let _ = self.store.put_lease(&record).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ready(command: &[&str], timeout_ms: u64) -> Readiness {
        Readiness {
            command: command.iter().map(|s| s.to_string()).collect(),
            timeout_ms,
        }
    }

    #[test]
    fn a_bad_readiness_declaration_is_refused_with_its_text() {
        let text = |r: Readiness| check_readiness(Some(&r)).unwrap_err().to_string();
        assert_eq!(text(ready(&[], 1000)), "Invalid input: ready_command needs a program");
        assert_eq!(text(ready(&[""], 1000)), "Invalid input: ready_command needs a program");
        assert_eq!(
            text(ready(&["x"; 65], 1000)),
            "Invalid input: ready_command has more than 64 words"
        );
        for ms in [0, 600_001] {
            assert_eq!(
                text(ready(&["true"], ms)),
                "Invalid input: ready_timeout must be from 1 ms to 600 s"
            );
        }
        assert!(check_readiness(Some(&ready(&["true"], 600_000))).is_ok());
        assert!(check_readiness(None).is_ok());
    }
}

//! The one gate every optional operation passes before its driver is called. A table
//! says, per operation, which refusal stands for a missing driver group, which capability
//! the lease's snapshot must grant, and whether the lease must be active; [`gate`] applies
//! the rows in one fixed order for every operation:
//!
//! 1. the driver has the group, else the operation's `does not support` refusal;
//! 2. the lease's snapshot grants the capability (fail closed: a snapshot that cannot be
//!    resolved denies it), else the operation's capability refusal;
//! 3. the lease is not past its expiry, else `Lease "{id}" expired at {expires_at}.`
//!    (every operation but destroy, which is clean-up);
//! 4. the lease is active, else `Lease "{id}" is not active (status: {status}).`
//!
//! Nothing reaches the driver until all three hold.
//!
//! Operations on an environment rather than a lease (listing and deleting templates,
//! acquiring from one) pass [`gate_driver`], which applies step 1 of the same table.

use crate::capability::{CapabilityKey, CapabilitySnapshot};
use crate::driver::{CapabilityInput, EnvironmentDriver};
use crate::error::{DriverError, RuntimeError, UnsupportedOperation};
use crate::model::{Lease, LeaseStatus, Timestamp};

use super::Resolved;

/// An optional operation of the facade.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Operation {
    /// `resume_lease`.
    Resume,
    /// `destroy_lease`.
    Destroy,
    /// `realize_workspace`.
    Realize,
    /// `execute`.
    Execute,
    /// `sync_in`.
    SyncIn,
    /// `sync_out`.
    SyncOut,
    /// `open_duplex_channel`.
    Duplex,
    /// `capture_template`.
    CaptureTemplate,
    /// `templates` (environment level).
    ListTemplates,
    /// `delete_template` (environment level).
    DeleteTemplate,
    /// `acquire_lease` with a template (environment level).
    AcquireFromTemplate,
    /// `pause_lease` and `unpause_lease`.
    Pause,
    /// `keep_alive` and arming an idle timeout.
    Idle,
    /// Every process verb: `spawn`, `processes`, `process`, `output`, `write_stdin`,
    /// `close_stdin`, `signal`, `resize`, `wait`.
    Processes,
    /// `expose`.
    Expose,
    /// `fork_lease`.
    Fork,
    /// `extend`.
    Extend,
    /// `runner_ingress`.
    RunnerIngress,
}

/// How a row refuses a denied capability (or a failed snapshot).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Denial {
    /// The same refusal as a missing group: [`RuntimeError::Unsupported`].
    Unsupported,
    /// [`RuntimeError::DuplexNotGranted`], with the snapshot's failure as its cause.
    DuplexNotGranted,
}

/// One row of the gate table: plain data.
#[derive(Clone, Copy, Debug)]
struct Rule {
    /// What the driver does not support when it lacks the operation's group.
    unsupported: UnsupportedOperation,
    /// The capability the lease's snapshot must grant, if any.
    capability: Option<CapabilityKey>,
    /// The refusal when the capability is denied, or the snapshot failed.
    denial: Denial,
    /// Whether the lease must be active.
    needs_active: bool,
}

impl Rule {
    /// The refusal when the driver under `key` lacks the group.
    fn missing(&self, key: String) -> RuntimeError {
        RuntimeError::Unsupported {
            key,
            operation: self.unsupported,
        }
    }

    /// The refusal when the capability is denied, or the snapshot failed (`cause`).
    fn denied(&self, key: String, cause: Option<DriverError>) -> RuntimeError {
        match self.denial {
            Denial::Unsupported => self.missing(key),
            Denial::DuplexNotGranted => RuntimeError::DuplexNotGranted { cause },
        }
    }
}

/// A row whose denial is the `does not support` refusal.
const fn row(unsupported: UnsupportedOperation, capability: Option<CapabilityKey>, needs_active: bool) -> Rule {
    Rule {
        unsupported,
        capability,
        denial: Denial::Unsupported,
        needs_active,
    }
}

/// The table: every optional operation's group refusal, capability and activity rule.
fn rule(operation: Operation) -> Rule {
    use UnsupportedOperation as U;
    match operation {
        // Resuming is how an ended, retained lease comes back.
        Operation::Resume => row(U::Resume, Some(CapabilityKey::ReusableLeases), false),
        // Destroy is clean-up: it must work on every lease, ended or not.
        Operation::Destroy => row(U::Destroy, None, false),
        Operation::Realize => row(U::Realize, None, true),
        Operation::Execute => row(U::Execute, None, true),
        Operation::SyncIn => row(U::Sync, Some(CapabilityKey::NativeSyncIn), true),
        Operation::SyncOut => row(U::Sync, Some(CapabilityKey::NativeSyncOut), true),
        Operation::Duplex => Rule {
            denial: Denial::DuplexNotGranted,
            ..row(U::Duplex, Some(CapabilityKey::DuplexCommandStream), true)
        },
        // Templates are a group, not a capability key: the snapshot stays nine keys.
        Operation::CaptureTemplate => row(U::TemplateCapture, None, true),
        Operation::ListTemplates | Operation::AcquireFromTemplate => row(U::Templates, None, false),
        Operation::DeleteTemplate => row(U::TemplateDelete, None, false),
        Operation::Processes => row(U::ProcessSessions, Some(CapabilityKey::PersistentProcessSessions), true),
        Operation::Pause => row(U::Pause, None, true),
        Operation::Expose => row(U::ExposePorts, None, true),
        // Fork is a group, not a capability key; only a live lease is copied.
        Operation::Fork => row(U::Fork, None, true),
        Operation::Idle => row(U::IdleTimeout, None, true),
        Operation::Extend => row(U::Extend, None, true),
        Operation::RunnerIngress => row(U::RunnerIngress, Some(CapabilityKey::RunnerWebSocketIngress), true),
    }
}

/// Step 1 of the table for an operation on an environment (no lease): the driver under
/// `key` has the operation's group, else its `does not support` refusal.
pub(super) fn gate_driver<'a, G: ?Sized + 'a>(
    key: &str,
    driver: &'a dyn EnvironmentDriver,
    operation: Operation,
    group: impl FnOnce(&'a dyn EnvironmentDriver) -> Option<&'a G>,
) -> Result<&'a G, RuntimeError> {
    group(driver).ok_or_else(|| rule(operation).missing(key.to_owned()))
}

/// Checks `operation` on `resolved` in the fixed order and hands back the driver's group,
/// reached through `group` (the driver's `as_*` accessor). `extra` is a driver-specific
/// refusal checked with the capability (sync's `supports_sync`); it answers `true` when
/// the operation may go on.
pub(super) async fn gate<'a, G: ?Sized + 'a>(
    resolved: &'a Resolved,
    operation: Operation,
    group: impl FnOnce(&'a dyn EnvironmentDriver) -> Option<&'a G>,
    extra: impl FnOnce(&'a G) -> bool,
) -> Result<&'a G, RuntimeError> {
    let rule = rule(operation);
    let found = group(resolved.driver.as_ref()).ok_or_else(|| rule.missing(resolved.key.clone()))?;
    if let Some(capability) = rule.capability {
        match snapshot(resolved).await {
            Ok(snapshot) if snapshot.get(capability) => {}
            Ok(_) => return Err(rule.denied(resolved.key.clone(), None)),
            Err(cause) => return Err(rule.denied(resolved.key.clone(), Some(cause))),
        }
    }
    if !extra(found) {
        return Err(rule.denied(resolved.key.clone(), None));
    }
    let lease = &resolved.context.lease;
    if operation != Operation::Destroy
        && let Some(expires_at) = lease.expires_at.filter(|at| *at <= Timestamp::now())
    {
        return Err(RuntimeError::LeaseExpired {
            id: lease.id.clone(),
            expires_at,
        });
    }
    if rule.needs_active {
        require_active(lease)?;
        if !matches!(operation, Operation::Pause | Operation::Idle | Operation::Extend)
            && super::pause::is_paused(lease)
        {
            return Err(RuntimeError::LeasePaused { id: lease.id.clone() });
        }
        // Every operation a lease takes is activity: it resets the idle clock. One that
        // finds the lease paused by its idle timeout is refused, but for those that work
        // on a paused lease (the pause is recorded by then).
        if operation != Operation::Idle {
            match super::idle::touch(resolved).await {
                Err(RuntimeError::LeasePaused { .. }) if matches!(operation, Operation::Pause | Operation::Extend) => {}
                other => other?,
            }
        }
    }
    Ok(found)
}

/// The lease's snapshot from its driver.
pub(super) async fn snapshot(resolved: &Resolved) -> Result<CapabilitySnapshot, DriverError> {
    let input = CapabilityInput {
        environment: resolved.context.environment.clone(),
        lease: Some(resolved.context.lease.clone()),
    };
    resolved.driver.resolve_capabilities(&input).await
}

fn require_active(lease: &Lease) -> Result<(), RuntimeError> {
    if lease.status == LeaseStatus::Active {
        Ok(())
    } else {
        Err(RuntimeError::LeaseNotActive {
            id: lease.id.clone(),
            status: lease.status,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: [Operation; 17] = [
        Operation::Resume,
        Operation::Destroy,
        Operation::Realize,
        Operation::Execute,
        Operation::SyncIn,
        Operation::SyncOut,
        Operation::Duplex,
        Operation::CaptureTemplate,
        Operation::ListTemplates,
        Operation::DeleteTemplate,
        Operation::AcquireFromTemplate,
        Operation::Processes,
        Operation::Pause,
        Operation::Fork,
        Operation::Idle,
        Operation::Extend,
        Operation::RunnerIngress,
    ];

    #[test]
    fn every_operation_refuses_a_missing_group_with_its_own_text() {
        let texts: Vec<String> = ALL.iter().map(|op| rule(*op).missing("k".into()).to_string()).collect();
        assert_eq!(
            texts,
            [
                "Environment driver \"k\" does not support lease resume.",
                "Environment driver \"k\" does not support lease destroy.",
                "Environment driver \"k\" does not support workspace realization.",
                "Environment driver \"k\" does not support command execution.",
                "Environment driver \"k\" does not support native file sync.",
                "Environment driver \"k\" does not support native file sync.",
                "Environment driver \"k\" does not support duplex channels.",
                "Environment driver \"k\" does not support template capture.",
                "Environment driver \"k\" does not support templates.",
                "Environment driver \"k\" does not support template deletion.",
                "Environment driver \"k\" does not support templates.",
                "Environment driver \"k\" does not support persistent process sessions.",
                "Environment driver \"k\" does not support pause.",
                "Environment driver \"k\" does not support lease fork.",
                "Environment driver \"k\" does not support idle timeouts.",
                "Environment driver \"k\" does not support moving a lease's expiry.",
                "Environment driver \"k\" does not support runner WebSocket ingress.",
            ]
        );
    }

    #[test]
    fn capability_refusals_follow_the_table() {
        let denied = |op| rule(op).denied("k".into(), None).to_string();
        assert_eq!(
            denied(Operation::Duplex),
            "Sandbox lease does not grant the duplex command stream capability."
        );
        assert_eq!(
            denied(Operation::SyncIn),
            "Environment driver \"k\" does not support native file sync."
        );
        assert_eq!(
            denied(Operation::Processes),
            "Environment driver \"k\" does not support persistent process sessions."
        );
        assert_eq!(
            denied(Operation::RunnerIngress),
            "Environment driver \"k\" does not support runner WebSocket ingress."
        );
        assert_eq!(
            denied(Operation::Resume),
            "Environment driver \"k\" does not support lease resume."
        );
        let capabilities: Vec<Option<CapabilityKey>> = ALL.iter().map(|op| rule(*op).capability).collect();
        assert_eq!(
            capabilities,
            [
                Some(CapabilityKey::ReusableLeases),
                None,
                None,
                None,
                Some(CapabilityKey::NativeSyncIn),
                Some(CapabilityKey::NativeSyncOut),
                Some(CapabilityKey::DuplexCommandStream),
                None,
                None,
                None,
                None,
                Some(CapabilityKey::PersistentProcessSessions),
                None,
                None,
                None,
                None,
                Some(CapabilityKey::RunnerWebSocketIngress),
            ]
        );
        let active: Vec<bool> = ALL.iter().map(|op| rule(*op).needs_active).collect();
        assert_eq!(
            active,
            [
                false, false, true, true, true, true, true, true, false, false, false, true, true, true, true, true,
                true
            ]
        );
    }
}

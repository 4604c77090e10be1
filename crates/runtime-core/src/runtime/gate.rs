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
use crate::error::{DriverError, RuntimeError};
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
}

/// One row of the gate table.
struct Rule {
    /// The refusal when the driver lacks the operation's group.
    missing: fn(key: String) -> RuntimeError,
    /// The capability the lease's snapshot must grant, if any.
    capability: Option<CapabilityKey>,
    /// The refusal when the capability is denied, or the snapshot failed (`cause`).
    denied: fn(key: String, cause: Option<DriverError>) -> RuntimeError,
    /// Whether the lease must be active.
    needs_active: bool,
}

/// The table: every optional operation's group refusal, capability and activity rule.
fn rule(operation: Operation) -> Rule {
    match operation {
        Operation::Resume => Rule {
            missing: |key| RuntimeError::ResumeUnsupported { key },
            capability: Some(CapabilityKey::ReusableLeases),
            denied: |key, _| RuntimeError::ResumeUnsupported { key },
            // Resuming is how an ended, retained lease comes back.
            needs_active: false,
        },
        Operation::Destroy => Rule {
            missing: |key| RuntimeError::DestroyUnsupported { key },
            capability: None,
            denied: |key, _| RuntimeError::DestroyUnsupported { key },
            // Destroy is clean-up: it must work on every lease, ended or not.
            needs_active: false,
        },
        Operation::Realize => Rule {
            missing: |key| RuntimeError::RealizeUnsupported { key },
            capability: None,
            denied: |key, _| RuntimeError::RealizeUnsupported { key },
            needs_active: true,
        },
        Operation::Execute => Rule {
            missing: |key| RuntimeError::ExecuteUnsupported { key },
            capability: None,
            denied: |key, _| RuntimeError::ExecuteUnsupported { key },
            needs_active: true,
        },
        Operation::SyncIn => Rule {
            missing: |key| RuntimeError::SyncUnsupported { key },
            capability: Some(CapabilityKey::NativeSyncIn),
            denied: |key, _| RuntimeError::SyncUnsupported { key },
            needs_active: true,
        },
        Operation::SyncOut => Rule {
            missing: |key| RuntimeError::SyncUnsupported { key },
            capability: Some(CapabilityKey::NativeSyncOut),
            denied: |key, _| RuntimeError::SyncUnsupported { key },
            needs_active: true,
        },
        Operation::Duplex => Rule {
            missing: |key| RuntimeError::DuplexUnsupported { key },
            capability: Some(CapabilityKey::DuplexCommandStream),
            denied: |_, cause| RuntimeError::DuplexNotGranted { cause },
            needs_active: true,
        },
        // Templates are a group, not a capability key: the snapshot stays nine keys.
        Operation::CaptureTemplate => Rule {
            missing: |key| RuntimeError::TemplateCaptureUnsupported { key },
            capability: None,
            denied: |key, _| RuntimeError::TemplateCaptureUnsupported { key },
            needs_active: true,
        },
        Operation::ListTemplates | Operation::AcquireFromTemplate => Rule {
            missing: |key| RuntimeError::TemplatesUnsupported { key },
            capability: None,
            denied: |key, _| RuntimeError::TemplatesUnsupported { key },
            needs_active: false,
        },
        Operation::DeleteTemplate => Rule {
            missing: |key| RuntimeError::TemplateDeleteUnsupported { key },
            capability: None,
            denied: |key, _| RuntimeError::TemplateDeleteUnsupported { key },
            needs_active: false,
        },
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
    group(driver).ok_or_else(|| (rule(operation).missing)(key.to_owned()))
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
    let found = group(resolved.driver.as_ref()).ok_or_else(|| (rule.missing)(resolved.key.clone()))?;
    if let Some(capability) = rule.capability {
        match snapshot(resolved).await {
            Ok(snapshot) if snapshot.get(capability) => {}
            Ok(_) => return Err((rule.denied)(resolved.key.clone(), None)),
            Err(cause) => return Err((rule.denied)(resolved.key.clone(), Some(cause))),
        }
    }
    if !extra(found) {
        return Err((rule.denied)(resolved.key.clone(), None));
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

    const ALL: [Operation; 11] = [
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
    ];

    #[test]
    fn every_operation_refuses_a_missing_group_with_its_own_text() {
        let texts: Vec<String> = ALL
            .iter()
            .map(|op| (rule(*op).missing)("k".into()).to_string())
            .collect();
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
            ]
        );
    }

    #[test]
    fn capability_refusals_follow_the_table() {
        let denied = |op| (rule(op).denied)("k".into(), None).to_string();
        assert_eq!(
            denied(Operation::Duplex),
            "Sandbox lease does not grant the duplex command stream capability."
        );
        assert_eq!(
            denied(Operation::SyncIn),
            "Environment driver \"k\" does not support native file sync."
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
            ]
        );
        let active: Vec<bool> = ALL.iter().map(|op| rule(*op).needs_active).collect();
        assert_eq!(
            active,
            [false, false, true, true, true, true, true, true, false, false, false]
        );
    }
}

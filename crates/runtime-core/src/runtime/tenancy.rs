//! Tenancy of leases: a runtime bound to a tenant ([`EnvironmentRuntime::for_tenant`])
//! sees only that tenant's leases. Every lease operation (realize, execute, sync, duplex,
//! capabilities, resume, release, destroy, capture) refuses another tenant's lease with the
//! text an unknown id gets, `Lease "{id}" was not found.`, so a lease's existence does not
//! leak across tenants; [`lease`](EnvironmentRuntime::lease) answers `None` and
//! [`leases`](EnvironmentRuntime::leases) (and the run and expiry sweeps built on it) leave
//! such leases out. Reconciliation (`envrt gc`) still reads every lease of the store: it
//! only reaps resources whose lease ended, and must not take another tenant's live lease
//! for an orphan. Such a runtime also refuses to acquire a lease (or run a warm pool) for
//! another tenant, with `Tenant "{company_id}" is not this runtime's tenant "{tenant}".`,
//! before any driver is touched: the lease would be one its caller could not see.

use crate::error::RuntimeError;
use crate::model::Lease;

use super::EnvironmentRuntime;

impl EnvironmentRuntime {
    /// This runtime bound to tenant `company_id`: lease operations see only leases whose
    /// `company_id` it is. A runtime without a tenant (the default) sees every lease.
    pub fn for_tenant(mut self, company_id: impl Into<String>) -> Self {
        self.tenant = Some(company_id.into());
        self
    }

    /// The tenant this runtime is bound to, if any.
    pub fn tenant(&self) -> Option<&str> {
        self.tenant.as_deref()
    }

    /// Whether `lease` belongs to the tenant of this runtime (always, without one).
    pub(super) fn visible(&self, lease: &Lease) -> bool {
        self.tenant.as_deref().is_none_or(|tenant| lease.company_id == tenant)
    }

    /// Refuses `company_id` when this runtime is bound to another tenant.
    pub(super) fn check_tenant(&self, company_id: &str) -> Result<(), RuntimeError> {
        match self.tenant.as_deref() {
            Some(tenant) if tenant != company_id => Err(RuntimeError::TenantMismatch {
                company_id: company_id.to_owned(),
                tenant: tenant.to_owned(),
            }),
            _ => Ok(()),
        }
    }
}

//! Tenancy of leases: a runtime bound to a tenant ([`EnvironmentRuntime::for_tenant`])
//! sees only that tenant's leases. Every lease operation (realize, execute, sync, duplex,
//! capabilities, resume, release, destroy, capture) refuses another tenant's lease with the
//! text an unknown id gets, `Lease "{id}" was not found.`, so a lease's existence does not
//! leak across tenants; [`lease`](EnvironmentRuntime::lease) answers `None` and
//! [`leases`](EnvironmentRuntime::leases) (and the run and expiry sweeps built on it) leave
//! such leases out. Reconciliation (`envrt gc`) still reads every lease of the store: it
//! only reaps resources whose lease ended, and must not take another tenant's live lease
//! for an orphan.

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
}

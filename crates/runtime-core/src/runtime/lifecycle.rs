//! The lease life cycle: acquire, resume, release (one lease or a whole run) and destroy,
//! with the status each ends in and what is recorded when a provider clean-up fails.

use std::sync::Arc;

use crate::driver::{AcquireInput, EnvironmentDriver, LeaseContext, LeaseGrant, ReleaseInput};
use crate::error::{RuntimeError, UnsupportedOperation};
use crate::model::{
    CleanupStatus, Environment, EnvironmentStatus, JsonMap, Lease, LeasePolicy, LeaseStatus, Timestamp,
};
use crate::store::LeaseFilter;
use envrt_driver_api::fault;

use super::EnvironmentRuntime;
use super::gate::{Operation, gate};

/// What the caller asks for when acquiring a lease.
#[derive(Clone, Debug, Default)]
pub struct AcquireRequest {
    /// The environment (registered with [`EnvironmentRuntime::put_environment`]).
    pub environment_id: String,
    /// Tenant scope.
    pub company_id: String,
    /// Run scope; `None` for an ad-hoc probe.
    pub run_id: Option<String>,
    /// Issue scope.
    pub issue_id: Option<String>,
    /// Execution-workspace scope.
    pub execution_workspace_id: Option<String>,
    /// Clean-up policy.
    pub policy: LeasePolicy,
    /// A working directory the caller would like.
    pub requested_cwd: Option<String>,
    /// Metadata stored on the lease.
    pub metadata: JsonMap,
    /// The latest time the lease may live until. The driver must attest an expiry at or
    /// before it; otherwise the lease is released at once and the acquire fails with
    /// [`RuntimeError::Unsupported`] (`lease expiry`) (fail closed).
    pub requested_expires_at: Option<Timestamp>,
    /// The id of a template of this environment to start the lease from (see
    /// [`EnvironmentRuntime::capture_template`]). Refused when the driver has no
    /// templates, or has no such template. The lease's metadata records it as
    /// `sourceTemplateRef`.
    pub template: Option<String>,
    /// A network policy of the lease's own, within the environment's policy or its
    /// `grantable` list and enforceable by the driver, else the acquire is refused with
    /// [`RuntimeError::Network`] (see [`crate::network`]); `None`: the environment's.
    pub network: Option<crate::network::Policy>,
    /// The owner scope (a tenant, agent or workspace key), recorded on the lease as
    /// `envrtScope`; [`EnvironmentRuntime::release_matching`] ends a scope's leases.
    pub scope: Option<String>,
    /// With [`Reuse::Scope`](super::scope::Reuse::Scope), a live lease of the scope and
    /// the same configuration fingerprint is handed back instead of a new one.
    pub reuse: super::scope::Reuse,
}

impl AcquireRequest {
    /// A request for `environment_id` in tenant `company_id`, ephemeral, ad hoc.
    pub fn new(environment_id: impl Into<String>, company_id: impl Into<String>) -> Self {
        AcquireRequest {
            environment_id: environment_id.into(),
            company_id: company_id.into(),
            ..Default::default()
        }
    }
}

pub use envrt_driver_api::template::SOURCE_TEMPLATE_KEY;

/// One lease that `release_leases` could not release.
#[derive(Debug)]
pub struct LeaseFailure {
    /// The lease id.
    pub lease_id: String,
    /// Why.
    pub error: RuntimeError,
}

/// The outcome of [`EnvironmentRuntime::release_leases`].
#[derive(Debug, Default)]
pub struct ReleaseReport {
    /// Leases released, in order.
    pub released: Vec<Lease>,
    /// Leases whose release failed; the others were still released.
    pub failures: Vec<LeaseFailure>,
}

impl ReleaseReport {
    /// Adds one lease's outcome.
    pub(super) fn record(&mut self, lease_id: String, outcome: Result<Lease, RuntimeError>) {
        match outcome {
            Ok(lease) => self.released.push(lease),
            Err(error) => self.failures.push(LeaseFailure { lease_id, error }),
        }
    }
}

impl EnvironmentRuntime {
    /// Records a failed provider clean-up (`pending_cleanup`, to be retried by release or
    /// destroy) and returns the driver's error.
    async fn cleanup_failed<T>(&self, mut lease: Lease, error: crate::DriverError) -> Result<T, RuntimeError> {
        lease.status = LeaseStatus::PendingCleanup;
        lease.cleanup_status = Some(CleanupStatus::Failed);
        lease.failure_reason = Some("release_cleanup_failed".into());
        self.store.put_lease(&lease).await?;
        Err(error.into())
    }

    /// Acquires a lease on an environment, through `environment.driver`, or hands over a
    /// ready lease when a warm pool matches the request (see [`start_pool`](Self::start_pool)).
    pub async fn acquire_lease(&self, request: AcquireRequest) -> Result<Lease, RuntimeError> {
        self.traced("acquire_lease", "", async {
            self.check_tenant(&request.company_id)?;
            super::scope::check_scope(request.scope.as_deref(), request.reuse)?;
            if request.reuse == super::scope::Reuse::Scope {
                return self.acquire_in_scope(request).await;
            }
            self.acquire_unscoped(request).await
        })
        .await
    }

    /// An acquire that hands back no existing lease (a scope is only recorded).
    pub(super) async fn acquire_unscoped(&self, mut request: AcquireRequest) -> Result<Lease, RuntimeError> {
        if let Some(scope) = &request.scope {
            request
                .metadata
                .insert(super::scope::SCOPE_KEY.into(), scope.clone().into());
        }
        {
            if let Some(lease) = self.pools.take(&request) {
                // The same checks as a fresh acquire, so a pool never outlives its rules (a
                // template deleted since the lease was made refuses it too).
                match self.check_pooled(&request).await {
                    Ok(()) => {
                        tracing::Span::current().record("lease_id", lease.id.as_str());
                        return self.hand_over(lease, request).await;
                    }
                    Err(error) => {
                        let _ = self.release_lease(&lease.id, LeaseStatus::Released).await;
                        return Err(error);
                    }
                }
            }
            self.acquire_fresh(request).await
        }
    }

    /// A fresh acquire's checks for a request served from a pool: the environment, and the
    /// template when the request names one.
    async fn check_pooled(&self, request: &AcquireRequest) -> Result<(), RuntimeError> {
        let (environment, driver) = self.check_acquirable(&request.environment_id).await?;
        if let Some(id) = &request.template {
            self.template_for_acquire(&environment, driver.as_ref(), &request.company_id, id)
                .await?;
        }
        Ok(())
    }

    /// The environment an acquire is for, with its driver, once it is known, registered and
    /// active.
    async fn check_acquirable(
        &self,
        environment_id: &str,
    ) -> Result<(Environment, Arc<dyn EnvironmentDriver>), RuntimeError> {
        let environment = self.known_environment(environment_id).await?;
        tracing::Span::current().record("driver", environment.driver.as_str());
        let driver = self.registered(&environment.driver)?;
        if environment.status != EnvironmentStatus::Active {
            return Err(RuntimeError::EnvironmentNotActive {
                name: environment.name.clone(),
            });
        }
        Ok((environment, driver))
    }

    /// Acquires a new lease through the driver, never from a pool.
    pub(super) async fn acquire_fresh(&self, mut request: AcquireRequest) -> Result<Lease, RuntimeError> {
        {
            self.check_tenant(&request.company_id)?;
            let (environment, driver) = self.check_acquirable(&request.environment_id).await?;
            super::network::lease_level(&environment, driver.as_ref(), request.network.as_ref())?;
            let network = super::network::proxied_policy(&environment, driver.as_ref(), request.network.as_ref())?;
            if let Some(requested) = request.requested_expires_at
                && requested <= Timestamp::now()
            {
                let message = format!("the requested expiry {requested} has already passed");
                return Err(crate::DriverError::invalid(message).into());
            }
            request.requested_expires_at =
                super::extend::bounded_by_max_ttl(&environment, request.requested_expires_at)?;
            let template = match &request.template {
                Some(id) => Some(
                    self.template_for_acquire(&environment, driver.as_ref(), &request.company_id, id)
                        .await?,
                ),
                None => None,
            };
            let mut metadata = request.metadata.clone();
            if let Some(template) = &template {
                metadata.insert(SOURCE_TEMPLATE_KEY.into(), template.id.clone().into());
            }
            let input = AcquireInput {
                lease_id: uuid::Uuid::new_v4().to_string(),
                environment: environment.clone(),
                company_id: request.company_id.clone(),
                run_id: request.run_id.clone(),
                issue_id: request.issue_id.clone(),
                execution_workspace_id: request.execution_workspace_id.clone(),
                policy: request.policy,
                requested_cwd: request.requested_cwd.clone(),
                metadata,
                requested_expires_at: request.requested_expires_at,
                template,
                network,
            };
            tracing::Span::current().record("lease_id", input.lease_id.as_str());
            fault::point("acquire");
            let grant = driver.acquire_lease(&input).await?;
            // The resource exists and no row names it yet: `gc` must find it as an orphan.
            fault::point("acquire");
            let now = Timestamp::now();
            let mut lease = Lease {
                id: input.lease_id.clone(),
                company_id: request.company_id,
                environment_id: Some(environment.id.clone()),
                execution_workspace_id: request.execution_workspace_id,
                issue_id: request.issue_id,
                run_id: request.run_id,
                status: LeaseStatus::Active,
                lease_policy: request.policy,
                provider: None,
                provider_lease_id: None,
                acquired_at: now,
                last_used_at: now,
                expires_at: None,
                released_at: None,
                failure_reason: None,
                cleanup_status: None,
                metadata: input.metadata.clone(),
            };
            apply_grant(&mut lease, grant, &environment.driver);
            if let Some(requested) = request.requested_expires_at
                && lease.expires_at.is_none_or(|granted| granted > requested)
            {
                return self.refuse_unbounded(driver.as_ref(), lease, environment).await;
            }
            if let Err(error) = self.store.put_lease(&lease).await {
                // Do not leak the resource of a lease nobody can find again.
                let release = ReleaseInput {
                    context: LeaseContext {
                        lease: lease.clone(),
                        environment: Some(environment),
                    },
                    status: LeaseStatus::Released,
                };
                let _ = driver.release_lease(&release).await;
                return Err(error.into());
            }
            fault::point("acquire");
            self.await_ready(lease, &environment).await
        }
    }

    /// Fail closed on an expiry the driver did not guarantee: end the resource at once
    /// (destroy where the driver can, else release) and refuse the acquire. When that
    /// clean-up fails the lease is kept as `pending_cleanup`, so `release` or `gc` retries.
    async fn refuse_unbounded(
        &self,
        driver: &dyn EnvironmentDriver,
        mut lease: Lease,
        environment: Environment,
    ) -> Result<Lease, RuntimeError> {
        let key = environment.driver.clone();
        let context = LeaseContext {
            lease: lease.clone(),
            environment: Some(environment),
        };
        let ended = match driver.as_destroy() {
            Some(destroy) => destroy.destroy_lease(&context).await,
            None => {
                let release = ReleaseInput {
                    context,
                    status: LeaseStatus::Released,
                };
                driver.release_lease(&release).await
            }
        };
        if ended.is_err() {
            lease.status = LeaseStatus::PendingCleanup;
            lease.cleanup_status = Some(CleanupStatus::Failed);
            lease.failure_reason = Some("release_cleanup_failed".into());
            self.store.put_lease(&lease).await?;
        }
        Err(RuntimeError::Unsupported {
            key,
            operation: UnsupportedOperation::Expiry,
        })
    }

    /// Releases, with status `expired`, every active lease whose expiry has passed, each
    /// in isolation (what `gc` and a watchdog call).
    pub async fn release_expired(&self) -> Result<ReleaseReport, RuntimeError> {
        let filter = LeaseFilter {
            statuses: vec![LeaseStatus::Active],
            ..Default::default()
        };
        let now = Timestamp::now();
        let mut report = ReleaseReport::default();
        for lease in self.leases(&filter).await? {
            if lease.expires_at.is_none_or(|at| at > now) {
                continue;
            }
            let outcome = self.release_lease(&lease.id, LeaseStatus::Expired).await;
            report.record(lease.id, outcome);
        }
        Ok(report)
    }

    /// Resumes a reusable lease; needs the driver's resume and `reusableLeases`.
    pub async fn resume_lease(&self, lease_id: &str) -> Result<Lease, RuntimeError> {
        self.traced("resume_lease", lease_id, async {
            let resolved = self.resolve(lease_id).await?;
            let resume = gate(&resolved, Operation::Resume, |d| d.as_resume(), |_| true).await?;
            let mut lease = resolved.context.lease.clone();
            match resume.resume_lease(&resolved.context).await {
                Ok(Some(grant)) => {
                    apply_grant(&mut lease, grant, &resolved.key);
                    lease.status = LeaseStatus::Active;
                    lease.last_used_at = Timestamp::now();
                    lease.released_at = None;
                    lease.failure_reason = None;
                    lease.cleanup_status = None;
                    self.store.put_lease(&lease).await?;
                    Ok(lease)
                }
                Ok(None) => {
                    lease.status = LeaseStatus::Failed;
                    lease.failure_reason = Some("not_found".into());
                    lease.last_used_at = Timestamp::now();
                    self.store.put_lease(&lease).await?;
                    Err(RuntimeError::LeaseGone { id: lease.id })
                }
                Err(error) => {
                    lease.failure_reason = Some("resume_failed".into());
                    self.store.put_lease(&lease).await?;
                    Err(error.into())
                }
            }
        })
        .await
    }

    /// Releases a lease with `status` (`released`, `failed` or `expired`). Under
    /// `retain_on_failure` a `failed` release ends as `retained`. A failed provider
    /// clean-up leaves the lease `pending_cleanup` and returns the error; releasing again
    /// retries. Releasing an ended lease again is a no-op.
    pub async fn release_lease(&self, lease_id: &str, status: LeaseStatus) -> Result<Lease, RuntimeError> {
        self.traced("release_lease", lease_id, async {
            if !matches!(
                status,
                LeaseStatus::Released | LeaseStatus::Failed | LeaseStatus::Expired
            ) {
                return Err(RuntimeError::InvalidReleaseStatus { status });
            }
            let resolved = self.resolve(lease_id).await?;
            let mut lease = resolved.context.lease.clone();
            let final_status = if status == LeaseStatus::Failed && lease.lease_policy == LeasePolicy::RetainOnFailure {
                LeaseStatus::Retained
            } else {
                status
            };
            let already_ended = match lease.status {
                LeaseStatus::Active | LeaseStatus::PendingCleanup => false,
                LeaseStatus::Retained => final_status == LeaseStatus::Retained,
                LeaseStatus::Released | LeaseStatus::Expired | LeaseStatus::Failed => true,
            };
            if already_ended {
                return Ok(lease);
            }
            let input = ReleaseInput {
                context: resolved.context.clone(),
                status: final_status,
            };
            let now = Timestamp::now();
            lease.last_used_at = now;
            let _ending = self.ending.begin(lease_id);
            // Its exposed ports close first: nothing reaches a lease being released.
            self.exposed.close(lease_id);
            fault::point("release");
            match resolved.driver.release_lease(&input).await {
                Ok(()) => {
                    // The resource is gone and the row still says active.
                    fault::point("release");
                    lease.status = final_status;
                    lease.released_at = Some(now);
                    lease.cleanup_status = Some(CleanupStatus::Success);
                    lease.metadata.remove(super::PAUSED_KEY);
                    lease.metadata.remove(super::IDLE_TIMEOUT_KEY);
                    record_receipt(&mut lease, resolved.driver.as_ref());
                    if final_status == LeaseStatus::Expired {
                        lease.failure_reason = Some("lease_expired".into());
                    }
                    self.store.put_lease(&lease).await?;
                    Ok(lease)
                }
                Err(error) => self.cleanup_failed(lease, error).await,
            }
        })
        .await
    }

    /// Releases every active lease of a run, one at a time and each in isolation.
    pub async fn release_leases(&self, run_id: &str, status: LeaseStatus) -> Result<ReleaseReport, RuntimeError> {
        let filter = LeaseFilter {
            run_id: Some(run_id.to_owned()),
            statuses: vec![LeaseStatus::Active],
            ..Default::default()
        };
        let mut report = ReleaseReport::default();
        for lease in self.leases(&filter).await? {
            let outcome = self.release_lease(&lease.id, status).await;
            report.record(lease.id, outcome);
        }
        Ok(report)
    }

    /// Destroys a lease's resource outright; idempotent.
    pub async fn destroy_lease(&self, lease_id: &str) -> Result<Lease, RuntimeError> {
        self.traced("destroy_lease", lease_id, async {
            let resolved = self.resolve(lease_id).await?;
            let destroy = gate(&resolved, Operation::Destroy, |d| d.as_destroy(), |_| true).await?;
            let mut lease = resolved.context.lease.clone();
            let now = Timestamp::now();
            lease.last_used_at = now;
            let _ending = self.ending.begin(lease_id);
            self.exposed.close(lease_id);
            fault::point("destroy");
            match destroy.destroy_lease(&resolved.context).await {
                Ok(()) => {
                    fault::point("destroy");
                    if matches!(
                        lease.status,
                        LeaseStatus::Active | LeaseStatus::Retained | LeaseStatus::PendingCleanup
                    ) {
                        lease.status = LeaseStatus::Released;
                    }
                    lease.released_at.get_or_insert(now);
                    lease.cleanup_status = Some(CleanupStatus::Success);
                    lease.metadata.insert("destroyed".into(), true.into());
                    lease.metadata.remove(super::PAUSED_KEY);
                    lease.metadata.remove(super::IDLE_TIMEOUT_KEY);
                    record_receipt(&mut lease, resolved.driver.as_ref());
                    self.store.put_lease(&lease).await?;
                    Ok(lease)
                }
                Err(error) => self.cleanup_failed(lease, error).await,
            }
        })
        .await
    }
}

/// Where the facade records a provider's termination receipt on the lease.
pub const TERMINATION_RECEIPT_KEY: &str = "terminationReceipt";

/// Records the receipt the driver took for this lease's release or destroy, if any (the
/// last one wins: an ephemeral release is a release and then a destroy).
fn record_receipt(lease: &mut Lease, driver: &dyn EnvironmentDriver) {
    if let Some(receipt) = driver.take_termination_receipt(&lease.id)
        && let Ok(value) = serde_json::to_value(&receipt)
    {
        lease.metadata.insert(TERMINATION_RECEIPT_KEY.into(), value);
    }
}

pub(super) fn apply_grant(lease: &mut Lease, grant: LeaseGrant, key: &str) {
    lease.provider = grant
        .provider
        .or_else(|| lease.provider.take())
        .or_else(|| Some(key.to_owned()));
    if grant.provider_lease_id.is_some() {
        lease.provider_lease_id = grant.provider_lease_id;
    }
    if grant.expires_at.is_some() {
        lease.expires_at = grant.expires_at;
    }
    lease.metadata.extend(grant.metadata);
    if lease.metadata_driver().is_none() {
        lease.metadata.insert("driver".into(), key.into());
    }
}

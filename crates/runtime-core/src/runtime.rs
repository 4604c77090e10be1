//! The `EnvironmentRuntime` facade of the contract's section 3.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, RwLock};
use std::time::Instant;

use tracing::Instrument;

use crate::capability::CapabilitySnapshot;
use crate::driver::{
    AcquireInput, CapabilityInput, DuplexChannel, EnvironmentDriver, LeaseContext, LeaseGrant, RealizedWorkspace,
    ReleaseInput, WorkspaceRequest,
};
use crate::error::RuntimeError;
use crate::execute::{ExecuteRequest, ExecuteResult};
use crate::model::{
    CleanupStatus, Environment, EnvironmentStatus, JsonMap, Lease, LeasePolicy, LeaseStatus, Timestamp,
    resolve_driver_key,
};
use crate::store::{LeaseFilter, LeaseStore, MemoryStore};
use crate::sync::{SyncOperation, SyncResult};

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

/// The facade: a registry of drivers by key plus a lease store. Every operation resolves
/// the lease's driver key, then checks in the contract's order before calling the driver.
pub struct EnvironmentRuntime {
    drivers: RwLock<HashMap<String, Arc<dyn EnvironmentDriver>>>,
    store: Arc<dyn LeaseStore>,
}

impl Default for EnvironmentRuntime {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for EnvironmentRuntime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EnvironmentRuntime")
            .field("drivers", &self.driver_keys())
            .finish_non_exhaustive()
    }
}

/// A lease resolved to its driver.
struct Resolved {
    key: String,
    driver: Arc<dyn EnvironmentDriver>,
    context: LeaseContext,
}

impl EnvironmentRuntime {
    /// A runtime with no drivers and an in-memory store.
    pub fn new() -> Self {
        Self::with_store(Arc::new(MemoryStore::new()))
    }

    /// A runtime with no drivers over `store`.
    pub fn with_store(store: Arc<dyn LeaseStore>) -> Self {
        EnvironmentRuntime {
            drivers: RwLock::new(HashMap::new()),
            store,
        }
    }

    /// The lease store.
    pub fn store(&self) -> &Arc<dyn LeaseStore> {
        &self.store
    }

    /// Registers a driver under its key; a later registration replaces an earlier one,
    /// which is returned.
    pub fn register_driver(&self, driver: Arc<dyn EnvironmentDriver>) -> Option<Arc<dyn EnvironmentDriver>> {
        let key = driver.key().to_owned();
        self.drivers
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key, driver)
    }

    /// The driver registered under `key`.
    pub fn driver(&self, key: &str) -> Option<Arc<dyn EnvironmentDriver>> {
        self.drivers.read().unwrap_or_else(|e| e.into_inner()).get(key).cloned()
    }

    /// The registered keys, sorted.
    pub fn driver_keys(&self) -> Vec<String> {
        let mut keys: Vec<String> = self
            .drivers
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .keys()
            .cloned()
            .collect();
        keys.sort();
        keys
    }

    /// Adds or replaces an environment.
    pub async fn put_environment(&self, environment: Environment) -> Result<(), RuntimeError> {
        Ok(self.store.put_environment(&environment).await?)
    }

    /// The environment with this id.
    pub async fn environment(&self, id: &str) -> Result<Option<Environment>, RuntimeError> {
        Ok(self.store.get_environment(id).await?)
    }

    /// The lease with this id.
    pub async fn lease(&self, id: &str) -> Result<Option<Lease>, RuntimeError> {
        Ok(self.store.get_lease(id).await?)
    }

    /// Leases passing `filter`.
    pub async fn leases(&self, filter: &LeaseFilter) -> Result<Vec<Lease>, RuntimeError> {
        Ok(self.store.list_leases(filter).await?)
    }

    fn registered(&self, key: &str) -> Result<Arc<dyn EnvironmentDriver>, RuntimeError> {
        self.driver(key)
            .ok_or_else(|| RuntimeError::DriverNotRegistered { key: key.to_owned() })
    }

    async fn load(&self, lease_id: &str) -> Result<LeaseContext, RuntimeError> {
        let lease = self
            .store
            .get_lease(lease_id)
            .await?
            .ok_or_else(|| RuntimeError::LeaseNotFound {
                id: lease_id.to_owned(),
            })?;
        let environment = match &lease.environment_id {
            Some(id) => self.store.get_environment(id).await?,
            None => None,
        };
        Ok(LeaseContext { lease, environment })
    }

    async fn resolve(&self, lease_id: &str) -> Result<Resolved, RuntimeError> {
        let context = self.load(lease_id).await?;
        let key = resolve_driver_key(&context.lease, context.environment.as_ref()).to_owned();
        tracing::Span::current().record("driver", key.as_str());
        let driver = self.registered(&key)?;
        Ok(Resolved { key, driver, context })
    }

    async fn snapshot(resolved: &Resolved) -> Result<CapabilitySnapshot, crate::DriverError> {
        let input = CapabilityInput {
            environment: resolved.context.environment.clone(),
            lease: Some(resolved.context.lease.clone()),
        };
        resolved.driver.resolve_capabilities(&input).await
    }

    /// Records a failed provider clean-up (`pending_cleanup`, to be retried by release or
    /// destroy) and returns the driver's error.
    async fn cleanup_failed<T>(&self, mut lease: Lease, error: crate::DriverError) -> Result<T, RuntimeError> {
        lease.status = LeaseStatus::PendingCleanup;
        lease.cleanup_status = Some(CleanupStatus::Failed);
        lease.failure_reason = Some("release_cleanup_failed".into());
        self.store.put_lease(&lease).await?;
        Err(error.into())
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

    /// Acquires a lease on an environment, through `environment.driver`.
    pub async fn acquire_lease(&self, request: AcquireRequest) -> Result<Lease, RuntimeError> {
        traced("acquire_lease", "", async {
            let environment = self
                .store
                .get_environment(&request.environment_id)
                .await?
                .ok_or_else(|| RuntimeError::EnvironmentNotFound {
                    id: request.environment_id.clone(),
                })?;
            tracing::Span::current().record("driver", environment.driver.as_str());
            let driver = self.registered(&environment.driver)?;
            if environment.status != EnvironmentStatus::Active {
                return Err(RuntimeError::EnvironmentNotActive {
                    name: environment.name.clone(),
                });
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
                metadata: request.metadata.clone(),
            };
            tracing::Span::current().record("lease_id", input.lease_id.as_str());
            let grant = driver.acquire_lease(&input).await?;
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
                metadata: request.metadata,
            };
            apply_grant(&mut lease, grant, &environment.driver);
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
            Ok(lease)
        })
        .await
    }

    /// Resumes a reusable lease; needs the driver's resume and `reusableLeases`.
    pub async fn resume_lease(&self, lease_id: &str) -> Result<Lease, RuntimeError> {
        traced("resume_lease", lease_id, async {
            let resolved = self.resolve(lease_id).await?;
            let unsupported = || RuntimeError::ResumeUnsupported {
                key: resolved.key.clone(),
            };
            let resume = resolved.driver.as_resume().ok_or_else(unsupported)?;
            match Self::snapshot(&resolved).await {
                Ok(snapshot) if snapshot.reusable_leases => {}
                _ => return Err(unsupported()),
            }
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
        traced("release_lease", lease_id, async {
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
            match resolved.driver.release_lease(&input).await {
                Ok(()) => {
                    lease.status = final_status;
                    lease.released_at = Some(now);
                    lease.cleanup_status = Some(CleanupStatus::Success);
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
        for lease in self.store.list_leases(&filter).await? {
            match self.release_lease(&lease.id, status).await {
                Ok(lease) => report.released.push(lease),
                Err(error) => report.failures.push(LeaseFailure {
                    lease_id: lease.id,
                    error,
                }),
            }
        }
        Ok(report)
    }

    /// Destroys a lease's resource outright; idempotent.
    pub async fn destroy_lease(&self, lease_id: &str) -> Result<Lease, RuntimeError> {
        traced("destroy_lease", lease_id, async {
            let resolved = self.resolve(lease_id).await?;
            let destroy = resolved
                .driver
                .as_destroy()
                .ok_or_else(|| RuntimeError::DestroyUnsupported {
                    key: resolved.key.clone(),
                })?;
            let mut lease = resolved.context.lease.clone();
            let now = Timestamp::now();
            lease.last_used_at = now;
            match destroy.destroy_lease(&resolved.context).await {
                Ok(()) => {
                    if matches!(
                        lease.status,
                        LeaseStatus::Active | LeaseStatus::Retained | LeaseStatus::PendingCleanup
                    ) {
                        lease.status = LeaseStatus::Released;
                    }
                    lease.released_at.get_or_insert(now);
                    lease.cleanup_status = Some(CleanupStatus::Success);
                    lease.metadata.insert("destroyed".into(), true.into());
                    self.store.put_lease(&lease).await?;
                    Ok(lease)
                }
                Err(error) => self.cleanup_failed(lease, error).await,
            }
        })
        .await
    }

    /// Returns the lease's working directory.
    pub async fn realize_workspace(
        &self,
        lease_id: &str,
        request: &WorkspaceRequest,
    ) -> Result<RealizedWorkspace, RuntimeError> {
        traced("realize_workspace", lease_id, async {
            let resolved = self.resolve(lease_id).await?;
            let realize = resolved
                .driver
                .as_realize()
                .ok_or_else(|| RuntimeError::RealizeUnsupported {
                    key: resolved.key.clone(),
                })?;
            Self::require_active(&resolved.context.lease)?;
            Ok(realize.realize_workspace(&resolved.context, request).await?)
        })
        .await
    }

    /// Runs a command on the lease.
    pub async fn execute(&self, lease_id: &str, request: ExecuteRequest) -> Result<ExecuteResult, RuntimeError> {
        traced("execute", lease_id, async {
            let resolved = self.resolve(lease_id).await?;
            let execute = resolved
                .driver
                .as_execute()
                .ok_or_else(|| RuntimeError::ExecuteUnsupported {
                    key: resolved.key.clone(),
                })?;
            Self::require_active(&resolved.context.lease)?;
            Ok(execute.execute(&resolved.context, request).await?)
        })
        .await
    }

    /// Host → environment transfer; needs the driver's sync and `nativeSyncIn`.
    pub async fn sync_in(&self, lease_id: &str, operations: &[SyncOperation]) -> Result<SyncResult, RuntimeError> {
        traced("sync_in", lease_id, self.sync(lease_id, operations, Direction::In)).await
    }

    /// Environment → host transfer; needs the driver's sync and `nativeSyncOut`.
    pub async fn sync_out(&self, lease_id: &str, operations: &[SyncOperation]) -> Result<SyncResult, RuntimeError> {
        traced("sync_out", lease_id, self.sync(lease_id, operations, Direction::Out)).await
    }

    async fn sync(
        &self,
        lease_id: &str,
        operations: &[SyncOperation],
        direction: Direction,
    ) -> Result<SyncResult, RuntimeError> {
        let resolved = self.resolve(lease_id).await?;
        let unsupported = || RuntimeError::SyncUnsupported {
            key: resolved.key.clone(),
        };
        let sync = resolved.driver.as_sync().ok_or_else(unsupported)?;
        let granted = match Self::snapshot(&resolved).await {
            Ok(snapshot) => match direction {
                Direction::In => snapshot.native_sync_in,
                Direction::Out => snapshot.native_sync_out,
            },
            Err(_) => false,
        };
        if !granted || !sync.supports_sync(&resolved.context) {
            return Err(unsupported());
        }
        Self::require_active(&resolved.context.lease)?;
        Ok(match direction {
            Direction::In => sync.sync_in(&resolved.context, operations).await?,
            Direction::Out => sync.sync_out(&resolved.context, operations).await?,
        })
    }

    /// Whether native sync (both directions) works on this lease. Never an error: an
    /// unknown lease, an unregistered key or a driver without sync give `false`.
    pub async fn supports_sync(&self, lease_id: &str) -> bool {
        let Ok(resolved) = self.resolve(lease_id).await else {
            return false;
        };
        let Some(sync) = resolved.driver.as_sync() else {
            return false;
        };
        match Self::snapshot(&resolved).await {
            Ok(s) => s.native_sync_in && s.native_sync_out && sync.supports_sync(&resolved.context),
            Err(_) => false,
        }
    }

    /// Opens a duplex channel to `command` (argv). Refused when the driver has no duplex,
    /// then when the lease's snapshot lacks `duplexCommandStream` or cannot be resolved;
    /// a refusal never reaches the driver.
    pub async fn open_duplex_channel(
        &self,
        lease_id: &str,
        command: &[String],
    ) -> Result<Box<dyn DuplexChannel>, RuntimeError> {
        traced("open_duplex_channel", lease_id, async {
            let resolved = self.resolve(lease_id).await?;
            let duplex = resolved
                .driver
                .as_duplex()
                .ok_or_else(|| RuntimeError::DuplexUnsupported {
                    key: resolved.key.clone(),
                })?;
            match Self::snapshot(&resolved).await {
                Ok(snapshot) if snapshot.duplex_command_stream => {}
                Ok(_) => return Err(RuntimeError::DuplexNotGranted { cause: None }),
                Err(cause) => return Err(RuntimeError::DuplexNotGranted { cause: Some(cause) }),
            }
            Self::require_active(&resolved.context.lease)?;
            if command.is_empty() {
                return Err(crate::DriverError::invalid("a duplex command needs at least a program").into());
            }
            Ok(duplex.open_duplex_channel(&resolved.context, command).await?)
        })
        .await
    }

    /// The lease's effective snapshot; `Ok(None)` when its driver key is not registered.
    pub async fn resolve_capabilities(&self, lease_id: &str) -> Result<Option<CapabilitySnapshot>, RuntimeError> {
        let context = self.load(lease_id).await?;
        let key = resolve_driver_key(&context.lease, context.environment.as_ref());
        let Some(driver) = self.driver(key) else {
            return Ok(None);
        };
        let input = CapabilityInput {
            environment: context.environment,
            lease: Some(context.lease),
        };
        Ok(Some(driver.resolve_capabilities(&input).await?))
    }

    /// An environment's snapshot before any lease; `Ok(None)` when its driver is not
    /// registered.
    pub async fn environment_capabilities(
        &self,
        environment_id: &str,
    ) -> Result<Option<CapabilitySnapshot>, RuntimeError> {
        let environment =
            self.store
                .get_environment(environment_id)
                .await?
                .ok_or_else(|| RuntimeError::EnvironmentNotFound {
                    id: environment_id.to_owned(),
                })?;
        let Some(driver) = self.driver(&environment.driver) else {
            return Ok(None);
        };
        let input = CapabilityInput {
            environment: Some(environment),
            lease: None,
        };
        Ok(Some(driver.resolve_capabilities(&input).await?))
    }
}

#[derive(Clone, Copy)]
enum Direction {
    In,
    Out,
}

fn apply_grant(lease: &mut Lease, grant: LeaseGrant, key: &str) {
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

/// Runs a facade operation inside a span carrying the operation, lease id and driver key,
/// and records its outcome and duration. Payloads and env values are never recorded.
async fn traced<T>(
    operation: &'static str,
    lease_id: &str,
    body: impl Future<Output = Result<T, RuntimeError>>,
) -> Result<T, RuntimeError> {
    let span = tracing::debug_span!("envrt", operation, lease_id, driver = tracing::field::Empty,);
    let started = Instant::now();
    let result = body.instrument(span.clone()).await;
    let duration_us = started.elapsed().as_micros() as u64;
    span.in_scope(|| match &result {
        Ok(_) => tracing::debug!(outcome = "ok", duration_us),
        Err(error) => tracing::debug!(outcome = "error", duration_us, %error),
    });
    result
}

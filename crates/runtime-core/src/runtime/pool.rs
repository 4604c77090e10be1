//! Warm pools: leases of one environment, for one tenant, acquired ahead of time so that an
//! acquire is a hand-over instead of a cold start.
//!
//! A pool is started with [`EnvironmentRuntime::start_pool`]. A background task keeps
//! `size` leases acquired and ready; [`EnvironmentRuntime::acquire_lease`] hands one out
//! when a request matches the pool (same environment, tenant, policy and template, and
//! nothing that only a fresh acquire can honour: no requested cwd or expiry) and wakes the
//! task to refill. Guarantees:
//!
//! - a ready lease is handed out at most once (one lock guards the queue);
//! - a handed-out lease was never used before: nothing can reach a ready lease, its id is
//!   not given to anybody until the hand-over;
//! - ready leases are checked every `health_interval` where the driver can tell (its
//!   resume group): one whose resource died is marked failed and replaced;
//! - [`EnvironmentRuntime::stop_pools`] stops the tasks and releases every ready lease.
//!   Ready leases are ordinary active leases in the store, marked with the metadata key
//!   [`POOLED_KEY`], so a process that died without stopping its pools leaves records
//!   that clean-up can find.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

use crate::error::{DriverError, RuntimeError};
use crate::model::{Lease, LeasePolicy, LeaseStatus, Timestamp};

use super::lifecycle::{AcquireRequest, ReleaseReport};
use super::{EnvironmentRuntime, LeaseContext};

/// The lease metadata key that marks a lease waiting in a pool.
pub const POOLED_KEY: &str = "envrtPooled";

/// What a pool keeps ready.
#[derive(Clone, Debug)]
pub struct PoolSpec {
    /// The environment the leases are on.
    pub environment_id: String,
    /// The tenant they are for.
    pub company_id: String,
    /// Their policy.
    pub policy: LeasePolicy,
    /// How many to keep ready.
    pub size: usize,
    /// How often ready leases are checked for a dead resource.
    pub health_interval: Duration,
    /// The template its leases start from (`None`: clean leases). Only acquires naming the
    /// same template are served from it.
    pub template: Option<String>,
    /// Metadata written on every pooled lease (besides [`POOLED_KEY`]), e.g. the holder
    /// process, so that clean-up elsewhere can tell when the pool's owner is gone. It stays
    /// on a lease handed out (over the request's own keys of the same name).
    pub metadata: crate::model::JsonMap,
}

impl PoolSpec {
    /// `size` ephemeral leases of `environment_id` for `company_id`, checked every 10 s.
    pub fn new(environment_id: impl Into<String>, company_id: impl Into<String>, size: usize) -> Self {
        PoolSpec {
            environment_id: environment_id.into(),
            company_id: company_id.into(),
            policy: LeasePolicy::Ephemeral,
            size,
            health_interval: Duration::from_secs(10),
            template: None,
            metadata: crate::model::JsonMap::new(),
        }
    }
}

/// What identifies a pool: a request matches it on these.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct PoolKey {
    environment_id: String,
    company_id: String,
    policy: LeasePolicy,
    template: Option<String>,
}

impl PoolKey {
    fn of_spec(spec: &PoolSpec) -> Self {
        PoolKey {
            environment_id: spec.environment_id.clone(),
            company_id: spec.company_id.clone(),
            policy: spec.policy,
            template: spec.template.clone(),
        }
    }

    fn of_request(request: &AcquireRequest) -> Option<Self> {
        // Only a fresh acquire can honour these.
        if request.requested_cwd.is_some() || request.requested_expires_at.is_some() || request.network.is_some() {
            return None;
        }
        Some(PoolKey {
            environment_id: request.environment_id.clone(),
            company_id: request.company_id.clone(),
            policy: request.policy,
            template: request.template.clone(),
        })
    }
}

/// One pool's state, shared by the runtime and its filler task.
pub(super) struct Pool {
    spec: PoolSpec,
    ready: Mutex<VecDeque<Lease>>,
    pub(super) wake: Notify,
    pub(super) stopped: AtomicBool,
    last_error: Mutex<Option<String>>,
    /// The filler task, awaited by [`EnvironmentRuntime::stop_pools`] so that no pool
    /// acquire is still in flight (and no lease of the pool still held) once it returns.
    pub(super) filler: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

/// Every pool of a runtime.
#[derive(Default)]
pub(super) struct Pools {
    pools: Mutex<HashMap<PoolKey, Arc<Pool>>>,
}

impl Pools {
    /// Every pool, taken out (none is running afterwards as far as the runtime knows).
    pub(super) fn drain(&self) -> Vec<Arc<Pool>> {
        self.pools
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain()
            .map(|(_, pool)| pool)
            .collect()
    }

    fn get(&self, key: &PoolKey) -> Option<Arc<Pool>> {
        self.pools.lock().unwrap_or_else(|e| e.into_inner()).get(key).cloned()
    }

    /// A ready lease for `request`, taken out of its pool, if any.
    pub(super) fn take(&self, request: &AcquireRequest) -> Option<Lease> {
        let pool = self.get(&PoolKey::of_request(request)?)?;
        let lease = pool.ready.lock().unwrap_or_else(|e| e.into_inner()).pop_front();
        pool.wake.notify_one();
        lease
    }
}

/// How a pool is doing.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PoolStatus {
    /// Leases ready to hand out.
    pub ready: usize,
    /// The size it keeps.
    pub size: usize,
    /// The last error of a refill, if the last refill failed.
    pub last_error: Option<String>,
}

impl EnvironmentRuntime {
    /// Starts a warm pool (replacing none: a second pool for the same environment, tenant
    /// and policy is refused). Needs a running tokio runtime, which the filler task runs on.
    pub fn start_pool(self: &Arc<Self>, spec: PoolSpec) -> Result<(), RuntimeError> {
        let handle = tokio::runtime::Handle::try_current()
            .map_err(|_| DriverError::invalid("a lease pool needs a running tokio runtime"))?;
        if spec.size == 0 {
            return Err(DriverError::invalid("a lease pool needs a size of at least 1").into());
        }
        self.check_tenant(&spec.company_id)?;
        let key = PoolKey::of_spec(&spec);
        let pool = Arc::new(Pool {
            spec,
            ready: Mutex::new(VecDeque::new()),
            wake: Notify::new(),
            stopped: AtomicBool::new(false),
            last_error: Mutex::new(None),
            filler: Mutex::new(None),
        });
        {
            let mut pools = self.pools.pools.lock().unwrap_or_else(|e| e.into_inner());
            if pools.contains_key(&key) {
                let message = format!(
                    "a pool for environment \"{}\" and tenant \"{}\" is already running",
                    key.environment_id, key.company_id
                );
                return Err(DriverError::invalid(message).into());
            }
            pools.insert(key, pool.clone());
        }
        let filler = handle.spawn(fill(Arc::downgrade(self), pool.clone()));
        *pool.filler.lock().unwrap_or_else(|e| e.into_inner()) = Some(filler);
        Ok(())
    }

    /// The status of the pool for `environment_id`, `company_id` and `policy`.
    pub fn pool_status(&self, environment_id: &str, company_id: &str, policy: LeasePolicy) -> Option<PoolStatus> {
        let key = PoolKey {
            environment_id: environment_id.to_owned(),
            company_id: company_id.to_owned(),
            policy,
            template: None,
        };
        self.pool_status_of(key)
    }

    /// The status of the pool of leases from `template` for `environment_id`,
    /// `company_id` and `policy`.
    pub fn template_pool_status(
        &self,
        environment_id: &str,
        company_id: &str,
        policy: LeasePolicy,
        template: &str,
    ) -> Option<PoolStatus> {
        self.pool_status_of(PoolKey {
            environment_id: environment_id.to_owned(),
            company_id: company_id.to_owned(),
            policy,
            template: Some(template.to_owned()),
        })
    }

    fn pool_status_of(&self, key: PoolKey) -> Option<PoolStatus> {
        let pool = self.pools.get(&key)?;
        let ready = pool.ready.lock().unwrap_or_else(|e| e.into_inner()).len();
        let last_error = pool.last_error.lock().unwrap_or_else(|e| e.into_inner()).clone();
        Some(PoolStatus {
            ready,
            size: pool.spec.size,
            last_error,
        })
    }

    /// Stops every pool and releases its ready leases, each in isolation. Returns once each
    /// pool's filler has ended, so a refill that was in flight has released its lease too:
    /// afterwards no lease of a stopped pool is held and none is being acquired.
    pub async fn stop_pools(&self) -> ReleaseReport {
        let pools = self.pools.drain();
        self.stop_these(pools).await
    }

    /// Stops `pools` and releases their ready leases (see [`stop_pools`](Self::stop_pools)).
    pub(super) async fn stop_these(&self, pools: Vec<Arc<Pool>>) -> ReleaseReport {
        let mut report = ReleaseReport::default();
        for pool in pools {
            pool.stopped.store(true, Ordering::SeqCst);
            pool.wake.notify_one();
            let own = super::pool_drop::is_current_filler(&pool);
            let filler = pool.filler.lock().unwrap_or_else(|e| e.into_inner()).take();
            if let Some(filler) = filler.filter(|_| !own) {
                // A filler that panicked has nothing more to release; its ready leases
                // are released below like any other's.
                let _ = filler.await;
            }
            let leases: Vec<Lease> = pool.ready.lock().unwrap_or_else(|e| e.into_inner()).drain(..).collect();
            for lease in leases {
                report.record(
                    lease.id.clone(),
                    self.release_lease(&lease.id, LeaseStatus::Released).await,
                );
            }
        }
        report
    }

    /// Hands a pooled lease over to `request`'s caller: the request's scopes and metadata
    /// go on it and the pool mark comes off.
    pub(super) async fn hand_over(&self, mut lease: Lease, request: AcquireRequest) -> Result<Lease, RuntimeError> {
        let now = Timestamp::now();
        lease.run_id = request.run_id;
        lease.issue_id = request.issue_id;
        lease.execution_workspace_id = request.execution_workspace_id;
        lease.acquired_at = now;
        lease.last_used_at = now;
        let mut metadata = request.metadata;
        lease.metadata.remove(POOLED_KEY);
        metadata.extend(std::mem::take(&mut lease.metadata));
        lease.metadata = metadata;
        self.store.put_lease(&lease).await?;
        Ok(lease)
    }
}

/// The filler task: keeps the pool full, checks ready leases now and then, and stops when
/// the pool is stopped or the runtime is gone.
async fn fill(weak: Weak<EnvironmentRuntime>, pool: Arc<Pool>) {
    let mut backoff = Duration::from_millis(100);
    let mut last_check = Instant::now();
    loop {
        if pool.stopped.load(Ordering::SeqCst) {
            return;
        }
        let Some(runtime) = weak.upgrade() else { return };
        let missing = pool
            .spec
            .size
            .saturating_sub(pool.ready.lock().unwrap_or_else(|e| e.into_inner()).len());
        let mut failed = false;
        for _ in 0..missing {
            envrt_driver_api::fault::point("pool_refill");
            match runtime.acquire_fresh(pool_request(&pool.spec)).await {
                Ok(lease) => {
                    // Made and recorded, not yet ready in the pool.
                    envrt_driver_api::fault::point("pool_refill");
                    if pool.stopped.load(Ordering::SeqCst) {
                        // Stopped while acquiring: this one is nobody's.
                        let _ = runtime.release_lease(&lease.id, LeaseStatus::Released).await;
                        return;
                    }
                    pool.ready.lock().unwrap_or_else(|e| e.into_inner()).push_back(lease);
                    *pool.last_error.lock().unwrap_or_else(|e| e.into_inner()) = None;
                    backoff = Duration::from_millis(100);
                }
                Err(error) => {
                    tracing::warn!(environment = %pool.spec.environment_id, %error, "pool refill failed");
                    *pool.last_error.lock().unwrap_or_else(|e| e.into_inner()) = Some(error.to_string());
                    failed = true;
                    break;
                }
            }
        }
        let wait = if failed {
            let wait = backoff;
            backoff = (backoff * 2).min(Duration::from_secs(30));
            wait
        } else {
            pool.spec.health_interval
        };
        drop(runtime);
        let _ = tokio::time::timeout(wait, pool.wake.notified()).await;
        if last_check.elapsed() >= pool.spec.health_interval
            && let Some(runtime) = weak.upgrade()
        {
            check_health(&runtime, &pool).await;
            last_check = Instant::now();
        }
    }
}

/// Drops ready leases whose resource died (the driver's resume says it is gone), marking
/// them failed in the store, so the next round replaces them.
async fn check_health(runtime: &EnvironmentRuntime, pool: &Pool) {
    let leases: Vec<Lease> = pool
        .ready
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .cloned()
        .collect();
    for lease in leases {
        let Ok(resolved) = runtime.resolve(&lease.id).await else {
            continue;
        };
        let Some(resume) = resolved.driver.as_resume() else {
            return;
        };
        let context = LeaseContext {
            lease: lease.clone(),
            environment: resolved.context.environment.clone(),
        };
        if let Ok(None) = resume.resume_lease(&context).await {
            let removed = {
                let mut ready = pool.ready.lock().unwrap_or_else(|e| e.into_inner());
                let before = ready.len();
                ready.retain(|l| l.id != lease.id);
                ready.len() < before
            };
            if removed {
                let mut dead = lease;
                dead.status = LeaseStatus::Failed;
                dead.failure_reason = Some("not_found".into());
                dead.last_used_at = Timestamp::now();
                let _ = runtime.store.put_lease(&dead).await;
            }
        }
    }
}

fn pool_request(spec: &PoolSpec) -> AcquireRequest {
    let mut request = AcquireRequest::new(spec.environment_id.clone(), spec.company_id.clone());
    request.policy = spec.policy;
    request.template = spec.template.clone();
    request.metadata = spec.metadata.clone();
    request.metadata.insert(POOLED_KEY.into(), true.into());
    request
}

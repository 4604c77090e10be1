//! What every check gets: the facade, the recording driver, the suite's environment, and
//! the driver's profile.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use envrt_runtime_core::{
    AcquireRequest, CapabilitySnapshot, Environment, EnvironmentDriver, EnvironmentRuntime, ExecuteRequest,
    ExecuteResult, Lease, LeasePolicy, LeaseStatus,
};

use crate::recorder::Recorder;
use crate::{LeftoversProbe, ResourceProbe, Target};

/// What the driver offers: its optional groups and its snapshots.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Profile {
    /// Has resume.
    pub has_resume: bool,
    /// Has destroy.
    pub has_destroy: bool,
    /// Has realize.
    pub has_realize: bool,
    /// Has execute.
    pub has_execute: bool,
    /// Has sync.
    pub has_sync: bool,
    /// Has duplex.
    pub has_duplex: bool,
    /// Has templates.
    pub has_templates: bool,
    /// Has persistent process sessions.
    pub has_processes: bool,
    /// Has lease fork.
    pub has_fork: bool,
    /// Has runner WebSocket ingress.
    pub has_ingress: bool,
    /// The environment's snapshot before any lease.
    pub environment: CapabilitySnapshot,
    /// The snapshot of an ephemeral lease.
    pub ephemeral: CapabilitySnapshot,
    /// The snapshot of a `reuse_by_environment` lease.
    pub reusable: CapabilitySnapshot,
    /// Whether execute carries arbitrary bytes.
    pub binary_safe: bool,
    /// Whether duplex channels can half-close.
    pub half_close: bool,
    /// Whether the driver's declaration withholds `duplexCommandStream` (then a duplex group
    /// with the capability refusal is the expected shape).
    pub duplex_withheld: bool,
}

/// The shared state of a suite run.
pub struct Ctx {
    /// The driver key.
    pub key: String,
    /// The facade.
    pub runtime: Arc<EnvironmentRuntime>,
    /// The recording wrapper around the driver.
    pub recorder: Arc<Recorder>,
    /// The suite's environment.
    pub environment_id: String,
    /// The suite's tenant, unique per run.
    pub company_id: String,
    /// A prefix unique to this run, carried by every marker.
    pub marker_prefix: String,
    /// The profile.
    pub profile: Profile,
    /// Property-test cases.
    pub cases: u32,
    pub(crate) leftovers: Option<LeftoversProbe>,
    pub(crate) resource: Option<ResourceProbe>,
    pub(crate) proc_root: std::path::PathBuf,
    /// How long one check may take.
    pub deadline: std::time::Duration,
    pub(crate) only: Option<Vec<&'static str>>,
    pub(crate) deviations: Vec<(&'static str, String)>,
    pub(crate) egress_host: Result<crate::EgressHost, String>,
    handle: tokio::runtime::Handle,
    counter: AtomicU64,
}

impl Ctx {
    pub(crate) async fn prepare(target: Target, handle: tokio::runtime::Handle) -> Result<Ctx, String> {
        let recorder = Arc::new(Recorder::new(target.driver.clone()));
        let key = recorder.key().to_owned();
        let runtime = Arc::new(EnvironmentRuntime::new());
        runtime.register_driver(recorder.clone());
        let run = format!("{:x}", std::process::id() as u64 * 1_000_003 + nanos());
        let environment_id = format!("conformance-{key}");
        let environment = Environment::new(&environment_id, format!("Conformance {key}"), &key)
            .with_config(target.environment_config);
        runtime.put_environment(environment).await.map_err(|e| e.to_string())?;
        let inner = recorder.inner();
        let mut ctx = Ctx {
            key: key.clone(),
            runtime,
            recorder: recorder.clone(),
            environment_id,
            company_id: format!("conformance-{run}"),
            marker_prefix: format!("envrt-conf-{run}"),
            profile: Profile {
                has_resume: inner.as_resume().is_some(),
                has_destroy: inner.as_destroy().is_some(),
                has_realize: inner.as_realize().is_some(),
                has_execute: inner.as_execute().is_some(),
                has_sync: inner.as_sync().is_some(),
                has_duplex: inner.as_duplex().is_some(),
                has_templates: inner.as_templates().is_some(),
                has_processes: inner.as_processes().is_some(),
                has_fork: inner.as_fork().is_some(),
                has_ingress: inner.as_runner_ingress().is_some(),
                binary_safe: target.binary_safe,
                half_close: target.half_close,
                duplex_withheld: target.duplex_withheld,
                ..Default::default()
            },
            cases: target.cases.max(1),
            leftovers: target.leftovers,
            resource: target.resource,
            proc_root: target.proc_root,
            deadline: target.deadline.unwrap_or(crate::runner::DEFAULT_DEADLINE),
            only: target.only,
            deviations: target.deviations,
            egress_host: target.egress_host,
            handle,
            counter: AtomicU64::new(0),
        };
        ctx.profile.environment = ctx
            .runtime
            .environment_capabilities(&ctx.environment_id)
            .await
            .map_err(|e| format!("environment capabilities: {e}"))?
            .ok_or("the driver is not registered")?;
        ctx.profile.ephemeral = ctx.snapshot_for(LeasePolicy::Ephemeral).await?;
        ctx.profile.reusable = ctx.snapshot_for(LeasePolicy::ReuseByEnvironment).await?;
        Ok(ctx)
    }

    async fn snapshot_for(&self, policy: LeasePolicy) -> Result<CapabilitySnapshot, String> {
        let lease = self.acquire(policy).await?;
        let snapshot = self.runtime.resolve_capabilities(&lease.id).await;
        self.finish(&lease).await;
        snapshot
            .map_err(|e| format!("lease capabilities: {e}"))?
            .ok_or_else(|| "the driver is not registered".to_owned())
    }

    /// The processes whose command line carries `marker`, or why none can be seen.
    pub fn processes(&self, marker: &str) -> Result<Vec<u32>, String> {
        crate::procs::processes_with_marker_in(&self.proc_root, marker)
    }

    /// Runs a future to completion on the suite's runtime.
    pub fn block_on<F: Future>(&self, future: F) -> F::Output {
        self.handle.block_on(future)
    }

    /// Whether the driver takes any absolute path of its environment as a sync source or
    /// target ([`PathScope::any_file_path`](envrt_runtime_core::PathScope::any_file_path)),
    /// so the file confinement checks expect acceptance there.
    pub fn whole_environment(&self) -> bool {
        use envrt_runtime_core::EnvironmentDriver;
        self.recorder.path_scope().any_file_path()
    }

    /// Whether the driver takes any absolute directory of its environment as a `cwd`
    /// ([`PathScope::any_cwd`](envrt_runtime_core::PathScope::any_cwd)).
    pub fn any_cwd(&self) -> bool {
        use envrt_runtime_core::EnvironmentDriver;
        self.recorder.path_scope().any_cwd()
    }

    /// A marker unique to this run and call, for finding processes and paths.
    pub fn marker(&self, what: &str) -> String {
        let n = self.counter.fetch_add(1, Ordering::Relaxed);
        format!("{}-{what}-{n}", self.marker_prefix)
    }

    /// Acquires a lease in the suite's environment and tenant.
    pub async fn acquire(&self, policy: LeasePolicy) -> Result<Lease, String> {
        let mut request = AcquireRequest::new(&self.environment_id, &self.company_id);
        request.policy = policy;
        request.run_id = Some(format!("{}-run", self.marker_prefix));
        self.runtime
            .acquire_lease(request)
            .await
            .map_err(|e| format!("acquire_lease failed: {e}"))
    }

    /// Releases a lease and destroys its resource where the driver can.
    pub async fn finish(&self, lease: &Lease) {
        let _ = self.runtime.release_lease(&lease.id, LeaseStatus::Released).await;
        if self.profile.has_destroy {
            let _ = self.runtime.destroy_lease(&lease.id).await;
        }
    }

    /// Acquires a lease, runs `body` with it, and always finishes the lease.
    pub fn with_lease<T, F, Fut>(&self, policy: LeasePolicy, body: F) -> Result<T, String>
    where
        F: FnOnce(Lease) -> Fut,
        Fut: Future<Output = Result<T, String>>,
    {
        self.block_on(async {
            let lease = self.acquire(policy).await?;
            let result = body(lease.clone()).await;
            self.finish(&lease).await;
            result
        })
    }

    /// Like [`with_lease`](Self::with_lease) for a synchronous body (property checks,
    /// which call [`block_on`](Self::block_on) per case).
    pub fn with_lease_blocking<T>(
        &self,
        policy: LeasePolicy,
        body: impl FnOnce(Lease) -> Result<T, String>,
    ) -> Result<T, String> {
        let lease = self.block_on(self.acquire(policy))?;
        let result = body(lease.clone());
        self.block_on(self.finish(&lease));
        result
    }

    /// Executes through the facade; a refusal or driver error becomes the failure text.
    pub async fn exec(&self, lease: &Lease, request: ExecuteRequest) -> Result<ExecuteResult, String> {
        let shown = format!("{} {:?}", request.command, request.args);
        self.runtime
            .execute(&lease.id, request)
            .await
            .map_err(|e| format!("execute `{shown}` failed: {e}"))
    }

    /// Runs `sh -c script` and requires exit code 0; returns stdout.
    pub async fn sh(&self, lease: &Lease, script: &str) -> Result<Vec<u8>, String> {
        let result = self.exec(lease, ExecuteRequest::new("sh", ["-c", script])).await?;
        if result.exit_code != Some(0) {
            return Err(format!(
                "`sh -c {script:?}` ended with {:?}/{:?}: {}",
                result.exit_code,
                result.signal,
                String::from_utf8_lossy(&result.stderr)
            ));
        }
        Ok(result.stdout)
    }
}

fn nanos() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos() as u64 ^ d.as_secs())
        .unwrap_or(0)
}

/// Fails with `message` unless `condition` holds.
pub(crate) fn ensure(condition: bool, message: impl FnOnce() -> String) -> Result<(), String> {
    if condition { Ok(()) } else { Err(message()) }
}

/// Fails unless `actual == expected`, showing both.
pub(crate) fn ensure_eq<T: PartialEq + std::fmt::Debug>(actual: T, expected: T, what: &str) -> Result<(), String> {
    ensure(actual == expected, || {
        format!("{what}: expected {expected:?}, got {actual:?}")
    })
}

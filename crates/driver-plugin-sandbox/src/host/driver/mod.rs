//! The `sandbox` driver: every environment verb sent to the plugin worker, gated on the
//! live worker's `supportedMethods`.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use envrt_driver_api::capability::{CapabilityKey, SupportSet, VerbSet};
use envrt_driver_api::driver::classify_driver;
use envrt_driver_api::{
    AcquireInput, CapabilityDeclaration, CapabilityInput, CapabilitySnapshot, DestroyLease, DriverError,
    DuplexChannels, EnvironmentDriver, Execute, FileSync, JsonMap, LeaseContext, LeaseGrant, LeasePolicy, LeaseStatus,
    RealizeWorkspace, Recovery, ReleaseInput, ResumeLease, SyncOperation, SyncResult, TerminationReceipt, Timestamp,
};
use serde::Serialize;
use serde_json::Value;

use crate::host::error::SandboxError;
use crate::host::manifest::PluginManifest;
use crate::host::options::SandboxOptions;
use crate::host::worker::supervisor::Supervisor;
use crate::protocol::environment::{
    AcquireLeaseParams, DriverBase, EndLeaseParams, LeaseRef, ResumeLeaseParams, SyncParams,
};
use crate::protocol::handshake::NoParams;
use crate::protocol::{methods, to_value};

mod duplex;
mod egress;
mod execute;
pub(crate) mod ingress;
pub(crate) mod post_upload;
mod processes;
mod realize;
mod recovery;
mod setup;
mod sync;
pub(crate) mod sync_out;
pub(crate) mod tail;
mod templates;
mod validate;

/// The driver key used when the manifest names none: runtime-core's fallback key, so a
/// lease that names no driver reaches this one.
pub const DEFAULT_DRIVER_KEY: &str = envrt_driver_api::model::FALLBACK_DRIVER_KEY;

/// A sandbox provider run as a plugin worker. Optional operations are offered only while
/// the live worker advertises their verb.
pub struct SandboxDriver {
    supervisor: Arc<Supervisor>,
    key: String,
    declaration: Option<CapabilityDeclaration>,
    /// The worker's verdicts on environment configurations (`environmentValidateConfig`),
    /// by the configuration's JSON text.
    validated: Mutex<HashMap<String, bool>>,
    /// Where the leases' process supervisors listen (see the `processes` module).
    socket_dirs: processes::SocketDirs,
    /// What the host needs to run a lease's egress proxy, or why it cannot (see the
    /// `egress` module).
    egress: Result<envrt_driver_agent::egress::EgressSetup, String>,
    /// PEM roots the egress proxy also trusts for brokered credentials' hosts.
    egress_roots: Option<std::path::PathBuf>,
    /// The worker's termination receipts of release and destroy, by envrt lease id, until
    /// the facade takes them (bounded: see [`MAX_RECEIPTS`]).
    receipts: Mutex<HashMap<String, TerminationReceipt>>,
}

/// Receipts held for the facade at most; past it the held ones are dropped (a caller that
/// never takes them, such as a direct driver call, cannot grow the map).
const MAX_RECEIPTS: usize = 1024;

impl std::fmt::Debug for SandboxDriver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SandboxDriver")
            .field("key", &self.key)
            .field("plugin", &self.supervisor.manifest().id)
            .field("worker_pid", &self.supervisor.pid())
            .finish()
    }
}

impl SandboxDriver {
    /// Starts the plugin's worker and completes the `initialize` handshake. Fails with
    /// `Worker initialize failed for "{pluginId}": {message}` (the worker is killed).
    pub async fn start(manifest: PluginManifest, options: SandboxOptions) -> Result<SandboxDriver, DriverError> {
        let entry = match options.driver_key.as_deref() {
            Some(key) => Some(manifest.driver_entry(Some(key)).ok_or_else(|| SandboxError::Manifest {
                message: format!("no environmentDrivers entry has driverKey \"{key}\""),
            })?),
            None => manifest.default_entry(),
        };
        let key = manifest.driver_key(options.driver_key.as_deref());
        let declaration = entry.and_then(|e| e.sandbox_capabilities);
        let egress = egress::resolve(&options);
        let egress_roots = options.egress_roots.clone();
        let supervisor = Supervisor::start(manifest, options).await?;
        Ok(SandboxDriver {
            supervisor,
            key,
            declaration,
            validated: Mutex::new(HashMap::new()),
            socket_dirs: processes::SocketDirs::default(),
            receipts: Mutex::new(HashMap::new()),
            egress,
            egress_roots,
        })
    }

    /// The manifest.
    pub fn manifest(&self) -> &PluginManifest {
        self.supervisor.manifest()
    }

    /// The live worker's `supportedMethods` (replaced on each restart).
    pub fn supported_methods(&self) -> Arc<BTreeSet<String>> {
        self.supervisor.supported()
    }

    /// The live worker's pid; `None` while it is restarting or down.
    pub fn worker_pid(&self) -> Option<u32> {
        self.supervisor.pid()
    }

    /// Calls `health` (never gated on `supportedMethods`).
    pub async fn health(&self) -> Result<Value, DriverError> {
        Ok(self
            .supervisor
            .call(
                methods::HEALTH,
                to_value(&NoParams {}),
                self.supervisor.options().rpc_timeout,
                None,
                None,
            )
            .await?)
    }

    /// Sends any method with the default timeout, ungated: for provider verbs this driver
    /// does not model (`environmentProbe`, `environmentValidateConfig`, ...).
    pub async fn call(&self, method: &str, params: Value) -> Result<Value, DriverError> {
        Ok(self
            .supervisor
            .call(method, params, self.supervisor.options().rpc_timeout, None, None)
            .await?)
    }

    /// The graceful stop: new calls are refused, pending ones drain (10 s), `shutdown` is
    /// sent, stdin closed, then SIGTERM and SIGKILL after the grace (5 s). Dropping the
    /// driver instead kills the worker at once.
    pub async fn shutdown(&self) {
        self.supervisor.shutdown().await;
    }

    /// `environmentProbe` for `environment`, answered within `timeout`; the error is the
    /// exact text `envrt doctor` shows: the worker does not advertise it, refused it
    /// (`the worker refused environmentProbe: {message}`), did not answer in time
    /// (`environmentProbe got no answer within {ms} ms`), or answered something else.
    pub async fn probe(
        &self,
        environment: &envrt_driver_api::Environment,
        timeout: std::time::Duration,
    ) -> Result<envrt_driver_api::ProbeAnswer, String> {
        if !self.advertises(methods::PROBE) {
            return Err("the worker does not advertise environmentProbe".into());
        }
        let params = crate::protocol::environment::ProbeParams {
            base: DriverBase {
                driver_key: self.key.clone(),
                company_id: String::new(),
                environment_id: environment.id.clone(),
                issue_id: None,
                config: environment.config.clone(),
            },
        };
        let answer = match self
            .supervisor
            .call(methods::PROBE, to_value(&params), timeout, None, None)
            .await
        {
            Ok(answer) => answer,
            Err(SandboxError::Timeout { ms, .. }) => {
                return Err(format!("environmentProbe got no answer within {ms} ms"));
            }
            Err(SandboxError::Rpc { message, .. }) => {
                return Err(format!("the worker refused environmentProbe: {message}"));
            }
            Err(other) => return Err(other.to_string()),
        };
        let result: crate::protocol::environment::ProbeResult = serde_json::from_value(answer)
            .map_err(|e| format!("environmentProbe answered something other than a probe result: {e}"))?;
        let mut summary = result
            .summary
            .filter(|s| !s.trim().is_empty())
            .unwrap_or_else(|| if result.ok { "ready".into() } else { "not ready".into() });
        for diagnostic in result.diagnostics.unwrap_or_default() {
            summary.push_str(&format!("; {}: {}", diagnostic.severity, diagnostic.message));
        }
        Ok(envrt_driver_api::ProbeAnswer {
            ok: result.ok,
            summary: summary.replace(['\n', '\r'], " "),
        })
    }

    fn advertises(&self, method: &str) -> bool {
        self.supervisor.advertises(method)
    }

    fn require(&self, method: &str) -> Result<(), SandboxError> {
        if self.advertises(method) {
            Ok(())
        } else {
            Err(SandboxError::NotAdvertised {
                plugin_id: self.supervisor.manifest().id.clone(),
                method: method.to_owned(),
            })
        }
    }

    async fn rpc(&self, method: &str, params: &impl Serialize, company_id: &str) -> Result<Value, SandboxError> {
        self.supervisor
            .call(
                method,
                to_value(params),
                self.supervisor.options().rpc_timeout,
                Some(company_id),
                None,
            )
            .await
    }

    /// A call on no company's behalf (recovery works across them).
    async fn call_unscoped(&self, method: &str, params: &impl Serialize) -> Result<Value, SandboxError> {
        let timeout = self.supervisor.options().rpc_timeout;
        self.supervisor
            .call(method, to_value(params), timeout, None, None)
            .await
    }

    fn base(&self, context: &LeaseContext) -> DriverBase {
        let lease = &context.lease;
        DriverBase {
            driver_key: self.key.clone(),
            company_id: lease.company_id.clone(),
            environment_id: lease.environment_id.clone().unwrap_or_default(),
            issue_id: lease.issue_id.clone(),
            config: context
                .environment
                .as_ref()
                .map(|e| e.config.clone())
                .unwrap_or_default(),
        }
    }

    /// The `lease` param of the lease-bound verbs.
    fn lease(context: &LeaseContext) -> LeaseRef {
        let lease = &context.lease;
        LeaseRef {
            provider_lease_id: lease.provider_lease_id.clone(),
            metadata: Some(lease.metadata.clone()),
            expires_at: lease.expires_at.map(|at| Value::String(at.to_rfc3339())),
        }
    }

    fn grant(&self, method: &str, value: Value) -> Result<Option<LeaseGrant>, SandboxError> {
        let invalid = |message: &str| SandboxError::InvalidResult {
            method: method.to_owned(),
            message: message.to_owned(),
        };
        let Value::Object(result) = value else {
            return Err(invalid("expected a lease object"));
        };
        let provider_lease_id = match result.get("providerLeaseId") {
            None | Some(Value::Null) => return Ok(None),
            Some(Value::String(id)) if id.is_empty() => return Ok(None),
            Some(Value::String(id)) => id.clone(),
            Some(_) => return Err(invalid("providerLeaseId must be a string")),
        };
        let mut metadata = match result.get("metadata") {
            None | Some(Value::Null) => JsonMap::new(),
            Some(Value::Object(m)) => m.clone(),
            Some(_) => return Err(invalid("metadata must be an object")),
        };
        // The documented key beside the protocol's remoteCwd.
        if let Some(cwd) = metadata.get("remoteCwd").filter(|v| v.is_string()).cloned() {
            metadata
                .entry(envrt_driver_api::model::WORKSPACE_METADATA_KEY)
                .or_insert(cwd);
        }
        let expires_at = match result.get("expiresAt") {
            Some(Value::String(text)) => {
                Some(Timestamp::parse_rfc3339(text).ok_or_else(|| invalid("expiresAt is not an RFC 3339 time"))?)
            }
            Some(Value::Number(n)) => n.as_u64().map(Timestamp),
            _ => None,
        };
        Ok(Some(LeaseGrant {
            provider: Some(self.key.clone()),
            provider_lease_id: Some(provider_lease_id),
            metadata,
            expires_at,
        }))
    }

    async fn end_lease(&self, method: &str, context: &LeaseContext) -> Result<(), SandboxError> {
        let params = EndLeaseParams {
            base: self.base(context),
            provider_lease_id: context.lease.provider_lease_id.clone(),
            lease_metadata: Some(context.lease.metadata.clone()),
            cancel_active_work: Some(true),
        };
        let answer = self.rpc(method, &params, &context.lease.company_id).await?;
        self.keep_receipt(context, answer);
        // The worker killed the lease's supervisor with its other sandboxes.
        self.socket_dirs.remove(&context.lease.id);
        // and the lease's egress forwarder: its proxy goes too
        egress::stop(&context.lease.id);
        Ok(())
    }

    /// Keeps the receipt a release or destroy answered with, when it is one for this lease
    /// (the worker is untrusted: a receipt for another provider lease, or anything that is
    /// not a receipt, is not recorded; an answer with none is Paperclip's "void").
    fn keep_receipt(&self, context: &LeaseContext, answer: serde_json::Value) {
        if answer.is_null() {
            return;
        }
        let receipt = serde_json::from_value::<TerminationReceipt>(answer)
            .ok()
            .filter(|r| context.lease.provider_lease_id.as_deref() == Some(r.provider_lease_id.as_str()));
        let Some(receipt) = receipt else {
            tracing::warn!(
                plugin = %self.supervisor.manifest().id,
                lease_id = %context.lease.id,
                "the worker's termination receipt is not one for this lease; not recorded"
            );
            return;
        };
        let mut receipts = self.receipts.lock().unwrap_or_else(|p| p.into_inner());
        if receipts.len() >= MAX_RECEIPTS && !receipts.contains_key(&context.lease.id) {
            receipts.clear();
        }
        receipts.insert(context.lease.id.clone(), receipt);
    }

    async fn sync(
        &self,
        method: &str,
        context: &LeaseContext,
        operations: &[SyncOperation],
    ) -> Result<SyncResult, DriverError> {
        self.require(method)?;
        let remote_cwd = context.lease.metadata.get("remoteCwd").and_then(|v| v.as_str());
        crate::host::driver::post_upload::check_cwds(operations, remote_cwd)?;
        let params = SyncParams {
            base: self.base(context),
            lease: Self::lease(context),
            operations: operations.to_vec(),
        };
        let value = self.rpc(method, &params, &context.lease.company_id).await?;
        Ok(serde_json::from_value(value).map_err(|e| SandboxError::InvalidResult {
            method: method.to_owned(),
            message: e.to_string(),
        })?)
    }
}

#[async_trait]
impl EnvironmentDriver for SandboxDriver {
    fn key(&self) -> &str {
        &self.key
    }

    fn brokers_credentials(&self) -> bool {
        // Its egress proxy (the reference worker's, when it runs one) terminates TLS for
        // credentialed hosts; the worker shows the lease's CA bundle to every sandbox.
        use envrt_driver_api::network::NetworkBoundary;
        super::network::boundary(self.supervisor.manifest()) == NetworkBoundary::Isolated
            && self.reference_boundary() == NetworkBoundary::Proxied
    }

    fn network_boundary(&self, _: &envrt_driver_api::Environment) -> envrt_driver_api::network::NetworkBoundary {
        match super::network::boundary(self.supervisor.manifest()) {
            envrt_driver_api::network::NetworkBoundary::Isolated => self.reference_boundary(),
            other => other,
        }
    }

    async fn update_network_policy(
        &self,
        context: &LeaseContext,
        policy: &envrt_driver_api::network::Policy,
    ) -> Result<(), DriverError> {
        self.update_egress(context, policy).await
    }

    async fn check_environment_config(&self, config: &envrt_driver_api::JsonMap) -> Result<(), DriverError> {
        self.check_config(config).await
    }

    async fn probe_environment(
        &self,
        environment: &envrt_driver_api::Environment,
        timeout: std::time::Duration,
    ) -> Option<Result<envrt_driver_api::ProbeAnswer, String>> {
        // A worker without the probe has nothing to say (the probe is optional).
        if !self.advertises(methods::PROBE) {
            return None;
        }
        Some(self.probe(environment, timeout).await)
    }

    async fn acquire_lease(&self, input: &AcquireInput) -> Result<LeaseGrant, DriverError> {
        self.require(methods::ACQUIRE_LEASE)?;
        let mut params = AcquireLeaseParams {
            base: DriverBase {
                driver_key: self.key.clone(),
                company_id: input.company_id.clone(),
                environment_id: input.environment.id.clone(),
                issue_id: input.issue_id.clone(),
                config: input.environment.config.clone(),
            },
            run_id: input.run_id.clone().unwrap_or_else(|| input.lease_id.clone()),
            requested_cwd: input.requested_cwd.clone(),
            execution_workspace_id: input.execution_workspace_id.clone(),
            requested_expires_at: input.requested_expires_at.map(|at| at.to_rfc3339()),
            envrt_lease_id: Some(input.lease_id.clone()),
            ..AcquireLeaseParams::default()
        };
        self.add_template(input, &mut params)?;
        let value = self.rpc(methods::ACQUIRE_LEASE, &params, &input.company_id).await?;
        let grant = self.grant(methods::ACQUIRE_LEASE, value)?;
        let mut grant = grant.ok_or_else(|| SandboxError::InvalidResult {
            method: methods::ACQUIRE_LEASE.into(),
            message: "providerLeaseId is missing".into(),
        })?;
        if let Some(policy) = &input.network {
            self.start_egress(input, &mut grant, policy).await?;
        }
        Ok(grant)
    }

    async fn release_lease(&self, input: &ReleaseInput) -> Result<(), DriverError> {
        // keep the resource of a retained lease; send nothing the worker stopped offering
        if input.status == LeaseStatus::Retained {
            return Ok(());
        }
        if self.advertises(methods::RELEASE_LEASE) {
            self.end_lease(methods::RELEASE_LEASE, &input.context).await?;
        }
        // Only a reusable lease keeps its sandbox for a later resume: any other release
        // also destroys it where the worker can, so ephemeral leases leave nothing behind.
        let reusable = input.context.lease.lease_policy == LeasePolicy::ReuseByEnvironment;
        if !reusable && self.advertises(methods::DESTROY_LEASE) {
            self.end_lease(methods::DESTROY_LEASE, &input.context).await?;
        }
        Ok(())
    }

    fn take_termination_receipt(&self, lease_id: &str) -> Option<TerminationReceipt> {
        self.receipts.lock().unwrap_or_else(|p| p.into_inner()).remove(lease_id)
    }

    async fn resolve_capabilities(&self, input: &CapabilityInput) -> Result<CapabilitySnapshot, DriverError> {
        // Written out key by key: a key added to the model is not granted until somebody
        // decides workers can serve it. `persistentProcessSessions` only while the live
        // worker advertises `envrtStartProcessSupervisor` (it found the supervisor's
        // binary and starts it in the lease's sandbox); `runnerWebSocketIngress` only
        // while it advertises `environmentRunnerIngressEndpoint` (the host forwards it and
        // checks the answer: the `ingress` module), and only where the manifest declares
        // it (an opt-in key).
        let mut supported: SupportSet = [
            CapabilityKey::ReusableLeases,
            CapabilityKey::NativeSyncIn,
            CapabilityKey::NativeSyncOut,
            CapabilityKey::IndependentControlCommands,
            CapabilityKey::IncrementalSessionOutput,
            CapabilityKey::ConcurrentSyncOperations,
            CapabilityKey::DuplexCommandStream,
        ]
        .into_iter()
        .collect();
        if self.advertises(methods::START_PROCESS_SUPERVISOR) {
            supported.insert(CapabilityKey::PersistentProcessSessions);
        }
        if self.advertises(methods::RUNNER_INGRESS_ENDPOINT) {
            supported.insert(CapabilityKey::RunnerWebSocketIngress);
        }
        let config_resolved = self.config_resolves(input.environment.as_ref()).await;
        Ok(classify_driver(
            self,
            supported,
            self.declaration.as_ref(),
            input,
            config_resolved,
        ))
    }

    fn as_resume(&self) -> Option<&dyn ResumeLease> {
        self.advertises(methods::RESUME_LEASE)
            .then_some(self as &dyn ResumeLease)
    }

    fn as_destroy(&self) -> Option<&dyn DestroyLease> {
        self.advertises(methods::DESTROY_LEASE)
            .then_some(self as &dyn DestroyLease)
    }

    fn as_realize(&self) -> Option<&dyn RealizeWorkspace> {
        self.advertises(methods::REALIZE_WORKSPACE)
            .then_some(self as &dyn RealizeWorkspace)
    }

    fn as_execute(&self) -> Option<&dyn Execute> {
        (self.advertises(methods::EXECUTE) || self.advertises(methods::EXECUTE_BINARY)).then_some(self as &dyn Execute)
    }

    fn as_sync(&self) -> Option<&dyn FileSync> {
        (self.advertises(methods::SYNC_IN) || self.advertises(methods::SYNC_OUT)).then_some(self as &dyn FileSync)
    }

    fn as_recovery(&self) -> Option<&dyn Recovery> {
        self.advertises(methods::LIST_LEASES).then_some(self as &dyn Recovery)
    }

    /// Offered while the live worker advertises `envrtStartProcessSupervisor`.
    fn as_processes(&self) -> Option<&dyn envrt_driver_api::ProcessSessions> {
        self.advertises(methods::START_PROCESS_SUPERVISOR)
            .then_some(self as &dyn envrt_driver_api::ProcessSessions)
    }

    fn as_expose(&self) -> Option<&dyn envrt_driver_api::ExposePorts> {
        self.advertises(methods::START_PROCESS_SUPERVISOR)
            .then_some(self as &dyn envrt_driver_api::ExposePorts)
    }

    /// Offered while the live worker advertises `environmentRunnerIngressEndpoint`.
    fn as_runner_ingress(&self) -> Option<&dyn envrt_driver_api::RunnerIngress> {
        self.advertises(methods::RUNNER_INGRESS_ENDPOINT)
            .then_some(self as &dyn envrt_driver_api::RunnerIngress)
    }

    fn as_duplex(&self) -> Option<&dyn DuplexChannels> {
        self.advertises(methods::DUPLEX_OPEN)
            .then_some(self as &dyn DuplexChannels)
    }

    /// Always offered: a worker without the verbs is refused in Paperclip's words.
    fn as_templates(&self) -> Option<&dyn envrt_driver_api::Templates> {
        Some(self)
    }

    /// `whole-environment` while the live worker advertises `envrtFilesAnywhere` (and
    /// `envrtCwdAnywhere`), `cwd-anywhere` while it advertises only `envrtCwdAnywhere`,
    /// else the workspace: the host cannot know what a worker confines, so it takes its
    /// word.
    fn path_scope(&self) -> envrt_driver_api::PathScope {
        if self.advertises(methods::FILES_ANYWHERE) && self.advertises(methods::CWD_ANYWHERE) {
            envrt_driver_api::PathScope::WholeEnvironment
        } else if self.advertises(methods::CWD_ANYWHERE) {
            envrt_driver_api::PathScope::CwdAnywhere
        } else {
            envrt_driver_api::PathScope::Workspace
        }
    }

    fn verified_verbs(&self) -> VerbSet {
        let mut verbs = (*self.supervisor.supported()).clone();
        if verbs.contains(methods::EXECUTE_BINARY) {
            verbs.insert(methods::EXECUTE.to_owned());
        }
        verbs
    }
}

#[async_trait]
impl ResumeLease for SandboxDriver {
    async fn resume_lease(&self, context: &LeaseContext) -> Result<Option<LeaseGrant>, DriverError> {
        self.require(methods::RESUME_LEASE)?;
        let params = ResumeLeaseParams {
            base: self.base(context),
            provider_lease_id: context.lease.provider_lease_id.clone(),
            lease_metadata: Some(context.lease.metadata.clone()),
        };
        let value = self
            .rpc(methods::RESUME_LEASE, &params, &context.lease.company_id)
            .await?;
        Ok(self.grant(methods::RESUME_LEASE, value)?)
    }
}

#[async_trait]
impl DestroyLease for SandboxDriver {
    async fn destroy_lease(&self, context: &LeaseContext) -> Result<(), DriverError> {
        self.require(methods::DESTROY_LEASE)?;
        Ok(self.end_lease(methods::DESTROY_LEASE, context).await?)
    }
}

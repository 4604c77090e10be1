//! The environment verbs: config, probe, the lease life cycle, workspace, execute, sync,
//! runner ingress, and envrt's `envrtListLeases` extension.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use envrt_driver_api::sync::{SyncOperation, SyncResult};
pub use envrt_driver_api::{JsonMap, RealizedWorkspace, WorkspaceRequest};

/// The fields every environment verb carries (`PluginEnvironmentDriverBaseParams`). Read
/// leniently: a field that is missing or `null` is empty.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DriverBase {
    /// The driver key of the environment.
    #[serde(default, deserialize_with = "null_is_default")]
    pub driver_key: String,
    /// The company the call acts for.
    #[serde(default, deserialize_with = "null_is_default")]
    pub company_id: String,
    /// The environment.
    #[serde(default, deserialize_with = "null_is_default")]
    pub environment_id: String,
    /// The issue, when there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub issue_id: Option<String>,
    /// The environment's provider configuration.
    #[serde(default, deserialize_with = "null_is_default")]
    pub config: JsonMap,
}

/// `null` reads as the type's default.
fn null_is_default<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(deserializer)?.unwrap_or_default())
}

/// `environmentValidateConfig` params (only these two fields).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ValidateConfigParams {
    /// The driver key.
    #[serde(default)]
    pub driver_key: String,
    /// The configuration to judge (any JSON, so a worker can refuse a non-object).
    #[serde(default)]
    pub config: Value,
}

/// `environmentValidateConfig` result.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ValidationResult {
    /// Whether the configuration is usable.
    pub ok: bool,
    /// Warnings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warnings: Option<Vec<String>>,
    /// Errors.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub errors: Option<Vec<String>>,
    /// The configuration as the provider normalized it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub normalized_config: Option<JsonMap>,
}

/// `environmentProbe` params.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ProbeParams {
    /// The common fields.
    #[serde(flatten)]
    pub base: DriverBase,
}

/// One probe diagnostic.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Diagnostic {
    /// `info`, `warning` or `error`.
    pub severity: String,
    /// The text.
    pub message: String,
    /// A machine-readable code.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    /// Details.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<JsonMap>,
}

/// `environmentProbe` result.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ProbeResult {
    /// Whether the provider is usable.
    pub ok: bool,
    /// One line.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<String>,
    /// Diagnostics.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diagnostics: Option<Vec<Diagnostic>>,
    /// Metadata.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<JsonMap>,
}

/// A lease as the protocol carries it (`PluginEnvironmentLease`): the `lease` param of
/// the lease-bound verbs, and the result of acquire and resume.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LeaseRef {
    /// The provider's lease id; `null` (or empty) in a resume result: the resource is gone.
    #[serde(default)]
    pub provider_lease_id: Option<String>,
    /// Provider metadata.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<JsonMap>,
    /// When the provider ends the lease: RFC 3339 text (the SDK's form; envrt's host also
    /// reads milliseconds since the epoch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<Value>,
}

/// `environmentAcquireLease` params.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AcquireLeaseParams {
    /// The common fields.
    #[serde(flatten)]
    pub base: DriverBase,
    /// The run the lease is for (envrt: the run id, or the lease id without one).
    #[serde(default)]
    pub run_id: String,
    /// Workspace mode.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace_mode: Option<String>,
    /// The cwd the caller asks for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requested_cwd: Option<String>,
    /// The agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_id: Option<String>,
    /// The execution workspace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub execution_workspace_id: Option<String>,
    /// The harness type of this run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adapter_type: Option<String>,
    /// Execution workspace settings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub execution_workspace_settings: Option<JsonMap>,
    /// The latest time the lease may stay active (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requested_expires_at: Option<String>,
    /// Extension: envrt's own id of the lease, which a worker serving `envrtListLeases`
    /// keeps and lists, so recovery can tell a lease the store still knows from an orphan.
    /// Other workers ignore it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub envrt_lease_id: Option<String>,
    /// Extension: the template the lease starts from (the name of
    /// `environmentStartInteractiveSetup`'s param); sent only to a worker that advertises
    /// `environmentCaptureTemplate`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_template_ref: Option<String>,
    /// Extension: its kind.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_template_kind: Option<String>,
}

/// `environmentResumeLease` params.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResumeLeaseParams {
    /// The common fields.
    #[serde(flatten)]
    pub base: DriverBase,
    /// The lease to resume.
    #[serde(default)]
    pub provider_lease_id: Option<String>,
    /// Its metadata.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_metadata: Option<JsonMap>,
}

/// `environmentReleaseLease` and `environmentDestroyLease` params.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EndLeaseParams {
    /// The common fields.
    #[serde(flatten)]
    pub base: DriverBase,
    /// The lease; `null` ends nothing.
    #[serde(default)]
    pub provider_lease_id: Option<String>,
    /// Its metadata.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_metadata: Option<JsonMap>,
    /// Terminate running work instead of waiting for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cancel_active_work: Option<bool>,
}

/// How a lease ended, in a [`TerminationReceipt`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EndState {
    /// Released: files kept, resumable.
    Stopped,
    /// Destroyed: nothing left.
    Destroyed,
}

/// Release and destroy result (or nothing).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TerminationReceipt {
    /// The lease.
    pub provider_lease_id: String,
    /// How it ended.
    pub state: EndState,
}

/// `environmentRealizeWorkspace` params.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RealizeWorkspaceParams {
    /// The common fields.
    #[serde(flatten)]
    pub base: DriverBase,
    /// The lease.
    pub lease: LeaseRef,
    /// What to realize.
    #[serde(default)]
    pub workspace: WorkspaceRequest,
}

/// `environmentExecute` (and `environmentExecuteBinary`) params. With the binary verb,
/// `stdin` is base64.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExecuteParams {
    /// The common fields.
    #[serde(flatten)]
    pub base: DriverBase,
    /// The lease.
    pub lease: LeaseRef,
    /// The program.
    pub command: String,
    /// Its arguments.
    #[serde(default)]
    pub args: Vec<String>,
    /// The working directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    /// The environment the command gets.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// Its standard input.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stdin: Option<String>,
    /// Its timeout.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// Run outside the lease's persistent session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bypass_session: Option<bool>,
    /// Extension: per-stream capture cap; the worker's default when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_output_bytes: Option<usize>,
    /// Extension (`envrtExecuteAsUser`): who the command runs as, as the request gave it;
    /// the reference worker takes `UID` or `UID:GID` inside its sandbox's user namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub envrt_user: Option<String>,
    /// Extension (`envrt.dataPlane`): the command's stdin arrives on the data plane as
    /// route number `n` (at least [`crate::dataplane::STDIN_ROUTE_BASE`]) in `data`
    /// frames, credited back as written, ended by `eof`; `stdin` is then absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub envrt_stdin_route: Option<u64>,
}

/// `environmentExecute` (and `environmentExecuteBinary`) result. With the binary verb,
/// `stdout` and `stderr` are base64.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExecuteResult {
    /// The exit code; `null` when killed by a signal or unknown.
    pub exit_code: Option<i32>,
    /// The signal that ended the command.
    #[serde(default)]
    pub signal: Option<String>,
    /// Whether the timeout ended it.
    #[serde(default)]
    pub timed_out: bool,
    /// Its standard output.
    #[serde(default)]
    pub stdout: String,
    /// Its standard error.
    #[serde(default)]
    pub stderr: String,
    /// Metadata (envrt: `stdoutTruncated`, `stderrTruncated`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<JsonMap>,
}

/// `environmentSyncIn` and `environmentSyncOut` params.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SyncParams {
    /// The common fields.
    #[serde(flatten)]
    pub base: DriverBase,
    /// The lease.
    pub lease: LeaseRef,
    /// The operations, applied in order.
    pub operations: Vec<SyncOperation>,
}

/// `environmentRunnerIngressEndpoint` params.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunnerIngressEndpointParams {
    /// The common fields.
    #[serde(flatten)]
    pub base: DriverBase,
    /// The lease.
    pub lease: LeaseRef,
    /// The port inside the lease.
    pub port: u16,
    /// The HTTP path.
    pub path: String,
    /// Extension: the directory where the lease's process supervisor listens (the host's
    /// `envrtStartProcessSupervisor` `socketDir`), so that a worker that did not start
    /// the running supervisor (it outlives workers) reaches the port through it. Other
    /// workers ignore it.
    #[serde(default, rename = "envrtSocketDir", skip_serializing_if = "Option::is_none")]
    pub envrt_socket_dir: Option<String>,
}

/// One header the runner must send to the ingress.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SecretHeader {
    /// Header name.
    pub name: String,
    /// Header value.
    pub value: String,
}

/// `environmentRunnerIngressEndpoint` result.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunnerIngressEndpoint {
    /// `authenticated_websocket`.
    pub kind: String,
    /// Where to connect.
    pub websocket_url: String,
    /// Headers to send.
    pub secret_headers: Vec<SecretHeader>,
    /// Changes whenever the endpoint does.
    pub generation: String,
}

/// Extension `envrtListLeases` params.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ListLeasesParams {
    /// The common fields.
    #[serde(flatten)]
    pub base: DriverBase,
}

/// One lease a worker holds, in [`ListLeasesResult`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkerLease {
    /// The provider lease id (what acquire returned).
    pub provider_lease_id: String,
    /// envrt's id of the lease (acquire's `envrtLeaseId`), when the worker was told it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub envrt_lease_id: Option<String>,
    /// When it expires (RFC 3339), when an expiry was requested.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<String>,
}

/// Extension `envrtListLeases` result: every lease the worker holds (released ones
/// included: they keep their files until destroyed).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListLeasesResult {
    /// The leases.
    pub leases: Vec<WorkerLease>,
}

/// Extension `envrtStartProcessSupervisor` params: start the lease's supervisor
/// (`envrt-agent`) so that it listens on `{socketDir}/sock`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StartProcessSupervisorParams {
    /// The common fields.
    #[serde(flatten)]
    pub base: DriverBase,
    /// The lease.
    pub lease: LeaseRef,
    /// An absolute host directory the host made for this lease's socket (mode 0700, the
    /// host's user's); the worker may hand it to the lease's own user, and binds it into
    /// the supervisor's sandbox.
    pub socket_dir: String,
}

/// Extension `envrtStartEgress` params.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StartEgressParams {
    /// The common fields.
    #[serde(flatten)]
    pub base: DriverBase,
    /// The lease.
    pub lease: LeaseRef,
    /// An absolute host directory the host made for this lease's egress sockets
    /// (`proxy.sock`, `dns.sock`), the host's user's and writable by nobody else.
    pub socket_dir: String,
    /// The name of a file in `socket_dir` that the host's proxy wrote: the CA bundle the
    /// lease's TLS clients must trust when the proxy brokers credentials. Every sandbox of
    /// the lease sees it read-only at `/.envrt/egress/ca-bundle.pem`. Absent: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_bundle: Option<String>,
    /// Variables every sandbox of the lease gets unless its request sets them: the CA
    /// variables and the credentials' placeholders (never a secret). At most
    /// [`MAX_LEASE_ENV`] names, each a shell variable name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
}

/// The most variables `envrtStartEgress` carries in `env`.
pub const MAX_LEASE_ENV: usize = 64;
/// The longest value of one of them, in bytes.
pub const MAX_LEASE_ENV_VALUE: usize = 4096;

/// Extension `envrtStartProcessSupervisor` result.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StartProcessSupervisorResult {
    /// Whether this call started it (`false`: it already ran, listening in that directory).
    pub started: bool,
}

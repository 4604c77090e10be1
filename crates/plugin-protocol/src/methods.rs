//! Method names, host → worker: every verb of the SDK's `HostToWorkerMethods` and envrt's
//! extension verbs. Nothing else in envrt spells a method name.

/// The handshake.
pub const INITIALIZE: &str = "initialize";
/// Liveness.
pub const HEALTH: &str = "health";
/// Graceful stop.
pub const SHUTDOWN: &str = "shutdown";

/// Plugin-level config validation (not an environment verb).
pub const PLUGIN_VALIDATE_CONFIG: &str = "validateConfig";
/// Plugin config change.
pub const CONFIG_CHANGED: &str = "configChanged";
/// Plugin event delivery.
pub const ON_EVENT: &str = "onEvent";
/// Plugin job.
pub const RUN_JOB: &str = "runJob";
/// Plugin webhook.
pub const HANDLE_WEBHOOK: &str = "handleWebhook";
/// Plugin API route.
pub const HANDLE_API_REQUEST: &str = "handleApiRequest";
/// Plugin data read.
pub const GET_DATA: &str = "getData";
/// Plugin action.
pub const PERFORM_ACTION: &str = "performAction";
/// Plugin tool.
pub const EXECUTE_TOOL: &str = "executeTool";
/// External object detection.
pub const DETECT_EXTERNAL_OBJECTS: &str = "detectExternalObjects";
/// External object resolution.
pub const RESOLVE_EXTERNAL_OBJECT: &str = "resolveExternalObject";
/// External object refresh.
pub const REFRESH_EXTERNAL_OBJECTS: &str = "refreshExternalObjects";

/// Environment config validation.
pub const VALIDATE_CONFIG: &str = "environmentValidateConfig";
/// Provider probe.
pub const PROBE: &str = "environmentProbe";
/// Acquire a lease.
pub const ACQUIRE_LEASE: &str = "environmentAcquireLease";
/// Resume a lease.
pub const RESUME_LEASE: &str = "environmentResumeLease";
/// Release a lease.
pub const RELEASE_LEASE: &str = "environmentReleaseLease";
/// Destroy a lease.
pub const DESTROY_LEASE: &str = "environmentDestroyLease";
/// Realize a workspace.
pub const REALIZE_WORKSPACE: &str = "environmentRealizeWorkspace";
/// Run a command (text stdin/stdout/stderr).
pub const EXECUTE: &str = "environmentExecute";
/// The runner's authenticated WebSocket ingress into a lease.
pub const RUNNER_INGRESS_ENDPOINT: &str = "environmentRunnerIngressEndpoint";
/// Host → environment file transfer.
pub const SYNC_IN: &str = "environmentSyncIn";
/// Environment → host file transfer.
pub const SYNC_OUT: &str = "environmentSyncOut";
/// Start an interactive setup session.
pub const START_INTERACTIVE_SETUP: &str = "environmentStartInteractiveSetup";
/// Read an interactive setup session.
pub const GET_INTERACTIVE_SETUP: &str = "environmentGetInteractiveSetup";
/// Capture a template from a setup session.
pub const CAPTURE_TEMPLATE: &str = "environmentCaptureTemplate";
/// Cancel an interactive setup session.
pub const CANCEL_INTERACTIVE_SETUP: &str = "environmentCancelInteractiveSetup";
/// Delete a template.
pub const DELETE_TEMPLATE: &str = "environmentDeleteTemplate";

/// Open a login pseudo-terminal.
pub const LOGIN_PTY_OPEN: &str = "loginPtyOpen";
/// Write to a login pseudo-terminal.
pub const LOGIN_PTY_INPUT: &str = "loginPtyInput";
/// Stop a login pseudo-terminal.
pub const LOGIN_PTY_STOP: &str = "loginPtyStop";
/// Close a login pseudo-terminal.
pub const LOGIN_PTY_CLOSE: &str = "loginPtyClose";

/// Open a duplex channel.
pub const DUPLEX_OPEN: &str = "duplexChannelOpen";
/// Write to a duplex channel.
pub const DUPLEX_WRITE: &str = "duplexChannelWrite";
/// Stop a duplex channel's command.
pub const DUPLEX_STOP: &str = "duplexChannelStop";
/// Close a duplex channel.
pub const DUPLEX_CLOSE: &str = "duplexChannelClose";

/// Extension: run a command with base64 stdin/stdout/stderr.
pub const EXECUTE_BINARY: &str = "environmentExecuteBinary";
/// Extension: close a duplex channel's input (half-close).
pub const DUPLEX_CLOSE_INPUT: &str = "duplexChannelCloseInput";
/// Extension: the leases the worker holds (for recovery: inventory and reaping).
pub const LIST_LEASES: &str = "envrtListLeases";
/// Extension: the templates of a tenant's environment.
pub const LIST_TEMPLATES: &str = "environmentListTemplates";
/// Extension marker, never called: advertised, it says the worker honours the execute
/// param `envrtUser` (run the command as that user); unadvertised, the host refuses a
/// request that names a user.
pub const EXECUTE_AS_USER: &str = "envrtExecuteAsUser";
/// Extension marker, never called: advertised, it says the worker takes any absolute
/// directory of its environment as an execute `cwd` (its sandbox is the boundary), so the
/// host declares the `cwd-anywhere` path scope.
pub const CWD_ANYWHERE: &str = "envrtCwdAnywhere";
/// Extension marker, never called: advertised, it says the worker also takes any absolute
/// path of its environment as a sync source or target, resolved in the environment's own
/// view (as its commands see it), so the host declares the `whole-environment` path scope.
pub const FILES_ANYWHERE: &str = "envrtFilesAnywhere";
/// Extension: start the lease's process supervisor (`envrt-agent`) inside the lease's
/// isolation, listening on [`SUPERVISOR_SOCKET`] in a directory the host made; answered
/// once it listens (see `docs/plugin-protocol.md`).
pub const START_PROCESS_SUPERVISOR: &str = "envrtStartProcessSupervisor";
/// The name of the supervisor's socket in the directory of
/// [`START_PROCESS_SUPERVISOR`]'s `socketDir`.
pub const SUPERVISOR_SOCKET: &str = "sock";
/// Extension: give the lease's sandboxes its network under a policy: a network namespace
/// of the lease's own whose loopback forwards `127.0.0.1:3128` and `127.0.0.1:53` to the
/// egress proxy's sockets in a directory the host made (see `docs/plugin-protocol.md`);
/// answered once the forwarder listens, and again (starting it anew) whenever called.
pub const START_EGRESS: &str = "envrtStartEgress";

/// The verbs every worker serves.
pub const LIFECYCLE: &[&str] = &[INITIALIZE, HEALTH, SHUTDOWN];

/// The SDK's plugin-level verbs (no environment behind them).
pub const PLUGIN: &[&str] = &[
    PLUGIN_VALIDATE_CONFIG,
    CONFIG_CHANGED,
    ON_EVENT,
    RUN_JOB,
    HANDLE_WEBHOOK,
    HANDLE_API_REQUEST,
    GET_DATA,
    PERFORM_ACTION,
    EXECUTE_TOOL,
    DETECT_EXTERNAL_OBJECTS,
    RESOLVE_EXTERNAL_OBJECT,
    REFRESH_EXTERNAL_OBJECTS,
];

/// The SDK's environment verbs, in the SDK's order.
pub const ENVIRONMENT: &[&str] = &[
    VALIDATE_CONFIG,
    PROBE,
    ACQUIRE_LEASE,
    RESUME_LEASE,
    RELEASE_LEASE,
    DESTROY_LEASE,
    REALIZE_WORKSPACE,
    EXECUTE,
    RUNNER_INGRESS_ENDPOINT,
    SYNC_IN,
    SYNC_OUT,
    START_INTERACTIVE_SETUP,
    GET_INTERACTIVE_SETUP,
    CAPTURE_TEMPLATE,
    CANCEL_INTERACTIVE_SETUP,
    DELETE_TEMPLATE,
];

/// The SDK's login pseudo-terminal verbs.
pub const LOGIN_PTY: &[&str] = &[LOGIN_PTY_OPEN, LOGIN_PTY_INPUT, LOGIN_PTY_STOP, LOGIN_PTY_CLOSE];

/// The SDK's duplex channel verbs.
pub const DUPLEX: &[&str] = &[DUPLEX_OPEN, DUPLEX_WRITE, DUPLEX_STOP, DUPLEX_CLOSE];

/// envrt's extension verbs: optional, advertised in `supportedMethods` like any other.
pub const EXTENSIONS: &[&str] = &[
    EXECUTE_BINARY,
    DUPLEX_CLOSE_INPUT,
    LIST_LEASES,
    LIST_TEMPLATES,
    EXECUTE_AS_USER,
    CWD_ANYWHERE,
    FILES_ANYWHERE,
    START_PROCESS_SUPERVISOR,
    START_EGRESS,
];

/// Every verb of the SDK's `HostToWorkerMethods`.
pub fn sdk() -> impl Iterator<Item = &'static str> {
    [LIFECYCLE, PLUGIN, ENVIRONMENT, LOGIN_PTY, DUPLEX]
        .into_iter()
        .flatten()
        .copied()
}

/// Every verb: the SDK's and envrt's extensions.
pub fn all() -> impl Iterator<Item = &'static str> {
    sdk().chain(EXTENSIONS.iter().copied())
}

/// Whether `method` is a duplex channel verb (the SDK's or the half-close extension).
pub fn is_duplex(method: &str) -> bool {
    DUPLEX.contains(&method) || method == DUPLEX_CLOSE_INPUT
}

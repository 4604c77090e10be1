//! Which methods the worker serves and advertises in `supportedMethods`, and which known
//! SDK methods it answers as not implemented.

use envrt_plugin_protocol::methods;

use super::Worker;

/// Every method the worker implements, as advertised in `supportedMethods` (the duplex
/// verbs only without `--no-duplex`).
pub(crate) const SUPPORTED_METHODS: &[&str] = &[
    methods::HEALTH,
    methods::SHUTDOWN,
    methods::VALIDATE_CONFIG,
    methods::PROBE,
    methods::ACQUIRE_LEASE,
    methods::RESUME_LEASE,
    methods::RELEASE_LEASE,
    methods::DESTROY_LEASE,
    methods::REALIZE_WORKSPACE,
    methods::EXECUTE,
    methods::EXECUTE_BINARY,
    methods::SYNC_IN,
    methods::SYNC_OUT,
    methods::DUPLEX_OPEN,
    methods::DUPLEX_WRITE,
    methods::DUPLEX_STOP,
    methods::DUPLEX_CLOSE,
    methods::DUPLEX_CLOSE_INPUT,
    methods::LIST_LEASES,
    methods::CAPTURE_TEMPLATE,
    methods::DELETE_TEMPLATE,
    methods::LIST_TEMPLATES,
    methods::START_INTERACTIVE_SETUP,
    methods::GET_INTERACTIVE_SETUP,
    methods::CANCEL_INTERACTIVE_SETUP,
    methods::EXECUTE_AS_USER,
    methods::CWD_ANYWHERE,
    methods::FILES_ANYWHERE,
    methods::START_PROCESS_SUPERVISOR,
    methods::START_EGRESS,
    methods::RUNNER_INGRESS_ENDPOINT,
];

/// Whether `method` is one an SDK worker knows but this worker does not implement
/// (plugin-level `validateConfig`, the environment verbs it does not serve, the login
/// pseudo-terminal): answered `-32004` `"{method} is not implemented by this plugin"`, as
/// an SDK worker without the hook does.
pub(crate) fn known_not_implemented(method: &str) -> bool {
    !SUPPORTED_METHODS.contains(&method)
        && (method == methods::PLUGIN_VALIDATE_CONFIG
            || methods::ENVIRONMENT.contains(&method)
            || methods::LOGIN_PTY.contains(&method))
}

impl Worker {
    /// The methods this worker advertises: those it serves, except the runner ingress
    /// without a supervisor's binary (the ingress reaches the lease through it).
    pub(super) fn advertises(&self, method: &str) -> bool {
        self.serves(method) && (method != methods::RUNNER_INGRESS_ENDPOINT || self.agent.is_some())
    }
}

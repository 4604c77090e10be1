//! JSON-RPC 2.0 and plugin error codes (the SDK's `JSONRPC_ERROR_CODES` and
//! `PLUGIN_RPC_ERROR_CODES`).

/// Parse error: the line is not JSON, or not a JSON-RPC 2.0 message.
pub const PARSE_ERROR: i64 = -32700;
/// Invalid request (envrt: also a request line over the size limit).
pub const INVALID_REQUEST: i64 = -32600;
/// Method not found.
pub const METHOD_NOT_FOUND: i64 = -32601;
/// Invalid params.
pub const INVALID_PARAMS: i64 = -32602;
/// Internal error.
pub const INTERNAL_ERROR: i64 = -32603;
/// The worker is unavailable (exited, not started).
pub const WORKER_UNAVAILABLE: i64 = -32000;
/// Capability denied.
pub const CAPABILITY_DENIED: i64 = -32001;
/// The worker's handler failed.
pub const WORKER_ERROR: i64 = -32002;
/// Timeout.
pub const TIMEOUT: i64 = -32003;
/// A known optional method the plugin does not implement.
pub const METHOD_NOT_IMPLEMENTED: i64 = -32004;
/// Invocation scope denied.
pub const INVOCATION_SCOPE_DENIED: i64 = -32005;
/// Cross-tenant config.
pub const CROSS_TENANT_CONFIG: i64 = -32006;
/// Unknown.
pub const UNKNOWN: i64 = -32099;

/// Every code with its name, in the order `docs/plugin-protocol.md` lists them.
pub const ALL: &[(i64, &str)] = &[
    (PARSE_ERROR, "parse"),
    (INVALID_REQUEST, "invalid request"),
    (METHOD_NOT_FOUND, "method not found"),
    (INVALID_PARAMS, "invalid params"),
    (INTERNAL_ERROR, "internal"),
    (WORKER_UNAVAILABLE, "worker unavailable"),
    (CAPABILITY_DENIED, "capability denied"),
    (WORKER_ERROR, "worker error"),
    (TIMEOUT, "timeout"),
    (METHOD_NOT_IMPLEMENTED, "method not implemented"),
    (INVOCATION_SCOPE_DENIED, "invocation scope denied"),
    (CROSS_TENANT_CONFIG, "cross-tenant config"),
    (UNKNOWN, "unknown"),
];

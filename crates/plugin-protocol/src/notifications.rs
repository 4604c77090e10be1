//! Notification names.

/// Worker → host: output of a running `environmentExecute`.
pub const EXECUTE_LOG: &str = "execute.log";
/// Worker → host: output bytes of a duplex channel.
pub const DUPLEX_DATA: &str = "duplexChannel.data";
/// Worker → host: a duplex channel's command ended.
pub const DUPLEX_EXIT: &str = "duplexChannel.exit";
/// Worker → host: output of a login pseudo-terminal.
pub const LOGIN_PTY_OUTPUT: &str = "loginPty.output";
/// Worker → host: a login pseudo-terminal ended.
pub const LOGIN_PTY_EXIT: &str = "loginPty.exit";
/// Worker → host: a log line of the worker.
pub const LOG: &str = "log";
/// Extension, host → worker: the host gave up on request `{id}`; the worker stops its
/// command. A worker that does not know it ignores it, as every unknown notification.
pub const CANCEL: &str = "envrt.cancel";

/// Every notification name.
pub const ALL: &[&str] = &[
    EXECUTE_LOG,
    DUPLEX_DATA,
    DUPLEX_EXIT,
    LOGIN_PTY_OUTPUT,
    LOGIN_PTY_EXIT,
    LOG,
    CANCEL,
];

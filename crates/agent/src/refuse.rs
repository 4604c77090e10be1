//! Every refusal text the agent sends, in one place so the tests can pin each exactly.

use crate::proto::{MAX_ARGS, MAX_KEEP, MAX_KEY, MAX_TUNNELS, Stream, VERSION};

pub(crate) fn unknown(id: u64) -> String {
    format!("no process {id} in this agent")
}

pub(crate) fn exited(id: u64, what: &str) -> String {
    format!("process {id} has exited: cannot {what}")
}

pub(crate) fn not_piped(id: u64) -> String {
    format!("process {id} was not started with piped stdin")
}

pub(crate) fn stdin_closed(id: u64) -> String {
    format!("process {id}'s stdin is already closed")
}

pub(crate) fn no_tty(id: u64) -> String {
    format!("process {id} has no terminal to resize")
}

pub(crate) fn recycled(id: u64, pid: i32) -> String {
    format!("process {id} (pid {pid}) is gone: its pid now names another process")
}

pub(crate) fn dropped(id: u64, stream: Stream, offset: u64, first: u64) -> String {
    format!(
        "offset {offset} of process {id}'s {} is no longer held: the first offset still held is {first} ({first} bytes dropped)",
        stream.name()
    )
}

pub(crate) fn past_end(id: u64, stream: Stream, offset: u64, end: u64) -> String {
    format!(
        "offset {offset} of process {id}'s {} is past its end: {end} bytes written so far",
        stream.name()
    )
}

pub(crate) fn no_stream(id: u64, stream: Stream, tty: bool) -> String {
    let has = if tty { "tty" } else { "stdout and stderr" };
    format!("process {id} has no {} stream (it has {has})", stream.name())
}

pub(crate) fn idempotency(key: &str, id: u64) -> String {
    format!("idempotency key {key:?} was already used for process {id} with a different request")
}

pub(crate) fn buffer_bound(need: u64, held: u64, bound: u64) -> String {
    format!(
        "the process would reserve {need} bytes of replay buffers, but {held} of the agent's bound of {bound} bytes are reserved"
    )
}

pub(crate) fn ids_spent(span: u64) -> String {
    format!(
        "the agent has given all {span} process ids of its generation; the lease's next supervisor numbers past them"
    )
}

pub(crate) fn process_bound(bound: u64) -> String {
    format!("the agent already holds {bound} processes, its bound")
}

pub(crate) fn empty_argv() -> String {
    "argv is empty".to_owned()
}

pub(crate) fn too_many_args(count: usize) -> String {
    format!("argv has {count} entries, more than the bound of {MAX_ARGS}")
}

pub(crate) fn nul(what: &str) -> String {
    format!("{what} contains a NUL byte")
}

pub(crate) fn env_name(name: &str) -> String {
    format!("environment variable name {name:?} is empty or holds '=' or a NUL byte")
}

pub(crate) fn keep(keep: u64) -> String {
    format!("keep of {keep} bytes is outside the bound of 1 to {MAX_KEEP} bytes")
}

pub(crate) fn key_length(len: usize) -> String {
    format!("idempotency key of {len} bytes is outside the bound of 1 to {MAX_KEY} bytes")
}

pub(crate) fn tty_size() -> String {
    "a terminal must be at least 1 row by 1 column".to_owned()
}

pub(crate) fn tty_stdin() -> String {
    "a process with a terminal reads its terminal: stdin must not be piped".to_owned()
}

pub(crate) fn hold_tty() -> String {
    "a process with a terminal cannot hold its output (hold is for pipes)".to_owned()
}

pub(crate) fn not_a_directory(cwd: &str) -> String {
    format!("cwd {cwd:?} is not a directory")
}

pub(crate) fn spawn_failed(program: &str, error: &std::io::Error) -> String {
    format!("cannot start {program:?}: {error}")
}

pub(crate) fn signal(name: &str) -> String {
    format!("unknown signal {name:?}")
}

pub(crate) fn base64() -> String {
    "stdin data is not valid base64".to_owned()
}

pub(crate) fn version(version: u32) -> String {
    format!("protocol version {version} is not supported: this agent speaks version {VERSION}")
}

pub(crate) fn hello_first() -> String {
    "the first request on a connection must be hello".to_owned()
}

pub(crate) fn hello_again() -> String {
    "hello was already sent on this connection".to_owned()
}

pub(crate) fn in_flight(id: u64) -> String {
    format!("request id {id} is already in flight on this connection")
}

pub(crate) fn too_many_in_flight(bound: usize) -> String {
    format!("more than {bound} requests in flight on this connection")
}

pub(crate) fn malformed(error: &serde_json::Error) -> String {
    format!("malformed request: {error}")
}

pub(crate) fn data_from_client() -> String {
    "a client sends no data frames".to_owned()
}

pub(crate) fn connect_not_alone() -> String {
    "connect must be the only request on its connection, right after hello".to_owned()
}

pub(crate) fn too_many_tunnels() -> String {
    format!("too many connect tunnels (the limit is {MAX_TUNNELS})")
}

pub(crate) fn cannot_connect(port: u16, error: &dyn std::fmt::Display) -> String {
    format!("cannot connect to 127.0.0.1:{port} in the lease: {error}")
}

pub(crate) fn user_form(user: &str) -> String {
    format!("user {user:?}: it is not UID, UID:GID, NAME or NAME:GROUP")
}

pub(crate) fn no_user(user: &str) -> String {
    format!("user {user:?}: no such user")
}

pub(crate) fn no_group(user: &str) -> String {
    format!("user {user:?}: no such group")
}

pub(crate) fn user_cannot_switch(user: &str, uid: u32) -> String {
    format!("user {user:?}: the supervisor runs as uid {uid} and cannot start a process as another user")
}

pub(crate) fn evicted(id: u64, bound: u64) -> String {
    format!(
        "process {id} ended and was evicted: the agent holds at most {bound} processes and evicts the oldest ended first"
    )
}

//! # envrt-plugin-protocol
//!
//! The plugin worker protocol of `@paperclipai/plugin-sdk` ([`SDK_VERSION`]) as envrt
//! speaks it, in one place for both sides: the host (`envrt-driver-plugin-sandbox`) and
//! the reference worker (`envrt-sandbox-worker`). The repository's
//! `docs/plugin-protocol.md` describes it in prose; a test keeps that page and
//! [`methods`], [`notifications`] and [`codes`] in step.
//!
//! - [`envelope`]: JSON-RPC 2.0 requests, responses, errors and notifications, and the
//!   line builders (one message per `\n`-terminated line);
//! - [`line`](mod@line): the one line parser, with the two classifications built on it (what a host
//!   reads from a worker, and what a worker reads from a host, with the SDK's exact
//!   parse-error texts);
//! - [`reader`]: the one bounded line reader both sides read the other's stream with;
//! - [`error_data`]: a worker refusal's stable kind and fields, carried in the error's
//!   `data` beside its text, and the code each refusal is answered with;
//! - [`methods`], [`notifications`], [`codes`]: every name and number, each listed once;
//! - [`handshake`], [`environment`], [`setup`], [`duplex`], [`login`]: typed params and
//!   results of every environment, duplex and login verb (the SDK's and envrt's
//!   extensions);
//! - [`dataplane`]: the `envrt.dataPlane` extension's binary frames, which carry duplex
//!   bytes on a socket of their own when host and worker agree at `initialize`. The SDK's plugin-level verbs ([`methods::PLUGIN`]: `onEvent`,
//!   `runJob`, ...) are named, not typed: envrt neither sends nor serves them.
//!
//! Params types serialize exactly as the SDK's TypeScript shapes (camelCase, optional
//! fields left out when absent) and deserialize leniently: unknown fields are ignored
//! and the common driver fields default, so a worker can answer a host that sends less.

pub mod codes;
pub mod dataplane;
pub mod duplex;
pub mod envelope;
pub mod environment;
pub mod error_data;
#[doc(hidden)]
pub mod fuzzing;
pub mod handshake;
pub mod line;
pub mod login;
pub mod methods;
pub mod notifications;
pub mod reader;
pub mod setup;

pub use envelope::{
    ErrorObject, Invocation, InvocationScope, Request, RequestId, error_response_line, mint_traceparent,
    notification_line, request_line, response_line,
};
pub use error_data::ErrorData;
pub use line::{HostMessage, Incoming, LineError};
pub use reader::{LineRead, LineReader};

/// The JSON-RPC version string carried by every message.
pub const JSONRPC_VERSION: &str = "2.0";

/// The `@paperclipai/plugin-sdk` version whose `dist/protocol.d.ts` these types follow.
pub const SDK_VERSION: &str = "2026.916.1";

pub use duplex::{decode_strict_base64, encode_base64};
pub use envelope::to_value;

// The names the host used before this crate existed, kept at the root.
pub use duplex::{DataParams as DuplexDataParams, ExitParams as DuplexExitParams, OpenResult as DuplexOpenResult};
pub use handshake::{ExecuteLogParams, InitializeResult};

//! # envrt-serve
//!
//! `envrt serve`: the runtime as a long-running service. Every facade operation is an
//! HTTP/JSON route under `/v1/` (environments, leases and their network policies, execute,
//! sync as tar streams, duplex over WebSocket, templates, capabilities, process sessions
//! with their output as NDJSON from per-stream offsets), described by the OpenAPI 3.1
//! document [`OPENAPI`] (`crates/serve/openapi.json`), which a test holds in step with
//! [`routes`].
//!
//! Every request carries a bearer token ([`auth`]) bound to one tenant and a set of
//! operations; it is authenticated before routing and authorised before any driver is
//! touched, and each tenant sees only its own leases and templates, another tenant's
//! answering exactly as an unknown one. Errors are `{"kind", "message"}` with the runtime's
//! stable kinds and exact texts ([`error`]). Mutating calls log one audit line each
//! (target `envrt_serve::audit`: token id, tenant, operation, lease, process, outcome
//! kind).
//!
//! The service holds no state of its own beyond the store: leases, templates and tokens
//! live in the SQLite store and the drivers' resources (a lease's processes in its
//! supervisor), so a restarted service carries on with them. The listener ([`listen`]) is
//! a unix socket (mode 0600) by default, TCP on loopback, or TLS beyond loopback. See
//! `docs/serve.md`.

#![forbid(unsafe_code)]

pub mod auth;
pub mod error;
pub mod listen;
mod routes;
mod state;

pub use error::{ApiError, ErrorBody};
pub use listen::{Bound, Endpoint, stop_signal};
pub use routes::{
    LABELS_MESSAGE, MAX_LABELS, NOT_A_TERMINAL_MESSAGE, Routes, SELECTOR_MESSAGE, ZERO_IDLE_MESSAGE, app, routes,
};
pub use state::{AuditSink, Limits, Service};

/// The OpenAPI 3.1 document of every route.
pub const OPENAPI: &str = include_str!("../openapi.json");

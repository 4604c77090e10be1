//! The `/v1/` router: one table of routes (path, methods, handler) that the router is
//! built from and the OpenAPI test reads, the authentication layer every request passes
//! first, and the extractors that turn a malformed request into the error body.
//!
//! Routes are grouped by resource (`environments`, `leases`, `lifecycle`, `network`, `execute`,
//! `files`, `duplex`, `templates`, `processes`, `terminal`); each group adds its rows to
//! [`routes`].

mod duplex;
mod environments;
mod execute;
mod files;
mod leases;
mod lifecycle;
mod network;
mod processes;
mod templates;
mod terminal;
pub use leases::{LABELS_MESSAGE, MAX_LABELS};
pub use lifecycle::{SELECTOR_MESSAGE, ZERO_IDLE_MESSAGE};
pub use terminal::NOT_A_TERMINAL_MESSAGE;

use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, QueryRejection};
use axum::extract::{Query, Request, State};
use axum::http::{Method, StatusCode, Uri};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::MethodRouter;
use serde::de::DeserializeOwned;

use crate::auth::{Principal, authenticate};
use crate::error::ApiError;
use crate::state::Service;
use processes::ProcessRef;

/// The routes: the router and, for each path, its methods.
pub struct Routes {
    router: Router<Arc<Service>>,
    /// `(path, methods)` in the order added; methods upper-case.
    pub table: Vec<(&'static str, Vec<&'static str>)>,
}

impl Routes {
    fn route(mut self, path: &'static str, methods: &[&'static str], handler: MethodRouter<Arc<Service>>) -> Self {
        self.router = self.router.route(path, handler);
        self.table.push((path, methods.to_vec()));
        self
    }
}

/// Every route of the service.
pub fn routes() -> Routes {
    use axum::routing::{delete, get, post, put};
    let routes = Routes {
        router: Router::new(),
        table: Vec::new(),
    };
    routes
        .route("/v1/environments", &["GET"], get(environments::list))
        .route("/v1/environments/{id}", &["GET"], get(environments::show))
        .route(
            "/v1/environments/{id}/capabilities",
            &["GET"],
            get(environments::capabilities),
        )
        .route("/v1/environments/{id}/templates", &["GET"], get(templates::list))
        .route(
            "/v1/environments/{id}/templates/{template}",
            &["DELETE"],
            delete(templates::delete),
        )
        .route("/v1/leases", &["GET", "POST"], get(leases::list).post(leases::acquire))
        .route(
            "/v1/leases/{id}",
            &["GET", "DELETE"],
            get(leases::show).delete(leases::destroy),
        )
        .route("/v1/leases/{id}/release", &["POST"], post(leases::release))
        .route("/v1/leases/{id}/resume", &["POST"], post(leases::resume))
        .route(
            "/v1/leases/release-matching",
            &["POST"],
            post(lifecycle::release_matching),
        )
        .route("/v1/leases/{id}/capabilities", &["GET"], get(leases::capabilities))
        .route("/v1/leases/{id}/pause", &["POST"], post(lifecycle::pause))
        .route("/v1/leases/{id}/unpause", &["POST"], post(lifecycle::unpause))
        .route("/v1/leases/{id}/fork", &["POST"], post(lifecycle::fork))
        .route("/v1/leases/{id}/keep-alive", &["POST"], post(lifecycle::keep_alive))
        .route("/v1/leases/{id}/idle-timeout", &["PUT"], put(lifecycle::idle_timeout))
        .route("/v1/leases/{id}/execute", &["POST"], post(execute::buffered))
        .route("/v1/leases/{id}/execute/stream", &["POST"], post(execute::streamed))
        .route(
            "/v1/leases/{id}/files",
            &["GET", "PUT"],
            get(files::sync_out).put(files::sync_in),
        )
        .route("/v1/leases/{id}/duplex", &["GET"], get(duplex::open))
        .route("/v1/leases/{id}/templates", &["POST"], post(templates::capture))
        .route("/v1/leases/{id}/network", &["PUT"], put(network::update))
        .route(
            "/v1/leases/{id}/processes",
            &["GET", "POST"],
            get(processes::list).post(processes::spawn),
        )
        .route("/v1/leases/{id}/processes/{n}", &["GET"], get(processes::show))
        .route("/v1/leases/{id}/processes/{n}/output", &["GET"], get(processes::output))
        .route(
            "/v1/leases/{id}/processes/{n}/stdin",
            &["POST"],
            post(processes::write_stdin),
        )
        .route(
            "/v1/leases/{id}/processes/{n}/stdin/close",
            &["POST"],
            post(processes::close_stdin),
        )
        .route(
            "/v1/leases/{id}/processes/{n}/signal",
            &["POST"],
            post(processes::signal),
        )
        .route(
            "/v1/leases/{id}/processes/{n}/resize",
            &["POST"],
            post(processes::resize),
        )
        .route("/v1/leases/{id}/processes/{n}/wait", &["GET"], get(processes::wait))
        .route(
            "/v1/leases/{id}/processes/{n}/terminal",
            &["GET"],
            get(terminal::attach),
        )
}

/// The whole application: every route behind authentication, with the error body for
/// unknown routes and methods.
pub fn app(service: Arc<Service>) -> Router {
    routes()
        .router
        .fallback(unknown_route)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(axum::middleware::from_fn_with_state(
            Arc::clone(&service),
            authenticated,
        ))
        .layer(axum::extract::DefaultBodyLimit::max(service.limits.max_json_bytes))
        .with_state(service)
}

/// Authenticates every request before routing reaches a handler (and so a driver).
async fn authenticated(State(service): State<Arc<Service>>, mut request: Request, next: Next) -> Response {
    let header = request
        .headers()
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    match authenticate(service.tokens(), header.as_deref()).await {
        Ok(principal) => {
            request.extensions_mut().insert(principal);
            next.run(request).await
        }
        Err(error) => error.into_response(),
    }
}

async fn unknown_route(method: Method, uri: Uri) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "not_found",
        format!("No route {method} {}.", uri.path()),
    )
}

async fn method_not_allowed(method: Method, uri: Uri) -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        format!("Method {method} is not allowed on {}.", uri.path()),
    )
}

/// The principal the authentication layer stored.
fn principal(request_principal: Option<axum::Extension<Principal>>) -> Result<Principal, ApiError> {
    request_principal
        .map(|axum::Extension(p)| p)
        .ok_or_else(ApiError::unauthenticated)
}

/// A query parsed into `T`, or 400 `invalid_request`: `Invalid query: {why}`.
fn query<T>(q: Result<Query<T>, QueryRejection>) -> Result<T, ApiError> {
    q.map(|Query(q)| q)
        .map_err(|e| ApiError::invalid(format!("Invalid query: {}", e.body_text())))
}

/// A body of at most [`Limits::max_json_bytes`](crate::Limits), as bytes.
fn body_bytes(service: &Service, body: Result<Bytes, BytesRejection>) -> Result<Bytes, ApiError> {
    let limit = service.limits.max_json_bytes;
    let bytes = body.map_err(|e| too_large_or_invalid(e.status(), limit, e.body_text()))?;
    if bytes.len() > limit {
        return Err(too_large(limit));
    }
    Ok(bytes)
}

/// A JSON body of at most [`Limits::max_json_bytes`](crate::Limits), parsed into `T`;
/// an empty body parses as `{}`.
fn json_body<T: DeserializeOwned>(service: &Service, body: Result<Bytes, BytesRejection>) -> Result<T, ApiError> {
    let bytes = body_bytes(service, body)?;
    let bytes: &[u8] = if bytes.iter().all(u8::is_ascii_whitespace) {
        b"{}"
    } else {
        &bytes
    };
    serde_json::from_slice(bytes).map_err(|e| ApiError::invalid(format!("Invalid JSON body: {e}")))
}

/// 413 `body_too_large`: `The request body is larger than {limit} bytes.`
fn too_large(limit: usize) -> ApiError {
    ApiError::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        "body_too_large",
        format!("The request body is larger than {limit} bytes."),
    )
}

fn too_large_or_invalid(status: StatusCode, limit: usize, text: String) -> ApiError {
    if status == StatusCode::PAYLOAD_TOO_LARGE {
        too_large(limit)
    } else {
        ApiError::invalid(format!("Cannot read the request body: {text}"))
    }
}

/// One audit line for a mutating call: who (token id and tenant), what, which lease, and
/// the outcome's kind. Never a token, a secret, an environment value or a command line.
fn audit(service: &Service, who: &Principal, what: &str, lease: Option<&str>, outcome: &Result<(), &ApiError>) {
    audit_line(service, who, what, lease, None, outcome);
}

/// [`audit`] of a call on one process: its lease, and its id (`{lease}/{n}`) as `process`.
fn audit_process(service: &Service, who: &Principal, what: &str, id: &ProcessRef, outcome: &Result<(), &ApiError>) {
    audit_line(service, who, what, Some(&id.lease), Some(&id.id), outcome);
}

fn audit_line(
    service: &Service,
    who: &Principal,
    what: &str,
    lease: Option<&str>,
    process: Option<&str>,
    outcome: &Result<(), &ApiError>,
) {
    let outcome = match outcome {
        Ok(()) => "ok",
        Err(error) => error.body.kind.as_str(),
    };
    let mut line = serde_json::json!({
        "audit": what,
        "who": who.token_id,
        "tenant": who.tenant,
        "lease": lease,
        "outcome": outcome,
    });
    if let Some(process) = process {
        line["process"] = process.into();
    }
    service.audit_line(&line);
    tracing::info!(
        target: "envrt_serve::audit",
        who = %who.token_id,
        tenant = %who.tenant,
        what,
        lease = lease.unwrap_or("-"),
        process = process.unwrap_or("-"),
        outcome,
        "audit"
    );
}

/// Runs `f`, audits its outcome, and returns it.
async fn audited<T, F>(service: &Service, who: &Principal, what: &str, lease: Option<&str>, f: F) -> Result<T, ApiError>
where
    F: Future<Output = Result<T, ApiError>>,
{
    let result = f.await;
    audit(service, who, what, lease, &result.as_ref().map(|_| ()));
    result
}

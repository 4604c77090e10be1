//! Process sessions (contract section 9): spawn a process on a lease that outlives the
//! request (and the service), list a lease's processes, show one, read its output from
//! per-stream offsets, feed and close its stdin, signal it, resize its terminal, wait for
//! it.
//!
//! A process id is `{lease}/{n}`; its routes take it as two path segments,
//! `/v1/leases/{id}/processes/{n}/...`, so no client has to escape the `/`. The facade
//! finds the process through the tenant-bound runtime, so another tenant's process (and a
//! malformed `n`) answers exactly as an unknown one: `Process "{lease}/{n}" was not found.`
//!
//! `GET .../output?stdout=N&stderr=N&tty=N` answers chunked `application/x-ndjson`: one
//! line per chunk, `{"stream": "stdout"|"stderr"|"tty", "offset": N, "data": BASE64}`
//! (`offset` is the chunk's first byte, absolute since the start), live until the
//! process ends, then `{"exit": PROCESS}` with its final state; or, in the middle, one
//! last `{"error": ERROR_BODY}` (an offset dropped while reading, the service stopping).
//! A stream left out of the query starts at its oldest byte still held. Every refusal
//! known before the first chunk (unknown process, an offset no longer held or past the
//! end) answers with its status instead.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::body::{Body, Bytes};
use axum::extract::rejection::{BytesRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use envrt::core::ProcessOutputStream;
use envrt::core::process::{Offsets, OutputEvent, ProcessInfo, ProcessStatus, SpawnRequest, StdinMode, TtySize};
use envrt::{EnvValue, RuntimeError, Secret};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::{audit_process, body_bytes, json_body, principal, query};
use crate::auth::Principal;
use crate::error::ApiError;
use crate::state::Service;

type Who = Option<axum::Extension<Principal>>;

/// A process as its routes name it: its lease, and its id `{lease}/{n}` as given (the
/// facade parses it).
pub(super) struct ProcessRef {
    pub(super) lease: String,
    pub(super) id: String,
}

impl ProcessRef {
    pub(super) fn new(lease: String, number: &str) -> ProcessRef {
        ProcessRef {
            id: format!("{lease}/{number}"),
            lease,
        }
    }
}

type ProcessPath = Path<(String, String)>;

fn process_ref(Path((lease, number)): ProcessPath) -> ProcessRef {
    ProcessRef::new(lease, &number)
}

/// `POST /v1/leases/{id}/processes`: the facade's `SpawnRequest`, its durations in
/// milliseconds and its environment values kept secret.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct SpawnBody {
    argv: Vec<String>,
    cwd: Option<String>,
    user: Option<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    #[serde(default)]
    stdin: StdinMode,
    tty: Option<TtySize>,
    keep: Option<u64>,
    timeout_ms: Option<u64>,
    idempotency_key: Option<String>,
}

impl SpawnBody {
    fn into_request(self) -> SpawnRequest {
        SpawnRequest {
            argv: self.argv,
            cwd: self.cwd,
            user: self.user,
            env: self
                .env
                .into_iter()
                .map(|(k, v)| (k, EnvValue::Secret(Secret::new(v))))
                .collect(),
            stdin: self.stdin,
            tty: self.tty,
            keep: self.keep,
            timeout: self.timeout_ms.map(Duration::from_millis),
            idempotency_key: self.idempotency_key,
        }
    }
}

/// `GET .../output`: where each stream starts.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct OutputQuery {
    stdout: Option<u64>,
    stderr: Option<u64>,
    tty: Option<u64>,
}

/// `POST .../signal`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct SignalBody {
    #[serde(default = "term")]
    signal: String,
}

fn term() -> String {
    "TERM".to_owned()
}

/// `POST .../resize`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ResizeBody {
    rows: u16,
    cols: u16,
}

/// `GET .../wait?timeoutMs=N`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct WaitQuery {
    timeout_ms: Option<u64>,
}

/// Runs the facade's call `f` on process `id`, audits its outcome as `what`, and returns it.
async fn audited<T>(
    service: &Service,
    who: &Principal,
    what: &str,
    id: &ProcessRef,
    f: impl Future<Output = Result<T, RuntimeError>>,
) -> Result<T, ApiError> {
    let result = f.await.map_err(ApiError::from);
    audit_process(service, who, what, id, &result.as_ref().map(|_| ()));
    result
}

pub(super) async fn spawn(
    State(service): State<Arc<Service>>,
    who: Who,
    Path(lease): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Result<(StatusCode, Json<ProcessInfo>), ApiError> {
    let who = principal(who)?;
    who.require("processes:write")?;
    let request = json_body::<SpawnBody>(&service, body)?.into_request();
    let result = async {
        let runtime = service.runtime_for(&who.tenant);
        service.check_process_limit(&who.tenant, &runtime).await?;
        Ok::<_, ApiError>(runtime.spawn(&lease, request).await?)
    }
    .await;
    let number = result
        .as_ref()
        .map_or_else(|_| "-".to_owned(), |info| info.id.number.to_string());
    let id = ProcessRef::new(lease, &number);
    audit_process(&service, &who, "process.spawn", &id, &result.as_ref().map(|_| ()));
    Ok((StatusCode::CREATED, Json(result?)))
}

pub(super) async fn list(
    State(service): State<Arc<Service>>,
    who: Who,
    Path(lease): Path<String>,
) -> Result<Json<Vec<ProcessInfo>>, ApiError> {
    let who = principal(who)?;
    who.require("processes:read")?;
    Ok(Json(service.runtime_for(&who.tenant).processes(&lease).await?))
}

pub(super) async fn show(
    State(service): State<Arc<Service>>,
    who: Who,
    path: ProcessPath,
) -> Result<Json<ProcessInfo>, ApiError> {
    let who = principal(who)?;
    who.require("processes:read")?;
    let id = process_ref(path).id;
    Ok(Json(service.runtime_for(&who.tenant).process(&id).await?))
}

pub(super) async fn output(
    State(service): State<Arc<Service>>,
    who: Who,
    path: ProcessPath,
    q: Result<Query<OutputQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let who = principal(who)?;
    who.require("processes:read")?;
    let q = query(q)?;
    let from = Offsets {
        stdout: q.stdout,
        stderr: q.stderr,
        tty: q.tty,
    };
    let id = process_ref(path).id;
    let output = service.runtime_for(&who.tenant).output(&id, &from).await?;
    let lines = futures::stream::unfold(Some((output, service.stopping())), next_line);
    Ok((
        [(axum::http::header::CONTENT_TYPE, "application/x-ndjson")],
        Body::from_stream(lines),
    )
        .into_response())
}

type Reading = (ProcessOutputStream, CancellationToken);

/// The next NDJSON line of an output stream, and what is left to read (nothing after the
/// exit, an error or the service's stop).
async fn next_line(state: Option<Reading>) -> Option<(Result<Bytes, std::convert::Infallible>, Option<Reading>)> {
    let (mut output, stopping) = state?;
    let event = tokio::select! {
        event = output.next() => event.map_err(ApiError::from),
        () = stopping.cancelled() => Err(ApiError::stopping()),
    };
    let (line, rest): (Value, _) = match event {
        Ok(Some(OutputEvent::Chunk(chunk))) => (
            json!({
                "stream": chunk.stream,
                "offset": chunk.offset,
                "data": base64::engine::general_purpose::STANDARD.encode(&chunk.bytes),
            }),
            Some((output, stopping)),
        ),
        Ok(Some(OutputEvent::Exit(info))) => (json!({ "exit": info }), None),
        Ok(None) => return None,
        Err(error) => (json!({ "error": error.body }), None),
    };
    Some((Ok(Bytes::from(format!("{line}\n"))), rest))
}

pub(super) async fn write_stdin(
    State(service): State<Arc<Service>>,
    who: Who,
    path: ProcessPath,
    body: Result<Bytes, BytesRejection>,
) -> Result<StatusCode, ApiError> {
    let who = principal(who)?;
    who.require("processes:write")?;
    let bytes = body_bytes(&service, body)?;
    let id = process_ref(path);
    let runtime = service.runtime_for(&who.tenant);
    audited(
        &service,
        &who,
        "process.stdin",
        &id,
        runtime.write_stdin(&id.id, &bytes),
    )
    .await?;
    Ok(StatusCode::NO_CONTENT)
}

pub(super) async fn close_stdin(
    State(service): State<Arc<Service>>,
    who: Who,
    path: ProcessPath,
) -> Result<StatusCode, ApiError> {
    let who = principal(who)?;
    who.require("processes:write")?;
    let id = process_ref(path);
    let runtime = service.runtime_for(&who.tenant);
    audited(&service, &who, "process.stdin.close", &id, runtime.close_stdin(&id.id)).await?;
    Ok(StatusCode::NO_CONTENT)
}

pub(super) async fn signal(
    State(service): State<Arc<Service>>,
    who: Who,
    path: ProcessPath,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<ProcessInfo>, ApiError> {
    let who = principal(who)?;
    who.require("processes:write")?;
    let body: SignalBody = json_body(&service, body)?;
    let id = process_ref(path);
    let runtime = service.runtime_for(&who.tenant);
    let signalled = runtime.signal(&id.id, &body.signal);
    Ok(Json(audited(&service, &who, "process.signal", &id, signalled).await?))
}

pub(super) async fn resize(
    State(service): State<Arc<Service>>,
    who: Who,
    path: ProcessPath,
    body: Result<Bytes, BytesRejection>,
) -> Result<StatusCode, ApiError> {
    let who = principal(who)?;
    who.require("processes:write")?;
    let body: ResizeBody = json_body(&service, body)?;
    let id = process_ref(path);
    let runtime = service.runtime_for(&who.tenant);
    let resized = runtime.resize(&id.id, body.rows, body.cols);
    audited(&service, &who, "process.resize", &id, resized).await?;
    Ok(StatusCode::NO_CONTENT)
}

pub(super) async fn wait(
    State(service): State<Arc<Service>>,
    who: Who,
    path: ProcessPath,
    q: Result<Query<WaitQuery>, QueryRejection>,
) -> Result<Json<ProcessStatus>, ApiError> {
    let who = principal(who)?;
    who.require("processes:read")?;
    let timeout = query(q)?.timeout_ms.map(Duration::from_millis);
    let id = process_ref(path).id;
    let runtime = service.runtime_for(&who.tenant);
    let stopping = service.stopping();
    let status = tokio::select! {
        status = runtime.wait_process(&id, timeout) => status?,
        () = stopping.cancelled() => ProcessStatus::Running,
    };
    Ok(Json(status))
}

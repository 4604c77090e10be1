//! Execute: buffered (`POST .../execute`, one JSON result) and streamed (`POST
//! .../execute/stream`, chunked `application/x-ndjson`: one line per output chunk,
//! `{"stream": "stdout"|"stderr", "data": BASE64}`, then one last line, `{"result":
//! RESULT}` without the captured output, or `{"error": ERROR_BODY}`).
//!
//! Environment values are passed to the runtime as secrets, so no log line of the
//! runtime shows them.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::body::{Body, Bytes};
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use envrt::{EnvValue, ExecuteRequest, ExecuteResult, OutputKeep, OutputStream, RuntimeError, Secret};
use serde::Deserialize;
use serde_json::{Value, json};

use super::{audit, json_body, principal};
use crate::auth::Principal;
use crate::error::ApiError;
use crate::state::Service;

type Who = Option<axum::Extension<Principal>>;

/// The request body of both execute routes.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct ExecuteBody {
    command: String,
    #[serde(default)]
    args: Vec<String>,
    cwd: Option<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    stdin: Option<String>,
    stdin_base64: Option<String>,
    timeout_ms: Option<u64>,
    max_output_bytes: Option<usize>,
    #[serde(default)]
    keep: OutputKeep,
    user: Option<String>,
}

impl ExecuteBody {
    fn into_request(self) -> Result<ExecuteRequest, ApiError> {
        let stdin = match (self.stdin, self.stdin_base64) {
            (Some(_), Some(_)) => return Err(ApiError::invalid("Give stdin or stdinBase64, not both.")),
            (Some(text), None) => Some(text.into_bytes()),
            (None, Some(b64)) => Some(
                base64::engine::general_purpose::STANDARD
                    .decode(b64)
                    .map_err(|e| ApiError::invalid(format!("stdinBase64 is not base64: {e}")))?,
            ),
            (None, None) => None,
        };
        let mut request = ExecuteRequest::new(self.command, self.args);
        request.cwd = self.cwd;
        request.env = self
            .env
            .into_iter()
            .map(|(k, v)| (k, EnvValue::Secret(Secret::new(v))))
            .collect();
        request.stdin = stdin;
        request.timeout = self.timeout_ms.map(Duration::from_millis);
        request.max_output_bytes = self.max_output_bytes;
        request.keep = self.keep;
        request.user = self.user;
        Ok(request)
    }
}

/// One stream's output: text when it is UTF-8, else base64 (as `envrt exec --json`).
fn output(bytes: &[u8]) -> (Value, &'static str) {
    match std::str::from_utf8(bytes) {
        Ok(text) => (text.into(), "utf8"),
        Err(_) => (base64::engine::general_purpose::STANDARD.encode(bytes).into(), "base64"),
    }
}

/// The result document (the same fields as `envrt exec --json`).
pub(crate) fn result_json(result: &ExecuteResult, with_output: bool) -> Value {
    let mut doc = json!({
        "exitCode": result.exit_code,
        "signal": result.signal,
        "timedOut": result.timed_out,
        "stdoutTruncated": result.stdout_truncated,
        "stderrTruncated": result.stderr_truncated,
        "durationMs": result.duration.as_secs_f64() * 1000.0,
    });
    if with_output {
        let (stdout, stdout_encoding) = output(&result.stdout);
        let (stderr, stderr_encoding) = output(&result.stderr);
        doc["stdout"] = stdout;
        doc["stdoutEncoding"] = stdout_encoding.into();
        doc["stderr"] = stderr;
        doc["stderrEncoding"] = stderr_encoding.into();
    }
    doc
}

pub(super) async fn buffered(
    State(service): State<Arc<Service>>,
    who: Who,
    Path(id): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, ApiError> {
    let who = principal(who)?;
    who.require("execute")?;
    let request = json_body::<ExecuteBody>(&service, body)?.into_request()?;
    let runtime = service.runtime_for(&who.tenant);
    let result = runtime.execute(&id, request).await.map_err(ApiError::from);
    audit(&service, &who, "execute", Some(&id), &result.as_ref().map(|_| ()));
    Ok(Json(result_json(&result?, true)))
}

pub(super) async fn streamed(
    State(service): State<Arc<Service>>,
    who: Who,
    Path(id): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let who = principal(who)?;
    who.require("execute")?;
    let mut request = json_body::<ExecuteBody>(&service, body)?.into_request()?;
    let runtime = service.runtime_for(&who.tenant);
    // An unknown (or another tenant's) lease answers with its status, not inside a stream.
    if runtime.lease(&id).await?.is_none() {
        return Err(RuntimeError::LeaseNotFound { id }.into());
    }
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<Result<Bytes, std::io::Error>>();
    let sink_tx = tx.clone();
    request.sink = Some(Arc::new(move |stream: OutputStream, chunk: &[u8]| {
        let line = json!({
            "stream": stream,
            "data": base64::engine::general_purpose::STANDARD.encode(chunk),
        });
        let _ = sink_tx.send(Ok(Bytes::from(format!("{line}\n"))));
    }));
    tokio::spawn(async move {
        let result = runtime.execute(&id, request).await.map_err(ApiError::from);
        audit(&service, &who, "execute", Some(&id), &result.as_ref().map(|_| ()));
        let last = match result {
            Ok(result) => json!({ "result": result_json(&result, false) }),
            Err(error) => json!({ "error": error.body }),
        };
        let _ = tx.send(Ok(Bytes::from(format!("{last}\n"))));
    });
    let stream = tokio_stream_from(rx);
    Ok((
        [(axum::http::header::CONTENT_TYPE, "application/x-ndjson")],
        Body::from_stream(stream),
    )
        .into_response())
}

/// The receiving end of a channel as a stream of body chunks.
fn tokio_stream_from<T: Send + 'static>(
    mut rx: tokio::sync::mpsc::UnboundedReceiver<T>,
) -> impl futures::Stream<Item = T> + Send + 'static {
    futures::stream::poll_fn(move |cx| rx.poll_recv(cx))
}

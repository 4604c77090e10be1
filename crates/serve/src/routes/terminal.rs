//! A process's terminal over WebSocket: `GET /v1/leases/{id}/processes/{n}/terminal
//! [?from=N]` attaches to a process spawned with a terminal (`tty`) and upgrades once the
//! process is found, has a terminal and its output is open from `from` (default: its
//! oldest byte held). Every refusal before that answers as an ordinary error body: an
//! unknown (or another tenant's) process, `Process "{id}" has no terminal to attach to.`
//! (409 `process_no_tty`), an offset no longer held or past the end, and a request without
//! an upgrade (`This route needs a WebSocket upgrade.`, 400).
//!
//! Then binary messages from the client are written to the terminal (at most
//! [`Limits::max_json_bytes`](crate::Limits) each); a text message `{"type": "resize",
//! "rows": R, "cols": C}` resizes it; binary messages to the client are the terminal's
//! output, in order from `from`; the last message is the text `{"type": "exit",
//! "process": PROCESS}` (the process's final record) or `{"type": "error", "kind",
//! "message"}` (a refused write or resize, an offset dropped while reading, the service
//! stopping) before the close. A text message that is neither is refused with
//! `A terminal message is binary input or {"type":"resize","rows":R,"cols":C}.` (kind
//! `invalid_request`). A client that closes or drops the socket detaches: the process
//! keeps running, and a later attach reads on from any offset still held.

use std::sync::Arc;

use axum::extract::rejection::QueryRejection;
use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use envrt::EnvironmentRuntime;
use envrt::core::ProcessOutputStream;
use envrt::core::process::{Offsets, OutputEvent};
use futures::{SinkExt as _, StreamExt as _};
use serde::Deserialize;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::{audit_process, principal, query};
use crate::auth::Principal;
use crate::error::ApiError;
use crate::state::Service;

use super::processes::ProcessRef;

type Who = Option<axum::Extension<Principal>>;

/// The exact text of a text message that is not a resize.
pub const NOT_A_TERMINAL_MESSAGE: &str =
    "A terminal message is binary input or {\"type\":\"resize\",\"rows\":R,\"cols\":C}.";

/// `GET .../terminal?from=N`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct TerminalQuery {
    from: Option<u64>,
}

/// A control message from the client.
#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "camelCase", deny_unknown_fields)]
enum Control {
    Resize { rows: u16, cols: u16 },
}

pub(super) async fn attach(
    State(service): State<Arc<Service>>,
    who: Who,
    Path((lease, number)): Path<(String, String)>,
    q: Result<Query<TerminalQuery>, QueryRejection>,
    upgrade: Result<WebSocketUpgrade, axum::extract::ws::rejection::WebSocketUpgradeRejection>,
) -> Result<Response, ApiError> {
    let who = principal(who)?;
    who.require("processes:write")?;
    let q = query(q)?;
    let id = ProcessRef::new(lease, &number);
    let runtime = service.runtime_for(&who.tenant);
    let opened = async {
        let info = runtime.process(&id.id).await?;
        if !info.tty {
            return Err(ApiError::new(
                StatusCode::CONFLICT,
                "process_no_tty",
                format!("Process \"{}\" has no terminal to attach to.", id.id),
            ));
        }
        let upgrade = upgrade.map_err(|_| ApiError::invalid("This route needs a WebSocket upgrade."))?;
        let from = Offsets {
            tty: q.from,
            ..Offsets::default()
        };
        Ok((upgrade, runtime.output(&id.id, &from).await?))
    }
    .await;
    audit_process(&service, &who, "process.attach", &id, &opened.as_ref().map(|_| ()));
    let (upgrade, output) = opened?;
    let stopping = service.stopping();
    // Small buffers: a terminal's frames are small, and a service holds many of them (the
    // 128 KiB defaults of each direction dominated the memory per open terminal).
    Ok(upgrade
        .max_message_size(service.limits.max_json_bytes)
        .read_buffer_size(8 * 1024)
        .write_buffer_size(0)
        .on_upgrade(move |socket| pump(socket, runtime, id.id, output, stopping)))
}

/// What ends a terminal session, as its last message.
fn last_message(error: ApiError) -> Message {
    let text = json!({ "type": "error", "kind": error.body.kind, "message": error.body.message });
    Message::Text(text.to_string().into())
}

async fn pump(
    socket: WebSocket,
    runtime: Arc<EnvironmentRuntime>,
    id: String,
    mut output: ProcessOutputStream,
    stopping: CancellationToken,
) {
    let (mut to_client, mut from_client) = socket.split();
    // The input side ends the session with an error it met (a refused write, a bad message).
    let (failed_tx, mut failed) = tokio::sync::oneshot::channel::<ApiError>();
    let input_id = id.clone();
    let reader = tokio::spawn(async move {
        while let Some(Ok(message)) = from_client.next().await {
            let outcome = match message {
                Message::Binary(data) => runtime.write_stdin(&input_id, &data).await.map_err(ApiError::from),
                Message::Text(text) => match serde_json::from_str::<Control>(&text) {
                    Ok(Control::Resize { rows, cols }) => {
                        runtime.resize(&input_id, rows, cols).await.map_err(ApiError::from)
                    }
                    Err(_) => Err(ApiError::invalid(NOT_A_TERMINAL_MESSAGE)),
                },
                Message::Close(_) => break,
                _ => Ok(()),
            };
            if let Err(error) = outcome {
                let _ = failed_tx.send(error);
                return;
            }
        }
    });
    let last = loop {
        let event = tokio::select! {
            event = output.next() => event.map_err(ApiError::from),
            failed = &mut failed => match failed {
                Ok(error) => Err(error),
                // The input side ended without an error: the client closed or dropped the
                // socket. Detach now, so the process's output stream is not held open.
                Err(_) => break None,
            },
            () = stopping.cancelled() => Err(ApiError::stopping()),
        };
        match event {
            Ok(Some(OutputEvent::Chunk(chunk))) => {
                if to_client.send(Message::Binary(chunk.bytes.into())).await.is_err() {
                    // The client went away: detach, the process runs on.
                    break None;
                }
            }
            Ok(Some(OutputEvent::Exit(info))) => {
                let text = json!({ "type": "exit", "process": info });
                break Some(Message::Text(text.to_string().into()));
            }
            Ok(None) => break None,
            Err(error) => break Some(last_message(error)),
        }
    };
    if let Some(last) = last {
        let _ = to_client.send(last).await;
        let _ = to_client.send(Message::Close(None)).await;
    }
    reader.abort();
}

//! Duplex over WebSocket: `GET /v1/leases/{id}/duplex?command=PROG&command=ARG...`
//! upgrades to a WebSocket once the channel is open (every refusal, from authentication
//! to `Sandbox lease does not grant the duplex command stream capability.`, answers as
//! an ordinary error body before the upgrade). Then binary messages from the client are
//! the command's stdin, and a text message `{"type": "closeInput"}` or `{"type":
//! "stop"}` half-closes or stops it; binary messages to the client are its output
//! (stdout and stderr together, in order), and the last message is the text `{"type":
//! "exit", "exitCode": N|null, "transportClosed": BOOL}` (or `{"type": "error", ...ERROR_BODY}`)
//! before the close. A client that closes or drops the socket stops the command.

use std::sync::Arc;

use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Path, RawQuery, State};
use axum::response::Response;
use envrt::DuplexChannel;
use futures::{SinkExt as _, StreamExt as _};
use serde_json::json;

use super::{audit, principal};
use crate::auth::Principal;
use crate::error::ApiError;
use crate::state::Service;

type Who = Option<axum::Extension<Principal>>;

/// The `command` values of the query, in order.
fn command(raw: Option<&str>) -> Result<Vec<String>, ApiError> {
    let pairs: Vec<(String, String)> =
        serde_urlencoded::from_str(raw.unwrap_or("")).map_err(|e| ApiError::invalid(format!("Invalid query: {e}")))?;
    let mut argv = Vec::new();
    for (key, value) in pairs {
        if key != "command" {
            return Err(ApiError::invalid(format!("Invalid query: unknown parameter \"{key}\"")));
        }
        argv.push(value);
    }
    Ok(argv)
}

pub(super) async fn open(
    State(service): State<Arc<Service>>,
    who: Who,
    Path(id): Path<String>,
    RawQuery(raw): RawQuery,
    upgrade: Result<WebSocketUpgrade, axum::extract::ws::rejection::WebSocketUpgradeRejection>,
) -> Result<Response, ApiError> {
    let who = principal(who)?;
    who.require("duplex")?;
    let argv = command(raw.as_deref())?;
    let upgrade = upgrade.map_err(|_| ApiError::invalid("This route needs a WebSocket upgrade."))?;
    let runtime = service.runtime_for(&who.tenant);
    let opened = runtime.open_duplex_channel(&id, &argv).await.map_err(ApiError::from);
    audit(&service, &who, "duplex.open", Some(&id), &opened.as_ref().map(|_| ()));
    let channel: Arc<dyn DuplexChannel> = Arc::from(opened?);
    Ok(upgrade.on_upgrade(move |socket| pump(socket, channel)))
}

async fn pump(socket: WebSocket, channel: Arc<dyn DuplexChannel>) {
    let (mut to_client, mut from_client) = socket.split();
    let input = Arc::clone(&channel);
    let reader = tokio::spawn(async move {
        // A client that closes the socket (or drops it) wants no more: the command is
        // stopped rather than left running for nobody.
        let mut gone = true;
        while let Some(Ok(message)) = from_client.next().await {
            let outcome = match message {
                Message::Binary(data) => input.write(&data).await,
                Message::Text(text) => match serde_json::from_str::<serde_json::Value>(&text)
                    .ok()
                    .and_then(|v| v["type"].as_str().map(str::to_owned))
                    .as_deref()
                {
                    Some("closeInput") => input.close_input().await,
                    Some("stop") => input.stop().await,
                    _ => Ok(()),
                },
                Message::Close(_) => break,
                _ => Ok(()),
            };
            if outcome.is_err() {
                gone = false;
                break;
            }
        }
        if gone {
            let _ = input.stop().await;
        }
    });
    let last = loop {
        match channel.read().await {
            Ok(Some(chunk)) => {
                if to_client.send(Message::Binary(chunk.into())).await.is_err() {
                    let _ = channel.stop().await;
                    break None;
                }
            }
            Ok(None) => break Some(channel.wait().await),
            Err(error) => break Some(Err(error)),
        }
    };
    if let Some(last) = last {
        let text = match last {
            Ok(exit) => json!({ "type": "exit", "exitCode": exit.exit_code, "transportClosed": exit.transport_closed }),
            Err(error) => {
                let body = ApiError::from(envrt::RuntimeError::from(error)).body;
                json!({ "type": "error", "kind": body.kind, "message": body.message })
            }
        };
        let _ = to_client.send(Message::Text(text.to_string().into())).await;
        let _ = to_client.send(Message::Close(None)).await;
    }
    reader.abort();
    let _ = channel.close().await;
}

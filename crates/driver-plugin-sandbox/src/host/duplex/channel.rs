//! The host side of one duplex channel: open (with the ceiling and the echo check),
//! write, read with the pre-bind hold replayed, half-close, stop, close and wait.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use envrt_driver_api::{DriverError, DuplexChannel, DuplexExit};
use serde_json::Value;
use tokio::time::Instant;

use crate::host::duplex::dataplane::PlaneLink;
use crate::host::duplex::routes::{BindOutcome, RouteShared, SlotPermit, next_route_id};
use crate::host::error::SandboxError;
use crate::host::worker::connection::Connection;
use crate::host::worker::supervisor::Supervisor;
use crate::protocol::duplex::{CloseParams, OpenParams, PairParams, WriteParams};
use crate::protocol::{self, methods, to_value};

/// Opens a channel: takes a slot (or refuses with nothing sent), mints the route id,
/// sends `duplexChannelOpen` and binds the pair the worker answers.
pub(crate) async fn open(
    supervisor: &Arc<Supervisor>,
    mut params: OpenParams,
    company_id: &str,
) -> Result<SandboxChannel, SandboxError> {
    let permit = supervisor
        .options()
        .route_slots
        .try_acquire()
        .ok_or(SandboxError::RouteBusy)?;
    let timeout = supervisor.options().duplex_timeout;
    let deadline = Instant::now() + timeout;
    let connection = supervisor.connection(methods::DUPLEX_OPEN, timeout, deadline).await?;
    let route_id = next_route_id();
    params.host_route_id = route_id.clone();
    supervisor.routes().register_pending(&route_id, connection.generation());
    let answer = connection
        .call(
            methods::DUPLEX_OPEN,
            to_value(&params),
            timeout,
            deadline,
            Some(company_id),
            None,
        )
        .await;
    let failed = |reason: String| {
        tracing::warn!(route = %route_id, "duplex open failed: {reason}");
        SandboxError::OpenFailed { reason }
    };
    let value = match answer {
        Ok(value) => value,
        Err(error) => {
            // The call's own error (the open timeout, the worker's reason, the worker's
            // exit) names what was hit; only a reply the host cannot use is OPEN_FAILED.
            supervisor.routes().fail_open(&route_id);
            tracing::warn!(route = %route_id, "duplex open failed: {error}");
            return Err(error);
        }
    };
    let reply = serde_json::from_value::<protocol::DuplexOpenResult>(value.clone());
    let session = match reply {
        Ok(reply) if reply.host_route_id == route_id && !reply.worker_session_id.is_empty() => reply.worker_session_id,
        _ => {
            supervisor.routes().fail_open(&route_id);
            // let the worker free whatever it opened
            let close = to_value(&CloseParams {
                host_route_id: route_id.clone(),
                worker_session_id: value.get("workerSessionId").and_then(Value::as_str).map(str::to_owned),
            });
            let close_timeout = supervisor.options().duplex_close_timeout;
            let connection = connection.clone();
            tokio::spawn(async move {
                let _ = connection
                    .call(
                        methods::DUPLEX_CLOSE,
                        close,
                        close_timeout,
                        Instant::now() + close_timeout,
                        None,
                        None,
                    )
                    .await;
            });
            return Err(failed(format!("malformed or non-echoing open reply: {value}")));
        }
    };
    match supervisor.routes().bind(&route_id, &session) {
        BindOutcome::Bound(route) => Ok(SandboxChannel {
            plane: connection.plane.link(&route_id),
            route,
            connection,
            supervisor: supervisor.clone(),
            permit: Mutex::new(Some(permit)),
        }),
        BindOutcome::Gone => Err(failed("the worker exited before the route was bound".into())),
        BindOutcome::Forged => {
            connection.kill();
            Err(failed(
                "the worker sent frames for another session before binding".into(),
            ))
        }
    }
}

/// Sends `duplexChannelClose` for a bound route and checks that the ack echoes both ids;
/// a non-echoing ack retires the worker.
pub(crate) async fn send_close(
    connection: &Connection,
    route: &RouteShared,
    timeout: Duration,
) -> Result<(), SandboxError> {
    let params = to_value(&CloseParams {
        host_route_id: route.route_id.clone(),
        worker_session_id: Some(route.session_id.clone()),
    });
    let ack = connection
        .call(
            methods::DUPLEX_CLOSE,
            params,
            timeout,
            Instant::now() + timeout,
            None,
            None,
        )
        .await;
    match ack {
        Ok(ack) => {
            let echoes = ack.get("hostRouteId").and_then(Value::as_str) == Some(route.route_id.as_str())
                && ack.get("workerSessionId").and_then(Value::as_str) == Some(route.session_id.as_str());
            if echoes {
                Ok(())
            } else {
                tracing::warn!(route = %route.route_id, %ack, "duplex close ack does not echo the ids; retiring the worker");
                connection.kill();
                Err(SandboxError::CloseNotAcknowledged {
                    route_id: route.route_id.clone(),
                })
            }
        }
        Err(SandboxError::WorkerExited { .. }) => Ok(()),
        Err(error) => Err(error),
    }
}

/// A duplex channel over the worker protocol.
pub(crate) struct SandboxChannel {
    route: Arc<RouteShared>,
    connection: Arc<Connection>,
    supervisor: Arc<Supervisor>,
    permit: Mutex<Option<SlotPermit>>,
    /// The route's handle on the binary data plane, when the worker accepted it.
    plane: Option<PlaneLink>,
}

struct PendingWrite<'a>(&'a RouteShared);

impl Drop for PendingWrite<'_> {
    fn drop(&mut self) {
        self.0.lock().pending_writes -= 1;
    }
}

impl SandboxChannel {
    fn ids(&self) -> PairParams {
        PairParams {
            host_route_id: self.route.route_id.clone(),
            worker_session_id: self.route.session_id.clone(),
        }
    }

    /// Fails when the route can no longer carry traffic.
    fn check_usable(&self) -> Result<(), SandboxError> {
        let state = self.route.lock();
        if let Some(error) = &state.worker_exit {
            return Err(error.clone());
        }
        if state.closed {
            return Err(SandboxError::RouteEnded {
                route_id: self.route.route_id.clone(),
                reason: "the channel is closed".into(),
            });
        }
        if let Some(reason) = &state.ended {
            return Err(SandboxError::RouteEnded {
                route_id: self.route.route_id.clone(),
                reason: reason.clone(),
            });
        }
        if Instant::now() >= state.deadline {
            drop(state);
            self.supervisor
                .routes()
                .end_route(&self.route, "the route passed its lifetime".into());
            return Err(SandboxError::RouteEnded {
                route_id: self.route.route_id.clone(),
                reason: "the route passed its lifetime".into(),
            });
        }
        Ok(())
    }

    async fn call(&self, method: &str, params: Value, timeout: Duration) -> Result<Value, SandboxError> {
        self.connection
            .call(method, params, timeout, Instant::now() + timeout, None, None)
            .await
    }

    async fn write_bytes(&self, data: &[u8]) -> Result<(), SandboxError> {
        let limits = &self.supervisor.routes().limits;
        for piece in data.chunks(limits.max_chunk_bytes.max(1)) {
            self.check_usable()?;
            if let Some(plane) = &self.plane {
                self.plane_write(plane, piece).await?;
                continue;
            }
            let over = {
                let mut state = self.route.lock();
                state.total_bytes += piece.len() as u64;
                if state.pending_writes >= limits.max_pending_writes {
                    Some("too many writes in flight")
                } else if state.total_bytes > limits.max_total_bytes {
                    Some("the route passed its total byte bound")
                } else {
                    state.pending_writes += 1;
                    None
                }
            };
            if let Some(reason) = over {
                self.supervisor.routes().end_route(&self.route, reason.into());
                return Err(SandboxError::RouteEnded {
                    route_id: self.route.route_id.clone(),
                    reason: reason.into(),
                });
            }
            let _pending = PendingWrite(&self.route);
            let PairParams {
                host_route_id,
                worker_session_id,
            } = self.ids();
            let params = to_value(&WriteParams {
                host_route_id,
                worker_session_id,
                data: Value::String(protocol::encode_base64(piece)),
            });
            self.call(methods::DUPLEX_WRITE, params, self.supervisor.options().duplex_timeout)
                .await?;
        }
        Ok(())
    }

    /// One piece over the data plane: counted towards the total bound, then sent under
    /// credit (pipelined: no round trip per write).
    async fn plane_write(&self, plane: &PlaneLink, piece: &[u8]) -> Result<(), SandboxError> {
        let over = {
            let mut state = self.route.lock();
            state.total_bytes += piece.len() as u64;
            state.total_bytes > self.supervisor.routes().limits.max_total_bytes
        };
        if over {
            let reason = "the route passed its total byte bound";
            self.supervisor.routes().end_route(&self.route, reason.into());
            return Err(SandboxError::RouteEnded {
                route_id: self.route.route_id.clone(),
                reason: reason.into(),
            });
        }
        let timeout = self.supervisor.options().duplex_timeout;
        plane
            .send(piece, &self.route.notify, || self.check_usable(), timeout)
            .await
    }

    async fn close_inner(&self) -> Result<(), SandboxError> {
        let worker_open = self.supervisor.routes().close_route(&self.route);
        let result = if worker_open && !self.connection.has_exited() {
            send_close(
                &self.connection,
                &self.route,
                self.supervisor.options().duplex_close_timeout,
            )
            .await
        } else {
            Ok(())
        };
        self.permit.lock().unwrap_or_else(|e| e.into_inner()).take();
        result
    }
}

#[async_trait]
impl DuplexChannel for SandboxChannel {
    async fn write(&self, data: &[u8]) -> Result<(), DriverError> {
        if data.is_empty() {
            return self.check_usable().map_err(Into::into);
        }
        self.write_bytes(data).await.map_err(Into::into)
    }

    async fn read(&self) -> Result<Option<Vec<u8>>, DriverError> {
        loop {
            let notified = self.route.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let mut state = self.route.lock();
                if let Some(chunk) = state.chunks.pop_front() {
                    state.buffered_bytes -= chunk.len();
                    if let Some(plane) = &self.plane {
                        plane.consumed(chunk.len());
                    }
                    return Ok(Some(chunk));
                }
                if let Some(error) = &state.worker_exit {
                    return Err(error.clone().into());
                }
                if state.exit.is_some() || state.closed || state.ended.is_some() {
                    return Ok(None);
                }
            }
            notified.await;
        }
    }

    async fn close_input(&self) -> Result<(), DriverError> {
        if !self.supervisor.advertises(methods::DUPLEX_CLOSE_INPUT) {
            return Err(SandboxError::CloseInputUnsupported.into());
        }
        self.check_usable()?;
        if let Some(plane) = &self.plane {
            plane.eof();
            return Ok(());
        }
        self.call(
            methods::DUPLEX_CLOSE_INPUT,
            to_value(&self.ids()),
            self.supervisor.options().duplex_timeout,
        )
        .await?;
        Ok(())
    }

    async fn stop(&self) -> Result<(), DriverError> {
        {
            let state = self.route.lock();
            if state.closed || state.ended.is_some() || !state.worker_open {
                return Ok(());
            }
        }
        self.call(
            methods::DUPLEX_STOP,
            to_value(&self.ids()),
            self.supervisor.options().duplex_timeout,
        )
        .await?;
        Ok(())
    }

    async fn close(&self) -> Result<(), DriverError> {
        self.close_inner().await.map_err(Into::into)
    }

    async fn wait(&self) -> Result<DuplexExit, DriverError> {
        loop {
            let notified = self.route.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if let Some(exit) = self.route.lock().exit {
                return Ok(exit);
            }
            notified.await;
        }
    }
}

impl Drop for SandboxChannel {
    fn drop(&mut self) {
        let worker_open = self.supervisor.routes().close_route(&self.route);
        if worker_open
            && !self.connection.has_exited()
            && let Ok(handle) = tokio::runtime::Handle::try_current()
        {
            let connection = self.connection.clone();
            let route = self.route.clone();
            let timeout = self.supervisor.options().duplex_close_timeout;
            handle.spawn(async move {
                let _ = send_close(&connection, &route, timeout).await;
            });
        }
    }
}

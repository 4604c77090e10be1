//! The upstream side of a forwarded request (plain HTTP, and an intercepted credentialed
//! connection): hyper's HTTP/1 client under the proxy's bounds, the check of the response
//! head, and the response body passed on under the live policy and the idle bound.
//!
//! Speed (bench row 13): the body is passed on as hyper reads it, polled inline by the
//! client's connection (no task or channel per frame), in frames of up to
//! [`Limits::body_buffer_bytes`] (512 KiB: measured against 128 and 256 KiB, fewer and
//! larger writes towards the lease are what counts): hyper's read buffer is also its head
//! bound, so the buffer is sized for the body and the head is bounded here instead
//! ([`check_head`]).

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::Response;
use hyper::body::{Frame, Incoming, SizeHint};
use tokio::sync::{oneshot, watch};
use tokio::time::{Instant, Sleep};

use crate::handle::{Body, Refused, Target};
use crate::policy::Policy;
use crate::proxy::Limits;

/// hyper's HTTP/1 client for one upstream connection: at most [`Limits::max_headers`]
/// headers, and a read buffer of [`Limits::body_buffer_bytes`] (hyper's floor is 8 KiB).
pub(crate) fn client_builder(limits: &Limits) -> hyper::client::conn::http1::Builder {
    let mut client = hyper::client::conn::http1::Builder::new();
    client
        .max_headers(limits.max_headers)
        .max_buf_size(limits.body_buffer_bytes.max(limits.max_head_bytes).max(8192));
    client
}

/// The text of a response whose head is over the bound (after `envrt egress: upstream ADDR: `).
pub(crate) fn head_too_large_text(max: usize) -> String {
    format!("the response head is larger than {max} bytes")
}

/// Refuses (502) an upstream response whose head — the status line and the header lines,
/// counted as sent — is longer than [`Limits::max_head_bytes`]. hyper bounds only what its
/// read buffer holds, which is sized for the body.
pub(crate) fn check_head<B>(resp: &Response<B>, limits: &Limits, addr: SocketAddr) -> Result<(), Refused> {
    // "HTTP/1.1 200 " + reason + CRLF, each "name: value" + CRLF, then the blank line.
    let status_line = 13 + resp.status().canonical_reason().map_or(0, str::len) + 2;
    let headers: usize = resp
        .headers()
        .iter()
        .map(|(name, value)| name.as_str().len() + 2 + value.len() + 2)
        .sum();
    if status_line + headers + 2 > limits.max_head_bytes {
        return Err(Refused::new(
            hyper::StatusCode::BAD_GATEWAY,
            format!(
                "envrt egress: upstream {addr}: {}\n",
                head_too_large_text(limits.max_head_bytes)
            ),
        ));
    }
    Ok(())
}

/// The upstream body, passed on as it arrives until it ends, or a policy update denies the
/// request's target, or the upstream passes nothing for `idle`, or the client is gone (then
/// hyper drops this body, and with it the upstream connection). Cut early, the body ends
/// short of its length and hyper closes the client's connection.
pub(crate) fn cut_on_update(
    body: Incoming,
    mut policy: watch::Receiver<Arc<Policy>>,
    target: Target,
    addr: SocketAddr,
    idle: Duration,
) -> Body {
    let (mut cut_tx, cut) = oneshot::channel::<()>();
    // One watcher per response (not per frame): it ends when the body is dropped (the
    // receiver closes), and drops its sender — which cuts the body — when an update denies
    // the target or the proxy's policy is gone.
    tokio::spawn(async move {
        loop {
            tokio::select! {
                () = cut_tx.closed() => return,
                changed = policy.changed() => {
                    if changed.is_err() { return; }
                    let now = policy.borrow_and_update().clone();
                    if let Err(r) = target.allowed(&now, addr) {
                        tracing::info!("egress proxy: response from {addr} cut by a policy update: {r}");
                        return;
                    }
                }
            }
        }
    });
    Guarded {
        inner: body,
        cut,
        idle,
        last: Instant::now(),
        timer: Box::pin(tokio::time::sleep(idle)),
        addr,
    }
    .boxed()
}

/// See [`cut_on_update`].
struct Guarded {
    inner: Incoming,
    /// Ready (closed) once the watcher cuts.
    cut: oneshot::Receiver<()>,
    idle: Duration,
    /// When the last frame arrived; the timer is moved on lazily, only when it fires.
    last: Instant,
    timer: Pin<Box<Sleep>>,
    addr: SocketAddr,
}

impl hyper::body::Body for Guarded {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let this = &mut *self;
        if Pin::new(&mut this.cut).poll(cx).is_ready() {
            return Poll::Ready(None);
        }
        if let Poll::Ready(frame) = Pin::new(&mut this.inner).poll_frame(cx) {
            this.last = Instant::now();
            return Poll::Ready(frame);
        }
        while this.timer.as_mut().poll(cx).is_ready() {
            let deadline = this.last + this.idle;
            if Instant::now() >= deadline {
                tracing::info!(
                    "egress proxy: response from {} idle for {:?}, cut",
                    this.addr,
                    this.idle
                );
                return Poll::Ready(None);
            }
            this.timer.as_mut().reset(deadline);
        }
        Poll::Pending
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

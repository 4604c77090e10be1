//! Duplex routes on the host: the process-wide slot ceiling, route ids from one
//! never-repeating counter, the per-worker route table keyed by the exact pair
//! (host route id, worker session id), the pre-bind hold, tombstones, and every bound.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use envrt_driver_api::DuplexExit;
use serde_json::Value;
use tokio::sync::{Notify, mpsc};
use tokio::time::Instant;

use crate::host::error::SandboxError;
use crate::protocol::{self, notifications};

/// The default process-wide ceiling on open duplex routes.
pub const DEFAULT_ROUTE_CEILING: usize = 128;

/// Bounds of one duplex route. Passing any of them ends the route with exit code none.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DuplexLimits {
    /// Largest decoded chunk in one frame (both directions; host writes are split to it).
    pub max_chunk_bytes: usize,
    /// Decoded bytes held unread (including the pre-bind hold).
    pub max_buffered_bytes: usize,
    /// Frames held unread.
    pub max_buffered_frames: usize,
    /// Writes in flight at once.
    pub max_pending_writes: usize,
    /// Decoded bytes over the route's life, both directions.
    pub max_total_bytes: u64,
    /// Protocol errors (invalid or empty base64) tolerated; the route ends on reaching it.
    pub max_protocol_errors: u32,
    /// Lifetime of a route.
    pub max_lifetime: Duration,
    /// Closed pairs remembered so their late frames are dropped quietly.
    pub max_tombstones: usize,
}

impl Default for DuplexLimits {
    fn default() -> Self {
        DuplexLimits {
            max_chunk_bytes: 256 * 1024,
            max_buffered_bytes: 384 * 1024,
            max_buffered_frames: 1024,
            max_pending_writes: 64,
            max_total_bytes: 256 * 1024 * 1024,
            max_protocol_errors: 3,
            max_lifetime: Duration::from_secs(3600),
            max_tombstones: 16 * 1024,
        }
    }
}

/// A ceiling on open duplex routes, shared by every sandbox driver that holds it (the
/// [`RouteSlots::global`] one by default, so the ceiling is process-wide).
#[derive(Debug)]
pub struct RouteSlots {
    limit: usize,
    in_use: AtomicUsize,
}

impl RouteSlots {
    /// A new, separate ceiling of `limit` routes.
    pub fn new(limit: usize) -> Arc<RouteSlots> {
        Arc::new(RouteSlots {
            limit,
            in_use: AtomicUsize::new(0),
        })
    }

    /// The process-wide ceiling of [`DEFAULT_ROUTE_CEILING`] routes.
    pub fn global() -> Arc<RouteSlots> {
        static GLOBAL: OnceLock<Arc<RouteSlots>> = OnceLock::new();
        GLOBAL.get_or_init(|| RouteSlots::new(DEFAULT_ROUTE_CEILING)).clone()
    }

    /// The ceiling.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Routes holding a slot now.
    pub fn in_use(&self) -> usize {
        self.in_use.load(Ordering::SeqCst)
    }

    pub(crate) fn try_acquire(self: &Arc<Self>) -> Option<SlotPermit> {
        self.in_use
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                (n < self.limit).then_some(n + 1)
            })
            .ok()
            .map(|_| SlotPermit { slots: self.clone() })
    }
}

/// One held slot; freed on drop.
#[derive(Debug)]
pub(crate) struct SlotPermit {
    slots: Arc<RouteSlots>,
}

impl Drop for SlotPermit {
    fn drop(&mut self) {
        self.slots.in_use.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Mints `duplex-route-<n>` from one process-wide counter that never repeats.
pub(crate) fn next_route_id() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(1);
    format!("duplex-route-{}", COUNTER.fetch_add(1, Ordering::Relaxed))
}

/// The `<n>` of `duplex-route-<n>`.
fn route_number(route_id: &str) -> Option<u64> {
    route_id.strip_prefix("duplex-route-")?.parse().ok()
}

/// One decoded frame.
#[derive(Debug)]
pub(crate) enum Frame {
    Data(Vec<u8>),
    /// Bytes from the binary data plane: part of a stream, so they may join the unread
    /// chunk before them (flow control bounds the bytes, not the frames).
    Stream(Vec<u8>),
    Invalid,
    Exit(DuplexExit),
}

/// The state of a bound route, shared with its channel handle.
#[derive(Debug)]
pub(crate) struct RouteShared {
    pub(crate) route_id: String,
    pub(crate) session_id: String,
    /// The worker generation that owns the route.
    pub(crate) generation: u64,
    pub(crate) state: Mutex<RouteState>,
    pub(crate) notify: Notify,
}

#[derive(Debug)]
pub(crate) struct RouteState {
    pub(crate) chunks: VecDeque<Vec<u8>>,
    pub(crate) buffered_bytes: usize,
    pub(crate) total_bytes: u64,
    pub(crate) protocol_errors: u32,
    pub(crate) pending_writes: usize,
    pub(crate) exit: Option<DuplexExit>,
    /// Why the host ended the route, when it did.
    pub(crate) ended: Option<String>,
    /// The handle closed it.
    pub(crate) closed: bool,
    /// The worker still has the route open (no close sent, worker alive).
    pub(crate) worker_open: bool,
    /// The worker that owned the route exited with this error: reads and writes fail
    /// with it.
    pub(crate) worker_exit: Option<SandboxError>,
    pub(crate) deadline: Instant,
}

impl RouteShared {
    pub(crate) fn lock(&self) -> std::sync::MutexGuard<'_, RouteState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl RouteState {
    /// Ends the route: output is dropped, the wait settles with exit code none.
    fn end(&mut self, reason: String, transport_closed: bool) {
        if self.ended.is_none() && !self.closed {
            self.ended = Some(reason);
        }
        self.chunks.clear();
        self.buffered_bytes = 0;
        if self.exit.is_none() {
            self.exit = Some(DuplexExit {
                exit_code: None,
                transport_closed,
            });
        }
    }

    fn apply(&mut self, frame: Frame, limits: &DuplexLimits) -> Option<String> {
        if self.ended.is_some() || self.closed {
            return None;
        }
        if Instant::now() >= self.deadline {
            return Some("the route passed its lifetime".into());
        }
        let merge = matches!(frame, Frame::Stream(_));
        match frame {
            Frame::Exit(exit) => {
                if self.exit.is_none() {
                    self.exit = Some(exit);
                }
                None
            }
            Frame::Invalid => {
                self.protocol_errors += 1;
                (self.protocol_errors >= limits.max_protocol_errors)
                    .then(|| format!("{} protocol errors (invalid or empty base64)", self.protocol_errors))
            }
            Frame::Data(_) | Frame::Stream(_) if self.exit.is_some() => None,
            Frame::Data(bytes) | Frame::Stream(bytes) => {
                if bytes.len() > limits.max_chunk_bytes {
                    return Some(format!("a chunk of {} bytes passed the chunk bound", bytes.len()));
                }
                self.total_bytes += bytes.len() as u64;
                if self.total_bytes > limits.max_total_bytes {
                    return Some("the route passed its total byte bound".into());
                }
                if self.buffered_bytes + bytes.len() > limits.max_buffered_bytes {
                    return Some("unread output passed the buffered byte bound".into());
                }
                if merge
                    && let Some(last) = self.chunks.back_mut()
                    && last.len() + bytes.len() <= limits.max_chunk_bytes
                {
                    self.buffered_bytes += bytes.len();
                    last.extend_from_slice(&bytes);
                    return None;
                }
                if self.chunks.len() + 1 > limits.max_buffered_frames {
                    return Some("unread output passed the buffered frame bound".into());
                }
                self.buffered_bytes += bytes.len();
                self.chunks.push_back(bytes);
                None
            }
        }
    }
}

struct PendingRoute {
    generation: u64,
    /// Held frames with the session they named (`None`: from the data plane, which names
    /// routes only).
    held: Vec<(Option<String>, Frame)>,
    held_bytes: usize,
    overflowed: bool,
}

enum Entry {
    Pending(PendingRoute),
    Bound { generation: u64, route: Arc<RouteShared> },
}

#[derive(Default)]
struct Table {
    live: HashMap<String, Entry>,
    /// Closed routes: the worker session id they had, or `None` when closed before binding
    /// (then every late frame for that route id is dropped).
    tombstones: HashMap<String, Option<String>>,
    order: VecDeque<String>,
    /// The highest route number whose tombstone was evicted.
    evicted_upto: u64,
}

/// The route table of one worker manager.
pub(crate) struct RouteTable {
    pub(crate) limits: DuplexLimits,
    table: Mutex<Table>,
    /// Routes the host ended while the worker still has them: closed in the background.
    closer: mpsc::UnboundedSender<Arc<RouteShared>>,
}

/// What `bind` found.
pub(crate) enum BindOutcome {
    Bound(Arc<RouteShared>),
    /// The route is gone (the worker exited meanwhile).
    Gone,
    /// A held frame named another session: the worker must be retired.
    Forged,
}

impl RouteTable {
    pub(crate) fn new(limits: DuplexLimits) -> (Arc<RouteTable>, mpsc::UnboundedReceiver<Arc<RouteShared>>) {
        let (closer, closes) = mpsc::unbounded_channel();
        (
            Arc::new(RouteTable {
                limits,
                table: Mutex::new(Table::default()),
                closer,
            }),
            closes,
        )
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Registers a route id before its open request is sent.
    pub(crate) fn register_pending(&self, route_id: &str, generation: u64) {
        self.lock().live.insert(
            route_id.to_owned(),
            Entry::Pending(PendingRoute {
                generation,
                held: Vec::new(),
                held_bytes: 0,
                overflowed: false,
            }),
        );
    }

    fn tombstone(&self, table: &mut Table, route_id: &str, session: Option<String>) {
        table.live.remove(route_id);
        if table.tombstones.insert(route_id.to_owned(), session).is_none() {
            table.order.push_back(route_id.to_owned());
        }
        while table.order.len() > self.limits.max_tombstones {
            if let Some(old) = table.order.pop_front() {
                table.tombstones.remove(&old);
                if let Some(n) = route_number(&old) {
                    table.evicted_upto = table.evicted_upto.max(n);
                }
            }
        }
    }

    /// The open failed: the route id is retired; late frames for it are dropped.
    pub(crate) fn fail_open(&self, route_id: &str) {
        let mut table = self.lock();
        self.tombstone(&mut table, route_id, None);
    }

    /// Binds a pending route to the worker's session and replays held frames in order.
    pub(crate) fn bind(self: &Arc<Self>, route_id: &str, session_id: &str) -> BindOutcome {
        let mut table = self.lock();
        let Some(Entry::Pending(pending)) = table.live.remove(route_id) else {
            return BindOutcome::Gone;
        };
        let route = Arc::new(RouteShared {
            route_id: route_id.to_owned(),
            session_id: session_id.to_owned(),
            generation: pending.generation,
            state: Mutex::new(RouteState {
                chunks: VecDeque::new(),
                buffered_bytes: 0,
                total_bytes: 0,
                protocol_errors: 0,
                pending_writes: 0,
                exit: None,
                ended: None,
                closed: false,
                worker_open: true,
                worker_exit: None,
                deadline: Instant::now() + self.limits.max_lifetime,
            }),
            notify: Notify::new(),
        });
        let mut ended = pending
            .overflowed
            .then(|| "output held before the open reply passed the buffered bound".to_owned());
        {
            let mut state = route.lock();
            for (session, frame) in pending.held {
                if session.as_deref().is_some_and(|s| s != session_id) {
                    self.tombstone(&mut table, route_id, Some(session_id.to_owned()));
                    return BindOutcome::Forged;
                }
                if ended.is_none() {
                    ended = state.apply(frame, &self.limits);
                }
            }
            if let Some(reason) = &ended {
                state.end(reason.clone(), false);
            }
        }
        if ended.is_some() {
            self.tombstone(&mut table, route_id, Some(session_id.to_owned()));
            let _ = self.closer.send(route.clone());
        } else {
            table.live.insert(
                route_id.to_owned(),
                Entry::Bound {
                    generation: pending.generation,
                    route: route.clone(),
                },
            );
            let weak = Arc::downgrade(self);
            let timer_route = Arc::downgrade(&route);
            let lifetime = self.limits.max_lifetime;
            tokio::spawn(async move {
                tokio::time::sleep(lifetime).await;
                if let (Some(table), Some(route)) = (weak.upgrade(), timer_route.upgrade()) {
                    table.end_route(&route, "the route passed its lifetime".into());
                }
            });
        }
        BindOutcome::Bound(route)
    }

    /// Ends a bound route from the host side and asks the worker to close it.
    pub(crate) fn end_route(&self, route: &Arc<RouteShared>, reason: String) {
        let mut table = self.lock();
        let send_close = {
            let mut state = route.lock();
            if state.closed || state.ended.is_some() {
                return;
            }
            tracing::warn!(route = %route.route_id, "ending duplex route: {reason}");
            state.end(reason, false);
            std::mem::replace(&mut state.worker_open, false)
        };
        route.notify.notify_waiters();
        self.tombstone(&mut table, &route.route_id, Some(route.session_id.clone()));
        if send_close {
            let _ = self.closer.send(route.clone());
        }
    }

    /// The handle closed the route: tombstone it. Returns whether the worker still has it
    /// open (then the caller sends `duplexChannelClose`).
    pub(crate) fn close_route(&self, route: &RouteShared) -> bool {
        let mut table = self.lock();
        let worker_open = {
            let mut state = route.lock();
            if state.closed {
                return false;
            }
            state.closed = true;
            if state.exit.is_none() {
                state.exit = Some(DuplexExit {
                    exit_code: None,
                    transport_closed: false,
                });
            }
            std::mem::replace(&mut state.worker_open, false)
        };
        route.notify.notify_waiters();
        if matches!(table.live.get(&route.route_id), Some(Entry::Bound { route: r, .. }) if r.session_id == route.session_id)
        {
            self.tombstone(&mut table, &route.route_id, Some(route.session_id.clone()));
        }
        worker_open
    }

    /// The worker of `generation` exited with `error`: every route of it ends with exit
    /// code none, and its reads and writes fail with `error`.
    pub(crate) fn end_generation(&self, generation: u64, error: &SandboxError) {
        let mut table = self.lock();
        let ids: Vec<String> = table
            .live
            .iter()
            .filter(|(_, e)| match e {
                Entry::Pending(p) => p.generation == generation,
                Entry::Bound { generation: g, .. } => *g == generation,
            })
            .map(|(id, _)| id.clone())
            .collect();
        for id in ids {
            let session = match table.live.get(&id) {
                Some(Entry::Bound { route, .. }) => {
                    {
                        let mut state = route.lock();
                        state.worker_open = false;
                        state.end("the worker exited".into(), true);
                        state.worker_exit.get_or_insert_with(|| error.clone());
                    }
                    route.notify.notify_waiters();
                    Some(route.session_id.clone())
                }
                _ => None,
            };
            self.tombstone(&mut table, &id, session);
        }
    }

    /// Routes one `duplexChannel.data`/`exit` frame. Returns false when the pair was never
    /// issued by this host (the worker must be retired).
    pub(crate) fn on_frame(&self, generation: u64, method: &str, params: Value) -> bool {
        let (Some(route_id), Some(session)) = (
            params.get("hostRouteId").and_then(Value::as_str),
            params.get("workerSessionId").and_then(Value::as_str),
        ) else {
            tracing::warn!(method, "duplex frame without string ids ignored");
            return true;
        };
        let frame = if method == notifications::DUPLEX_DATA {
            match params
                .get("chunk")
                .and_then(Value::as_str)
                .and_then(protocol::decode_strict_base64)
            {
                Some(bytes) => Frame::Data(bytes),
                None => Frame::Invalid,
            }
        } else {
            match serde_json::from_value::<protocol::DuplexExitParams>(params.clone()) {
                Ok(exit) => Frame::Exit(DuplexExit {
                    exit_code: exit.exit_code,
                    transport_closed: exit.transport_closed,
                }),
                Err(_) => Frame::Invalid,
            }
        };
        self.route_frame(generation, route_id, Some(session), frame)
    }

    /// Routes one decoded frame; `session` is `None` for frames of the data plane. Returns
    /// false when the pair was never issued by this host (the worker must be retired).
    pub(crate) fn route_frame(&self, generation: u64, route_id: &str, session: Option<&str>, frame: Frame) -> bool {
        let mut table = self.lock();
        let table = &mut *table;
        match table.live.get_mut(route_id) {
            Some(Entry::Pending(pending)) => {
                if pending.generation == generation && !pending.overflowed {
                    if let Frame::Data(bytes) | Frame::Stream(bytes) = &frame {
                        pending.held_bytes += bytes.len();
                    }
                    let merged = match (&frame, pending.held.last_mut()) {
                        (Frame::Stream(bytes), Some((None, Frame::Stream(last))))
                            if last.len() + bytes.len() <= self.limits.max_chunk_bytes =>
                        {
                            last.extend_from_slice(bytes);
                            true
                        }
                        _ => false,
                    };
                    if !merged {
                        pending.held.push((session.map(str::to_owned), frame));
                    }
                    if pending.held.len() > self.limits.max_buffered_frames
                        || pending.held_bytes > self.limits.max_buffered_bytes
                    {
                        // stop holding and free the hold: the route ends when it binds
                        pending.overflowed = true;
                        pending.held = Vec::new();
                        pending.held_bytes = 0;
                    }
                }
                true
            }
            Some(Entry::Bound { generation: g, route }) => {
                if *g != generation {
                    return true;
                }
                if session.is_some_and(|s| s != route.session_id) {
                    return false;
                }
                let route = route.clone();
                let ended = {
                    let mut state = route.lock();
                    let ended = state.apply(frame, &self.limits);
                    if let Some(reason) = &ended {
                        tracing::warn!(route = %route.route_id, "ending duplex route: {reason}");
                        state.end(reason.clone(), false);
                        state.worker_open = false;
                    }
                    ended
                };
                route.notify.notify_waiters();
                if ended.is_some() {
                    self.tombstone(table, route_id, Some(route.session_id.clone()));
                    let _ = self.closer.send(route);
                }
                true
            }
            None => match table.tombstones.get(route_id) {
                Some(None) => true,
                Some(Some(closed_session)) => session.is_none_or(|s| s == closed_session),
                // an id older than every remembered tombstone may be one of ours whose
                // tombstone was evicted: drop it quietly rather than retire the worker
                None => route_number(route_id).is_some_and(|n| n <= table.evicted_upto),
            },
        }
    }
}

//! The host side of the `envrt.dataPlane` extension: a unix socket pair made at spawn (the
//! worker inherits its end), the offer in `initialize`, and, once the worker accepts,
//! duplex bytes in binary frames with credit-based flow control instead of base64 JSON
//! lines (framing in [`envrt_plugin_protocol::dataplane`]).
//!
//! - Output (worker → host): the worker sends at most `window` bytes of a route before the
//!   host hands credit back, which it does as the reader consumes them; so the route's
//!   unread buffer never passes the window (at most the buffered byte bound), and a slow
//!   reader slows the command instead of losing the route. Frames go through the same
//!   route table as JSON frames (pre-bind hold, tombstones, bounds, forged-route checks).
//! - Input (host → worker): a write goes out under the credit the worker hands back once
//!   the bytes reached the command's stdin; writes are pipelined, and a write with no
//!   credit waits (up to the duplex timeout) instead of overflowing anything. A failed
//!   stdin write comes back as a `close` frame whose text later writes fail with.
//! - A malformed frame (unknown kind, oversized) or a frame for a route the host never
//!   issued retires the worker, as a forged JSON frame does.

use std::collections::HashMap;
use std::io;
use std::os::fd::{AsRawFd as _, OwnedFd};
use std::os::unix::process::CommandExt as _;
use std::process::Command;
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

use envrt_driver_api::{DriverError, DuplexExit};
use tokio::io::BufReader;
use tokio::sync::{Notify, mpsc};
use tokio::time::Instant;

use crate::host::duplex::routes::{DuplexLimits, Frame, RouteTable};
use crate::host::error::SandboxError;
use crate::host::options::SandboxOptions;
use crate::host::worker::connection::Connection;
use crate::protocol::{codes, methods};
use envrt_plugin_protocol::dataplane::{self as wire, Kind, Offer};

/// The most bytes each side may have in flight per route (less when the buffered byte
/// bound is lower: output credit never lets the unread buffer pass it).
pub(crate) const MAX_WINDOW: usize = 1024 * 1024;

/// The window offered under `limits`.
pub(crate) fn window(limits: &DuplexLimits) -> u32 {
    limits.max_buffered_bytes.clamp(1, MAX_WINDOW) as u32
}

/// Makes the socket pair for a worker about to be spawned by `command`: the worker's end
/// stays open across its exec at the same descriptor number (and only in that child: it
/// is close-on-exec everywhere else). Returns the host's end and that number.
#[allow(unsafe_code)]
pub(crate) fn pass_to_child(command: &mut Command) -> io::Result<(OwnedFd, i32)> {
    let (host, worker) = std::os::unix::net::UnixStream::pair()?;
    let worker = OwnedFd::from(worker);
    let number = worker.as_raw_fd();
    // SAFETY: the closure runs in the forked child before exec and makes one
    // async-signal-safe system call (fcntl) on a descriptor it owns; it allocates nothing.
    // The descriptor is closed in the host when the command is dropped after the spawn.
    unsafe {
        command
            .pre_exec(move || rustix::io::fcntl_setfd(&worker, rustix::io::FdFlags::empty()).map_err(io::Error::from));
    }
    Ok((OwnedFd::from(host), number))
}

/// After `initialize`: starts `connection`'s data plane when the worker advertised the
/// extension in `supported`, else closes the host's end (duplex stays on JSON frames). A
/// malformed or forged frame retires the worker.
pub(crate) fn settle(
    connection: &Arc<Connection>,
    supported: &[String],
    options: &SandboxOptions,
    routes: &Arc<RouteTable>,
) {
    let weak = Arc::downgrade(connection);
    connection.plane.settle(
        supported.iter().any(|m| m == wire::EXTENSION),
        &options.duplex_limits,
        routes.clone(),
        connection.generation(),
        move || {
            if let Some(connection) = weak.upgrade() {
                connection.kill();
            }
        },
    );
}

/// The data plane of one connection: offered, then live or gone.
#[derive(Default)]
pub(crate) struct PlaneSlot {
    offered: Mutex<Option<(OwnedFd, i32)>>,
    live: OnceLock<Arc<HostPlane>>,
}

impl PlaneSlot {
    /// A slot holding the host's end of a socket passed at spawn, if any.
    pub(crate) fn new(offered: Option<(OwnedFd, i32)>) -> PlaneSlot {
        PlaneSlot {
            offered: Mutex::new(offered),
            live: OnceLock::new(),
        }
    }

    /// The offer for `initialize`, when a socket was passed.
    pub(crate) fn offer(&self, limits: &DuplexLimits) -> Option<Offer> {
        let offered = self.offered.lock().unwrap_or_else(|e| e.into_inner());
        let (_, fd) = offered.as_ref()?;
        Some(Offer {
            version: wire::VERSION,
            fd: *fd,
            window: window(limits),
            chunk: limits.max_chunk_bytes.clamp(1, wire::MAX_PAYLOAD) as u32,
        })
    }

    /// Starts the plane when `accepted`, else closes the host's end. `retire` kills the
    /// worker.
    fn settle(
        &self,
        accepted: bool,
        limits: &DuplexLimits,
        routes: Arc<RouteTable>,
        generation: u64,
        retire: impl Fn() + Send + Sync + 'static,
    ) {
        let offered = self.offered.lock().unwrap_or_else(|e| e.into_inner()).take();
        let Some((fd, _)) = offered.filter(|_| accepted) else {
            return;
        };
        match HostPlane::start(fd, window(limits), routes, generation, retire) {
            Ok(plane) => {
                let _ = self.live.set(plane);
            }
            Err(e) => tracing::warn!("the duplex data plane could not start: {e}"),
        }
    }

    /// A fresh stdin route for an execute (its number, from `STDIN_ROUTE_BASE` up, and
    /// its handle), when the data plane is live.
    pub(crate) fn stdin_link(&self) -> Option<(u64, PlaneLink)> {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let plane = self.live.get()?.clone();
        let number = wire::STDIN_ROUTE_BASE + NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Some((number, plane.link_number(number)))
    }

    /// The per-route handle of `route_id`, when the data plane is live.
    pub(crate) fn link(&self, route_id: &str) -> Option<PlaneLink> {
        let plane = self.live.get()?.clone();
        let number = wire::route_number(route_id)?;
        Some(plane.link_number(number))
    }
}

impl HostPlane {
    /// Registers route `number`'s input (a full window of credit) and returns its handle.
    fn link_number(self: Arc<Self>, number: u64) -> PlaneLink {
        let plane = self;
        let input = Arc::new(Input {
            state: Mutex::new(InputState {
                credit: u64::from(plane.window),
                error: None,
            }),
            notify: Notify::new(),
        });
        plane.lock().insert(number, input.clone());
        PlaneLink { plane, number, input }
    }
}

/// A live data plane.
pub(crate) struct HostPlane {
    frames: mpsc::UnboundedSender<Vec<u8>>,
    inputs: Mutex<HashMap<u64, Arc<Input>>>,
    window: u32,
}

struct Input {
    state: Mutex<InputState>,
    notify: Notify,
}

struct InputState {
    /// Bytes the host may still send.
    credit: u64,
    /// The worker closed the input: the text every later write fails with.
    error: Option<String>,
}

impl HostPlane {
    fn start(
        fd: OwnedFd,
        window: u32,
        routes: Arc<RouteTable>,
        generation: u64,
        retire: impl Fn() + Send + Sync + 'static,
    ) -> io::Result<Arc<HostPlane>> {
        let stream = std::os::unix::net::UnixStream::from(fd);
        stream.set_nonblocking(true)?;
        let (read, write) = tokio::net::UnixStream::from_std(stream)?.into_split();
        let plane = Arc::new(HostPlane {
            frames: wire::spawn_writer(write),
            inputs: Mutex::new(HashMap::new()),
            window,
        });
        tokio::spawn(read_frames(
            Arc::downgrade(&plane),
            BufReader::with_capacity(256 * 1024, read),
            routes,
            generation,
            retire,
        ));
        Ok(plane)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Arc<Input>>> {
        self.inputs.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn input(&self, route: u64) -> Option<Arc<Input>> {
        self.lock().get(&route).cloned()
    }
}

impl Input {
    fn lock(&self) -> std::sync::MutexGuard<'_, InputState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

async fn read_frames(
    plane: Weak<HostPlane>,
    mut reader: BufReader<tokio::net::unix::OwnedReadHalf>,
    routes: Arc<RouteTable>,
    generation: u64,
    retire: impl Fn(),
) {
    loop {
        let frame = match wire::read_frame(&mut reader).await {
            Ok(Some(frame)) => frame,
            Ok(None) => return,
            Err(e) => {
                if e.kind() == io::ErrorKind::InvalidData {
                    tracing::warn!("the worker sent a malformed data plane frame ({e}); retiring it");
                    retire();
                }
                return;
            }
        };
        let Some(plane) = plane.upgrade() else { return };
        let routed = match frame.kind {
            Kind::Data if frame.payload.is_empty() => Some(Frame::Invalid),
            Kind::Data => Some(Frame::Stream(frame.payload)),
            Kind::Exit => Some(match wire::parse_exit(&frame.payload) {
                Some((exit_code, transport_closed)) => Frame::Exit(DuplexExit {
                    exit_code,
                    transport_closed,
                }),
                None => Frame::Invalid,
            }),
            Kind::Credit => {
                if let (Some(input), Some(bytes)) = (plane.input(frame.route), wire::parse_credit(&frame.payload)) {
                    input.lock().credit += u64::from(bytes);
                    input.notify.notify_waiters();
                }
                None
            }
            Kind::Close => {
                if let Some(input) = plane.input(frame.route) {
                    input
                        .lock()
                        .error
                        .get_or_insert_with(|| String::from_utf8_lossy(&frame.payload).into_owned());
                    input.notify.notify_waiters();
                }
                None
            }
            Kind::Eof => None,
        };
        if let Some(routed) = routed
            && !routes.route_frame(generation, &wire::route_id(frame.route), None, routed)
        {
            tracing::warn!(
                route = frame.route,
                "worker sent a data plane frame for a route the host never issued; retiring it"
            );
            retire();
            return;
        }
    }
}

/// One route's handle on the data plane; unregistered when dropped.
pub(crate) struct PlaneLink {
    plane: Arc<HostPlane>,
    number: u64,
    input: Arc<Input>,
}

impl PlaneLink {
    /// Sends `piece` under credit, waiting for credit (at most `timeout` in all) while
    /// `usable` holds; `ended` is notified when the route ends. A closed input fails with
    /// the worker's text, as the JSON write's error would.
    pub(crate) async fn send(
        &self,
        piece: &[u8],
        ended: &Notify,
        usable: impl Fn() -> Result<(), SandboxError>,
        timeout: Duration,
    ) -> Result<(), SandboxError> {
        let deadline = Instant::now() + timeout;
        let mut rest = piece;
        loop {
            let credited = self.input.notify.notified();
            let route_ended = ended.notified();
            tokio::pin!(credited, route_ended);
            credited.as_mut().enable();
            route_ended.as_mut().enable();
            usable()?;
            {
                let mut state = self.input.lock();
                if let Some(message) = &state.error {
                    return Err(SandboxError::Rpc {
                        method: methods::DUPLEX_WRITE.into(),
                        code: codes::WORKER_ERROR,
                        message: message.clone(),
                        data: None,
                    });
                }
                if state.credit > 0 {
                    let n = rest.len().min(usize::try_from(state.credit).unwrap_or(usize::MAX));
                    state.credit -= n as u64;
                    let _ = self
                        .plane
                        .frames
                        .send(wire::encode(self.number, Kind::Data, &rest[..n]));
                    rest = &rest[n..];
                    if rest.is_empty() {
                        return Ok(());
                    }
                    continue;
                }
            }
            tokio::select! {
                () = &mut credited => {}
                () = &mut route_ended => {}
                () = tokio::time::sleep_until(deadline) => {
                    return Err(SandboxError::Timeout {
                        method: methods::DUPLEX_WRITE.into(),
                        ms: timeout.as_millis() as u64,
                    });
                }
            }
        }
    }

    /// Half-closes the command's stdin after every byte sent before; later writes fail
    /// as the worker would fail them (`Duplex channel is closed.`).
    pub(crate) fn eof(&self) {
        self.input
            .lock()
            .error
            .get_or_insert_with(|| DriverError::ChannelClosed.to_string());
        let _ = self.plane.frames.send(wire::encode(self.number, Kind::Eof, &[]));
    }

    /// The reader took `bytes` of output: the worker may send that much more.
    pub(crate) fn consumed(&self, bytes: usize) {
        let mut left = bytes;
        while left > 0 {
            let n = left.min(u32::MAX as usize);
            let _ = self.plane.frames.send(wire::credit(self.number, n as u32));
            left -= n;
        }
    }
}

impl Drop for PlaneLink {
    fn drop(&mut self) {
        self.plane.lock().remove(&self.number);
    }
}

//! The worker side of the `envrt.dataPlane` extension (framing in
//! `envrt_plugin_protocol::dataplane`): the socket the host passed at spawn carries every duplex
//! channel's bytes in binary frames, with credit-based flow control per route.
//!
//! - At start the worker takes every socket it inherited (above stderr) and marks it
//!   close-on-exec, so no sandboxed command ever holds the data plane; a socket that no
//!   offer names is closed after `initialize` (or at once under `--no-data-plane`).
//! - `initialize` with an `envrtDataPlane {version: 1, fd, window}` offer naming one of
//!   them starts the plane; the worker then lists `envrt.dataPlane` in `supportedMethods`.
//!   Without an offer (an SDK host, the raw protocol) nothing changes.
//! - Output: the command's stdout goes out as `data` frames, at most `window` bytes ahead
//!   of the host's credit; while there is none the pipe is not read, so the command
//!   blocks on its writes. The `exit` frame follows the last `data` frame.
//! - Input: `data` frames are written to the command's stdin in order, and their bytes
//!   are credited back once written; `eof` closes stdin after them. A write that fails
//!   answers with one `close` frame carrying the error text (`Duplex channel is
//!   closed.`).
//! - Execute stdin: an execute with the extension param `envrtStdinRoute` (a number from
//!   `STDIN_ROUTE_BASE` up) takes its stdin from that route's `data` frames, written to the
//!   command's stdin in order and credited back once written, until `eof`; so megabytes
//!   of stdin never sit in a JSON line, and at most the window waits in the worker (frames
//!   that arrive before their execute is read wait for it, see `Plane::take_stdin`).

use std::collections::{HashMap, VecDeque};
use std::os::fd::{AsFd, AsRawFd as _, FromRawFd as _, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};

use envrt_driver_api::DriverError;
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _, BufReader};
use tokio::sync::{Notify, mpsc};

use super::duplex::{Channels, Pending};
use envrt_plugin_protocol::dataplane::{self as wire, Kind, Offer};

/// Sockets inherited at start, waiting for an offer.
static ADOPTED: Mutex<Vec<OwnedFd>> = Mutex::new(Vec::new());

/// Takes every socket this process inherited above stderr and marks it close-on-exec;
/// keeps them for an offer when `keep`, else closes them. Call first thing in `main`,
/// before anything opens a descriptor or starts a thread.
#[allow(unsafe_code)]
pub(crate) fn adopt_inherited_sockets(keep: bool) {
    let Ok(entries) = std::fs::read_dir("/proc/self/fd") else {
        return;
    };
    let numbers: Vec<i32> = entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .filter(|&fd| fd > 2)
        .collect();
    let mut adopted = ADOPTED.lock().unwrap_or_else(|e| e.into_inner());
    for fd in numbers {
        // the listing's own descriptor is closed by now: its link no longer resolves
        let is_socket = std::fs::read_link(format!("/proc/self/fd/{fd}"))
            .is_ok_and(|target| target.to_string_lossy().starts_with("socket:"));
        if !is_socket {
            continue;
        }
        // SAFETY: `fd` is an open socket this process inherited: nothing in it has opened
        // or claimed a socket yet (this runs first in `main`), so this is its only owner.
        let owned = unsafe { OwnedFd::from_raw_fd(fd) };
        let _ = rustix::io::fcntl_setfd(&owned, rustix::io::FdFlags::CLOEXEC);
        if keep {
            adopted.push(owned);
        }
    }
}

/// Answers the offer in `initialize` params: starts the plane for `channels` and returns
/// true when the offer is one this worker speaks and names an adopted socket. Sockets no
/// offer named are closed.
pub(crate) fn accept(params: &Value, channels: &Arc<Channels>) -> bool {
    let adopted = std::mem::take(&mut *ADOPTED.lock().unwrap_or_else(|e| e.into_inner()));
    let Some(offer) = params
        .get(wire::OFFER_PARAM)
        .and_then(|v| serde_json::from_value::<Offer>(v.clone()).ok())
    else {
        return false;
    };
    if offer.version != wire::VERSION || offer.window == 0 || offer.chunk == 0 {
        return false;
    }
    let Some(fd) = adopted.into_iter().find(|fd| fd.as_raw_fd() == offer.fd) else {
        return false;
    };
    match Plane::start(fd, offer, Arc::downgrade(channels)) {
        Ok(plane) => channels.plane.set(plane).is_ok(),
        Err(e) => {
            eprintln!("envrt-sandbox-worker: the data plane could not start: {e}");
            false
        }
    }
}

/// The live data plane.
pub(crate) struct Plane {
    frames: mpsc::UnboundedSender<Vec<u8>>,
    routes: Mutex<HashMap<u64, Entry>>,
    stdins: Mutex<Stdins>,
    window: u32,
    chunk: usize,
}

/// The stdin routes of executes: open ones (frames queue until the execute takes them;
/// the host sends at most the window before credit), and the last ones finished, whose
/// late frames are dropped.
#[derive(Default)]
struct Stdins {
    open: HashMap<u64, (StdinSender, Option<mpsc::UnboundedReceiver<StdinFrame>>)>,
    done: VecDeque<u64>,
}

type StdinSender = mpsc::UnboundedSender<StdinFrame>;

/// One input frame of an execute's stdin.
pub(crate) enum StdinFrame {
    Data(Vec<u8>),
    Eof,
}

#[derive(Clone)]
struct Entry {
    route: String,
    session: String,
    output: Arc<Output>,
    acks: mpsc::UnboundedSender<Ack>,
}

/// What a route's stdin did with one input frame, in arrival order.
enum Ack {
    Write(usize, Pending),
    Eof(Pending),
    Failed(String),
}

impl Plane {
    fn start(fd: OwnedFd, offer: Offer, channels: Weak<Channels>) -> std::io::Result<Arc<Plane>> {
        let stream = std::os::unix::net::UnixStream::from(fd);
        stream.set_nonblocking(true)?;
        let (read, write) = tokio::net::UnixStream::from_std(stream)?.into_split();
        let plane = Arc::new(Plane {
            frames: wire::spawn_writer(write),
            routes: Mutex::new(HashMap::new()),
            stdins: Mutex::default(),
            window: offer.window,
            // a quarter of the window per frame keeps several frames in flight per route
            chunk: (offer.chunk as usize)
                .min(wire::MAX_PAYLOAD)
                .min((offer.window as usize / 4).max(1)),
        });
        tokio::spawn(read_frames(
            Arc::downgrade(&plane),
            channels,
            BufReader::with_capacity(16 * 1024, read),
        ));
        Ok(plane)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Entry>> {
        self.routes.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Puts the channel (`route`, `session`) on the plane; `None` (JSON frames) when the
    /// route id is not `duplex-route-<n>`. `closed` is the channel's closed flag.
    pub(crate) fn register(&self, route: &str, session: &str, closed: Arc<AtomicBool>) -> Option<Arc<Output>> {
        let number = wire::route_number(route)?;
        let output = Arc::new(Output {
            number,
            frames: self.frames.clone(),
            credit: Mutex::new(u64::from(self.window)),
            chunk: self.chunk,
            notify: Notify::new(),
            closed,
        });
        let (acks, queue) = mpsc::unbounded_channel();
        tokio::spawn(acknowledge(number, self.frames.clone(), queue));
        self.lock().insert(
            number,
            Entry {
                route: route.to_owned(),
                session: session.to_owned(),
                output: output.clone(),
                acks,
            },
        );
        Some(output)
    }

    /// The stdin stream of an execute naming `route` (`None` for a number below
    /// `STDIN_ROUTE_BASE`, or one already used).
    pub(crate) fn take_stdin(self: &Arc<Self>, route: u64) -> Option<StdinStream> {
        if route < wire::STDIN_ROUTE_BASE {
            return None;
        }
        let mut stdins = self.stdins.lock().unwrap_or_else(|e| e.into_inner());
        if stdins.done.contains(&route) {
            return None;
        }
        let rx = stdins.open.entry(route).or_insert_with(stdin_pair).1.take()?;
        Some(StdinStream {
            plane: self.clone(),
            route,
            rx,
        })
    }

    fn stdin_frame(&self, route: u64, frame: StdinFrame) {
        let mut stdins = self.stdins.lock().unwrap_or_else(|e| e.into_inner());
        if !stdins.done.contains(&route) {
            let _ = stdins.open.entry(route).or_insert_with(stdin_pair).0.send(frame);
        }
    }

    /// The channel of `route` was closed: nothing more is sent or taken for it.
    pub(crate) fn forget(&self, route: &str) {
        let entry = wire::route_number(route).and_then(|n| self.lock().remove(&n));
        if let Some(entry) = entry {
            entry.output.closed.store(true, Ordering::SeqCst);
            entry.output.notify.notify_waiters();
        }
    }
}

fn stdin_pair() -> (StdinSender, Option<mpsc::UnboundedReceiver<StdinFrame>>) {
    let (tx, rx) = mpsc::unbounded_channel();
    (tx, Some(rx))
}

/// An execute's stdin on the data plane; the route is finished when dropped.
pub(crate) struct StdinStream {
    plane: Arc<Plane>,
    route: u64,
    rx: mpsc::UnboundedReceiver<StdinFrame>,
}

impl StdinStream {
    /// Writes the route's data to `pipe` in order, crediting each frame back once written,
    /// and closes it at `eof`. A failed write (the command stopped reading) answers with one
    /// `close` frame, so the host stops sending.
    pub(crate) async fn feed<W: AsyncWrite + Unpin>(mut self, mut pipe: W) {
        while let Some(frame) = self.rx.recv().await {
            let StdinFrame::Data(bytes) = frame else { break };
            if pipe.write_all(&bytes).await.is_err() {
                let text = DriverError::ChannelClosed.to_string();
                let _ = self
                    .plane
                    .frames
                    .send(wire::encode(self.route, Kind::Close, text.as_bytes()));
                break;
            }
            let n = u32::try_from(bytes.len()).unwrap_or(u32::MAX);
            let _ = self.plane.frames.send(wire::credit(self.route, n));
        }
    }
}

impl Drop for StdinStream {
    fn drop(&mut self) {
        let mut stdins = self.plane.stdins.lock().unwrap_or_else(|e| e.into_inner());
        stdins.open.remove(&self.route);
        stdins.done.push_back(self.route);
        if stdins.done.len() > 1024 {
            stdins.done.pop_front();
        }
    }
}

/// The output side of one route.
pub(crate) struct Output {
    number: u64,
    frames: mpsc::UnboundedSender<Vec<u8>>,
    credit: Mutex<u64>,
    /// The largest data payload to send: the host's chunk bound, at most a quarter of the
    /// window.
    chunk: usize,
    notify: Notify,
    closed: Arc<AtomicBool>,
}

impl Output {
    /// Moves the command's stdout to the host: reads at most the credit (and the host's
    /// chunk bound) at a time straight into a frame, and reads nothing while there is no
    /// credit, so the command blocks on its writes. Ends at the end of output, or when the
    /// channel is closed (the rest is not read).
    pub(crate) async fn pump<R: AsyncRead + AsFd + Unpin>(&self, mut pipe: R) {
        // bulk output in fewer, larger reads (best effort: the system may refuse)
        let _ = rustix::pipe::fcntl_setpipe_size(&pipe, 1024 * 1024);
        loop {
            let credited = self.notify.notified();
            tokio::pin!(credited);
            credited.as_mut().enable();
            if self.closed.load(Ordering::SeqCst) {
                return;
            }
            let credit = *self.credit.lock().unwrap_or_else(|e| e.into_inner());
            let want = self.chunk.min(usize::try_from(credit).unwrap_or(usize::MAX));
            if want == 0 {
                credited.await;
                continue;
            }
            let mut frame = vec![0u8; wire::HEADER_BYTES + want];
            let n = match pipe.read(&mut frame[wire::HEADER_BYTES..]).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            if self.closed.load(Ordering::SeqCst) {
                return;
            }
            *self.credit.lock().unwrap_or_else(|e| e.into_inner()) -= n as u64;
            frame.truncate(wire::HEADER_BYTES + n);
            wire::write_header(&mut frame, self.number, Kind::Data);
            let _ = self.frames.send(frame);
        }
    }

    /// Sends the exit frame (after every data frame sent before).
    pub(crate) fn exit(&self, exit_code: Option<i32>) {
        let _ = self.frames.send(wire::exit(self.number, exit_code, false));
    }

    fn grant(&self, bytes: u32) {
        *self.credit.lock().unwrap_or_else(|e| e.into_inner()) += u64::from(bytes);
        self.notify.notify_waiters();
    }
}

async fn read_frames(
    plane: Weak<Plane>,
    channels: Weak<Channels>,
    mut reader: BufReader<tokio::net::unix::OwnedReadHalf>,
) {
    loop {
        let frame = match wire::read_frame(&mut reader).await {
            Ok(Some(frame)) => frame,
            Ok(None) => return,
            Err(e) => {
                eprintln!("envrt-sandbox-worker: the data plane broke: {e}");
                return;
            }
        };
        let (Some(plane), Some(channels)) = (plane.upgrade(), channels.upgrade()) else {
            return;
        };
        if frame.route >= wire::STDIN_ROUTE_BASE {
            match frame.kind {
                Kind::Data => plane.stdin_frame(frame.route, StdinFrame::Data(frame.payload)),
                Kind::Eof => plane.stdin_frame(frame.route, StdinFrame::Eof),
                _ => {}
            }
            continue;
        }
        // a frame for a route closed meanwhile is dropped
        let Some(entry) = plane.lock().get(&frame.route).cloned() else {
            continue;
        };
        let ack = match frame.kind {
            Kind::Data => {
                let n = frame.payload.len();
                channels
                    .write_bytes(&entry.route, &entry.session, frame.payload)
                    .map(|pending| Ack::Write(n, pending))
            }
            Kind::Eof => channels.close_input_pair(&entry.route, &entry.session).map(Ack::Eof),
            Kind::Credit => {
                if let Some(bytes) = wire::parse_credit(&frame.payload) {
                    entry.output.grant(bytes);
                }
                continue;
            }
            Kind::Close | Kind::Exit => continue,
        };
        let _ = entry.acks.send(ack.unwrap_or_else(|e| Ack::Failed(e.message)));
    }
}

/// Credits written input back to the host in order; the first failure is sent as one
/// `close` frame, after which nothing more is credited.
async fn acknowledge(number: u64, frames: mpsc::UnboundedSender<Vec<u8>>, mut acks: mpsc::UnboundedReceiver<Ack>) {
    let closed = || DriverError::ChannelClosed.to_string();
    let mut failed = false;
    while let Some(ack) = acks.recv().await {
        let outcome = match ack {
            Ack::Write(n, pending) => match pending.await {
                Ok(Ok(())) => Ok(n),
                Ok(Err(e)) => Err(e.message),
                Err(_) => Err(closed()),
            },
            Ack::Eof(pending) => match pending.await {
                Ok(Ok(())) => Ok(0),
                Ok(Err(e)) => Err(e.message),
                Err(_) => Err(closed()),
            },
            Ack::Failed(message) => Err(message),
        };
        if failed {
            continue;
        }
        match outcome {
            Ok(0) => {}
            Ok(n) => {
                let _ = frames.send(wire::credit(number, u32::try_from(n).unwrap_or(u32::MAX)));
            }
            Err(message) => {
                failed = true;
                let _ = frames.send(wire::encode(number, Kind::Close, message.as_bytes()));
            }
        }
    }
}

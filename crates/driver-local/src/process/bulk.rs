//! Reading a command's output stream on a blocking thread of its own once the stream
//! carries bulk output, and handing output to the caller's sink one chunk at a time.
//!
//! Read through the event loop, every write of the command into an empty pipe costs the
//! reader an `epoll_wait` wake-up of a runtime worker, a task poll, the read, and a read
//! more that finds the pipe empty (`EAGAIN`) before the task parks again; a program that
//! writes 8 KiB at a time (`head`, `cat` of a file, most `stdio`) pays that for every
//! write. A thread that sleeps in `poll(2)` on the pipe is woken by the writer directly,
//! as `cat` is in a shell pipeline. Streams with little output never get a thread: the
//! first read that fills the task's buffer hands the stream over (see `exec`), so that
//! many concurrent small commands cost no threads.

use std::io::{self, Read};
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use envrt_driver_api::{CappedBuffer, OutputSink, OutputStream};
use nix::fcntl::{FcntlArg, fcntl};
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};

/// Size of the pipe of a stream read in bulk (`F_SETPIPE_SZ`; the host may refuse, which
/// costs only speed: past the user's `pipe-user-pages-soft` the kernel says `EPERM`).
pub(crate) const BULK_PIPE: usize = 1024 * 1024;

/// Size of each read of a stream read in bulk: at most this much per sink call. Small
/// enough that the buffer stays in the core's cache between the pipe and the sink.
pub(crate) const BULK_READ: usize = 256 * 1024;

/// How long the reader thread sleeps at most in one `poll` before it looks at whether it
/// was told to stop.
const POLL_SLICE_MS: u16 = 20;

/// The caller's sink, called one chunk at a time whichever thread reads: a stream read
/// by a thread and one read by the task never call it at the same time.
pub(crate) struct Delivery {
    sink: Option<Arc<dyn OutputSink>>,
    gate: Mutex<()>,
}

impl Delivery {
    pub(crate) fn new(sink: Option<Arc<dyn OutputSink>>) -> Arc<Self> {
        Arc::new(Delivery {
            sink,
            gate: Mutex::new(()),
        })
    }

    /// Hands `chunk` of `stream` to the sink, if there is one.
    pub(crate) fn deliver(&self, stream: OutputStream, chunk: &[u8]) {
        if let Some(sink) = &self.sink {
            // A sink that panicked poisons the gate; the panic itself ends the call.
            let _one_at_a_time = self.gate.lock().unwrap_or_else(|e| e.into_inner());
            sink.on_chunk(stream, chunk);
        }
    }
}

/// What the reader thread and the supervising task share.
#[derive(Default)]
struct Shared {
    /// Set when the task no longer wants output (the drain is over, or the call was
    /// dropped): the thread delivers nothing more and ends within [`POLL_SLICE_MS`].
    stop: AtomicBool,
    /// Bytes read so far, so that the task can tell an idle pipe from a busy one.
    bytes: AtomicU64,
}

/// A stream being read by a thread of its own.
pub(crate) struct BulkReader {
    shared: Arc<Shared>,
    done: tokio::task::JoinHandle<CappedBuffer>,
}

impl BulkReader {
    /// Starts reading `pipe` (the read end of the command's `stream`) on a blocking thread
    /// until end of file or [`stop`](Self::stop), keeping what `kept` still takes.
    pub(crate) fn start(pipe: OwnedFd, stream: OutputStream, kept: CappedBuffer, delivery: Arc<Delivery>) -> Self {
        let _ = fcntl(&pipe, FcntlArg::F_SETPIPE_SZ(BULK_PIPE as i32));
        let shared = Arc::new(Shared::default());
        let thread_shared = Arc::clone(&shared);
        let done = tokio::task::spawn_blocking(move || pump(pipe, stream, kept, &delivery, &thread_shared));
        BulkReader { shared, done }
    }

    /// Bytes read so far.
    pub(crate) fn progress(&self) -> u64 {
        self.shared.bytes.load(Ordering::Relaxed)
    }

    /// Tells the thread to deliver nothing more and end.
    pub(crate) fn stop(&self) {
        self.shared.stop.store(true, Ordering::Release);
    }

    /// Waits for the thread to end (end of file, or soon after [`stop`](Self::stop)) and
    /// returns what it kept. A panic of the sink on the thread is resumed here.
    pub(crate) async fn finish(&mut self) -> CappedBuffer {
        match (&mut self.done).await {
            Ok(kept) => kept,
            Err(error) if error.is_panic() => std::panic::resume_unwind(error.into_panic()),
            // Cancelled only when the runtime shuts down: nothing was kept.
            Err(_) => CappedBuffer::new(0),
        }
    }
}

impl Drop for BulkReader {
    /// The call was dropped, or is over: no more sink calls after this.
    fn drop(&mut self) {
        self.stop();
    }
}

/// The reader thread: nonblocking reads, `poll` while the pipe is empty.
fn pump(
    pipe: OwnedFd,
    stream: OutputStream,
    mut kept: CappedBuffer,
    delivery: &Delivery,
    shared: &Shared,
) -> CappedBuffer {
    let mut pipe = std::fs::File::from(pipe);
    let mut buf = vec![0u8; BULK_READ];
    while !shared.stop.load(Ordering::Acquire) {
        match pipe.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                let chunk = &buf[..n];
                shared.bytes.fetch_add(n as u64, Ordering::Relaxed);
                kept.push(chunk);
                if !shared.stop.load(Ordering::Acquire) {
                    delivery.deliver(stream, chunk);
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                let mut fds = [PollFd::new(pipe.as_fd(), PollFlags::POLLIN)];
                let _ = poll(&mut fds, PollTimeout::from(POLL_SLICE_MS));
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
    kept
}

//! Sinks that go wrong only when the caller's sink is slow: one relays chunks through a
//! small queue and drops what does not fit (a `try_send` where a driver should wait), the
//! other holds a chunk back whenever the sink was slow and hands it on after the next one
//! of its stream. With a quick sink both deliver every byte in order.

use std::sync::mpsc::{SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use envrt_runtime_core::{OutputSink, OutputStream};

/// How the relay goes wrong.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SinkFault {
    /// A queue of two chunks; a chunk that does not fit is dropped.
    DropsWhenFull,
    /// After a slow delivery, the next chunk is delivered after the one that follows it.
    SwapsWhenSlow,
}

type Chunk = (OutputStream, Vec<u8>);

/// The relay between the driver and the caller's sink; [`Relay::finish`] hands on what is
/// left once the command is over.
pub(crate) struct Relay {
    sender: Mutex<Option<SyncSender<Chunk>>>,
    thread: Mutex<Option<JoinHandle<()>>>,
    held: Mutex<Option<Chunk>>,
    slow: Mutex<bool>,
    sink: Arc<dyn OutputSink>,
    fault: SinkFault,
}

impl Relay {
    pub(crate) fn new(sink: Arc<dyn OutputSink>, fault: SinkFault) -> Arc<Relay> {
        let (sender, thread) = if fault == SinkFault::DropsWhenFull {
            let (tx, rx) = std::sync::mpsc::sync_channel::<Chunk>(2);
            let downstream = sink.clone();
            let thread = std::thread::spawn(move || {
                for (stream, chunk) in rx {
                    downstream.on_chunk(stream, &chunk);
                }
            });
            (Some(tx), Some(thread))
        } else {
            (None, None)
        };
        Arc::new(Relay {
            sender: Mutex::new(sender),
            thread: Mutex::new(thread),
            held: Mutex::new(None),
            slow: Mutex::new(false),
            sink,
            fault,
        })
    }

    fn deliver(&self, stream: OutputStream, chunk: &[u8]) {
        let started = Instant::now();
        self.sink.on_chunk(stream, chunk);
        *self.slow.lock().unwrap() = started.elapsed() > Duration::from_millis(2);
    }

    /// Hands on whatever is still held or queued.
    pub(crate) fn finish(&self) {
        if let Some((stream, chunk)) = self.held.lock().unwrap().take() {
            self.sink.on_chunk(stream, &chunk);
        }
        drop(self.sender.lock().unwrap().take());
        if let Some(thread) = self.thread.lock().unwrap().take() {
            let _ = thread.join();
        }
    }
}

impl OutputSink for Relay {
    fn on_chunk(&self, stream: OutputStream, chunk: &[u8]) {
        match self.fault {
            SinkFault::DropsWhenFull => {
                if let Some(tx) = self.sender.lock().unwrap().as_ref() {
                    match tx.try_send((stream, chunk.to_vec())) {
                        Ok(()) | Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => {}
                    }
                }
            }
            SinkFault::SwapsWhenSlow => {
                let mut held = self.held.lock().unwrap();
                match held.take() {
                    Some((held_stream, held_chunk)) if held_stream == stream => {
                        drop(held);
                        self.deliver(stream, chunk);
                        self.deliver(held_stream, &held_chunk);
                    }
                    other => {
                        *held = other;
                        if held.is_none() && *self.slow.lock().unwrap() {
                            *held = Some((stream, chunk.to_vec()));
                        } else {
                            drop(held);
                            self.deliver(stream, chunk);
                        }
                    }
                }
            }
        }
    }
}

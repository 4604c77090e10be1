//! Tail capture ([`OutputKeep::Tail`](envrt_driver_api::OutputKeep)): the worker caps
//! each stream by its head, but streams every byte as `execute.log`; with tail mode the
//! host keeps the newest bytes of that stream itself and uses them as the result's output.

use std::sync::{Arc, Mutex, PoisonError};

use envrt_driver_api::{CappedBuffer, ExecuteRequest, OutputKeep, OutputStream};

use crate::host::worker::connection::ExecSink;

/// The two streams' tail buffers, fed from `execute.log`.
pub(crate) struct TailCapture {
    buffers: Arc<Mutex<[CappedBuffer; 2]>>,
}

impl TailCapture {
    /// A capture when `request` keeps the tail; `None` for the head (the worker's output).
    pub(crate) fn for_request(request: &ExecuteRequest) -> Option<TailCapture> {
        (request.keep == OutputKeep::Tail).then(|| TailCapture {
            buffers: Arc::new(Mutex::new([request.output_buffer(), request.output_buffer()])),
        })
    }

    /// A sink that records each chunk, then hands it to `next` (the caller's sink).
    pub(crate) fn sink(&self, next: Option<ExecSink>) -> ExecSink {
        let buffers = self.buffers.clone();
        Arc::new(move |stream: OutputStream, bytes: Vec<u8>| {
            {
                let mut buffers = buffers.lock().unwrap_or_else(PoisonError::into_inner);
                buffers[usize::from(stream == OutputStream::Stderr)].push(&bytes);
            }
            if let Some(next) = &next {
                next(stream, bytes);
            }
        })
    }

    /// The stdout and stderr buffers.
    pub(crate) fn into_buffers(self) -> (CappedBuffer, CappedBuffer) {
        let mut buffers = self.buffers.lock().unwrap_or_else(PoisonError::into_inner);
        let [stdout, stderr] = std::mem::take(&mut *buffers);
        (stdout, stderr)
    }
}

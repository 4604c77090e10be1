//! `NativeDuplex`: a live two-way byte channel to a running command, each operation an
//! awaitable. The Python half makes it an async iterator of output chunks.

use std::sync::Arc;

use envrt::DuplexChannel;
use pyo3::prelude::*;

use crate::errors::runtime_error;
use crate::result::Bytes;

/// An open duplex channel.
#[pyclass(frozen, module = "envrt._envrt")]
pub(crate) struct NativeDuplex {
    channel: Arc<dyn DuplexChannel>,
}

impl NativeDuplex {
    pub(crate) fn new(channel: Box<dyn DuplexChannel>) -> Self {
        NativeDuplex {
            channel: Arc::from(channel),
        }
    }
}

#[pymethods]
impl NativeDuplex {
    /// Writes bytes to the command's stdin.
    fn write<'py>(&self, py: Python<'py>, data: Vec<u8>) -> PyResult<Bound<'py, PyAny>> {
        let channel = self.channel.clone();
        crate::rt::future_into_py(py, async move {
            channel.write(&data).await.map_err(|e| runtime_error(e.into()))
        })
    }

    /// The next output chunk, or `None` once output has ended.
    fn read<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let channel = self.channel.clone();
        crate::rt::future_into_py(py, async move {
            let chunk = channel.read().await.map_err(|e| runtime_error(e.into()))?;
            Ok(chunk.map(Bytes))
        })
    }

    /// Closes the command's stdin (EOF).
    fn close_input<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let channel = self.channel.clone();
        crate::rt::future_into_py(py, async move {
            channel.close_input().await.map_err(|e| runtime_error(e.into()))
        })
    }

    /// Stops the command.
    fn stop<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let channel = self.channel.clone();
        crate::rt::future_into_py(
            py,
            async move { channel.stop().await.map_err(|e| runtime_error(e.into())) },
        )
    }

    /// Closes the channel and frees everything; idempotent.
    fn close<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let channel = self.channel.clone();
        crate::rt::future_into_py(
            py,
            async move { channel.close().await.map_err(|e| runtime_error(e.into())) },
        )
    }

    /// Waits for the end: `(exit_code, transport_closed)`; the exit code is `None` when
    /// the host ended the channel.
    fn wait<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let channel = self.channel.clone();
        crate::rt::future_into_py(py, async move {
            let exit = channel.wait().await.map_err(|e| runtime_error(e.into()))?;
            Ok((exit.exit_code, exit.transport_closed))
        })
    }
}

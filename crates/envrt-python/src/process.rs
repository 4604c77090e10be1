//! Persistent process sessions (contract section 9) for Python: `NativeProcesses` holds
//! the runtime's process verbs (spawn, list, find, write, close stdin, signal, resize,
//! wait), each an awaitable, and `NativeProcessOutput` one live output stream. Process
//! records cross as JSON text in the contract's field names; refusals keep their exact
//! text and kind (`process_not_found`, `process_exited`, ...).

use std::collections::BTreeMap;
use std::sync::Arc;

use envrt::core::ProcessOutputStream;
use envrt::core::process::{Offsets, OutputEvent, SpawnRequest, StdinMode, TtySize};
use envrt::{EnvValue, EnvironmentRuntime};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::errors::runtime_error;
use crate::result::Bytes;
use crate::runtime::{from_json, seconds, to_json};

/// The process verbs of one runtime.
#[pyclass(frozen, module = "envrt._envrt")]
pub(crate) struct NativeProcesses {
    inner: Arc<EnvironmentRuntime>,
}

impl NativeProcesses {
    pub(crate) fn new(inner: Arc<EnvironmentRuntime>) -> Self {
        NativeProcesses { inner }
    }
}

/// One output event as Python sees it: `("chunk", stream, offset, bytes)` or
/// `("exit", None, None, info_json)`.
type Event = (
    &'static str,
    Option<&'static str>,
    Option<u64>,
    Option<Bytes>,
    Option<String>,
);

#[pymethods]
impl NativeProcesses {
    /// Spawns `argv` on the lease; returns the process as JSON. `tty` is `(rows, cols)`.
    #[pyo3(signature = (lease_id, argv, tty=None, keep=None, stdin=false, env=BTreeMap::new(), cwd=None, timeout=None, idempotency_key=None, user=None))]
    #[allow(clippy::too_many_arguments)]
    fn spawn<'py>(
        &self,
        py: Python<'py>,
        lease_id: String,
        argv: Vec<String>,
        tty: Option<(u16, u16)>,
        keep: Option<u64>,
        stdin: bool,
        env: BTreeMap<String, String>,
        cwd: Option<String>,
        timeout: Option<f64>,
        idempotency_key: Option<String>,
        user: Option<String>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let request = SpawnRequest {
            argv,
            cwd,
            user,
            env: env.into_iter().map(|(k, v)| (k, EnvValue::from(v))).collect(),
            stdin: if stdin { StdinMode::Piped } else { StdinMode::Null },
            tty: tty.map(|(rows, cols)| TtySize { rows, cols }),
            keep,
            timeout: timeout.map(seconds).transpose()?,
            idempotency_key,
        };
        let runtime = self.inner.clone();
        crate::rt::future_into_py(py, async move {
            let info = runtime.spawn(&lease_id, request).await.map_err(runtime_error)?;
            Ok(to_json(&info))
        })
    }

    /// Every process of the lease as a JSON list, in spawn order.
    fn processes<'py>(&self, py: Python<'py>, lease_id: String) -> PyResult<Bound<'py, PyAny>> {
        let runtime = self.inner.clone();
        crate::rt::future_into_py(py, async move {
            let list = runtime.processes(&lease_id).await.map_err(runtime_error)?;
            Ok(to_json(&list))
        })
    }

    /// The process `id` as JSON, from any program on the same store.
    fn process<'py>(&self, py: Python<'py>, id: String) -> PyResult<Bound<'py, PyAny>> {
        let runtime = self.inner.clone();
        crate::rt::future_into_py(py, async move {
            let info = runtime.process(&id).await.map_err(runtime_error)?;
            Ok(to_json(&info))
        })
    }

    /// The output stream of `id`. `every` starts each stream the process has at that
    /// offset; `offsets` (JSON, `{"stdout": n, ...}`) names streams one by one; with
    /// neither, each stream starts at its oldest byte held.
    #[pyo3(signature = (id, every=None, offsets=None))]
    fn output<'py>(
        &self,
        py: Python<'py>,
        id: String,
        every: Option<u64>,
        offsets: Option<String>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let mut from: Offsets = match offsets {
            Some(text) => from_json(&text)?,
            None => Offsets::default(),
        };
        let runtime = self.inner.clone();
        crate::rt::future_into_py(py, async move {
            if let Some(offset) = every {
                let info = runtime.process(&id).await.map_err(runtime_error)?;
                for held in &info.streams {
                    from = from.with(held.stream, offset);
                }
            }
            let stream = runtime.output(&id, &from).await.map_err(runtime_error)?;
            Ok(NativeProcessOutput {
                stream: Arc::new(tokio::sync::Mutex::new(stream)),
            })
        })
    }

    /// Writes bytes to the process's stdin (or terminal).
    fn write_stdin<'py>(&self, py: Python<'py>, id: String, data: Vec<u8>) -> PyResult<Bound<'py, PyAny>> {
        let runtime = self.inner.clone();
        crate::rt::future_into_py(py, async move {
            runtime.write_stdin(&id, &data).await.map_err(runtime_error)
        })
    }

    /// Ends the process's stdin.
    fn close_stdin<'py>(&self, py: Python<'py>, id: String) -> PyResult<Bound<'py, PyAny>> {
        let runtime = self.inner.clone();
        crate::rt::future_into_py(py, async move { runtime.close_stdin(&id).await.map_err(runtime_error) })
    }

    /// Sends `signal` (`TERM`, `SIGTERM` or a number) to the process group; returns the
    /// process as JSON.
    fn signal<'py>(&self, py: Python<'py>, id: String, signal: String) -> PyResult<Bound<'py, PyAny>> {
        let runtime = self.inner.clone();
        crate::rt::future_into_py(py, async move {
            let info = runtime.signal(&id, &signal).await.map_err(runtime_error)?;
            Ok(to_json(&info))
        })
    }

    /// Resizes the process's terminal.
    fn resize<'py>(&self, py: Python<'py>, id: String, rows: u16, cols: u16) -> PyResult<Bound<'py, PyAny>> {
        if rows == 0 || cols == 0 {
            return Err(PyValueError::new_err(format!(
                "a terminal needs at least 1 row and 1 column, not {rows}x{cols}"
            )));
        }
        let runtime = self.inner.clone();
        crate::rt::future_into_py(py, async move {
            runtime.resize(&id, rows, cols).await.map_err(runtime_error)
        })
    }

    /// Waits for the process to end, at most `timeout` seconds; returns its status as
    /// JSON (still `running` when the timeout passed first).
    #[pyo3(signature = (id, timeout=None))]
    fn wait<'py>(&self, py: Python<'py>, id: String, timeout: Option<f64>) -> PyResult<Bound<'py, PyAny>> {
        let timeout = timeout.map(seconds).transpose()?;
        let runtime = self.inner.clone();
        crate::rt::future_into_py(py, async move {
            let status = runtime.wait_process(&id, timeout).await.map_err(runtime_error)?;
            Ok(to_json(&status))
        })
    }
}

/// One process's live output: chunks in order, then the exit.
#[pyclass(frozen, module = "envrt._envrt")]
pub(crate) struct NativeProcessOutput {
    stream: Arc<tokio::sync::Mutex<ProcessOutputStream>>,
}

#[pymethods]
impl NativeProcessOutput {
    /// The next event: `("chunk", stream, offset, bytes, None)`, then
    /// `("exit", None, None, None, info_json)`; `None` after the exit.
    fn next<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let stream = self.stream.clone();
        crate::rt::future_into_py(py, async move {
            let event = stream.lock().await.next().await.map_err(runtime_error)?;
            let event: Option<Event> = event.map(|event| match event {
                OutputEvent::Chunk(chunk) => (
                    "chunk",
                    Some(chunk.stream.name()),
                    Some(chunk.offset),
                    Some(Bytes(chunk.bytes)),
                    None,
                ),
                OutputEvent::Exit(info) => ("exit", None, None, None, Some(to_json(&info))),
            });
            Ok(event)
        })
    }
}

//! What crosses into Python: a command's structured result, and bytes that become
//! Python `bytes` (a `Vec<u8>` alone would become a list).

use pyo3::prelude::*;
use pyo3::types::PyBytes;

/// Bytes handed to Python as `bytes`.
pub(crate) struct Bytes(pub(crate) Vec<u8>);

impl<'py> IntoPyObject<'py> for Bytes {
    type Target = PyBytes;
    type Output = Bound<'py, PyBytes>;
    type Error = std::convert::Infallible;

    fn into_pyobject(self, py: Python<'py>) -> Result<Self::Output, Self::Error> {
        Ok(PyBytes::new(py, &self.0))
    }
}

/// What a command did: how it ended, its captured output and whether each stream passed
/// the cap, and how long it took.
#[pyclass(frozen, module = "envrt._envrt")]
pub(crate) struct ExecResult {
    result: envrt::ExecuteResult,
}

impl ExecResult {
    pub(crate) fn new(result: envrt::ExecuteResult) -> Self {
        ExecResult { result }
    }
}

/// `None` or the value, as Python prints it.
fn py_option<T: std::fmt::Display>(value: Option<T>) -> String {
    value.map_or_else(|| "None".to_owned(), |v| v.to_string())
}

fn py_bool(value: bool) -> &'static str {
    if value { "True" } else { "False" }
}

#[pymethods]
impl ExecResult {
    /// The exit code; `None` when a signal ended the command.
    #[getter]
    fn exit_code(&self) -> Option<i32> {
        self.result.exit_code
    }

    /// The signal name (`SIGKILL`, ...) when a signal ended the command.
    #[getter]
    fn signal(&self) -> Option<&str> {
        self.result.signal.as_deref()
    }

    /// Whether the timeout fired.
    #[getter]
    fn timed_out(&self) -> bool {
        self.result.timed_out
    }

    /// Captured stdout.
    #[getter]
    fn stdout<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &self.result.stdout)
    }

    /// Captured stderr.
    #[getter]
    fn stderr<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &self.result.stderr)
    }

    /// Whether stdout passed the cap (what was kept is in `stdout`).
    #[getter]
    fn stdout_truncated(&self) -> bool {
        self.result.stdout_truncated
    }

    /// Whether stderr passed the cap.
    #[getter]
    fn stderr_truncated(&self) -> bool {
        self.result.stderr_truncated
    }

    /// Wall time in seconds.
    #[getter]
    fn duration(&self) -> f64 {
        self.result.duration.as_secs_f64()
    }

    /// Driver-specific facts, as JSON text.
    #[getter]
    fn metadata_json(&self) -> String {
        serde_json::Value::Object(self.result.metadata.clone()).to_string()
    }

    /// Exit code 0 and no timeout.
    #[getter]
    fn success(&self) -> bool {
        self.result.success()
    }

    fn __repr__(&self) -> String {
        let r = &self.result;
        format!(
            "ExecResult(exit_code={}, signal={}, timed_out={}, stdout_bytes={}, stdout_truncated={}, stderr_bytes={}, stderr_truncated={}, duration={:.3})",
            py_option(r.exit_code),
            py_option(r.signal.as_ref().map(|s| format!("'{s}'"))),
            py_bool(r.timed_out),
            r.stdout.len(),
            py_bool(r.stdout_truncated),
            r.stderr.len(),
            py_bool(r.stderr_truncated),
            r.duration.as_secs_f64(),
        )
    }
}

//! `NativeLifecycle`: the life-cycle v2 calls of the facade (contract section 8: pause
//! and unpause, fork, idle timeout and keep-alive, releasing by scope or label) and
//! exposed lease ports (section 10), as asyncio awaitables. Thin: each method is one
//! facade call, its refusals the facade's errors with their exact texts and kinds.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use envrt::core::{ExposeAt, LeaseSelector};
use envrt::{EnvironmentRuntime, LeaseStatus};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use serde_json::json;

use crate::errors::runtime_error;
use crate::runtime::{seconds, to_json, word};

/// The life-cycle verbs of one runtime (`NativeRuntime.lifecycle_verbs()`).
#[pyclass(frozen, module = "envrt._envrt")]
pub(crate) struct NativeLifecycle {
    inner: Arc<EnvironmentRuntime>,
}

impl NativeLifecycle {
    pub(crate) fn new(inner: Arc<EnvironmentRuntime>) -> Self {
        NativeLifecycle { inner }
    }
}

#[pymethods]
impl NativeLifecycle {
    /// Stops every process of the lease without ending it; answers the lease as JSON.
    fn pause<'py>(&self, py: Python<'py>, lease_id: String) -> PyResult<Bound<'py, PyAny>> {
        let runtime = self.inner.clone();
        crate::rt::future_into_py(py, async move {
            let lease = runtime.pause_lease(&lease_id).await.map_err(runtime_error)?;
            Ok(to_json(&lease))
        })
    }

    /// Continues what `pause` stopped; answers the lease as JSON.
    fn unpause<'py>(&self, py: Python<'py>, lease_id: String) -> PyResult<Bound<'py, PyAny>> {
        let runtime = self.inner.clone();
        crate::rt::future_into_py(py, async move {
            let lease = runtime.unpause_lease(&lease_id).await.map_err(runtime_error)?;
            Ok(to_json(&lease))
        })
    }

    /// Copies the lease into `count` new leases; answers them as a JSON list.
    fn fork<'py>(&self, py: Python<'py>, lease_id: String, count: usize) -> PyResult<Bound<'py, PyAny>> {
        let runtime = self.inner.clone();
        crate::rt::future_into_py(py, async move {
            let copies = runtime.fork_lease(&lease_id, count).await.map_err(runtime_error)?;
            Ok(to_json(&copies))
        })
    }

    /// Arms (or re-arms) the lease's idle timeout of `idle` seconds; answers the lease.
    fn set_idle_timeout<'py>(&self, py: Python<'py>, lease_id: String, idle: f64) -> PyResult<Bound<'py, PyAny>> {
        let idle = seconds(idle)?;
        let runtime = self.inner.clone();
        crate::rt::future_into_py(py, async move {
            let lease = runtime.set_idle_timeout(&lease_id, idle).await.map_err(runtime_error)?;
            Ok(to_json(&lease))
        })
    }

    /// Resets the lease's idle clock; answers the lease.
    fn keep_alive<'py>(&self, py: Python<'py>, lease_id: String) -> PyResult<Bound<'py, PyAny>> {
        let runtime = self.inner.clone();
        crate::rt::future_into_py(py, async move {
            let lease = runtime.keep_alive(&lease_id).await.map_err(runtime_error)?;
            Ok(to_json(&lease))
        })
    }

    /// Releases every active lease of tenant `company` in owner scope `scope`, or with
    /// label `label = (key, value)` (exactly one of the two); answers
    /// `{"released": [lease...], "failures": [{"leaseId", "kind", "message"}]}`.
    #[pyo3(signature = (company, scope=None, label=None, status="released"))]
    fn release_matching<'py>(
        &self,
        py: Python<'py>,
        company: String,
        scope: Option<String>,
        label: Option<(String, String)>,
        status: &str,
    ) -> PyResult<Bound<'py, PyAny>> {
        let selector = match (scope, label) {
            (Some(scope), None) => LeaseSelector::Scope(scope),
            (None, Some((key, value))) => LeaseSelector::Label { key, value },
            _ => {
                return Err(PyValueError::new_err(
                    "release_matching needs exactly one of scope= and label=",
                ));
            }
        };
        let status = word::<LeaseStatus>(status, "lease status")?;
        let runtime = self.inner.clone();
        crate::rt::future_into_py(py, async move {
            let report = runtime
                .release_matching(&company, &selector, status)
                .await
                .map_err(runtime_error)?;
            let failures: Vec<_> = report
                .failures
                .iter()
                .map(|f| json!({"leaseId": f.lease_id, "kind": f.error.kind(), "message": f.error.to_string()}))
                .collect();
            Ok(json!({"released": report.released, "failures": failures}).to_string())
        })
    }

    /// Serves `port` inside the lease on the host: on loopback (a port the system picks),
    /// on the unix socket `unix`, or on `listen` (`ADDR:PORT`; beyond loopback with a
    /// token). Answers `(address, token)`: `tcp://127.0.0.1:N` or `unix:///path`.
    #[pyo3(signature = (lease_id, port, unix=None, listen=None))]
    fn expose<'py>(
        &self,
        py: Python<'py>,
        lease_id: String,
        port: u16,
        unix: Option<PathBuf>,
        listen: Option<String>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let at = match (unix, listen) {
            (Some(_), Some(_)) => return Err(PyValueError::new_err("expose takes unix= or listen=, not both")),
            (Some(path), None) => ExposeAt::Unix(path),
            (None, Some(addr)) => ExposeAt::Listen(
                addr.parse::<SocketAddr>()
                    .map_err(|_| PyValueError::new_err(format!("expose: \"{addr}\" is not an ADDRESS:PORT")))?,
            ),
            (None, None) => ExposeAt::Loopback,
        };
        let runtime = self.inner.clone();
        crate::rt::future_into_py(py, async move {
            let endpoint = runtime.expose(&lease_id, port, at).await.map_err(runtime_error)?;
            Ok((endpoint.address.to_string(), endpoint.token))
        })
    }

    /// Closes every endpoint `expose` opened for the lease (release and destroy close
    /// them too).
    fn close_exposed(&self, lease_id: &str) {
        self.inner.close_exposed(lease_id);
    }
}

//! `NativeRuntime`: an [`EnvironmentRuntime`] whose operations are asyncio awaitables.
//! Structured values (leases, snapshots, sync operations) cross as JSON text in the
//! contract's own field names; the Python half turns them into objects.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use envrt::{
    AcquireRequest, EnvValue, Environment, EnvironmentRuntime, ExecuteRequest, JsonMap, LeaseFilter, LeasePolicy,
    LeaseStatus, OutputKeep, OutputStream, RuntimeBuilder, SyncOperation, Timestamp,
};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::duplex::NativeDuplex;
use crate::errors::{native, runtime_error};
use crate::process::NativeProcesses;
use crate::result::{Bytes, ExecResult};
use crate::transfer;

/// One sandbox plugin: the manifest's JSON text, the folder its relative paths are
/// resolved against, the `environmentDrivers` entry, and the plugin configuration as JSON.
type PluginSpec = (String, Option<PathBuf>, Option<String>, String);

/// Builds a runtime from `drivers`, a JSON object from driver key to that driver's
/// settings in the form of its `envrt.toml` section (`{"local": {"root": "/x"}, "docker":
/// {}}`): every driver this build knows is registered through its descriptor, at the
/// given settings or its defaults, except that one set up only on demand (Docker, which
/// connects to an engine) is left out unless named. Then one sandbox driver per plugin,
/// and a SQLite lease store when `database` is given; bound to tenant `tenant` when given
/// (another tenant's leases are then not found). A key this build does not know is a
/// `ValueError` naming the known ones.
#[pyfunction]
#[pyo3(signature = (*, drivers="{}".to_owned(), plugins=Vec::new(), database=None, tenant=None))]
pub(crate) fn build_runtime(
    py: Python<'_>,
    drivers: String,
    plugins: Vec<PluginSpec>,
    database: Option<PathBuf>,
    tenant: Option<String>,
) -> PyResult<Bound<'_, PyAny>> {
    let mut builder = crate::drivers::configured(RuntimeBuilder::new(), &from_json(&drivers)?)?;
    if let Some(tenant) = tenant {
        builder = builder.tenant(tenant);
    }
    let mut loaded = Vec::with_capacity(plugins.len());
    for (manifest, folder, driver_key, config) in plugins {
        loaded.push(crate::drivers::plugin(
            &manifest,
            folder.as_deref(),
            driver_key,
            from_json(&config)?,
        )?);
    }
    crate::rt::future_into_py(py, async move {
        if let Some(path) = database {
            let store = envrt::SqliteStore::open(&path)
                .await
                .map_err(|e| runtime_error(e.into()))?;
            // A plugin's `ctx.state` lives in the runtime's store, as an envrt.toml
            // `[[plugin]]`'s does: it outlives the worker and this runtime.
            let state: Arc<dyn envrt::core::PluginStateStore> = Arc::new(store.clone());
            for (_, options) in &mut loaded {
                options.worker_calls.state = Arc::clone(&state);
            }
            builder = builder.store(Arc::new(store));
        }
        builder = crate::drivers::with_plugins(builder, loaded);
        let runtime = builder
            .build()
            .await
            .map_err(|e| native("driver_setup", &e.to_string(), None))?;
        Ok(NativeRuntime {
            inner: Arc::new(runtime),
        })
    })
}

/// The runtime, shared by every awaitable it hands out.
#[pyclass(frozen, module = "envrt._envrt")]
pub(crate) struct NativeRuntime {
    inner: Arc<EnvironmentRuntime>,
}

impl NativeRuntime {
    /// Wraps a runtime someone else assembled.
    pub(crate) fn from_shared(inner: Arc<EnvironmentRuntime>) -> Self {
        NativeRuntime { inner }
    }
}

pub(crate) fn from_json<T: DeserializeOwned>(text: &str) -> PyResult<T> {
    serde_json::from_str(text).map_err(|e| PyValueError::new_err(format!("invalid JSON: {e}")))
}

pub(crate) fn to_json<T: Serialize>(value: &T) -> String {
    serde_json::to_string(value).unwrap_or_else(|_| "null".into())
}

/// A network policy from its JSON form (`{"egress": "allow", "allow": [...]}`); a policy
/// the grammar refuses is a `ValueError` with the grammar's text.
fn network_policy(text: &str) -> PyResult<envrt::core::network::Policy> {
    serde_json::from_str(text).map_err(|e| PyValueError::new_err(format!("network policy: {e}")))
}

pub(crate) fn word<T: DeserializeOwned>(text: &str, what: &str) -> PyResult<T> {
    serde_json::from_value(serde_json::Value::String(text.to_owned()))
        .map_err(|_| PyValueError::new_err(format!("unknown {what} \"{text}\"")))
}

#[pymethods]
impl NativeRuntime {
    /// Adds or replaces an environment; `config` is its driver configuration as JSON.
    /// `ready_command` (with `ready_timeout_ms`) is the readiness command every new lease
    /// must pass (contract section 8, "Readiness"); the facade refuses a bad one.
    #[pyo3(signature = (id, driver, name=None, config="{}".to_owned(), active=true, ready_command=None, ready_timeout_ms=60_000))]
    #[allow(clippy::too_many_arguments)]
    fn put_environment<'py>(
        &self,
        py: Python<'py>,
        id: String,
        driver: String,
        name: Option<String>,
        config: String,
        active: bool,
        ready_command: Option<Vec<String>>,
        ready_timeout_ms: u64,
    ) -> PyResult<Bound<'py, PyAny>> {
        let config: JsonMap = from_json(&config)?;
        let mut environment = Environment::new(&id, name.unwrap_or_else(|| id.clone()), driver).with_config(config);
        if !active {
            environment.status = envrt::EnvironmentStatus::Archived;
        }
        environment.readiness = ready_command.map(|command| envrt::core::Readiness {
            command,
            timeout_ms: ready_timeout_ms,
        });
        let runtime = self.inner.clone();
        crate::rt::future_into_py(py, async move {
            runtime.put_environment(environment).await.map_err(runtime_error)
        })
    }

    /// The process verbs (contract section 9) of this runtime.
    fn process_verbs(&self) -> NativeProcesses {
        NativeProcesses::new(self.inner.clone())
    }

    /// The life-cycle verbs (pause, fork, idle timeout, release by scope or label,
    /// expose) of this runtime.
    fn lifecycle_verbs(&self) -> crate::lifecycle::NativeLifecycle {
        crate::lifecycle::NativeLifecycle::new(self.inner.clone())
    }

    /// The registered driver keys.
    fn driver_keys(&self) -> Vec<String> {
        self.inner.driver_keys()
    }

    /// Acquires a lease; returns the lease as JSON. `ttl` (seconds) asks for an expiry;
    /// `network` is a network policy's JSON form (contract section 10); `scope` with
    /// `reuse = "scope"` may hand back the scope's live lease (section 8, "Scope reuse");
    /// `labels` go to the metadata object `labels`. `idle_timeout` (seconds) is armed
    /// right after the acquire; when arming is refused the new lease is released again
    /// and the refusal raised (as `envrt lease acquire --idle-timeout` does).
    #[pyo3(signature = (environment_id, company, run_id=None, policy="ephemeral", ttl=None, metadata="{}".to_owned(), network=None, scope=None, reuse="never", labels=BTreeMap::new(), idle_timeout=None))]
    #[allow(clippy::too_many_arguments)]
    fn acquire<'py>(
        &self,
        py: Python<'py>,
        environment_id: String,
        company: String,
        run_id: Option<String>,
        policy: &str,
        ttl: Option<f64>,
        metadata: String,
        network: Option<String>,
        scope: Option<String>,
        reuse: &str,
        labels: BTreeMap<String, String>,
        idle_timeout: Option<f64>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let mut request = AcquireRequest::new(environment_id, company);
        request.run_id = run_id;
        request.policy = word::<LeasePolicy>(policy, "lease policy")?;
        request.metadata = from_json(&metadata)?;
        request.network = network.as_deref().map(network_policy).transpose()?;
        request.requested_expires_at = ttl.map(seconds).transpose()?.map(|d| Timestamp::now().after(d));
        request.scope = scope;
        request.reuse = match reuse {
            "never" => envrt::core::Reuse::Never,
            "scope" => envrt::core::Reuse::Scope,
            other => {
                return Err(PyValueError::new_err(format!(
                    "unknown reuse \"{other}\" (expected \"never\" or \"scope\")"
                )));
            }
        };
        if !labels.is_empty() {
            let labels: JsonMap = labels.into_iter().map(|(k, v)| (k, v.into())).collect();
            request.metadata.insert(envrt::core::LABELS_KEY.into(), labels.into());
        }
        let idle = idle_timeout.map(seconds).transpose()?;
        let runtime = self.inner.clone();
        crate::rt::future_into_py(py, async move {
            let lease = runtime.acquire_lease(request).await.map_err(runtime_error)?;
            let Some(idle) = idle else {
                return Ok(to_json(&lease));
            };
            match runtime.set_idle_timeout(&lease.id, idle).await {
                Ok(lease) => Ok(to_json(&lease)),
                Err(error) => {
                    // No lease is left without the idle timeout it was asked for.
                    let _ = runtime.release_lease(&lease.id, LeaseStatus::Released).await;
                    Err(runtime_error(error))
                }
            }
        })
    }

    /// Replaces an active lease's network policy (its JSON form); answers the level the
    /// lease now has (`egress proxy (allow)`, `no network`, ...).
    fn update_network<'py>(&self, py: Python<'py>, lease_id: String, network: String) -> PyResult<Bound<'py, PyAny>> {
        let policy = network_policy(&network)?;
        let runtime = self.inner.clone();
        crate::rt::future_into_py(py, async move {
            let level = runtime
                .update_network_policy(&lease_id, &policy)
                .await
                .map_err(runtime_error)?;
            Ok(level.to_string())
        })
    }

    /// The stored lease as JSON, or `None`.
    fn lease<'py>(&self, py: Python<'py>, lease_id: String) -> PyResult<Bound<'py, PyAny>> {
        let runtime = self.inner.clone();
        crate::rt::future_into_py(py, async move {
            let lease = runtime.lease(&lease_id).await.map_err(runtime_error)?;
            Ok(lease.map(|l| to_json(&l)))
        })
    }

    /// The stored leases as a JSON list, filtered by environment and statuses.
    #[pyo3(signature = (environment_id=None, statuses=Vec::new()))]
    fn leases<'py>(
        &self,
        py: Python<'py>,
        environment_id: Option<String>,
        statuses: Vec<String>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let filter = LeaseFilter {
            environment_id,
            statuses: statuses
                .iter()
                .map(|s| word::<LeaseStatus>(s, "lease status"))
                .collect::<PyResult<_>>()?,
            ..Default::default()
        };
        let runtime = self.inner.clone();
        crate::rt::future_into_py(py, async move {
            let leases = runtime.leases(&filter).await.map_err(runtime_error)?;
            Ok(to_json(&leases))
        })
    }

    /// Runs `argv` on the lease. `on_output(stream, chunk)` is called for every chunk
    /// while it runs (from a runtime thread, holding the GIL). `user` runs it as another
    /// user where the driver allows it (`ExecuteRequest::user`).
    #[pyo3(signature = (lease_id, argv, cwd=None, env=BTreeMap::new(), stdin=None, timeout=None, max_output=None, on_output=None, keep="head", user=None))]
    #[allow(clippy::too_many_arguments)]
    fn exec<'py>(
        &self,
        py: Python<'py>,
        lease_id: String,
        argv: Vec<String>,
        cwd: Option<String>,
        env: BTreeMap<String, String>,
        stdin: Option<Vec<u8>>,
        timeout: Option<f64>,
        max_output: Option<usize>,
        on_output: Option<Py<PyAny>>,
        keep: &str,
        user: Option<String>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let Some((command, args)) = argv.split_first() else {
            return Err(PyValueError::new_err("a command needs at least a program"));
        };
        let mut request = ExecuteRequest::new(command.clone(), args.iter().cloned());
        request.cwd = cwd;
        request.env = env.into_iter().map(|(k, v)| (k, EnvValue::from(v))).collect();
        request.stdin = stdin;
        request.timeout = timeout.map(seconds).transpose()?;
        request.max_output_bytes = max_output;
        request.keep = word::<OutputKeep>(keep, "output part")?;
        request.user = user;
        if let Some(callback) = on_output {
            request.sink = Some(Arc::new(move |stream: OutputStream, chunk: &[u8]| {
                if crate::rt::is_shut_down() {
                    return;
                }
                Python::attach(|py| {
                    let name = match stream {
                        OutputStream::Stdout => "stdout",
                        OutputStream::Stderr => "stderr",
                    };
                    if let Err(error) = callback.call1(py, (name, PyBytes::new(py, chunk))) {
                        error.write_unraisable(py, None);
                    }
                })
            }));
        }
        let runtime = self.inner.clone();
        crate::rt::future_into_py(py, async move {
            let result = runtime.execute(&lease_id, request).await.map_err(runtime_error)?;
            Ok(ExecResult::new(result))
        })
    }

    /// One file of the lease, as bytes.
    fn read_file<'py>(&self, py: Python<'py>, lease_id: String, path: String) -> PyResult<Bound<'py, PyAny>> {
        let runtime = self.inner.clone();
        crate::rt::future_into_py(py, async move {
            Ok(Bytes(transfer::read_file(&runtime, &lease_id, &path).await?))
        })
    }

    /// Writes one file of the lease (parents are created); `mode` sets its mode.
    #[pyo3(signature = (lease_id, path, data, mode=None))]
    fn write_file<'py>(
        &self,
        py: Python<'py>,
        lease_id: String,
        path: String,
        data: Vec<u8>,
        mode: Option<u32>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let runtime = self.inner.clone();
        crate::rt::future_into_py(py, async move {
            transfer::write_file(&runtime, &lease_id, &path, data, mode).await
        })
    }

    /// Sync operations (JSON list, contract field names) into the lease; returns the
    /// counts as JSON.
    fn sync_in<'py>(&self, py: Python<'py>, lease_id: String, operations: String) -> PyResult<Bound<'py, PyAny>> {
        let operations: Vec<SyncOperation> = from_json(&operations)?;
        let runtime = self.inner.clone();
        crate::rt::future_into_py(py, async move {
            let result = runtime.sync_in(&lease_id, &operations).await.map_err(runtime_error)?;
            Ok(to_json(&result))
        })
    }

    /// Sync operations out of the lease; returns the counts as JSON.
    fn sync_out<'py>(&self, py: Python<'py>, lease_id: String, operations: String) -> PyResult<Bound<'py, PyAny>> {
        let operations: Vec<SyncOperation> = from_json(&operations)?;
        let runtime = self.inner.clone();
        crate::rt::future_into_py(py, async move {
            let result = runtime.sync_out(&lease_id, &operations).await.map_err(runtime_error)?;
            Ok(to_json(&result))
        })
    }

    /// Opens a duplex channel to `argv`.
    fn open_duplex<'py>(&self, py: Python<'py>, lease_id: String, argv: Vec<String>) -> PyResult<Bound<'py, PyAny>> {
        let runtime = self.inner.clone();
        crate::rt::future_into_py(py, async move {
            let channel = runtime
                .open_duplex_channel(&lease_id, &argv)
                .await
                .map_err(runtime_error)?;
            Ok(NativeDuplex::new(channel))
        })
    }

    /// Releases the lease with `status` (`released`, `failed`, `expired`); returns it.
    #[pyo3(signature = (lease_id, status="released"))]
    fn release<'py>(&self, py: Python<'py>, lease_id: String, status: &str) -> PyResult<Bound<'py, PyAny>> {
        let status = word::<LeaseStatus>(status, "lease status")?;
        let runtime = self.inner.clone();
        crate::rt::future_into_py(py, async move {
            let lease = runtime.release_lease(&lease_id, status).await.map_err(runtime_error)?;
            Ok(to_json(&lease))
        })
    }

    /// Destroys the lease's resource; returns the lease.
    fn destroy<'py>(&self, py: Python<'py>, lease_id: String) -> PyResult<Bound<'py, PyAny>> {
        let runtime = self.inner.clone();
        crate::rt::future_into_py(py, async move {
            let lease = runtime.destroy_lease(&lease_id).await.map_err(runtime_error)?;
            Ok(to_json(&lease))
        })
    }

    /// The lease's effective capability snapshot as JSON; `None` when its driver is not
    /// registered.
    fn capabilities<'py>(&self, py: Python<'py>, lease_id: String) -> PyResult<Bound<'py, PyAny>> {
        let runtime = self.inner.clone();
        crate::rt::future_into_py(py, async move {
            let snapshot = runtime.resolve_capabilities(&lease_id).await.map_err(runtime_error)?;
            Ok(snapshot.map(|s| to_json(&s)))
        })
    }

    /// An environment's capability snapshot before any lease, as JSON.
    fn environment_capabilities<'py>(&self, py: Python<'py>, environment_id: String) -> PyResult<Bound<'py, PyAny>> {
        let runtime = self.inner.clone();
        crate::rt::future_into_py(py, async move {
            let snapshot = runtime
                .environment_capabilities(&environment_id)
                .await
                .map_err(runtime_error)?;
            Ok(snapshot.map(|s| to_json(&s)))
        })
    }
}

/// Seconds from Python as a duration; refuses negative and non-finite values.
pub(crate) fn seconds(value: f64) -> PyResult<Duration> {
    Duration::try_from_secs_f64(value).map_err(|_| PyValueError::new_err(format!("invalid duration {value} s")))
}

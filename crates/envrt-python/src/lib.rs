//! # envrt-python
//!
//! The native half of the `envrt` Python package: the module `envrt._envrt`, built with
//! PyO3 and maturin as one abi3 wheel. It holds an [`envrt::EnvironmentRuntime`] on the
//! tokio runtime of `pyo3-async-runtimes` and hands every operation to Python as an
//! asyncio awaitable. The Python half (`python/envrt/`) wraps it in friendlier classes,
//! maps error kinds to Python's exception classes and carries the Inspect AI provider.
//!
//! Errors keep the contract's exact text: the native side sends
//! [`RuntimeError::kind`](envrt::RuntimeError::kind) with the text to
//! `envrt._errors.from_native`, which picks the exception class.

use pyo3::prelude::*;

mod config;
mod drivers;
mod duplex;
mod errors;
mod lifecycle;
mod process;
mod result;
mod rt;
mod runtime;
mod transfer;

/// Adds `dir` to the directories searched for the reference sandbox worker
/// `envrt-sandbox-worker` (after the interpreter's own directory, before `PATH`): the
/// package adds its own directory, where its wheel installs the worker.
#[pyfunction]
fn add_worker_search_dir(dir: std::path::PathBuf) {
    envrt::config::add_worker_search_dir(dir);
}

/// Where the reference sandbox worker is found, `configured` (`[sandbox] worker`) when
/// given; raises `envrt_error` kind `unavailable` with the text saying which binary, where
/// it looked and how to set it.
#[pyfunction]
#[pyo3(signature = (configured=None))]
fn locate_sandbox_worker(configured: Option<std::path::PathBuf>) -> PyResult<std::path::PathBuf> {
    envrt::config::locate_reference_worker(configured.as_deref())
        .map_err(|message| errors::native("unavailable", &message, None))
}

#[pymodule]
fn _envrt(module: &Bound<'_, PyModule>) -> PyResult<()> {
    module.add_class::<runtime::NativeRuntime>()?;
    module.add_class::<result::ExecResult>()?;
    module.add_class::<duplex::NativeDuplex>()?;
    module.add_class::<process::NativeProcesses>()?;
    module.add_class::<lifecycle::NativeLifecycle>()?;
    module.add_class::<process::NativeProcessOutput>()?;
    module.add_function(wrap_pyfunction!(runtime::build_runtime, module)?)?;
    module.add_function(wrap_pyfunction!(drivers::known_drivers, module)?)?;
    module.add_function(wrap_pyfunction!(config::open_config, module)?)?;
    module.add_function(wrap_pyfunction!(rt::shutdown, module)?)?;
    module.add_function(wrap_pyfunction!(add_worker_search_dir, module)?)?;
    module.add_function(wrap_pyfunction!(locate_sandbox_worker, module)?)?;
    module.setattr("_shutdown", module.getattr("shutdown")?)?;
    rt::register(module)?;
    Ok(())
}

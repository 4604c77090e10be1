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
mod result;
mod rt;
mod runtime;
mod transfer;

#[pymodule]
fn _envrt(module: &Bound<'_, PyModule>) -> PyResult<()> {
    module.add_class::<runtime::NativeRuntime>()?;
    module.add_class::<result::ExecResult>()?;
    module.add_class::<duplex::NativeDuplex>()?;
    module.add_function(wrap_pyfunction!(runtime::build_runtime, module)?)?;
    module.add_function(wrap_pyfunction!(drivers::known_drivers, module)?)?;
    module.add_function(wrap_pyfunction!(config::open_config, module)?)?;
    module.add_function(wrap_pyfunction!(rt::shutdown, module)?)?;
    module.setattr("_shutdown", module.getattr("shutdown")?)?;
    rt::register(module)?;
    Ok(())
}

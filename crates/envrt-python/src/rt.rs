//! The module's own tokio runtime, shut down before the interpreter finalizes.
//!
//! `pyo3-async-runtimes` keeps its tokio runtime in a static that is never shut down, so
//! its threads outlive `Py_Finalize`. A future completed just before `asyncio.run`
//! returns is finished on a blocking thread inside `Python::attach` (it calls
//! `loop.call_soon_threadsafe`, which releases the GIL while it writes the loop's
//! self-pipe); the main thread then leaves `asyncio.run` and starts finalizing, and when
//! that thread takes the GIL back or releases its thread state the interpreter aborts
//! (`PyGILState_Release: thread state ... must be current when releasing`).
//!
//! Here the runtime is ours: [`shutdown`], called from an `atexit` hook the package
//! registers at import (atexit runs while the interpreter is still whole), sets
//! [`is_shut_down`] and shuts the runtime down with the GIL released, which joins its
//! worker and blocking threads. After that no runtime thread exists to call into Python,
//! and a late blocking job drops its closure unrun (its `Py` handles are queued for a
//! later decref, which needs no interpreter). Futures made after shutdown never complete.

use std::cell::OnceCell;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use pyo3::prelude::*;
use pyo3::types::PyAnyMethods;
use pyo3_async_runtimes::TaskLocals;
use pyo3_async_runtimes::generic::{ContextExt, Runtime as GenericRuntime};
use tokio::runtime::{Handle, Runtime};
use tokio::task::JoinHandle;

/// Set once [`shutdown`] has begun: runtime threads must not take the GIL any more.
static SHUT_DOWN: AtomicBool = AtomicBool::new(false);
/// The runtime while it runs; [`shutdown`] takes it out.
static RUNTIME: Mutex<Option<Runtime>> = Mutex::new(None);
/// A handle that outlives the runtime: spawning on it after shutdown cancels the task.
static HANDLE: OnceLock<Handle> = OnceLock::new();

/// How long [`shutdown`] waits for blocking jobs still running.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

tokio::task_local! {
    static TASK_LOCALS: OnceCell<TaskLocals>;
}

/// True once the interpreter is on its way out; nothing may call into Python then.
pub(crate) fn is_shut_down() -> bool {
    SHUT_DOWN.load(Ordering::Acquire)
}

fn handle() -> &'static Handle {
    HANDLE.get_or_init(|| {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .thread_name("envrt-tokio")
            .build()
            .expect("unable to build the tokio runtime");
        let handle = runtime.handle().clone();
        *RUNTIME.lock().unwrap_or_else(|e| e.into_inner()) = Some(runtime);
        handle
    })
}

/// The runtime `pyo3-async-runtimes` drives our futures on.
pub(crate) struct EnvrtTokio;

impl GenericRuntime for EnvrtTokio {
    type JoinError = tokio::task::JoinError;
    type JoinHandle = JoinHandle<()>;

    fn spawn<F>(fut: F) -> Self::JoinHandle
    where
        F: Future<Output = ()> + Send + 'static,
    {
        handle().spawn(fut)
    }

    fn spawn_blocking<F>(f: F) -> Self::JoinHandle
    where
        F: FnOnce() + Send + 'static,
    {
        // These jobs take the GIL to complete an asyncio future.
        handle().spawn_blocking(move || {
            if !is_shut_down() {
                f();
            }
        })
    }
}

impl ContextExt for EnvrtTokio {
    fn scope<F, R>(locals: TaskLocals, fut: F) -> Pin<Box<dyn Future<Output = R> + Send>>
    where
        F: Future<Output = R> + Send + 'static,
    {
        let cell = OnceCell::new();
        let _ = cell.set(locals);
        Box::pin(TASK_LOCALS.scope(cell, fut))
    }

    fn get_task_locals() -> Option<TaskLocals> {
        TASK_LOCALS.try_with(|c| c.get().cloned()).unwrap_or_default()
    }
}

/// A Rust future as an asyncio awaitable, run on the module's runtime.
pub(crate) fn future_into_py<F, T>(py: Python<'_>, fut: F) -> PyResult<Bound<'_, PyAny>>
where
    F: Future<Output = PyResult<T>> + Send + 'static,
    T: for<'py> IntoPyObject<'py> + Send + 'static,
{
    pyo3_async_runtimes::generic::future_into_py::<EnvrtTokio, F, T>(py, fut)
}

/// Shuts the runtime down and joins its threads, with the GIL released so that a thread
/// finishing a future can take it. Idempotent; registered with `atexit` at import.
#[pyfunction]
pub(crate) fn shutdown(py: Python<'_>) {
    SHUT_DOWN.store(true, Ordering::Release);
    let runtime = RUNTIME.lock().unwrap_or_else(|e| e.into_inner()).take();
    if let Some(runtime) = runtime {
        py.detach(move || runtime.shutdown_timeout(SHUTDOWN_GRACE));
    }
}

/// Registers [`shutdown`] with `atexit`.
pub(crate) fn register(module: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = module.py();
    let hook = module.getattr("_shutdown")?;
    py.import("atexit")?.call_method1("register", (hook,))?;
    Ok(())
}

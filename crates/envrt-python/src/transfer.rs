//! One file in or out of a lease through the library's [`envrt::files`]: a sync of one
//! file entry through a private host-side temporary directory, after a probe (through
//! execute, as the lease's command user) that refuses a directory, a file that user may
//! not read or write, and a missing file, with typed errors.

use envrt::EnvironmentRuntime;
use envrt::files::{self, FileError};
use pyo3::prelude::*;

use crate::errors::{native, runtime_error};

fn file_error(error: FileError) -> PyErr {
    let os = match &error {
        FileError::IsADirectory { .. } => Some("is_a_directory"),
        FileError::PermissionDenied { .. } => Some("permission_denied"),
        FileError::NotFound { .. } => Some("not_found"),
        _ => None,
    };
    match error {
        FileError::Runtime(error) => runtime_error(error),
        other => native(other.kind(), &other.to_string(), os),
    }
}

/// The bytes of the lease's file `path`.
pub(crate) async fn read_file(runtime: &EnvironmentRuntime, lease_id: &str, path: &str) -> PyResult<Vec<u8>> {
    files::read_file(runtime, lease_id, path).await.map_err(file_error)
}

/// Writes `data` to the lease's file `path`, with `mode` when given.
pub(crate) async fn write_file(
    runtime: &EnvironmentRuntime,
    lease_id: &str,
    path: &str,
    data: Vec<u8>,
    mode: Option<u32>,
) -> PyResult<()> {
    files::write_file(runtime, lease_id, path, &data, mode)
        .await
        .map_err(file_error)
}

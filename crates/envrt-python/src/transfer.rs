//! One file in or out of a lease: a sync of one file entry through a private host-side
//! temporary directory, so every driver with native sync serves `read_file` and
//! `write_file` with the same checks and error texts as `sync_in` / `sync_out`.

use envrt::{EnvironmentRuntime, SyncFile, SyncOperation};
use pyo3::prelude::*;

use crate::errors::{native, runtime_error};

fn io_error(context: &str, error: std::io::Error) -> PyErr {
    native("io", &format!("{context}: {error}"), None)
}

fn one(operation_id: &str, file: SyncFile) -> [SyncOperation; 1] {
    [SyncOperation {
        operation_id: operation_id.to_owned(),
        files: vec![file],
        post_upload_commands: Vec::new(),
    }]
}

/// The bytes of the lease's file `path`.
pub(crate) async fn read_file(runtime: &EnvironmentRuntime, lease_id: &str, path: &str) -> PyResult<Vec<u8>> {
    let dir = tempfile::tempdir().map_err(|e| io_error("creating a temporary directory", e))?;
    let target = dir.path().join("file");
    let file = SyncFile::file(path, target.to_string_lossy());
    runtime
        .sync_out(lease_id, &one("read_file", file))
        .await
        .map_err(runtime_error)?;
    std::fs::read(&target).map_err(|e| io_error("reading the copied file", e))
}

/// Writes `data` to the lease's file `path`, with `mode` when given.
pub(crate) async fn write_file(
    runtime: &EnvironmentRuntime,
    lease_id: &str,
    path: &str,
    data: Vec<u8>,
    mode: Option<u32>,
) -> PyResult<()> {
    let dir = tempfile::tempdir().map_err(|e| io_error("creating a temporary directory", e))?;
    let source = dir.path().join("file");
    std::fs::write(&source, data).map_err(|e| io_error("writing the temporary file", e))?;
    let mut file = SyncFile::file(source.to_string_lossy(), path);
    file.mode = mode;
    runtime
        .sync_in(lease_id, &one("write_file", file))
        .await
        .map_err(runtime_error)?;
    Ok(())
}

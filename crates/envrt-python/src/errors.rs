//! Native errors to Python exceptions: the error's stable kind, its exact text, and the
//! operating-system class behind it (a missing file, a refused permission, a directory
//! where a file was wanted) go to `envrt._errors.from_native`, which picks the class.

use std::error::Error as StdError;
use std::io::ErrorKind;

use envrt::{DriverError, RuntimeError};
use pyo3::prelude::*;

/// A Python exception for a runtime error.
pub(crate) fn runtime_error(error: RuntimeError) -> PyErr {
    let os = os_class(&error);
    native(error.kind(), &error.to_string(), os)
}

/// A Python exception of `kind` with `message` (for failures that are not a
/// [`RuntimeError`], such as a driver that cannot be set up).
pub(crate) fn native(kind: &str, message: &str, os: Option<&str>) -> PyErr {
    if crate::rt::is_shut_down() {
        // The interpreter is finalizing: a lazy exception needs no GIL.
        return pyo3::exceptions::PyRuntimeError::new_err(message.to_owned());
    }
    Python::attach(|py| {
        let made = py
            .import("envrt._errors")
            .and_then(|module| module.getattr("from_native"))
            .and_then(|from_native| from_native.call1((kind, message, os)));
        match made {
            Ok(value) => PyErr::from_value(value),
            Err(error) => error,
        }
    })
}

/// The operating-system class of the failure: `not_found`, `permission_denied`,
/// `is_a_directory` or `not_a_directory`; `None` when it has none.
fn os_class(error: &RuntimeError) -> Option<&'static str> {
    if let RuntimeError::Driver(driver) = error {
        match driver {
            DriverError::SourceMissing { .. } => return Some("not_found"),
            DriverError::SourceKind { expected, .. } => {
                return Some(if *expected == "file" {
                    "is_a_directory"
                } else {
                    "not_a_directory"
                });
            }
            DriverError::PathOutsideWorkspace { .. } => return Some("permission_denied"),
            _ => {}
        }
    }
    let mut current: Option<&(dyn StdError + 'static)> = Some(error);
    while let Some(error) = current {
        if let Some(io) = error.downcast_ref::<std::io::Error>() {
            return match io.kind() {
                ErrorKind::NotFound => Some("not_found"),
                ErrorKind::PermissionDenied => Some("permission_denied"),
                ErrorKind::IsADirectory => Some("is_a_directory"),
                ErrorKind::NotADirectory => Some("not_a_directory"),
                _ => None,
            };
        }
        current = error.source();
    }
    None
}

//! Worker refusals as structured data: the error's stable kind plus its fields, carried in
//! a JSON-RPC error's `data` beside the human `message` (envrt's additive extension; the
//! `message` is still the exact contract text, so a host that ignores `data` loses
//! nothing). Both sides use this module: the reference worker builds its answer with
//! [`refusal`], the host reads it back with [`ErrorData::from_object`] and
//! [`ErrorData::into_driver_error`], and falls back to reading the text only when `data`
//! is absent (third-party workers).
//!
//! On the wire: `{"code": -32602, "message": "Path \"/etc\" is outside the lease
//! workspace.", "data": {"kind": "path_outside_workspace", "fields": {"path": "/etc"}}}`.
//! Each kind is [`DriverError::kind`]'s name for the variant.

use envrt_driver_api::DriverError;
use serde::{Deserialize, Serialize};

use crate::codes;
use crate::envelope::ErrorObject;

/// A refusal's stable kind and fields: every [`DriverError`] variant a worker answers
/// bad input or a refused operation with. Other failures (I/O, a missing tool) have no
/// structured form; they cross as their text alone.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", content = "fields", rename_all = "snake_case")]
#[non_exhaustive]
pub enum ErrorData {
    /// [`DriverError::PathOutsideWorkspace`].
    PathOutsideWorkspace {
        /// The path as given.
        path: String,
    },
    /// [`DriverError::UserRefused`].
    UserRefused {
        /// The user as the request gave it.
        user: String,
        /// Why.
        reason: String,
    },
    /// [`DriverError::EntryEscapesTarget`].
    EntryEscapesTarget {
        /// The entry name or link.
        entry: String,
        /// The sync target.
        target: String,
    },
    /// [`DriverError::PostUploadCwd`].
    PostUploadCwd {
        /// The refused cwd.
        cwd: String,
    },
    /// [`DriverError::PostUploadFailed`].
    PostUploadFailed {
        /// The command line.
        command: String,
        /// `exit code N`, `signal S` or `a timeout`.
        outcome: String,
    },
    /// [`DriverError::SourceMissing`].
    SourceMissing {
        /// The source path.
        path: String,
    },
    /// [`DriverError::SourceKind`].
    SourceKind {
        /// The source path.
        path: String,
        /// `file` or `directory`.
        expected: String,
    },
    /// [`DriverError::TreeTooDeep`].
    TreeTooDeep {
        /// The sync source as given.
        path: String,
        /// The bound.
        limit: usize,
    },
    /// [`DriverError::SyncTooLarge`].
    SyncTooLarge {
        /// The sync source as given.
        path: String,
        /// The bound, in bytes.
        limit: u64,
    },
    /// [`DriverError::InvalidGlob`].
    InvalidGlob {
        /// The pattern.
        pattern: String,
    },
    /// [`DriverError::InvalidInput`].
    InvalidInput {
        /// What is wrong (the text after `Invalid input: `).
        message: String,
    },
    /// [`DriverError::ResourceGone`].
    ResourceGone {
        /// The provider lease id.
        id: String,
    },
    /// [`DriverError::ChannelClosed`].
    ChannelClosed,
    /// [`DriverError::HostFileSystem`] (since the sandbox's sync out reports a full or
    /// read-only target file system typed; an older host reads the text).
    HostFileSystem {
        /// The sync out's host target as the worker was given it.
        target: String,
        /// `full` or `read-only`.
        why: String,
    },
    /// [`DriverError::LeaseFileSystem`] (a sync in's lease target on a full or read-only
    /// file system).
    LeaseFileSystem {
        /// The sync in's lease target as given.
        target: String,
        /// `full` or `read-only`.
        why: String,
    },
}

impl ErrorData {
    /// The structured form of `error`, when it has one.
    pub fn of(error: &DriverError) -> Option<ErrorData> {
        Some(match error {
            DriverError::PathOutsideWorkspace { path } => ErrorData::PathOutsideWorkspace { path: path.clone() },
            DriverError::UserRefused { user, reason } => ErrorData::UserRefused {
                user: user.clone(),
                reason: reason.clone(),
            },
            DriverError::EntryEscapesTarget { entry, target } => ErrorData::EntryEscapesTarget {
                entry: entry.clone(),
                target: target.clone(),
            },
            DriverError::PostUploadCwd { cwd } => ErrorData::PostUploadCwd { cwd: cwd.clone() },
            DriverError::PostUploadFailed { command, outcome } => ErrorData::PostUploadFailed {
                command: command.clone(),
                outcome: outcome.clone(),
            },
            DriverError::SourceMissing { path } => ErrorData::SourceMissing { path: path.clone() },
            DriverError::SourceKind { path, expected } => ErrorData::SourceKind {
                path: path.clone(),
                expected: (*expected).to_owned(),
            },
            DriverError::TreeTooDeep { path, limit } => ErrorData::TreeTooDeep {
                path: path.clone(),
                limit: *limit,
            },
            DriverError::SyncTooLarge { path, limit } => ErrorData::SyncTooLarge {
                path: path.clone(),
                limit: *limit,
            },
            DriverError::InvalidGlob { pattern } => ErrorData::InvalidGlob {
                pattern: pattern.clone(),
            },
            DriverError::InvalidInput { message } => ErrorData::InvalidInput {
                message: message.clone(),
            },
            DriverError::ResourceGone { id } => ErrorData::ResourceGone { id: id.clone() },
            DriverError::ChannelClosed => ErrorData::ChannelClosed,
            DriverError::HostFileSystem { target, why } => ErrorData::HostFileSystem {
                target: target.clone(),
                why: (*why).to_owned(),
            },
            DriverError::LeaseFileSystem { target, why } => ErrorData::LeaseFileSystem {
                target: target.clone(),
                why: (*why).to_owned(),
            },
            _ => return None,
        })
    }

    /// The structured part of a worker's error, when its `data` is one (any other `data`,
    /// or an unknown kind, is `None`: the host then reads the text as before).
    pub fn from_object(error: &ErrorObject) -> Option<ErrorData> {
        serde_json::from_value(error.data.clone()?).ok()
    }

    /// The typed error this stands for; `None` for a [`ErrorData::SourceKind`] whose
    /// `expected` is neither `file` nor `directory`, or a file-system error whose `why` is
    /// neither `full` nor `read-only`.
    pub fn into_driver_error(self) -> Option<DriverError> {
        Some(match self {
            ErrorData::PathOutsideWorkspace { path } => DriverError::PathOutsideWorkspace { path },
            ErrorData::UserRefused { user, reason } => DriverError::UserRefused { user, reason },
            ErrorData::EntryEscapesTarget { entry, target } => DriverError::EntryEscapesTarget { entry, target },
            ErrorData::PostUploadCwd { cwd } => DriverError::PostUploadCwd { cwd },
            ErrorData::PostUploadFailed { command, outcome } => DriverError::PostUploadFailed { command, outcome },
            ErrorData::SourceMissing { path } => DriverError::SourceMissing { path },
            ErrorData::SourceKind { path, expected } => DriverError::SourceKind {
                path,
                expected: match expected.as_str() {
                    "file" => "file",
                    "directory" => "directory",
                    _ => return None,
                },
            },
            ErrorData::TreeTooDeep { path, limit } => DriverError::TreeTooDeep { path, limit },
            ErrorData::SyncTooLarge { path, limit } => DriverError::SyncTooLarge { path, limit },
            ErrorData::InvalidGlob { pattern } => DriverError::InvalidGlob { pattern },
            ErrorData::InvalidInput { message } => DriverError::InvalidInput { message },
            ErrorData::ResourceGone { id } => DriverError::ResourceGone { id },
            ErrorData::ChannelClosed => DriverError::ChannelClosed,
            ErrorData::HostFileSystem { target, why } => DriverError::HostFileSystem {
                target,
                why: file_system_why(&why)?,
            },
            ErrorData::LeaseFileSystem { target, why } => DriverError::LeaseFileSystem {
                target,
                why: file_system_why(&why)?,
            },
        })
    }
}

/// `full` or `read-only` as the static text the typed errors hold.
fn file_system_why(why: &str) -> Option<&'static str> {
    match why {
        "full" => Some("full"),
        "read-only" => Some("read-only"),
        _ => None,
    }
}

/// The JSON-RPC error a worker answers `error` with: bad input (paths, globs, cwds,
/// escapes, bounds, a refused user) is `-32602`, everything else `-32002`; the message is
/// the runtime-core `Display` text, and `data` the structured form when there is one.
pub fn refusal(error: &DriverError) -> ErrorObject {
    let code = match error {
        DriverError::PathOutsideWorkspace { .. }
        | DriverError::EntryEscapesTarget { .. }
        | DriverError::PostUploadCwd { .. }
        | DriverError::InvalidGlob { .. }
        | DriverError::TreeTooDeep { .. }
        | DriverError::SyncTooLarge { .. }
        | DriverError::InvalidInput { .. }
        | DriverError::UserRefused { .. } => codes::INVALID_PARAMS,
        _ => codes::WORKER_ERROR,
    };
    ErrorObject {
        code,
        message: error.to_string(),
        data: ErrorData::of(error).map(|data| crate::to_value(&data)),
    }
}

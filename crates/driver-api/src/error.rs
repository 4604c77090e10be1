//! Errors. [`RuntimeError`] is what the facade returns; its `Display` is the exact text of
//! the contract. [`DriverError`] is what drivers return; the facade wraps it unchanged.

use std::error::Error as StdError;

mod kind;
mod unsupported;

pub use unsupported::UnsupportedOperation;

/// A boxed error source.
pub type BoxError = Box<dyn StdError + Send + Sync + 'static>;

/// An error of the `EnvironmentRuntime` facade (envrt-runtime-core). Match on the
/// variant, never on the text.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RuntimeError {
    /// No driver is registered under the resolved key.
    #[error("Environment driver \"{key}\" is not registered in the environment runtime yet.")]
    DriverNotRegistered {
        /// The resolved driver key.
        key: String,
    },
    /// `acquire_lease` on an environment whose status is not `active`.
    #[error("Environment \"{name}\" is not active.")]
    EnvironmentNotActive {
        /// The environment's name.
        name: String,
    },
    /// The driver lacks an optional operation's group, or the lease's snapshot denies the
    /// capability the operation needs: one variant for every such refusal (object_store's
    /// `NotImplemented` shape), its text derived from [`UnsupportedOperation`]'s row, e.g.
    /// `Environment driver "local" does not support duplex channels.`.
    #[error("Environment driver \"{key}\" does not support {operation}.")]
    Unsupported {
        /// The driver key.
        key: String,
        /// What it does not support.
        operation: UnsupportedOperation,
    },
    /// The lease's effective snapshot lacks `duplexCommandStream`, or resolving it failed.
    #[error("Sandbox lease does not grant the duplex command stream capability.")]
    DuplexNotGranted {
        /// The capability-resolution failure, when that is why (fail closed).
        #[source]
        cause: Option<DriverError>,
    },
    /// No lease with this id is in the lease store.
    #[error("Lease \"{id}\" was not found.")]
    LeaseNotFound {
        /// The lease id.
        id: String,
    },
    /// An acquire (or a warm pool) on a runtime bound to a tenant named another tenant's
    /// `company_id`; refused before any driver is touched, so no lease is made.
    #[error("Tenant \"{company_id}\" is not this runtime's tenant \"{tenant}\".")]
    TenantMismatch {
        /// The tenant the request named.
        company_id: String,
        /// The tenant the runtime is bound to.
        tenant: String,
    },
    /// No environment with this id is known to the runtime.
    #[error("Environment \"{id}\" was not found.")]
    EnvironmentNotFound {
        /// The environment id.
        id: String,
    },
    /// The operation needs an active lease.
    #[error("Lease \"{id}\" is not active (status: {status}).")]
    LeaseNotActive {
        /// The lease id.
        id: String,
        /// Its status.
        status: crate::LeaseStatus,
    },
    /// The provider no longer has the lease's resource (resume found it gone).
    #[error("Lease \"{id}\" can no longer be resumed: its provider resource is gone.")]
    LeaseGone {
        /// The lease id.
        id: String,
    },
    /// The lease is paused (contract section 8): execute, spawn and the other process
    /// verbs, sync, duplex, realize and capture wait for `unpause_lease`.
    #[error("Lease \"{id}\" is paused.")]
    LeasePaused {
        /// The lease id.
        id: String,
    },
    /// The lease's backend died behind envrt's back (its container was removed, its
    /// workspace deleted, its sandbox gone): the driver answered
    /// [`DriverError::ResourceGone`] to an operation on it. The lease stays active until
    /// released or destroyed, which succeed and clean what is left.
    #[error(
        "Lease \"{id}\" is lost: its provider resource \"{resource}\" is gone; release or destroy the lease to end it."
    )]
    LeaseLost {
        /// The lease id.
        id: String,
        /// The provider lease id the driver no longer has.
        resource: String,
    },
    /// A new lease's readiness command did not succeed (contract section 8,
    /// "Readiness"); the lease was ended before this error returned. `reason`:
    /// `its readiness command exited with code {code}`, `... was ended by signal
    /// {signal}`, `... did not finish within {timeout_ms} ms`.
    #[error("Lease \"{id}\" is not ready: {reason}.")]
    NotReady {
        /// The lease id.
        id: String,
        /// Why, from the list above.
        reason: String,
    },
    /// The lease's idle timeout ended it (its driver's idle watchdog, with no holder
    /// needed); the facade records it as expired.
    #[error("Lease \"{id}\" ended after its idle timeout.")]
    LeaseIdleEnded {
        /// The lease id.
        id: String,
    },
    /// The lease is past its expiry; no operation but release and destroy is taken.
    #[error("Lease \"{id}\" expired at {expires_at}.")]
    LeaseExpired {
        /// The lease id.
        id: String,
        /// When it expired.
        expires_at: crate::model::Timestamp,
    },
    /// An acquire names a template its environment's driver does not have (never
    /// captured, or deleted).
    #[error("Template \"{id}\" was not found in environment \"{environment_id}\".")]
    TemplateNotFound {
        /// The template id as given.
        id: String,
        /// The environment of the acquire.
        environment_id: String,
    },
    /// A release was asked with a status that does not end a lease.
    #[error("A lease cannot be released with status \"{status}\"; use released, failed or expired.")]
    InvalidReleaseStatus {
        /// The requested status.
        status: crate::LeaseStatus,
    },
    /// A process verb was refused (contract section 9): an unknown or exited process, no
    /// terminal, an offset no longer held or past the end, ...
    #[error(transparent)]
    Process(#[from] crate::process::ProcessError),
    /// A network setting the lease's driver cannot enforce, or a lease's policy beyond what
    /// its environment grants (see [`crate::network`]).
    #[error("Network policy refused: {0}")]
    Network(#[from] crate::network::NetworkRefusal),
    /// The driver failed.
    #[error(transparent)]
    Driver(#[from] DriverError),
    /// The lease store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// An error raised by a driver. Common failures have their own variant so that every
/// driver reports them with the same text.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DriverError {
    /// An environment-side path lies outside the lease workspace (`..`, an absolute path
    /// elsewhere, or a symlink that leads out).
    #[error("Path \"{path}\" is outside the lease workspace.")]
    PathOutsideWorkspace {
        /// The offending path as given.
        path: String,
    },
    /// The request's `user` cannot be honoured; `reason` is one of the texts each driver
    /// documents (the command did not run).
    #[error("Cannot run as user \"{user}\": {reason}")]
    UserRefused {
        /// The user as the request gave it.
        user: String,
        /// Why, one sentence ending in a period.
        reason: String,
    },
    /// An archive entry or a copied link would land outside the sync target.
    #[error("Entry \"{entry}\" would be written outside the target \"{target}\".")]
    EntryEscapesTarget {
        /// The entry name or link.
        entry: String,
        /// The sync target.
        target: String,
    },
    /// A post-upload command's cwd is not absolute, contains `..`, or is not under one of
    /// the operation's targets.
    #[error("Post-upload command cwd \"{cwd}\" must be an absolute path under one of the operation's targets.")]
    PostUploadCwd {
        /// The refused cwd.
        cwd: String,
    },
    /// A post-upload command failed; later commands were not run.
    #[error("Post-upload command \"{command}\" failed with {outcome}.")]
    PostUploadFailed {
        /// The command line.
        command: String,
        /// `exit code N`, `signal S` or `a timeout`.
        outcome: String,
    },
    /// A sync source does not exist.
    #[error("Sync source \"{path}\" does not exist.")]
    SourceMissing {
        /// The source path.
        path: String,
    },
    /// A sync entry's kind does not match what is on disk.
    #[error("Sync source \"{path}\" is not a {expected}.")]
    SourceKind {
        /// The source path.
        path: String,
        /// `file` or `directory`.
        expected: &'static str,
    },
    /// A synced tree is nested deeper than the bound every driver's walk applies
    /// (`envrt_driver_files::tree::MAX_TREE_DEPTH`); nothing was written.
    #[error("Sync source \"{path}\" is nested deeper than {limit} directory levels.")]
    TreeTooDeep {
        /// The sync source as given.
        path: String,
        /// The bound.
        limit: usize,
    },
    /// A sync out entry holds more bytes of file content than its bound
    /// ([`SyncFile::max_bytes`](crate::sync::SyncFile::max_bytes), by default
    /// [`DEFAULT_SYNC_MAX_BYTES`](crate::sync::DEFAULT_SYNC_MAX_BYTES)); nothing was placed.
    #[error("Sync out of \"{path}\" exceeds the limit of {limit} bytes.")]
    SyncTooLarge {
        /// The sync source as given.
        path: String,
        /// The bound, in bytes.
        limit: u64,
    },
    /// An exclude glob does not parse.
    #[error("Exclude pattern \"{pattern}\" is not a valid glob.")]
    InvalidGlob {
        /// The pattern.
        pattern: String,
    },
    /// Input the driver cannot accept.
    #[error("Invalid input: {message}")]
    InvalidInput {
        /// What is wrong.
        message: String,
    },
    /// A sync out could not write its host target because the target's file system is
    /// full or read-only; the driver left no partial file there.
    #[error("Sync out stopped: the file system of \"{target}\" is {why}; nothing partial was left there.")]
    HostFileSystem {
        /// The operation's host target (its targets joined by `", "` when it had several).
        target: String,
        /// `full` or `read-only`.
        why: &'static str,
    },
    /// A sync in could not write into the lease because the file system under its target
    /// there is full or read-only; the driver left no partial file there.
    #[error("Sync in stopped: the file system of \"{target}\" in the lease is {why}; nothing partial was left there.")]
    LeaseFileSystem {
        /// The operation's lease target (its targets joined by `", "` when it had several).
        target: String,
        /// `full` or `read-only`.
        why: &'static str,
    },
    /// The lease's provider resource does not exist (any more).
    #[error("Lease resource \"{id}\" does not exist.")]
    ResourceGone {
        /// The provider lease id.
        id: String,
    },
    /// A plugin worker lacks an optional verb the operation needs; Paperclip's own
    /// refusal (`{operation}` is `template capture`, `template deletion` or
    /// `interactive setup`).
    #[error("Sandbox provider \"{provider}\" does not support {operation}.")]
    ProviderUnsupported {
        /// The provider (driver) key.
        provider: String,
        /// What it does not support.
        operation: &'static str,
    },
    /// The duplex channel is closed.
    #[error("Duplex channel is closed.")]
    ChannelClosed,
    /// A process verb was refused by the driver's supervisor (section 9).
    #[error(transparent)]
    Process(#[from] crate::process::ProcessError),
    /// The backend (engine, worker) cannot be reached or is not usable.
    #[error("{message}")]
    Unavailable {
        /// What is unavailable, naming its address.
        message: String,
        /// The underlying error.
        #[source]
        source: Option<BoxError>,
    },
    /// An I/O failure.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// Any other failure.
    #[error("{message}")]
    Other {
        /// What failed.
        message: String,
        /// The underlying error.
        #[source]
        source: Option<BoxError>,
    },
}

impl DriverError {
    /// An [`DriverError::Other`] without a source.
    pub fn other(message: impl Into<String>) -> Self {
        DriverError::Other {
            message: message.into(),
            source: None,
        }
    }

    /// An [`DriverError::Io`] with context.
    pub fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        DriverError::Io {
            context: context.into(),
            source,
        }
    }

    /// An [`DriverError::InvalidInput`].
    pub fn invalid(message: impl Into<String>) -> Self {
        DriverError::InvalidInput {
            message: message.into(),
        }
    }

    /// The one refusal of an execute `cwd` that is missing or not a directory, on every
    /// driver (contract section 5): `Invalid input: cwd "{cwd}" is not a directory in the
    /// environment.`, with `cwd` as the caller gave it.
    pub fn missing_cwd(cwd: &str) -> Self {
        DriverError::invalid(format!("cwd \"{cwd}\" is not a directory in the environment."))
    }
}

/// A failure of a lease store (envrt-runtime-core's `LeaseStore`).
#[derive(Debug, thiserror::Error)]
#[error("Lease store error: {message}")]
pub struct StoreError {
    /// What failed.
    pub message: String,
    /// The underlying error.
    #[source]
    pub source: Option<BoxError>,
}

impl StoreError {
    /// A store error without a source.
    pub fn new(message: impl Into<String>) -> Self {
        StoreError {
            message: message.into(),
            source: None,
        }
    }
}

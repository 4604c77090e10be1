//! # envrt-driver-local
//!
//! The embedded default driver: commands run as real processes on this host, each lease
//! owns a private workspace directory, and files move in and out natively.
//!
//! ```
//! use std::sync::Arc;
//! use envrt_driver_local::{LocalConfig, LocalDriver};
//! use envrt_runtime_core::{AcquireRequest, Environment, EnvironmentRuntime, ExecuteRequest, LeaseStatus};
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! # let root = std::env::temp_dir().join(format!("envrt-local-doc-{}", std::process::id()));
//! let driver = LocalDriver::new(LocalConfig { root: Some(root.clone()), ..Default::default() })?;
//! let runtime = EnvironmentRuntime::new();
//! runtime.register_driver(Arc::new(driver));
//! runtime.put_environment(Environment::new("env-1", "This host", "local")).await?;
//! let lease = runtime.acquire_lease(AcquireRequest::new("env-1", "acme")).await?;
//! let out = runtime.execute(&lease.id, ExecuteRequest::new("echo", ["hello"])).await?;
//! assert_eq!(out.stdout, b"hello\n");
//! runtime.release_lease(&lease.id, LeaseStatus::Released).await?; // workspace removed
//! # std::fs::remove_dir(&root).unwrap();
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # }).unwrap();
//! ```
//!
//! ## Capabilities
//! Static support set: `reusableLeases` (only under `reuse_by_environment`, by the
//! classifier's narrowing), `nativeSyncIn`, `nativeSyncOut`, `independentControlCommands`,
//! and the opt-in keys it declares, `incrementalSessionOutput` (the sink streams) and
//! `concurrentSyncOperations` (sync in and out touch independent paths), and
//! `persistentProcessSessions` when the supervisor `envrt-agent` is found (`ENVRT_AGENT`,
//! next to the executable, or on `PATH`): one per lease, started on its first `spawn`
//! inside its containment, ended with it. No duplex channels; no runner ingress.
//!
//! ## Leases
//! [`acquire_lease`](EnvironmentDriver::acquire_lease) creates `{root}/lease-{lease id}`
//! with mode `0700` (`root` from [`LocalConfig::root`], default
//! `{temp dir}/envrt-local-{uid}`). The provider lease id is the directory name; lease metadata
//! carries `workspace` (the host path). On release:
//!
//! | policy | workspace |
//! |---|---|
//! | `ephemeral`, `reuse_by_execution_workspace` | removed |
//! | `reuse_by_environment` | kept; resume returns it (`None` once it has vanished) |
//! | `retain_on_failure` | kept when the lease ends `retained`, removed otherwise |
//!
//! Destroy removes it whatever the policy. Release and destroy first kill every command
//! the lease still runs; both are idempotent.
//!
//! ## Expiry
//! A requested expiry is attested as is (`expires_at` = the requested time). At acquire
//! the driver starts a detached watchdog (`/bin/sh` in a process group of its own, outside
//! the lease's cgroup, pid recorded in `{root}/.watchdog-lease-{id}`) that sleeps until
//! the expiry, then kills everything the lease runs (its cgroup, or without cgroups every
//! process whose working directory lies in the workspace or whose `HOME` is it) and removes
//! the workspace unless the policy is `reuse_by_environment`. It needs nothing from the
//! program that took the lease, so a holder that died still has its lease ended on time;
//! the store learns of it through `release_expired` (`envrt gc`). Release and destroy
//! before the expiry kill the watchdog, so none outlives its lease.
//!
//! ## Recovery
//! The driver has the recovery group ([`Recovery`]): its inventory is every lease
//! workspace under the root (kind [`KIND_WORKSPACE`], with what runs tied to it and its
//! watchdog), every expiry watchdog whose workspace is gone ([`KIND_WATCHDOG`]) and every
//! template capture a crash cut short ([`KIND_TEMPLATE_STAGING`]), whichever process made
//! them; reaping kills what is tied to the workspace, ends the
//! watchdog and removes the directory. `kill_leftovers` kills what a dead holder's lease
//! still runs ([`kill_tied_to`]). `EnvironmentRuntime::reconcile` (`envrt gc`) reaps what
//! no lease of the store keeps, so a root belongs to one lease store.
//!
//! ## Execute
//! Every command runs in its own process group with no shell (unless you run one). Its
//! working directory is the workspace, or `cwd` resolved inside it (relative to it, or
//! absolute under it; `..` and symlinks leading out are refused with
//! [`DriverError::PathOutsideWorkspace`]). A timeout sends `SIGTERM` to the whole group,
//! then `SIGKILL` after [`LocalConfig::kill_grace`]; the partial output is kept and
//! `timed_out` is set. When the command itself exits, whatever it left in its group (a
//! background grandchild still holding stdout, say) is killed and the call returns. Each
//! stream is capped (`max_output_bytes`); the sink still sees every chunk. A program that
//! does not exist exits `127` with `envrt: command not found: NAME` on stderr (one that
//! cannot be executed, `126` with `envrt: permission denied: NAME`). Dropping the execute
//! future kills the group; so do release and destroy for every command of the lease.
//!
//! **Environment.** The host's variables are not inherited. A command sees only:
//! - the host's values of the allow-list [`LocalConfig::env_allowlist`] (default `PATH`,
//!   `LANG`, `LC_ALL`, `LC_CTYPE`, `TZ`) when they are set;
//! - `PATH` = `/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin` when the host
//!   has none;
//! - `HOME` = the lease workspace;
//! - then the request's own variables, which override all of the above.
//!
//! **Users.** A request's `user` (`NAME`, `UID`, `NAME:GROUP`, `UID:GID`) is honoured only
//! when envrt runs as root and the environment's config lists that exact text in
//! `allowedUsers` (`[environment.config] allowedUsers = ["nobody"]`); otherwise the
//! command does not run and the error is `Cannot run as user "U": REASON` with one of the
//! reasons of [`DriverError::UserRefused`]'s local texts (see `docs/contract.md`). The
//! child drops to that uid and gid (supplementary groups cleared) before `exec`, enters
//! its working directory as that user (the driver's root becomes `0711` the first time, so
//! a user can pass through it to a workspace opened up for it, without listing the
//! others; each workspace stays `0700` until a command of its lease opens it), and is contained by its process group rather than
//! a cgroup. Paths stay confined to the workspace: the local driver's
//! [`path_scope`](EnvironmentDriver::path_scope) is `workspace` unless
//! [`LocalConfig::path_scope`] opts in to the whole host (`whole-environment`: any
//! absolute `cwd` or sync path of the host is accepted; relative ones still start at the
//! workspace, and `..` is still refused).
//!
//! ## Sync
//! `sync_in` and `sync_out` follow the contract's section 6. Host-side paths must be
//! absolute; environment-side paths are confined to the workspace like `cwd` above (a
//! target may not be the workspace itself, and targets of one operation may not overlap).
//! Every check runs before anything is written (post-upload cwds included). Each entry is
//! staged beside its target (files `0600`, directories `0700` until complete, then their
//! final mode) and the operation's entries are renamed into place together only once all
//! are staged, so a failed operation leaves neither target nor temporary files; an
//! existing target, file or directory, is replaced whole by an atomic exchange.
//!
//! - The top-level source is always resolved; inside a directory, `followSymlinks: false`
//!   (the default) copies links as links, and a copied link that would resolve outside the
//!   target (`..`, an absolute path elsewhere, or through other copied links) is refused
//!   with [`DriverError::EntryEscapesTarget`]. With `followSymlinks: true`, a followed link
//!   of the workspace must stay inside it, and a link loop is refused.
//! - `mode` is the final mode of the file or top directory; everything else keeps the
//!   source's permission bits (special bits included: commands already run as the
//!   driver's user, so this grants nothing new). `access` and `writablePath` concern
//!   providers that mount; a copy ignores them.
//! - `exclude` globs follow [`ExcludeSet`](envrt_driver_api::sync::ExcludeSet).
//! - Post-upload commands (`sync_in` only) run with `sh -c` after the files land, in order,
//!   stopping at the first failure; the default cwd is the first target (its parent for a
//!   file).
//! - Counts are regular files and their bytes. FIFOs, sockets and devices are skipped.
//! - `realize_workspace` ignores `local_path`; `remote_path` is created inside the
//!   workspace.
//!
//! ## Templates
//! [`capture_template`](envrt_driver_api::Templates::capture_template) copies the lease's
//! workspace to `{root}/.templates/{id}/tree` (with `template.json` beside it; kind
//! `snapshot`): each file is cloned with `FICLONE` where the file system shares blocks
//! (btrfs, XFS with reflink), copied otherwise; links stay links; permission bits are kept;
//! FIFOs, sockets and devices are skipped. The copy is staged in a hidden sibling and
//! renamed into place, so a failed capture lists nothing. A lease acquired from the
//! template starts with a copy of that tree as its workspace; deleting the template
//! removes the directory and leaves such leases as they are. The metadata reports
//! `filesCloned`, `filesCopied`, `bytes` and `captureMillis`.
//!
//! ## Containment
//! Where a cgroup v2 hierarchy is mounted and writable (as root, or with a delegated
//! subtree), every command starts inside a cgroup of its own under
//! `{cgroup2 mount}/envrt-local/lease-{id}/`, so whatever it forks (a `setsid` daemon
//! included) is killed when the command exits or times out, and on release, destroy and
//! `envrt gc`. Otherwise the driver falls back to the process-group kill plus, on release
//! and destroy, a `/proc` scan for processes whose `HOME` is the workspace or whose working
//! directory lies in it; a descendant that leaves the group, the workspace and its `HOME`
//! then survives. [`LocalDriver::containment`] says which applies ([`LocalConfig::cgroups`]
//! turns cgroups off).
//!
//! ## Limits
//! Commands run as the driver's own user with no isolation beyond the working directory:
//! a command can read and write anything that user can, and every variable of a request
//! (`LD_PRELOAD` included) reaches it and whatever it starts. See `docs/security.md`.
//! Path confinement is checked on the real file system before each operation; a command
//! racing the driver to swap a directory for a symlink during a sync is not defended
//! against. Synced trees deeper than
//! [`MAX_TREE_DEPTH`](envrt_driver_files::tree::MAX_TREE_DEPTH) levels are refused.

// The names the crate doc above links to.
#[cfg(doc)]
use envrt_driver_api::{DriverError, EnvironmentDriver, Recovery};

mod config;
mod descriptor;
mod driver;
mod execute;
mod expiry;
mod extend;
mod fork;
mod idle;
mod pause;
mod process;
mod processes;
mod realize;
mod recovery;
mod sync;
mod templates;
mod workspace;

pub use config::LocalConfig;
pub use descriptor::{DESCRIPTOR, LocalDescriptor};
pub use driver::{DRIVER_KEY, LocalDriver};
pub use process::containment::kill_tied_to;
pub use process::describe_containment;
pub use recovery::{KIND_TEMPLATE_STAGING, KIND_WATCHDOG, KIND_WORKSPACE};

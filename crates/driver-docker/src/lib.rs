//! # envrt-driver-docker
//!
//! The `docker` driver of envrt: one container per lease, reached through the Docker
//! Engine API with [`bollard`] — the local socket by default, `DOCKER_HOST` (unix or tcp)
//! otherwise.
//!
//! - **Leases**: a container from the environment's `image` (never pulled), running
//!   `sleep infinity` under Docker's init (so every orphan is reaped), labelled with
//!   [`LABEL_LEASE_ID`], [`LABEL_ENVIRONMENT_ID`], [`LABEL_COMPANY_ID`] and
//!   [`LABEL_MANAGED`] (plus [`DockerConfig::extra_labels`]). `reuse_by_environment`
//!   stops it on release and resume starts it again (after checking the lease label);
//!   `retain_on_failure` keeps it running after a release as failed; every other release
//!   removes it. Release, destroy and resume treat a vanished container as done (resume
//!   reports it gone). [`DockerDriver::reap_orphans`] removes containers no lease owns;
//!   the recovery group lists them ([`KIND_CONTAINER`] items, scoped by the extra labels)
//!   for `EnvironmentRuntime::reconcile` and `envrt gc`.
//! - **Expiry**: a requested expiry is bounded to the whole second at or before it and
//!   returned as the lease's `expires_at`. The container's main process is then
//!   `sh -c 'exec sleep $(( END - $(date +%s) ))'` instead of `sleep infinity`, so at the
//!   expiry it exits, docker-init stops the container and every command in it dies, with
//!   no host process involved (a holder that was killed changes nothing). Unless the policy
//!   is `reuse_by_environment` (whose containers stay, stopped), every container is created
//!   with `AutoRemove` and so removed with its anonymous volumes once stopped. The expiry
//!   is on the container as [`LABEL_EXPIRES_AT`]. `extend` (local engine) re-arms the
//!   host expiry watchdog and, for a later expiry, stops that `sleep`; see `extend.rs`.
//! - **Idle timeout** (local engine): a detached host watchdog per armed lease kills the
//!   container's init once the lease has been idle for its timeout (no operation, no
//!   process in the container but its init, main process and supervisor); see `idle.rs`.
//! - **Execute**: through the exec API. The command runs under a tiny `sh` wrapper that
//!   reports its pid; a timeout stops the whole process tree from a second exec (`SIGTERM`,
//!   then `SIGKILL` after [`DockerConfig::kill_grace`]) and checks nothing is left. The call
//!   returns when the command exits even if a background process still holds its output
//!   (that process is killed). The image needs a POSIX `sh` with `/proc` mounted.
//!   Docker reports a command killed by a signal as exit code 128 + n; outside a timeout
//!   that code is returned as is. A request's `user` is the exec's `User` (as the
//!   container's `/etc/passwd` and `/etc/group` know it); one the container lacks is
//!   refused with `Cannot run as user "U": no such user in the container.` (or `group`).
//! - **Paths**: the container is the boundary ([`PathScope::WholeEnvironment`]): `cwd`,
//!   sync targets and sync sources may be any absolute path of the container (`/tmp`,
//!   `/usr/bin`); relative ones start at the workspace; `..`, an empty path and NUL bytes
//!   are refused (`Path "{path}" is outside the lease workspace.`), and so is a sync target
//!   `/` (`Invalid input: A sync target cannot be the root directory "/".`). Symlinks are
//!   resolved by the engine inside the container's own file system; the host's paths are
//!   never looked at.
//! - **Sync**: tar streams through the archive API, built and read on the fly, never held
//!   whole. A target is *replaced*: the entry lands in a hidden temporary sibling first and
//!   is renamed over the target only when complete (the workspace root, which cannot be
//!   renamed, gets its content replaced), so a failure leaves the old target as it was.
//!   Uploaded files belong to the container's user. Host-side extraction refuses entries
//!   with `..` or absolute names and links that lead out of the target, and gives every
//!   file and directory the permission bits of its archive header (`rwx` for user, group
//!   and others; set-uid, set-gid and sticky bits are dropped so that nothing from a
//!   container becomes a set-uid file on the host).
//! - **Duplex**: exec attach; output is stdout and stderr in arrival order.
//! - **Processes** (contract section 9): one supervisor (`envrt-agent`) per lease inside
//!   its container, bind-mounted read-only at [`AGENT_PATH`] with its socket in a host run
//!   directory mounted at [`RUN_DIR`], started by the lease's first spawn; every verb is
//!   one request to its socket (no exec). Granted where the supervisor is a static binary
//!   ([`DockerConfig::agent`], else found as the local driver finds it) and the engine is
//!   on this host, on the leases that have it mounted ([`META_AGENT`]);
//!   [`DockerDriver::process_sessions`] says why not otherwise.
//! - **Templates**: a capture commits the lease's container (paused while it is
//!   committed) to the image `envrt-template:{id}` (kind `image`), labelled
//!   [`LABEL_MANAGED`], [`LABEL_TEMPLATE`], [`LABEL_TEMPLATE_ENVIRONMENT`] and the
//!   configured extra labels; listing finds those images by label and tag. A lease started
//!   from a template runs that image (with the environment's user, working directory,
//!   variables and limits). Deleting removes the image; leases already running it keep
//!   running, and the image goes when the last of them is released or destroyed
//!   ([`DockerDriver::prune_template_images`]). A lease with
//!   `readOnlyRootFs` keeps its workspace on a volume, which a commit does not hold, so its
//!   capture is refused.
//!
//! - **Hardening** (always): every capability dropped but [`KEPT_CAPABILITIES`],
//!   `no-new-privileges`, a process limit and a memory limit (defaults
//!   [`DEFAULT_PIDS_LIMIT`], [`DEFAULT_MEMORY_BYTES`]), no network. Request variables go
//!   into the exec inside the container only. See `docs/security.md`.
//!
//! Environment config (JSON, camelCase): `image` (required), `user`, `workingDir`
//! (default `/workspace`), `env`, `network` (default `none`), `memoryBytes`, `nanoCpus`,
//! `pidsLimit`, `readOnlyRootFs` (default false; the workspace and `/tmp` then are
//! volumes), `duplex` (default true; false withdraws `duplexCommandStream`),
//! `allowedUsers` (who a request's `user` may name besides the configured `user`; none by
//! default).

#![forbid(unsafe_code)]

#[cfg(doc)]
use envrt_driver_api::PathScope;

mod bind;
mod config;
mod container;
mod descriptor;
mod driver;
mod duplex;
mod egress;
mod egress_credentials;
mod engine;
mod execute;
mod execute_agent;
mod expiry;
mod extend;
mod fork;
mod idle;
mod network;
mod owner;
mod pause;
mod process;
mod processes;
mod realize;
mod recovery;
mod sync;
mod templates;

pub use config::{
    DEFAULT_BIND_DIR, DEFAULT_DOCKER_HOST, DEFAULT_MEMORY_BYTES, DEFAULT_PIDS_LIMIT, DEFAULT_WORKING_DIR, DockerConfig,
    EnvConfig, KEPT_CAPABILITIES, WorkspaceMount,
};
pub use descriptor::{DESCRIPTOR, DockerDescriptor, STATE_LABEL};
pub use driver::{
    DRIVER_KEY, DockerDriver, LABEL_COMPANY_ID, LABEL_ENVIRONMENT_ID, LABEL_EXPIRES_AT, LABEL_LEASE_ID, LABEL_MANAGED,
};
pub use processes::{AGENT_PATH, DEFAULT_AGENT_DIR, META_AGENT, RUN_DIR};
pub use recovery::KIND_CONTAINER;
pub use templates::{
    LABEL_TEMPLATE, LABEL_TEMPLATE_CREATED, LABEL_TEMPLATE_ENVIRONMENT, LABEL_TEMPLATE_LABEL, LABEL_TEMPLATE_SOURCE,
    TEMPLATE_REPOSITORY,
};

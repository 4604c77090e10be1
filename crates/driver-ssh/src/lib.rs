//! # envrt-driver-ssh
//!
//! Leases on remote machines over SSH: a lease is a private workspace directory on a
//! remote host, commands run there over SSH session channels, files move as tar streams.
//!
//! ## Why the system OpenSSH (through the `openssh` crate's native multiplexing)
//! The driver drives the host's `ssh` client: one `ControlMaster` connection per host
//! (started by `ssh -M`, which does the key exchange, host-key verification and
//! authentication), and every command a channel opened on that master through its control
//! socket by the `openssh` crate's `native-mux` implementation (no `ssh` process per
//! command). The alternative, a pure-Rust client (`russh`), was weighed and not taken:
//! - **Security record**: authentication and host-key checking stay with OpenSSH, the
//!   implementation every `sshd` is tested against, with its known-hosts format, agent,
//!   `~/.ssh/config` (jump hosts, certificates) and hardware keys working as users expect.
//! - **Performance**: a command costs one channel open over an open connection, the same
//!   as `ssh -o ControlPath=... host cmd` minus the `ssh` process, and a pure-Rust client
//!   would pay the same round trips; no crypto crates to compile (the `openssh` crates are
//!   small, on the 2-core builders too).
//! - **Maintenance**: `openssh` and `openssh-mux-client` are maintained (jonhoo,
//!   NobodyXu) and only speak the documented `PROTOCOL.mux`.
//!
//! The price, stated where it shows: OpenSSH's mux protocol relays a command's exit
//! status but not its exit-signal, so a command killed by a signal the driver did not send
//! ends with neither an exit code nor a signal (`metadata.signal = "unknown"`); timeouts,
//! which the driver sends, report theirs. The host needs the `ssh` binary.
//!
//! ## Hosts and trust
//! The environment's configuration names the host: `host` (required unless
//! [`SshConfig::target`] gives a default), `port`, `user`, `key` (a private key file;
//! otherwise the agent and OpenSSH's defaults), `knownHosts` (the file the host key must
//! be in; OpenSSH's default otherwise) and `acceptNewHostKey` (default false: a host
//! whose key is not known is refused; a key that differs from a known one is always
//! refused), and `connectRetrySeconds` (default 5: how long a connection failure that may
//! pass — refused, timed out, unreachable — is tried again). Nothing of a request's variables is ever put on a command line: they travel
//! on the channel's stdin and are read by the remote prologue.
//!
//! ## Leases
//! `acquire_lease` creates `{root}/lease-{lease id}` (mode `0700`; `root` is
//! [`SshConfig::root`], relative to the remote user's home unless absolute) holding `work`
//! (the workspace: each command's cwd and `HOME`) and `run` (pid files, sync staging).
//! Release follows the policy like the local driver (removed unless `reuse_by_environment`,
//! or `retain_on_failure` ending `retained`); destroy removes it whatever the policy;
//! both first kill everything the lease runs, and both are idempotent. Resume finds the
//! directory again, from any process. A requested expiry is not supported (the facade
//! refuses such an acquire).
//!
//! ## Capabilities
//! Explicit support set: `reusableLeases` (under `reuse_by_environment`), `nativeSyncIn`,
//! `nativeSyncOut`, `duplexCommandStream`, `independentControlCommands`,
//! `incrementalSessionOutput`, and `persistentProcessSessions` on a host where the process
//! supervisor runs (below). No runner ingress.
//!
//! ## Persistent process sessions
//! Contract section 9, held by one supervisor (`envrt-agent`) per lease on the remote host
//! and reached through a unix socket the master connection forwards
//! (`ssh -O forward -L LOCAL:REMOTE`, over the mux protocol). The first capability
//! resolution for a host probes it (once, and again after its connection was replaced,
//! for a host that may have rebooted): this host's supervisor binary
//! ([`SshConfig::agent`], else `ENVRT_AGENT`, next to the executable, `PATH`) must be built
//! for the host's `uname -m`, the host must have `setsid` and `flock`, and the binary,
//! copied over the master when missing (into `~/.cache/envrt-agent`, `0700`, named by its
//! content hash, written under a temporary name and renamed), must run there. Only then do
//! its leases get `persistentProcessSessions`; [`SshDriver::process_support`] says why not
//! (and `envrt doctor` shows it). A dynamically linked build runs only where the remote C
//! library matches; a static build (`crates/agent/README.md`) runs on any Linux host of
//! its architecture.
//!
//! The supervisor starts on a lease's first spawn, under the lease's remote `flock`,
//! detached from the channel (`setsid`, stdin from `/dev/null`, its log
//! `{lease dir}/agent.log`, its pid `{lease dir}/agent.pid`), with `--subreaper`, in the
//! workspace with a command's environment (`HOME` = the workspace): it outlives the
//! channel, the master connection and the program that started it, and another program on
//! the same store finds its processes by id through a forward of its own. Its socket is
//! `~/.cache/envrt-agent/{hash of the lease directory}.sock` (a unix socket path is
//! bounded to 107 bytes, which a lease directory under a deep root already nearly takes);
//! the local end of a forward is in a `0700` directory of the lease under the control
//! directory, one per master connection. A cwd is resolved on the remote side like an
//! execute's. Release, destroy and `gc` stop the supervisor (it cannot start anything
//! more), kill every process below it (as a subreaper it keeps `setsid` escapees below
//! it), then it; they remove its socket and pid file, cancel this program's forward and
//! remove the lease's forward directory.
//!
//! ## Execute
//! The login shell of the remote user (it must read POSIX `sh`) replaces itself with
//! `env -i` and a clean `/bin/sh` prologue, which reads the request's variables from
//! stdin, enters the cwd (confined lexically here, and on the remote side by resolving it:
//! a symlink leading out is refused with [`DriverError::PathOutsideWorkspace`]), records
//! its pid, starts a watchdog and becomes the command. `sshd` puts each channel's command
//! in a session and process group of its own; the watchdog kills that whole group when the
//! command ends (what it left holding stdout) and when the connection breaks, so nothing
//! of a command outlives its channel. A timeout sends `SIGTERM` to the group, then
//! `SIGKILL` after [`SshConfig::kill_grace`]. A missing program exits `127` with
//! `envrt: command not found: NAME`. The command sees the remote login's values of
//! [`SshConfig::env_allowlist`], `PATH` (a default when unset), `HOME` = the workspace,
//! then the request's variables (names must be `sh` identifiers). Each stream is capped;
//! the sink sees every chunk.
//!
//! ## Sync
//! Contract section 6, with the local driver's rules: every check first (sources, kinds,
//! overlapping targets, links that would escape, post-upload cwds), then the transfer;
//! sync in streams one tar archive into a staging directory of the lease and renames the
//! entries into place only after the remote side has checked every target's parent
//! resolves inside the workspace; sync out checks each source on the remote side and
//! stages on the host. An existing target is replaced by two renames (not one atomic
//! exchange: a reader may see it absent for an instant).
//!
//! ## Connections
//! One master per host (host, port, user, key, known-hosts), shared by every lease on it;
//! at most [`SshConfig::max_channels`] channels at once (`sshd`'s `MaxSessions`, 10 by
//! default, bounds a connection), further calls wait. A master that died is replaced on
//! the next call; a call whose connection broke mid-command fails with an `Unavailable`
//! error and its command is killed on the remote side by its watchdog.

// The names the crate doc above links to.
#[cfg(doc)]
use envrt_driver_api::{DriverError, EnvironmentDriver, Recovery};

mod config;
mod connection;
mod descriptor;
mod driver;
mod duplex;
mod execute;
mod fork;
mod pause;
mod processes;
mod realize;
mod recovery;
mod remote;
mod sync;
mod target;

pub use config::SshConfig;
pub use descriptor::{DESCRIPTOR, SshDescriptor};
pub use driver::{DRIVER_KEY, SshDriver};
pub use target::{MAX_CONNECT_RETRY_SECONDS, SshTarget};

//! What every sandbox is held to, beyond its namespaces: the identity the command runs as,
//! the `/proc` paths made read-only or masked, the sizes of its tmpfs mounts and its
//! process and memory limits; and the `bwrap` options that apply them.
//!
//! Defaults (each a worker flag, see the module docs of [`super`]):
//! - a worker running as root starts `bwrap` as the lease's own unprivileged host user (a
//!   uid of its own from `--sandbox-uids`, see the `uids` module), so the sandbox's user
//!   namespace maps the command to an unprivileged host user: host-owned files under
//!   `/proc/sys` and elsewhere are not writable even where a mount is; the lease directory
//!   is owned by that user so the workspace stays writable;
//! - read-only: `/proc/sys`, `/proc/sysrq-trigger`, `/proc/irq`, `/proc/bus`, `/proc/fs`;
//!   masked (`/dev/null` over files, an empty read-only tmpfs over directories):
//!   `/proc/kcore`, `/proc/keys`, `/proc/key-users`, `/proc/timer_list`,
//!   `/proc/timer_stats`, `/proc/sched_debug`, `/proc/latency_stats`, `/proc/kpagecount`,
//!   `/proc/kpageflags`, `/proc/kpagecgroup`, `/proc/kmsg`, `/proc/acpi`, `/proc/asound`,
//!   `/proc/scsi` (those the kernel has);
//! - `/tmp` is the lease's own directory, kept across its commands (`.tmp-<lease id>`
//!   beside the lease directory, removed with it): bounded by the lease root's file system,
//!   like the workspace; with `--fresh-tmp`, each command gets a fresh tmpfs `/tmp` of
//!   `--tmp-size` (256 MiB) instead. `/dev/shm` is a tmpfs of 64 MiB per command, the rest
//!   of `/dev` read-only;
//! - at most 1024 processes (`RLIMIT_NPROC`, counted in the sandbox's own user namespace)
//!   and 8 GiB of address space per process (`RLIMIT_AS`), set by the sandbox init before
//!   the command starts, soft and hard.

use std::path::Path;

use super::uids::Ids;

/// `/proc` paths bound read-only from the host (as container runtimes do).
const PROC_READ_ONLY: &[&str] = &["/proc/sys", "/proc/sysrq-trigger", "/proc/irq", "/proc/bus", "/proc/fs"];

/// `/proc` paths hidden: files get `/dev/null`, directories an empty read-only tmpfs.
const PROC_MASKED: &[&str] = &[
    "/proc/kcore",
    "/proc/keys",
    "/proc/key-users",
    "/proc/timer_list",
    "/proc/timer_stats",
    "/proc/sched_debug",
    "/proc/latency_stats",
    "/proc/kpagecount",
    "/proc/kpageflags",
    "/proc/kpagecgroup",
    "/proc/kmsg",
    "/proc/acpi",
    "/proc/asound",
    "/proc/scsi",
];

/// The fixed identity `--sandbox-uid` or `--sandbox-gid` alone completes (`nobody`).
pub(crate) const DEFAULT_SANDBOX_ID: u32 = 65534;
/// Default size of the `/tmp` tmpfs.
pub(crate) const DEFAULT_TMP_BYTES: u64 = 256 * 1024 * 1024;
/// Default size of the `/dev/shm` tmpfs.
pub(crate) const DEFAULT_SHM_BYTES: u64 = 64 * 1024 * 1024;
/// Default process limit per sandbox.
pub(crate) const DEFAULT_MAX_PROCESSES: u64 = 1024;
/// Default address-space limit per process.
pub(crate) const DEFAULT_MAX_MEMORY: u64 = 8 * 1024 * 1024 * 1024;

/// The settings every sandbox of a worker gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Policy {
    /// Host uid and gid `bwrap` (and so the command) runs as: a uid per lease, one for
    /// all, or the worker's own (the only choice for a worker that is not root).
    pub(crate) ids: Ids,
    /// Size of the `/tmp` tmpfs in bytes (with a fresh `/tmp` per command only).
    pub(crate) tmp_bytes: u64,
    /// Keep each lease's `/tmp` across its commands (the default), rather than a fresh
    /// tmpfs per command.
    pub(crate) persistent_tmp: bool,
    /// Size of the `/dev/shm` tmpfs in bytes.
    pub(crate) shm_bytes: u64,
    /// `RLIMIT_NPROC` of the command (0: not set).
    pub(crate) max_processes: u64,
    /// `RLIMIT_AS` of the command in bytes (0: not set).
    pub(crate) max_memory: u64,
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            ids: Ids::default(),
            tmp_bytes: DEFAULT_TMP_BYTES,
            persistent_tmp: true,
            shm_bytes: DEFAULT_SHM_BYTES,
            max_processes: DEFAULT_MAX_PROCESSES,
            max_memory: DEFAULT_MAX_MEMORY,
        }
    }
}

impl Policy {
    /// The limits argument of the sandbox init (`NPROC:AS`).
    pub(crate) fn limits_arg(&self) -> String {
        format!("{}:{}", self.max_processes, self.max_memory)
    }
}

/// The `/proc` options: read-only binds and masks for the paths this kernel has.
pub(crate) fn proc_options() -> Vec<String> {
    let mut a = Vec::new();
    for path in PROC_READ_ONLY.iter().filter(|p| Path::new(p).exists()) {
        a.extend(["--ro-bind".to_owned(), (*path).to_owned(), (*path).to_owned()]);
    }
    for path in PROC_MASKED {
        match std::fs::symlink_metadata(path) {
            Ok(m) if m.is_dir() => a.extend([
                "--tmpfs".to_owned(),
                (*path).to_owned(),
                "--remount-ro".to_owned(),
                (*path).to_owned(),
            ]),
            Ok(_) => a.extend(["--ro-bind".to_owned(), "/dev/null".to_owned(), (*path).to_owned()]),
            Err(_) => {}
        }
    }
    a
}

/// The `/dev` and `/tmp` options: a read-only `/dev` with a sized `/dev/shm`; `/tmp` the
/// lease's own directory `tmp` (as `bwrap` reaches it) when given, else a sized tmpfs.
pub(crate) fn tmpfs_options(policy: &Policy, tmp: Option<&Path>) -> Vec<String> {
    let mut a: Vec<String> = [
        "--dev".to_owned(),
        "/dev".to_owned(),
        "--size".to_owned(),
        policy.shm_bytes.to_string(),
        "--tmpfs".to_owned(),
        "/dev/shm".to_owned(),
        "--remount-ro".to_owned(),
        "/dev".to_owned(),
    ]
    .into();
    match tmp {
        Some(dir) => a.extend([
            "--bind".to_owned(),
            dir.to_string_lossy().into_owned(),
            "/tmp".to_owned(),
        ]),
        None => a.extend([
            "--size".to_owned(),
            policy.tmp_bytes.to_string(),
            "--tmpfs".to_owned(),
            "/tmp".to_owned(),
        ]),
    }
    a
}

/// Applies the limits argument of the sandbox init to the calling process (inherited by
/// the command it starts). Soft and hard limits are both set, so the command cannot raise
/// them.
pub(crate) fn apply_limits(arg: &str) -> Result<(), String> {
    let (nproc, memory) = arg
        .split_once(':')
        .and_then(|(a, b)| Some((a.parse::<u64>().ok()?, b.parse::<u64>().ok()?)))
        .ok_or_else(|| format!("bad limits {arg:?}"))?;
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    for (resource, value) in [(Resource::Nproc, nproc), (Resource::As, memory)] {
        if value == 0 {
            continue;
        }
        // never above the hard limit already in force (raising it needs privileges)
        let value = getrlimit(resource).maximum.map_or(value, |hard| hard.min(value));
        let limit = Rlimit {
            current: Some(value),
            maximum: Some(value),
        };
        setrlimit(resource, limit).map_err(|e| format!("setrlimit {resource:?}: {e}"))?;
    }
    Ok(())
}

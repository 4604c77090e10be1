//! The extension `envrtStartProcessSupervisor`: one process supervisor (`envrt-agent`)
//! per lease, which holds the lease's persistent processes (contract section 9).
//!
//! The host makes a private directory for the lease's socket and names it; the worker
//! checks it (absolute, a directory and not a link, the worker's own user's, mode 0700),
//! hands it to the lease's host user, and starts
//! `envrt-agent --socket /.envrt-agent/sock --subreaper` in a sandbox of the lease built
//! exactly as a command's (the lease's host uid, no network, its own pid namespace, the
//! same mounts, limits and environment, under the sandbox init), with that directory bound
//! read-write at `/.envrt-agent` and the agent's binary read-only at `/.envrt-agent-bin`.
//! Both are bound from descriptors the worker opened (`bwrap --bind-fd`), so no path
//! above them has to be reachable by the lease's user. It answers once the agent says it
//! listens (10 s at most; else the agent's sandbox is killed and the call refused with
//! `The process supervisor of lease {id} did not start: {why}`).
//!
//! The supervisor's sandbox belongs to no command, and to no worker: a process does not
//! end with the program that spawned it (contract section 9), so the supervisor outlives
//! the worker that started it (no `bwrap --die-with-parent`, a session of its own, moved
//! out of the worker's cgroup into its parent, see [`super::sandbox`]), and a later host
//! reaches it again in the same socket directory (the host names one per lease, the same
//! for every program on this machine). Its record, `{root}/.supervisor-{lease id}/`
//! (`0700`, the worker's, out of the workspace), holds `tag` (written before the start: a
//! random tag that `bwrap`'s command line carries, so a worker killed before it learnt the
//! pids still leaves a supervisor the next one finds), `running` (the boot id, `bwrap`'s
//! pid and start time, the pid namespace's init's pid and start time) and `generation`.
//! Whatever worker then serves the lease ends it from that record, only while the boot id
//! and each pid's start time still match or the tag is on the command line (a recycled
//! pid is never signalled), by
//! SIGKILLing the namespace's init, which takes every process the agent started,
//! `setsid` escapees included: at release and destroy ([`Supervisors::forget`]), at expiry
//! and `gc` (which destroys), when a worker starts over a root whose lease is gone, and
//! before a start that replaces a supervisor the host cannot reach. A second call for a
//! lease whose supervisor this worker runs answers at once (`started: false`).
//!
//! Each supervisor of a lease numbers its processes past every id an earlier one could
//! give (`generation` counts them, kept across a release: see
//! [`envrt_driver_agent::next_generation`]), so a supervisor killed by a command, or
//! replaced after a worker restart, never gives an id that named another process.
//!
//! The agent binary is found as every driver finds it (`ENVRT_AGENT`, beside the worker's
//! own executable or one directory up, `PATH`); a worker that finds none does not
//! advertise the extension, and the host then does not grant `persistentProcessSessions`.

use std::collections::HashMap;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use envrt_driver_api::DriverError;
use envrt_plugin_protocol::environment::{StartProcessSupervisorParams, StartProcessSupervisorResult};
use envrt_plugin_protocol::methods::SUPERVISOR_SOCKET;
use rustix::fs::{Mode, OFlags};
use tokio::io::{AsyncBufReadExt, AsyncReadExt};

use super::exec::{FdBind, SpawnAs};
use super::rpc::RpcError;
use super::sandbox::{Sandbox, WORKSPACE};
use super::uids::Owner;

/// Where the socket directory appears inside the supervisor's sandbox.
pub(crate) const SOCKET_DIR_INSIDE: &str = "/.envrt-agent";
/// Where the agent's binary appears inside the supervisor's sandbox.
pub(crate) const AGENT_INSIDE: &str = "/.envrt-agent-bin";
/// How long a starting agent has to say it listens.
const START_BOUND: Duration = Duration::from_secs(10);
/// How much of the agent's stderr a refusal quotes.
const WHY_BYTES: usize = 2048;
/// How much of a running agent's stderr is logged.
const LOG_BYTES: u64 = 64 * 1024;
/// Prefix of a lease's supervisor record in the root.
pub(crate) const RECORD_PREFIX: &str = ".supervisor-";
/// The record's file naming the running supervisor.
const RUNNING: &str = "running";
/// The record's generation counter.
const GENERATION: &str = "generation";
/// The record's tag of the supervisor's sandbox, written before it starts (see
/// [`super::exec::SpawnAs::detached`]).
const TAG: &str = "tag";

/// The supervisors this worker runs, by lease directory.
#[derive(Default)]
pub(crate) struct Supervisors {
    /// Held while one starts, so two calls for a lease start one agent.
    starting: tokio::sync::Mutex<()>,
    running: std::sync::Mutex<HashMap<PathBuf, Running>>,
}

/// A running supervisor: the socket directory it listens in, and its watcher (the task
/// that owns its `bwrap` and ends when it exits).
struct Running {
    socket_dir: PathBuf,
    /// The directory's (device, inode): a directory the host made anew at the same path
    /// (it could not reach the supervisor in the old one) is another.
    dir_id: (u64, u64),
    watcher: tokio::task::JoinHandle<()>,
}

impl Supervisors {
    /// Drops this worker's note of the lease's supervisor (release, destroy, expiry)
    /// and ends the supervisor its record names, whichever worker started it; `destroyed`
    /// drops the record whole (else its generation stays, for the lease's next supervisor).
    pub(crate) fn forget(&self, lease_dir: &Path, destroyed: bool) {
        let gone = self.running.lock().unwrap_or_else(|p| p.into_inner()).remove(lease_dir);
        end(lease_dir, !destroyed);
        if let Some(gone) = gone {
            gone.watcher.abort();
        }
    }

    /// The directory the live supervisor of the lease at `lease_dir` listens in, if this
    /// worker runs one.
    pub(crate) fn socket_dir_of(&self, lease_dir: &Path) -> Option<PathBuf> {
        let running = self.running.lock().unwrap_or_else(|p| p.into_inner());
        running
            .get(lease_dir)
            .filter(|r| !r.watcher.is_finished())
            .map(|r| r.socket_dir.clone())
    }

    /// Whether the lease at `lease_dir` has a live supervisor listening in the directory
    /// `socket_dir` whose (device, inode) is `dir_id`.
    fn live_in(&self, lease_dir: &Path, socket_dir: &Path, dir_id: (u64, u64)) -> bool {
        let running = self.running.lock().unwrap_or_else(|p| p.into_inner());
        running
            .get(lease_dir)
            .is_some_and(|r| r.socket_dir == socket_dir && r.dir_id == dir_id && !r.watcher.is_finished())
    }

    /// Starts the lease's supervisor (see the module docs).
    pub(crate) async fn start(
        &self,
        sandbox: &Sandbox,
        agent: &Path,
        lease_dir: &Path,
        owner: Owner,
        params: StartProcessSupervisorParams,
    ) -> Result<serde_json::Value, RpcError> {
        let lease = lease_dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let socket_dir = PathBuf::from(&params.socket_dir);
        let (dir, dir_id) = open_socket_dir(&socket_dir, owner)?;
        let _starting = self.starting.lock().await;
        if self.live_in(lease_dir, &socket_dir, dir_id) {
            return Ok(envrt_plugin_protocol::to_value(&StartProcessSupervisorResult {
                started: false,
            }));
        }
        // One the host cannot reach (this worker's or an earlier one's): it ends first,
        // with what it held.
        if let Some(old) = self.running.lock().unwrap_or_else(|p| p.into_inner()).remove(lease_dir) {
            old.watcher.abort();
        }
        end(lease_dir, true);
        let record =
            record_dir(lease_dir).ok_or_else(|| RpcError::invalid_params("the lease directory has no name"))?;
        match std::fs::DirBuilder::new().mode(0o700).create(&record) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(DriverError::io(format!("Creating {}", record.display()), e).into()),
        }
        let generation = envrt_driver_agent::next_generation(&record.join(GENERATION))
            .map_err(|e| DriverError::io(format!("Counting the supervisors of lease {lease}"), e))?;
        // Recorded before it starts: a worker killed before it knows the pids leaves a
        // supervisor the next one still finds.
        let tag = uuid::Uuid::new_v4().simple().to_string();
        std::fs::write(record.join(TAG), &tag)
            .map_err(|e| DriverError::io(format!("Recording the supervisor of lease {lease}"), e))?;
        if let Some((uid, gid)) = owner.0 {
            // AT_EMPTY_PATH: the opened directory itself, whatever its path now leads to
            rustix::fs::chownat(
                &dir,
                "",
                Some(rustix::fs::Uid::from_raw(uid)),
                Some(rustix::fs::Gid::from_raw(gid)),
                rustix::fs::AtFlags::EMPTY_PATH,
            )
            .map_err(|e| {
                DriverError::io(
                    format!("Handing {} to the lease's user", socket_dir.display()),
                    std::io::Error::from(e),
                )
            })?;
        }
        let binary = rustix::fs::open(agent, OFlags::PATH | OFlags::CLOEXEC, Mode::empty())
            .map_err(|e| DriverError::io(format!("Opening {}", agent.display()), std::io::Error::from(e)))?;
        let binds = [
            FdBind {
                fd: dir.as_raw_fd(),
                dest: SOCKET_DIR_INSIDE,
                read_only: false,
            },
            FdBind {
                fd: binary.as_raw_fd(),
                dest: AGENT_INSIDE,
                read_only: true,
            },
        ];
        let socket = format!("{SOCKET_DIR_INSIDE}/{SUPERVISOR_SOCKET}");
        let argv = [
            AGENT_INSIDE.to_owned(),
            "--socket".into(),
            socket.clone(),
            "--subreaper".into(),
        ]
        .into_iter()
        .chain(envrt_driver_agent::id_args(generation))
        .collect::<Vec<String>>();
        let (mut child, tracked) = sandbox
            .spawn_as(
                lease_dir,
                WORKSPACE,
                &[],
                &argv,
                [Stdio::null(), Stdio::piped(), Stdio::piped()],
                SpawnAs {
                    user: None,
                    bind: None,
                    fd_binds: &binds,
                    detached: Some(&tag),
                },
            )
            .map_err(|e| DriverError::io("Starting bwrap", e))?;
        drop((dir, binary));
        let stdout = child.stdout.take().expect("piped stdout");
        let mut stderr = child.stderr.take().expect("piped stderr");
        let mut lines = tokio::io::BufReader::new(stdout);
        let mut line = String::new();
        let said = tokio::time::timeout(START_BOUND, (&mut lines).take(4096).read_line(&mut line)).await;
        let expected = format!("envrt-agent listening on {socket}");
        if !matches!(said, Ok(Ok(_)) if line.trim_end() == expected) {
            let _ = sandbox.terminate(&mut child).await;
            let mut why = Vec::new();
            let _ = tokio::time::timeout(
                Duration::from_secs(1),
                (&mut stderr).take(WHY_BYTES as u64).read_to_end(&mut why),
            )
            .await;
            let why = String::from_utf8_lossy(&why).trim().to_owned();
            let why = match (said, why.is_empty()) {
                (_, false) => why,
                (Err(_), true) => format!("it did not listen within {} s", START_BOUND.as_secs()),
                (Ok(_), true) => format!("it said {:?}", line.trim_end()),
            };
            return Err(RpcError::worker(format!(
                "The process supervisor of lease {lease} did not start: {why}"
            )));
        }
        let bwrap = child.id().unwrap_or(0);
        let written = Identity::of(bwrap)
            .map(|bwrap| {
                let init = super::sandbox::ns_init(bwrap.pid).and_then(Identity::of);
                running_text(&bwrap, init.as_ref())
            })
            .map(|text| std::fs::write(record.join(RUNNING), text));
        if !matches!(written, Some(Ok(()))) {
            // A supervisor no record names could never be ended by a later worker.
            let _ = sandbox.terminate(&mut child).await;
            return Err(RpcError::worker(format!(
                "The process supervisor of lease {lease} did not start: its record in {} could not be written",
                record.display()
            )));
        }
        let tag = lease.clone();
        let watcher = tokio::spawn(async move {
            // Its output is read (so it never blocks on a full pipe): stdout dropped,
            // stderr logged as the worker's own up to LOG_BYTES (it is as untrusted as a
            // command: no line it writes is held whole), the rest dropped.
            let drain_out = tokio::spawn(async move {
                let _ = tokio::io::copy(&mut lines, &mut tokio::io::sink()).await;
            });
            let drain_err = tokio::spawn(async move {
                let mut logged = tokio::io::BufReader::new((&mut stderr).take(LOG_BYTES)).split(b'\n');
                while let Ok(Some(line)) = logged.next_segment().await {
                    eprintln!(
                        "envrt-sandbox-worker: supervisor of {tag}: {}",
                        String::from_utf8_lossy(&line)
                    );
                }
                drop(logged);
                let _ = tokio::io::copy(&mut stderr, &mut tokio::io::sink()).await;
            });
            let _ = child.wait().await;
            drop(tracked);
            drain_out.abort();
            drain_err.abort();
        });
        self.running.lock().unwrap_or_else(|p| p.into_inner()).insert(
            lease_dir.to_path_buf(),
            Running {
                socket_dir,
                dir_id,
                watcher,
            },
        );
        Ok(envrt_plugin_protocol::to_value(&StartProcessSupervisorResult {
            started: true,
        }))
    }
}

/// The supervisor record of the lease at `lease_dir`: `{root}/.supervisor-{lease id}`.
pub(crate) fn record_dir(lease_dir: &Path) -> Option<PathBuf> {
    let name = lease_dir.file_name()?.to_str()?;
    Some(lease_dir.parent()?.join(format!("{RECORD_PREFIX}{name}")))
}

/// A process as the record names it: its pid and its start time (clock ticks after boot,
/// `/proc/{pid}/stat` field 22), which a recycled pid does not share.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Identity {
    pub(crate) pid: u32,
    pub(crate) start: u64,
}

impl Identity {
    /// The process a record names (whether it still runs is [`Identity::alive`]).
    pub(crate) fn new(pid: u32, start: u64) -> Identity {
        Identity { pid, start }
    }

    /// The running (not zombie) process `pid`, with its start time.
    pub(crate) fn of(pid: u32) -> Option<Identity> {
        if pid == 0 {
            return None;
        }
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        let (_, rest) = stat.rsplit_once(')')?;
        let mut fields = rest.split_whitespace();
        if fields.next()? == "Z" {
            return None;
        }
        // after the state (field 3), the start time is field 22
        let start = fields.nth(18)?.parse().ok()?;
        Some(Identity { pid, start })
    }

    /// Whether the process this names still runs.
    pub(crate) fn alive(&self) -> bool {
        Identity::of(self.pid) == Some(*self)
    }

    pub(crate) fn kill(&self) {
        if self.alive()
            && let Some(pid) = i32::try_from(self.pid).ok().and_then(rustix::process::Pid::from_raw)
        {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
        }
    }
}

/// The host's boot id: a start time is a start time of this boot only.
pub(crate) fn boot_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .unwrap_or_default()
        .trim()
        .to_owned()
}

/// The record's `running`: `{boot id} {bwrap pid} {start} {init pid} {start}` (the init
/// `0 0` when it was not seen).
fn running_text(bwrap: &Identity, init: Option<&Identity>) -> String {
    let (ipid, istart) = init.map_or((0, 0), |i| (i.pid, i.start));
    format!("{} {} {} {ipid} {istart}\n", boot_id(), bwrap.pid, bwrap.start)
}

/// Reads a record's `running`: the processes it names, when it is of this boot.
fn parse_running(text: &str) -> Vec<Identity> {
    let fields: Vec<&str> = text.split_whitespace().collect();
    let [boot, rest @ ..] = fields.as_slice() else {
        return Vec::new();
    };
    if *boot != boot_id() || rest.len() != 4 {
        return Vec::new();
    }
    let numbers: Vec<u64> = rest.iter().filter_map(|n| n.parse().ok()).collect();
    if numbers.len() != 4 {
        return Vec::new();
    }
    [(numbers[0], numbers[1]), (numbers[2], numbers[3])]
        .into_iter()
        .filter(|(pid, _)| *pid != 0)
        .filter_map(|(pid, start)| {
            Some(Identity {
                pid: u32::try_from(pid).ok()?,
                start,
            })
        })
        .collect()
}

/// The processes whose command line carries the tag `tag` (a supervisor's `bwrap` and the
/// copy of it that is its pid namespace's init); none for a tag that is not one.
fn tagged(tag: &str) -> Vec<Identity> {
    if tag.len() != 32 || !tag.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Vec::new();
    }
    let needle = format!("\0{}\0{tag}\0", super::sandbox::DETACHED_TAG);
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| c.windows(needle.len()).any(|w| w == needle.as_bytes()))
        })
        .filter_map(Identity::of)
        .collect()
}

/// Ends the supervisor the record of the lease at `lease_dir` names, if it still runs (each
/// process checked by its start time), and waits (bounded, 2 s) until it is gone: every
/// process whose command line carries the record's tag, the namespace's init (whose death
/// takes the whole pid namespace), the one `bwrap` has now when its own identity holds,
/// then `bwrap`. Drops `running` and the tag; `keep_generation` unset drops the whole
/// record.
pub(crate) fn end(lease_dir: &Path, keep_generation: bool) {
    let Some(record) = record_dir(lease_dir) else { return };
    let named = std::fs::read_to_string(record.join(RUNNING))
        .map(|text| parse_running(&text))
        .unwrap_or_default();
    let mut targets = std::fs::read_to_string(record.join(TAG))
        .map(|tag| tagged(tag.trim()))
        .unwrap_or_default();
    if let [bwrap, rest @ ..] = named.as_slice() {
        if bwrap.alive()
            && let Some(init) = super::sandbox::ns_init(bwrap.pid).and_then(Identity::of)
        {
            targets.push(init);
        }
        targets.extend(rest.iter().copied());
        targets.push(*bwrap);
    }
    for target in &targets {
        target.kill();
    }
    for _ in 0..200 {
        if !targets.iter().any(Identity::alive) {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    if keep_generation {
        let _ = std::fs::remove_file(record.join(RUNNING));
        let _ = std::fs::remove_file(record.join(TAG));
    } else {
        let _ = std::fs::remove_dir_all(&record);
    }
}

/// Opens the host's socket directory, refusing anything but an absolute path to a
/// directory (not a link) with mode 0700 of the worker's own user (or of the lease's,
/// which a start before this one handed it to).
fn open_socket_dir(dir: &Path, owner: Owner) -> Result<(OwnedFd, (u64, u64)), RpcError> {
    let refuse = |why: &str| RpcError::invalid_params(format!("socketDir {:?} {why}", dir.to_string_lossy()));
    if !dir.is_absolute() {
        return Err(refuse("is not an absolute path"));
    }
    let fd = rustix::fs::open(
        dir,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| refuse(&format!("cannot be opened as a directory: {}", std::io::Error::from(e))))?;
    let meta = std::fs::metadata(format!("/proc/self/fd/{}", fd.as_fd().as_raw_fd()))
        .map_err(|e| refuse(&format!("cannot be read: {e}")))?;
    let ours = meta.uid() == rustix::process::geteuid().as_raw() || owner.0.is_some_and(|(uid, _)| uid == meta.uid());
    if !ours || meta.mode() & 0o7777 != 0o700 {
        return Err(refuse("must be a directory of the worker's user with mode 0700"));
    }
    Ok((fd, (meta.dev(), meta.ino())))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A child that sleeps until killed, and the record of a lease naming it as `bwrap`.
    fn sleeper_and_record(root: &Path) -> (std::process::Child, Identity, PathBuf) {
        let child = std::process::Command::new("sleep").arg("300").spawn().unwrap();
        let identity = Identity::of(child.id()).unwrap();
        let lease_dir = root.join("sbx-lease");
        std::fs::create_dir(&lease_dir).unwrap();
        let record = record_dir(&lease_dir).unwrap();
        std::fs::create_dir(&record).unwrap();
        std::fs::write(record.join(GENERATION), "3").unwrap();
        (child, identity, lease_dir)
    }

    fn reaped_by_signal(child: &mut std::process::Child) -> bool {
        use std::os::unix::process::ExitStatusExt;
        child.wait().unwrap().signal() == Some(9)
    }

    #[test]
    fn a_recycled_pid_or_another_boot_is_never_signalled_and_the_recorded_process_is() {
        let root = tempfile::tempdir().unwrap();
        let (mut child, identity, lease_dir) = sleeper_and_record(root.path());
        let record = record_dir(&lease_dir).unwrap();
        assert_eq!(record, root.path().join(".supervisor-sbx-lease"));
        // The same pid with another start time (a recycled pid), or of another boot.
        let recycled = Identity {
            start: identity.start + 1,
            ..identity
        };
        for text in [
            running_text(&recycled, None),
            format!("another-boot {} {} 0 0\n", identity.pid, identity.start),
            "garbage\n".to_owned(),
        ] {
            std::fs::write(record.join(RUNNING), text).unwrap();
            end(&lease_dir, true);
            assert!(identity.alive(), "a process the record does not name was signalled");
            assert!(!record.join(RUNNING).exists());
        }
        // The process the record names ends; release keeps the generation, destroy not.
        std::fs::write(record.join(RUNNING), running_text(&identity, None)).unwrap();
        end(&lease_dir, true);
        assert!(reaped_by_signal(&mut child));
        assert_eq!(std::fs::read_to_string(record.join(GENERATION)).unwrap(), "3");
        end(&lease_dir, false);
        assert!(!record.exists());
    }

    #[test]
    fn a_supervisor_the_record_knows_only_by_its_tag_is_ended() {
        let root = tempfile::tempdir().unwrap();
        let lease_dir = root.path().join("sbx-tagged");
        std::fs::create_dir(&lease_dir).unwrap();
        let record = record_dir(&lease_dir).unwrap();
        std::fs::create_dir(&record).unwrap();
        let tag = uuid::Uuid::new_v4().simple().to_string();
        // A process whose command line carries the tag as bwrap's does (no pids recorded).
        // (`read`, a builtin, waits on the pipe: no child of its own is left behind)
        let mut child = std::process::Command::new("sh")
            .args(["-c", "read line", "sh", crate::sandbox::DETACHED_TAG, &tag, "x"])
            .stdin(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // `spawn` returns once the exec is past its point of no return, before the new
        // command line is in place: a scan in that window sees none (no tag) yet.
        let needle = format!("\0{}\0{tag}\0", crate::sandbox::DETACHED_TAG);
        let carries_tag = || {
            std::fs::read(format!("/proc/{}/cmdline", child.id()))
                .is_ok_and(|c| c.windows(needle.len()).any(|w| w == needle.as_bytes()))
        };
        for _ in 0..500 {
            if carries_tag() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert!(carries_tag(), "the tagged command never ran");
        let identity = Identity::of(child.id()).unwrap();
        // Another tag, or one that is no tag, names nothing.
        for other in [uuid::Uuid::new_v4().simple().to_string(), String::new()] {
            std::fs::write(record.join(TAG), other).unwrap();
            end(&lease_dir, true);
            assert!(identity.alive());
        }
        std::fs::write(record.join(TAG), &tag).unwrap();
        end(&lease_dir, true);
        assert!(reaped_by_signal(&mut child));
        assert!(!record.join(TAG).exists());
    }
}

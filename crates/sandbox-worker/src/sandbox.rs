//! The `bwrap` sandbox: finding and checking `bwrap`, building the command line, tracking
//! every live sandbox, and killing a sandbox's whole pid namespace.
//!
//! Layout inside the sandbox: `/usr` read-only, `/bin`, `/sbin`, `/lib*` as on the host
//! (links into `/usr`, or read-only binds), a minimal read-only `/etc` (loader cache, users,
//! groups, alternatives, name service, time zone, os-release), fresh `/proc`, minimal
//! `/dev`, the lease's own `/tmp` and `/var/tmp` (see `policy` and `lease_tmp`), and the
//! lease directory bound read-write at `/workspace` (the cwd by default).
//! Every namespace is unshared (user, pid, network, ipc, uts, cgroup), all capabilities are
//! dropped, the command gets a new session and dies with the worker (all but the lease's
//! process supervisor, which outlives it: see the `supervisor` module). On top of that the
//! worker's policy (see the `policy` module) applies: an unprivileged sandbox user,
//! read-only and masked `/proc` paths, sized tmpfs mounts and process limits. `bwrap` runs
//! with an empty environment, and so does the sandbox init; the command's variables reach
//! the init through a memfd, and from it the command only. `HOME` is `/workspace` unless
//! the request sets it.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rustix::fd::{AsRawFd, OwnedFd};
use rustix::pipe::PipeFlags;
use rustix::process::{Pid, Signal, kill_process};
use tokio::process::{Child, Command};

pub(crate) use super::exec::SpawnAs;
use super::init::{INIT_FLAG, Reported, parse_report};
pub(crate) use super::lease_tmp::{TMP_PREFIX, remove_lease_dir};
use super::policy::{Policy, proc_options, tmpfs_options};
use super::uids::Owner;
use super::view::View;

/// The variable a detached sandbox's `bwrap` command line names with its tag (see
/// [`SpawnAs::detached`]).
pub(crate) const DETACHED_TAG: &str = "ENVRT_SUPERVISOR_TAG";

/// Where the worker binary appears in each sandbox, to run as the command's parent.
pub const INIT_PATH: &str = "/.envrt-init";

/// Where the lease directory appears inside the sandbox.
pub(crate) const WORKSPACE: &str = "/workspace";

/// The only `PATH` a sandboxed command gets unless the request sets its own (its `HOME`
/// is `/workspace` likewise).
pub const SANDBOX_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Files and directories of `/etc` bound read-only when they exist on the host.
const ETC_ALLOW: &[&str] = &[
    "/etc/alternatives",
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/passwd",
    "/etc/group",
    "/etc/nsswitch.conf",
    "/etc/hosts",
    "/etc/localtime",
    "/etc/mime.types",
    // Often a link to ../usr/lib/os-release: the bind follows it (Inspect AI's tools read it).
    "/etc/os-release",
];

/// The `bwrap` binary and the worker-wide sandbox settings.
#[derive(Debug)]
pub(crate) struct Sandbox {
    bwrap: PathBuf,
    /// `bwrap --version` output, e.g. `bubblewrap 0.8.0`.
    pub(crate) version: String,
    /// Time between the graceful SIGTERM and the SIGKILL of a sandbox.
    pub(crate) grace: Duration,
    live: Arc<Mutex<HashMap<u32, Live>>>,
    init: PathBuf,
    root_links: Vec<(String, Option<String>)>,
    /// Identity, tmpfs sizes and limits of every sandbox.
    pub(crate) policy: Policy,
    /// The `/proc` read-only binds and masks for this kernel.
    proc_options: Vec<String>,
    /// Where bwrap reaches the lease directories.
    view: View,
}

/// The message printed when `bwrap` cannot be found.
pub(crate) fn missing_bwrap_message(what: &str) -> String {
    format!(
        "envrt-sandbox-worker: {what}: bwrap (bubblewrap) is required to sandbox commands; install it with `apt-get install bubblewrap`"
    )
}

impl Sandbox {
    /// Finds `bwrap` (the explicit path, else `PATH`), and proves it can build a sandbox by
    /// running `true` in one. Errors are the text to print before exiting.
    pub(crate) fn detect(
        explicit: Option<PathBuf>,
        grace: Duration,
        policy: Policy,
        view: View,
    ) -> Result<Sandbox, String> {
        let bwrap = match explicit {
            Some(path) if path.is_file() => path,
            Some(path) => return Err(missing_bwrap_message(&format!("{} does not exist", path.display()))),
            None => find_in_path("bwrap").ok_or_else(|| missing_bwrap_message("bwrap was not found on PATH"))?,
        };
        let version = std::process::Command::new(&bwrap)
            .arg("--version")
            .env_clear()
            .stdin(Stdio::null())
            .output()
            .map_err(|e| missing_bwrap_message(&format!("cannot run {}: {e}", bwrap.display())))?;
        let version = String::from_utf8_lossy(&version.stdout).trim().to_owned();
        let root_links = root_layout();
        let init = view.bwrap_init.clone();
        let sandbox = Sandbox {
            init,
            bwrap,
            version,
            grace,
            live: Arc::default(),
            root_links,
            policy,
            proc_options: proc_options(),
            view,
        };
        let probe_dir = std::env::temp_dir();
        let mut probe = std::process::Command::new(&sandbox.bwrap);
        probe
            .args(sandbox.args(&probe_dir, None, &sandbox.init, WORKSPACE, &SpawnAs::default()))
            .arg("true")
            .env_clear()
            .stdin(Stdio::null());
        super::fds::inherit_only(&mut probe, &[]);
        if let Some((uid, gid)) = sandbox.policy.ids.representative() {
            use std::os::unix::process::CommandExt;
            probe.uid(uid).gid(gid);
        }
        let out = probe
            .output()
            .map_err(|e| format!("envrt-sandbox-worker: cannot run {}: {e}", sandbox.bwrap.display()))?;
        if !out.status.success() {
            return Err(format!(
                "envrt-sandbox-worker: {} cannot create a sandbox here ({}): {}",
                sandbox.bwrap.display(),
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        Ok(sandbox)
    }

    /// The `bwrap` options (everything before the command): `tmp` is the lease's own
    /// `/tmp` (a fresh tmpfs when `None`), `user` the uid and gid inside the sandbox.
    fn args(&self, lease_dir: &Path, tmp: Option<&Path>, init: &Path, cwd: &str, how: &SpawnAs<'_>) -> Vec<String> {
        let mut a = options(&self.root_links, init, lease_dir, &self.policy, &self.proc_options, tmp);
        if let Some(bind) = how.bind {
            // before the final `--remount-ro /`, which must stay last
            let at = a.len() - 2;
            let view = self.view.lease_dir(bind).to_string_lossy().into_owned();
            a.splice(at..at, ["--bind".into(), view, super::sync_sandboxed::XFER.into()]);
        }
        for bind in how.fd_binds {
            let at = a.len() - 2;
            let option = if bind.read_only { "--ro-bind-fd" } else { "--bind-fd" };
            a.splice(at..at, [option.into(), bind.fd.to_string(), bind.dest.into()]);
        }
        // the request's user, else (with a host uid per lease) the one every command sees
        if let Some((uid, gid)) = how.user.or(self.policy.ids.inside()) {
            a.extend(["--uid".into(), uid.to_string(), "--gid".into(), gid.to_string()]);
        }
        if let Some(tag) = how.detached {
            // it outlives the worker: only its own record ends it
            a.retain(|option| option != "--die-with-parent");
            a.extend([
                "--setenv".into(),
                DETACHED_TAG.into(),
                tag.to_owned(),
                "--unsetenv".into(),
                DETACHED_TAG.into(),
            ]);
        }
        a.extend(["--chdir".into(), cwd.to_owned(), "--".into()]);
        a
    }

    /// The lease's own `/tmp` as `bwrap` reaches it, made on first use (mode `1777`, the
    /// sandbox user's), with its own `/var/tmp` beside it (`var_tmp`); `None` under
    /// `--fresh-tmp`.
    fn lease_tmp(&self, lease_dir: &Path, owner: Owner) -> std::io::Result<Option<PathBuf>> {
        if !self.policy.persistent_tmp {
            return Ok(None);
        }
        let tmp = super::lease_tmp::make(owner, lease_dir)?;
        Ok(Some(self.view.lease_dir(&tmp)))
    }

    /// Spawns `argv` in a sandbox over `lease_dir`, under the worker binary in its init role
    /// (see [`super::init`]), which reports how the command ended on a status pipe. The
    /// child is tracked until [`Tracked`] drops.
    pub(crate) fn spawn(
        &self,
        lease_dir: &Path,
        cwd: &str,
        env: &[(String, String)],
        argv: &[String],
        stdio: [Stdio; 3],
    ) -> std::io::Result<(Child, Tracked)> {
        self.spawn_as(lease_dir, cwd, env, argv, stdio, SpawnAs::default())
    }

    /// [`Sandbox::spawn`] with the command running as [`SpawnAs`] says.
    pub(crate) fn spawn_as(
        &self,
        lease_dir: &Path,
        cwd: &str,
        env: &[(String, String)],
        argv: &[String],
        [stdin, stdout, stderr]: [Stdio; 3],
        how: SpawnAs<'_>,
    ) -> std::io::Result<(Child, Tracked)> {
        let (status_read, status_write) = rustix::pipe::pipe_with(PipeFlags::CLOEXEC | PipeFlags::NONBLOCK)?;
        // bwrap resolves bind sources as the sandbox user: through the view (see there).
        let lease_path = self.view.lease_dir(lease_dir);
        // The command's environment travels in a memfd read by the sandbox init, which
        // hands it to the command only: never in bwrap's environment (where LD_PRELOAD and
        // friends would act on the host side) nor the init's (where they would run before
        // its limits are set), nor on any command line.
        // A lease under a network policy: its sandboxes join its network namespace (see
        // the `egress` module), with its resolver and the proxy variables.
        let joined = super::egress::joined(lease_dir)?;
        let env_fd = match &joined {
            None => env_memfd(env)?,
            Some(joined) => {
                let mut with_proxy = envrt_driver_agent::egress::proxy_env();
                with_proxy.extend(joined.env.iter().cloned());
                with_proxy.extend(env.iter().cloned());
                env_memfd(&with_proxy)?
            }
        };
        // bwrap, and so every process of the sandbox, runs as the lease's own host user
        let owner = self.policy.ids.owner_of(lease_dir).map_err(std::io::Error::other)?;
        let tmp = self.lease_tmp(lease_dir, owner)?;
        let mut args = self.args(&lease_path, tmp.as_deref(), &self.init, cwd, &how);
        if let Some(joined) = &joined {
            super::egress::join_args(&mut args, joined);
        }
        let mut command = Command::new(&self.bwrap);
        command
            .args(args)
            .arg(INIT_PATH)
            .arg(INIT_FLAG)
            .arg(status_write.as_raw_fd().to_string())
            .arg(self.policy.limits_arg())
            .arg(env_fd.as_raw_fd().to_string())
            .arg("--")
            .args(argv)
            // bwrap itself runs with an empty environment.
            .env_clear()
            .stdin(stdin)
            .stdout(stdout)
            .stderr(stderr)
            .kill_on_drop(how.detached.is_none());
        if let Some((uid, gid)) = owner.0 {
            match &joined {
                None => {
                    command.uid(uid).gid(gid);
                }
                // the namespace is entered as root, then the user changes (in that order)
                Some(joined) => super::fds::join_net(command.as_std_mut(), joined.netns.as_raw_fd(), Some((uid, gid))),
            }
            // the init reopens the pipe through /proc, as the sandbox's user
            rustix::fs::fchown(
                &status_write,
                Some(rustix::fs::Uid::from_raw(uid)),
                Some(rustix::fs::Gid::from_raw(gid)),
            )?;
        }
        // Only the status pipe and the environment reach bwrap (and the sandbox): every
        // other descriptor of the worker is close-on-exec in the child.
        if let (Some(joined), None) = (&joined, owner.0) {
            super::fds::join_net(command.as_std_mut(), joined.netns.as_raw_fd(), None);
        }
        let mut keep = vec![status_write.as_raw_fd(), env_fd.as_raw_fd()];
        keep.extend(joined.iter().map(|j| j.resolv.as_raw_fd()));
        keep.extend(
            joined
                .iter()
                .filter_map(|j| j.ca_bundle.as_ref().map(|fd| fd.as_raw_fd())),
        );
        keep.extend(how.fd_binds.iter().map(|bind| bind.fd));
        super::fds::inherit_only(command.as_std_mut(), &keep);
        let escape = how.detached.and_then(|_| escape_cgroup());
        if how.detached.is_some() {
            super::fds::detach(command.as_std_mut(), escape.as_ref().map(|fd| fd.as_raw_fd()));
        }
        let child = command.spawn();
        drop((status_write, env_fd, escape, joined));
        let child = child?;
        let pid = child.id().unwrap_or(0);
        let killed = Arc::new(AtomicBool::new(false));
        if how.detached.is_none() {
            self.live.lock().unwrap_or_else(|p| p.into_inner()).insert(
                pid,
                Live {
                    lease_dir: lease_dir.to_path_buf(),
                    killed: killed.clone(),
                },
            );
        }
        Ok((
            child,
            Tracked {
                pid,
                live: self.live.clone(),
                status: status_read,
                killed,
            },
        ))
    }

    /// SIGKILLs every live sandbox and reaps them (the worker is exiting). Killing the pid
    /// namespace's init takes every process of the sandbox with it.
    pub(crate) fn kill_all(&self) {
        for pid in self.kill_where(|_| true) {
            if let Some(raw) = i32::try_from(pid).ok().and_then(Pid::from_raw) {
                // Exiting: reap here so no zombie is left to a PID 1 that may not reap; a
                // reaped pid may be reused, so it leaves the live set at once.
                if let Ok(Some(_)) = rustix::process::waitpid(Some(raw), rustix::process::WaitOptions::NOHANG) {
                    self.live.lock().unwrap_or_else(|p| p.into_inner()).remove(&pid);
                }
            }
        }
    }

    /// SIGKILLs every sandbox running over `lease_dir` (release and destroy of a lease);
    /// their calls report `SIGKILL`.
    pub(crate) fn kill_lease(&self, lease_dir: &Path) {
        self.kill_where(|dir| dir == lease_dir);
    }

    /// Kills the selected sandboxes and waits (bounded) until each `bwrap` has exited.
    fn kill_where(&self, select: impl Fn(&Path) -> bool) -> Vec<u32> {
        let pids: Vec<u32> = self
            .live
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .filter(|(_, live)| select(&live.lease_dir))
            .map(|(pid, live)| {
                live.killed.store(true, Ordering::SeqCst);
                *pid
            })
            .collect();
        for pid in &pids {
            kill_namespace(*pid);
        }
        let exited = |p: &u32| !Path::new(&format!("/proc/{p}/task")).exists() || is_zombie(*p);
        for round in 0..200 {
            if pids.iter().all(exited) {
                break;
            }
            if round == 100 {
                // bwrap did not exit after its namespace died: kill it too.
                for pid in pids.iter().filter(|p| !exited(p)) {
                    signal(*pid, Signal::KILL);
                }
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        pids
    }

    /// How many sandboxes are running.
    pub(crate) fn live_count(&self) -> usize {
        self.live.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// Ends a sandbox: SIGTERM to every process of its pid namespace, then after the grace
    /// SIGKILL of the namespace. Returns the status and the signal that ended it.
    pub(crate) async fn terminate(&self, child: &mut Child) -> (std::io::Result<ExitStatus>, &'static str) {
        let Some(pid) = child.id() else {
            return (child.wait().await, "SIGKILL");
        };
        let namespace = ns_init(pid).and_then(|init| pid_namespace(init).map(|ns| (init, ns)));
        if let Some((init, ns)) = &namespace {
            for member in namespace_members(ns) {
                if member != *init && !is_sandbox_init(member) {
                    signal(member, Signal::TERM);
                }
            }
            if let Ok(status) = tokio::time::timeout(self.grace, child.wait()).await {
                wait_namespace_gone(namespace.as_ref().map(|(_, ns)| ns.as_str())).await;
                return (status, "SIGTERM");
            }
        }
        kill_namespace(pid);
        let status = match tokio::time::timeout(Duration::from_secs(1), child.wait()).await {
            Ok(status) => status,
            Err(_) => {
                signal(pid, Signal::KILL);
                child.wait().await
            }
        };
        wait_namespace_gone(namespace.as_ref().map(|(_, ns)| ns.as_str())).await;
        (status, "SIGKILL")
    }
}

/// A running sandbox in the live set.
#[derive(Debug)]
struct Live {
    lease_dir: PathBuf,
    killed: Arc<AtomicBool>,
}

/// Removes a sandbox from the live set when dropped.
#[derive(Debug)]
pub(crate) struct Tracked {
    pid: u32,
    live: Arc<Mutex<HashMap<u32, Live>>>,
    status: OwnedFd,
    killed: Arc<AtomicBool>,
}

impl Tracked {
    /// Whether the sandbox was killed from outside its call (lease release or destroy).
    pub(crate) fn killed(&self) -> bool {
        self.killed.load(Ordering::SeqCst)
    }

    /// How the command ended, as its sandbox init reported; call after `bwrap` exited.
    /// `None` when nothing was reported (bwrap failed, or the sandbox was killed).
    pub(crate) fn reported(&self) -> Option<Reported> {
        let mut text = Vec::new();
        let mut buf = [0u8; 512];
        while text.len() < 64 * 1024 {
            match rustix::io::read(&self.status, &mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => text.extend_from_slice(&buf[..n]),
            }
        }
        parse_report(&String::from_utf8_lossy(&text))
    }
}

impl Drop for Tracked {
    fn drop(&mut self) {
        self.live.lock().unwrap_or_else(|p| p.into_inner()).remove(&self.pid);
    }
}

/// How the host's `/bin`, `/sbin` and `/lib*` look (a link and its target, or a directory),
/// so the sandbox mirrors them.
fn root_layout() -> Vec<(String, Option<String>)> {
    ["/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"]
        .iter()
        .filter_map(|dir| match std::fs::symlink_metadata(dir) {
            Ok(m) if m.file_type().is_symlink() => std::fs::read_link(dir)
                .ok()
                .map(|t| (dir.to_string(), Some(t.to_string_lossy().into_owned()))),
            Ok(m) if m.is_dir() => Some((dir.to_string(), None)),
            _ => None,
        })
        .collect()
}

/// The `bwrap` options the worker runs every command with (everything before the
/// command): `lease_dir` as the only writable place at `/workspace`, `init` (the worker
/// binary) bound at [`INIT_PATH`], working directory `cwd`, the default policy's
/// mounts. Public so that benchmarks measure a bare `bwrap` with exactly the worker's
/// flags.
pub fn bwrap_options(lease_dir: &Path, cwd: &str, init: &Path) -> Vec<String> {
    let policy = Policy {
        persistent_tmp: false,
        ..Policy::default()
    };
    let mut a = options(&root_layout(), init, lease_dir, &policy, &proc_options(), None);
    a.extend(["--chdir".into(), cwd.to_owned(), "--".into()]);
    a
}

/// Where the egress forwarder's binary, the host's sockets directory and its own run
/// directory appear in its sandbox.
pub(crate) const FORWARDER_AGENT: &str = "/.envrt/agent";
pub(crate) const FORWARDER_SOCKETS: &str = "/.envrt/sockets";
pub(crate) const FORWARDER_RUN: &str = "/.envrt/run";

impl Sandbox {
    /// `bwrap` and its options for a lease's egress forwarder, up to and including `--`:
    /// run from inside the lease's network namespace (which it keeps: every other
    /// namespace is its own), it sees `/usr` and the root links read-only, its binary
    /// (`agent`, a descriptor) read-only at [`FORWARDER_AGENT`], the host's sockets
    /// directory (`sockets`) read-only at [`FORWARDER_SOCKETS`] and its run directory
    /// (`run`) at [`FORWARDER_RUN`], its working directory, and nothing else of the
    /// host's files. It has no capability, a session of its own, and no parent-death
    /// signal: it outlives the worker, as the lease does.
    pub(crate) fn forwarder_command(
        &self,
        agent: std::os::fd::RawFd,
        sockets: std::os::fd::RawFd,
        run: std::os::fd::RawFd,
    ) -> (PathBuf, Vec<String>) {
        let mut a: Vec<String> = [
            "--unshare-user",
            "--unshare-ipc",
            "--unshare-pid",
            "--unshare-uts",
            "--unshare-cgroup-try",
            "--new-session",
            "--cap-drop",
            "ALL",
            "--hostname",
            "envrt-forwarder",
            "--ro-bind",
            "/usr",
            "/usr",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        a.extend(root_link_args(&self.root_links));
        a.extend(["--proc".into(), "/proc".into(), "--dev".into(), "/dev".into()]);
        for (fd, dest, option) in [
            (agent, FORWARDER_AGENT, "--ro-bind-fd"),
            (sockets, FORWARDER_SOCKETS, "--ro-bind-fd"),
            (run, FORWARDER_RUN, "--bind-fd"),
        ] {
            a.extend([option.to_owned(), fd.to_string(), dest.to_owned()]);
        }
        a.extend([
            "--remount-ro".into(),
            "/".into(),
            "--chdir".into(),
            FORWARDER_RUN.into(),
            "--".into(),
        ]);
        (self.bwrap.clone(), a)
    }
}

/// The options that give a sandbox the host's root directories beside `/usr`: each a
/// link to where it points, or a read-only bind.
fn root_link_args(root_links: &[(String, Option<String>)]) -> Vec<String> {
    let mut a = Vec::new();
    for (dir, link) in root_links {
        match link {
            Some(target) => a.extend(["--symlink".into(), target.clone(), dir.clone()]),
            None => a.extend(["--ro-bind".into(), dir.clone(), dir.clone()]),
        }
    }
    a
}

/// Writes `NAME=VALUE` for each variable, each ended by a NUL (the defaults `PATH` and
/// `HOME` first, so a request may replace them), into a memfd rewound for the sandbox
/// init to read.
fn env_memfd(env: &[(String, String)]) -> std::io::Result<OwnedFd> {
    let fd = rustix::fs::memfd_create("envrt-sandbox-env", rustix::fs::MemfdFlags::CLOEXEC)?;
    let mut data = Vec::new();
    let defaults = [("PATH", SANDBOX_PATH), ("HOME", WORKSPACE)];
    for (k, v) in defaults
        .into_iter()
        .chain(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
    {
        data.extend_from_slice(k.as_bytes());
        data.push(b'=');
        data.extend_from_slice(v.as_bytes());
        data.push(0);
    }
    let mut file = std::fs::File::from(fd);
    std::io::Write::write_all(&mut file, &data)?;
    std::io::Seek::seek(&mut file, std::io::SeekFrom::Start(0))?;
    Ok(OwnedFd::from(file))
}

fn options(
    root_links: &[(String, Option<String>)],
    init: &Path,
    lease_dir: &Path,
    policy: &Policy,
    proc_options: &[String],
    tmp: Option<&Path>,
) -> Vec<String> {
    let mut a: Vec<String> = [
        "--unshare-all",
        "--die-with-parent",
        "--new-session",
        "--cap-drop",
        "ALL",
        "--hostname",
        "envrt-sandbox",
        "--ro-bind",
        "/usr",
        "/usr",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    a.extend(root_link_args(root_links));
    a.extend([
        "--ro-bind".into(),
        init.to_string_lossy().into_owned(),
        INIT_PATH.into(),
    ]);
    for etc in ETC_ALLOW {
        a.extend(["--ro-bind-try".into(), etc.to_string(), etc.to_string()]);
    }
    a.extend(["--proc".into(), "/proc".into()]);
    a.extend(proc_options.iter().cloned());
    a.extend(tmpfs_options(policy, tmp));
    a.extend(super::lease_tmp::var_tmp_options(policy, tmp));
    a.extend([
        "--bind".into(),
        lease_dir.to_string_lossy().into_owned(),
        WORKSPACE.into(),
    ]);
    // The sandbox's root (where /etc and the mount points live) is read-only too.
    a.extend(["--remount-ro".into(), "/".into()]);
    a
}

/// Where a detached sandbox goes so that it outlives the worker: the parent of the
/// worker's own cgroup (v2), when the host made that one for this worker alone
/// (`envrt-worker-*`, all of which the host kills when the worker ends), opened for
/// writing its `cgroup.procs`. `None` otherwise (no cgroup v2, or the worker runs in one
/// the host did not make): the sandbox then simply stays where the worker is.
pub(crate) fn escape_cgroup() -> Option<OwnedFd> {
    let own = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let own = own.lines().find_map(|l| l.strip_prefix("0::"))?.trim().to_owned();
    let own = Path::new(&own);
    if !own.file_name()?.to_str()?.starts_with("envrt-worker-") {
        return None;
    }
    let mount = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let mount = mount.lines().find_map(|line| {
        let (fields, tail) = line.split_once(" - ")?;
        (tail.split_whitespace().next()? == "cgroup2").then(|| fields.split_whitespace().nth(4).map(PathBuf::from))?
    })?;
    let parent = mount.join(own.parent()?.strip_prefix("/").ok()?);
    rustix::fs::open(
        parent.join("cgroup.procs"),
        rustix::fs::OFlags::WRONLY | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )
    .map_err(|e| {
        eprintln!(
            "envrt-sandbox-worker: cannot leave the worker's cgroup for {}: {e}",
            parent.display()
        )
    })
    .ok()
}

fn find_in_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|d| d.join(name)).find(|p| p.is_file())
}

fn signal(pid: u32, sig: Signal) {
    if let Some(pid) = i32::try_from(pid).ok().and_then(Pid::from_raw) {
        // The process may be gone already; nothing to do then.
        let _ = kill_process(pid, sig);
    }
}

/// SIGKILLs the namespace init: the kernel kills the whole namespace, and `bwrap` reaps
/// its child and exits (killing `bwrap` too would leave the init to a PID 1 that may never
/// reap it). Without an init yet, `bwrap` itself is killed.
fn kill_namespace(bwrap_pid: u32) {
    if bwrap_pid == 0 {
        return;
    }
    match ns_init(bwrap_pid) {
        Some(init) => signal(init, Signal::KILL),
        None => signal(bwrap_pid, Signal::KILL),
    }
}

/// The pid (host view) of the sandbox's namespace init: `bwrap`'s child.
pub(crate) fn ns_init(bwrap_pid: u32) -> Option<u32> {
    let children = std::fs::read_to_string(format!("/proc/{bwrap_pid}/task/{bwrap_pid}/children")).ok()?;
    children.split_whitespace().next()?.parse().ok()
}

/// Whether `pid` is the worker binary in its init role (it must outlive the command to
/// report its status, so the graceful SIGTERM skips it).
fn is_sandbox_init(pid: u32) -> bool {
    std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c.starts_with(format!("{INIT_PATH}\0").as_bytes()))
}

fn pid_namespace(pid: u32) -> Option<String> {
    std::fs::read_link(format!("/proc/{pid}/ns/pid"))
        .ok()
        .map(|p| p.to_string_lossy().into_owned())
}

fn is_zombie(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| {
            s.rsplit_once(')')
                .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z'))
        })
        .unwrap_or(true)
}

/// Every live process (host pids) whose pid namespace is `ns`.
fn namespace_members(ns: &str) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| pid_namespace(*pid).as_deref() == Some(ns) && !is_zombie(*pid))
        .collect()
}

/// Waits (bounded, 2 s) until no live process is left in `ns`, SIGKILLing stragglers.
async fn wait_namespace_gone(ns: Option<&str>) {
    let Some(ns) = ns else { return };
    for _ in 0..200 {
        let members = namespace_members(ns);
        if members.is_empty() {
            return;
        }
        for pid in members {
            signal(pid, Signal::KILL);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

//! The `bwrap` sandbox: finding and checking `bwrap`, building the command line, tracking
//! every live sandbox, and killing a sandbox's whole pid namespace.
//!
//! Layout inside the sandbox: `/usr` read-only, `/bin`, `/sbin`, `/lib*` as on the host
//! (links into `/usr`, or read-only binds), a minimal read-only `/etc` (loader cache, users,
//! groups, alternatives, name service, time zone), fresh `/proc`, minimal `/dev`, a tmpfs
//! `/tmp`, and the lease directory bound read-write at `/workspace` (the cwd by default).
//! Every namespace is unshared (user, pid, network, ipc, uts, cgroup), all capabilities are
//! dropped, the command gets a new session and dies with the worker.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rustix::process::{Pid, Signal, kill_process};
use tokio::process::{Child, Command};

/// Where the lease directory appears inside the sandbox.
pub(crate) const WORKSPACE: &str = "/workspace";

/// The only `PATH` a sandboxed command gets unless the request sets its own.
pub(crate) const SANDBOX_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

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
];

/// The `bwrap` binary and the worker-wide sandbox settings.
#[derive(Debug)]
pub(crate) struct Sandbox {
    bwrap: PathBuf,
    /// `bwrap --version` output, e.g. `bubblewrap 0.8.0`.
    pub(crate) version: String,
    /// Time between the graceful SIGTERM and the SIGKILL of a sandbox.
    pub(crate) grace: Duration,
    live: Arc<Mutex<HashMap<u32, PathBuf>>>,
    root_links: Vec<(String, Option<String>)>,
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
    pub(crate) fn detect(explicit: Option<PathBuf>, grace: Duration) -> Result<Sandbox, String> {
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
        let root_links = ["/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"]
            .iter()
            .filter_map(|dir| match std::fs::symlink_metadata(dir) {
                Ok(m) if m.file_type().is_symlink() => std::fs::read_link(dir)
                    .ok()
                    .map(|t| (dir.to_string(), Some(t.to_string_lossy().into_owned()))),
                Ok(m) if m.is_dir() => Some((dir.to_string(), None)),
                _ => None,
            })
            .collect();
        let sandbox = Sandbox {
            bwrap,
            version,
            grace,
            live: Arc::default(),
            root_links,
        };
        let probe_dir = std::env::temp_dir();
        let out = std::process::Command::new(&sandbox.bwrap)
            .args(sandbox.args(&probe_dir, WORKSPACE, &[]))
            .arg("true")
            .env_clear()
            .stdin(Stdio::null())
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

    /// The `bwrap` options (everything before the command).
    fn args(&self, lease_dir: &Path, cwd: &str, env: &[(String, String)]) -> Vec<String> {
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
        for (dir, link) in &self.root_links {
            match link {
                Some(target) => a.extend(["--symlink".into(), target.clone(), dir.clone()]),
                None => a.extend(["--ro-bind".into(), dir.clone(), dir.clone()]),
            }
        }
        for etc in ETC_ALLOW {
            a.extend(["--ro-bind-try".into(), etc.to_string(), etc.to_string()]);
        }
        a.extend(
            ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--bind"]
                .iter()
                .map(|s| s.to_string()),
        );
        a.push(lease_dir.to_string_lossy().into_owned());
        a.push(WORKSPACE.into());
        // The sandbox's root (where /etc and the mount points live) is read-only too.
        a.extend(["--remount-ro".into(), "/".into()]);
        a.extend(["--chdir".into(), cwd.to_owned(), "--clearenv".into()]);
        if !env.iter().any(|(k, _)| k == "PATH") {
            a.extend(["--setenv".into(), "PATH".into(), SANDBOX_PATH.into()]);
        }
        for (k, v) in env {
            a.extend(["--setenv".into(), k.clone(), v.clone()]);
        }
        a.push("--".into());
        a
    }

    /// Spawns `argv` in a sandbox over `lease_dir`. The program is started through
    /// `/bin/sh -c 'exec "$0" "$@"'` so that a missing program is exit code 127 with a
    /// message naming it, as in a shell. The child is tracked until [`Tracked`] drops.
    pub(crate) fn spawn(
        &self,
        lease_dir: &Path,
        cwd: &str,
        env: &[(String, String)],
        argv: &[String],
        [stdin, stdout, stderr]: [Stdio; 3],
    ) -> std::io::Result<(Child, Tracked)> {
        let mut command = Command::new(&self.bwrap);
        command
            .args(self.args(lease_dir, cwd, env))
            .args(["/bin/sh", "-c", "exec \"$0\" \"$@\""])
            .args(argv)
            .env_clear()
            .stdin(stdin)
            .stdout(stdout)
            .stderr(stderr)
            .kill_on_drop(true);
        let child = command.spawn()?;
        let pid = child.id().unwrap_or(0);
        self.live
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(pid, lease_dir.to_path_buf());
        Ok((
            child,
            Tracked {
                pid,
                live: self.live.clone(),
            },
        ))
    }

    /// SIGKILLs every live sandbox (the worker is exiting). Killing the pid namespace's
    /// init takes every process of the sandbox with it.
    pub(crate) fn kill_all(&self) {
        self.kill_where(|_| true);
    }

    /// SIGKILLs every sandbox running over `lease_dir` (release and destroy of a lease).
    pub(crate) fn kill_lease(&self, lease_dir: &Path) {
        self.kill_where(|dir| dir == lease_dir);
    }

    fn kill_where(&self, select: impl Fn(&Path) -> bool) {
        let pids: Vec<u32> = self
            .live
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .filter(|(_, dir)| select(dir))
            .map(|(pid, _)| *pid)
            .collect();
        for pid in &pids {
            hard_kill(*pid);
        }
        // Wait (bounded) until the namespaces are gone, so nothing outlives the worker.
        for _ in 0..200 {
            if pids
                .iter()
                .all(|p| !Path::new(&format!("/proc/{p}/task")).exists() || is_zombie(*p))
            {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
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
                if member != *init {
                    signal(member, Signal::TERM);
                }
            }
            if let Ok(status) = tokio::time::timeout(self.grace, child.wait()).await {
                wait_namespace_gone(namespace.as_ref().map(|(_, ns)| ns.as_str())).await;
                return (status, "SIGTERM");
            }
        }
        hard_kill(pid);
        let status = child.wait().await;
        wait_namespace_gone(namespace.as_ref().map(|(_, ns)| ns.as_str())).await;
        (status, "SIGKILL")
    }
}

/// Removes a sandbox from the live set when dropped.
#[derive(Debug)]
pub(crate) struct Tracked {
    pid: u32,
    live: Arc<Mutex<HashMap<u32, PathBuf>>>,
}

impl Drop for Tracked {
    fn drop(&mut self) {
        self.live.lock().unwrap_or_else(|p| p.into_inner()).remove(&self.pid);
    }
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

/// SIGKILLs the namespace init (the kernel then kills the whole namespace) and `bwrap`.
fn hard_kill(bwrap_pid: u32) {
    if bwrap_pid == 0 {
        return;
    }
    if let Some(init) = ns_init(bwrap_pid) {
        signal(init, Signal::KILL);
    }
    signal(bwrap_pid, Signal::KILL);
}

/// The pid (host view) of the sandbox's namespace init: `bwrap`'s child.
fn ns_init(bwrap_pid: u32) -> Option<u32> {
    let children = std::fs::read_to_string(format!("/proc/{bwrap_pid}/task/{bwrap_pid}/children")).ok()?;
    children.split_whitespace().next()?.parse().ok()
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

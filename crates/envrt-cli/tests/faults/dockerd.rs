//! A Docker engine of the test's own, to restart under a running call: `dockerd` with its
//! own data root, exec root (so its own managed containerd, socket and state), pid file
//! and socket, all in one short temporary directory, never the shared engine. It holds a
//! copy of the test image (saved from the default engine) and is torn down on every path
//! ([`Drop`]): its containers removed, the daemon stopped (killed past a bound), what it
//! left (shims, mounts) ended, the directory removed.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

/// Bound on the engine answering after a start, and on it exiting after a signal.
const BOUND: Duration = Duration::from_secs(60);

pub struct PrivateDockerd {
    dir: tempfile::TempDir,
    daemon: Option<Child>,
    /// Entries of the data root's `overlay2` once the image is loaded.
    image_layers: usize,
    /// One private engine at a time in a test binary: eight engines (each with its own
    /// containerd) starting, killed and restarted at once on two cores made the calls
    /// under test time out instead of meeting the restart. Dropped last.
    _turn: std::sync::MutexGuard<'static, ()>,
}

/// The turn [`PrivateDockerd::start`] takes.
static TURN: std::sync::Mutex<()> = std::sync::Mutex::new(());

impl PrivateDockerd {
    /// A running engine of its own holding `image` (copied from the default engine), or
    /// `None` (skipped loudly; a failure when Docker is required) without `dockerd`.
    pub fn start(image: &str) -> Option<PrivateDockerd> {
        let has_dockerd = Command::new("dockerd")
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success());
        if !has_dockerd {
            envrt_test_support::Component::Docker.skip_or_fail(
                "ENVRT_REQUIRE_DOCKER=1 but no dockerd to start an engine of the test's own",
                "SKIPPED: no dockerd to start an engine of the test's own",
            );
            return None;
        }
        // Short: the engine's and containerd's sockets live under it (108-byte limit).
        let dir = tempfile::Builder::new().prefix("edk").tempdir_in("/tmp").unwrap();
        let turn = TURN.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let mut engine = PrivateDockerd {
            dir,
            daemon: None,
            image_layers: 0,
            _turn: turn,
        };
        engine.launch();
        let mut saved = Command::new("docker")
            .args(["save", image])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let loaded = Command::new("docker")
            .args(["-H", &engine.host(), "load", "-q"])
            .stdin(saved.stdout.take().unwrap())
            .output()
            .unwrap();
        assert!(saved.wait().unwrap().success(), "docker save {image} failed");
        assert!(loaded.status.success(), "{}", String::from_utf8_lossy(&loaded.stderr));
        engine.image_layers = engine.layer_dirs();
        Some(engine)
    }

    /// The engine's address, as `DOCKER_HOST` takes it.
    pub fn host(&self) -> String {
        format!("unix://{}", self.socket().display())
    }

    fn socket(&self) -> PathBuf {
        self.dir.path().join("s.sock")
    }

    fn root(&self) -> &Path {
        self.dir.path()
    }

    /// The daemon's pid.
    pub fn pid(&self) -> Pid {
        Pid::from_raw(self.daemon.as_ref().expect("the engine runs").id() as i32)
    }

    /// Starts the daemon and waits (bounded) until it answers.
    pub fn launch(&mut self) {
        assert!(self.daemon.is_none(), "the engine already runs");
        let root = self.root();
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(root.join("log"))
            .unwrap();
        let mut daemon = Command::new("dockerd");
        daemon
            .arg("--data-root")
            .arg(root.join("data"))
            .arg("--exec-root")
            .arg(root.join("x"))
            .arg("--pidfile")
            .arg(root.join("pid"))
            .args([
                "-H",
                &self.host(),
                "--iptables=false",
                "--bridge=none",
                "--shutdown-timeout=5",
            ])
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log);
        std::os::unix::process::CommandExt::process_group(&mut daemon, 0);
        self.daemon = Some(daemon.spawn().unwrap());
        let deadline = Instant::now() + BOUND;
        loop {
            let info = Command::new("docker")
                .args(["-H", &self.host(), "version", "--format", "{{.Server.Version}}"])
                .output()
                .unwrap();
            if info.status.success() {
                return;
            }
            if let Some(status) = self.daemon.as_mut().unwrap().try_wait().unwrap() {
                panic!("dockerd exited ({status}) before it answered: {}", self.log());
            }
            assert!(
                Instant::now() < deadline,
                "dockerd did not answer within {BOUND:?}: {}",
                self.log()
            );
            // Nothing to await but the socket answering: ask again shortly.
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Sends the daemon `signal` and waits (bounded) until it has exited.
    pub fn stop(&mut self, signal: Signal) {
        let mut daemon = self.daemon.take().expect("the engine runs");
        kill(Pid::from_raw(daemon.id() as i32), signal).unwrap();
        let deadline = Instant::now() + BOUND;
        while daemon.try_wait().unwrap().is_none() {
            if Instant::now() > deadline {
                let _ = daemon.kill();
                let _ = daemon.wait();
                panic!("dockerd did not exit within {BOUND:?} of {signal}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        // Its containerd follows it (it dies with the daemon): wait for that too, so a
        // start after this one never finds the old one's socket busy. Its pid file goes:
        // with no init reaping orphans here the dead containerd may stay a zombie, which a
        // starting daemon would take for a live one and wait for in vain.
        self.wait_for_no_process_naming(&self.root().join("x/containerd/containerd.toml"));
        let _ = std::fs::remove_file(self.root().join("x/containerd/containerd.pid"));
    }

    /// Asserts that nothing of container `id` is left on this engine although it may list
    /// it (a ghost, see `envrt_soak::leaks::Leaks::engine_ghosts`): the engine answers "no
    /// such container" to a removal, and no directory, task bundle, process or mount of
    /// its own names it; its layers are gone too (the data root holds the image's only).
    pub fn assert_holds_nothing_of(&self, id: &str) {
        let rm = Command::new("docker")
            .args(["-H", &self.host(), "rm", "-f", id])
            .output()
            .unwrap();
        assert!(
            String::from_utf8_lossy(&rm.stderr).contains("No such container"),
            "a removal of {id}: {rm:?}"
        );
        let data = self.root().join("data");
        assert!(!data.join("containers").join(id).exists(), "{id} has its directory");
        let bundle = self
            .root()
            .join("x/containerd/daemon/io.containerd.runtime.v2.task/moby")
            .join(id);
        assert!(!bundle.exists(), "{id} has its task bundle");
        assert_eq!(processes_naming(Path::new(id)), Vec::new(), "processes of {id}");
        let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        assert!(!mounts.contains(id), "a mount names {id}");
        assert_eq!(self.layer_dirs(), self.image_layers, "layers beside the image's");
    }

    /// The entries of the data root's `overlay2` directory (the image's layers, and each
    /// container's two).
    fn layer_dirs(&self) -> usize {
        std::fs::read_dir(self.root().join("data/overlay2"))
            .map(|entries| entries.count())
            .unwrap_or(0)
    }

    /// The daemon's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.root().join("log")).unwrap_or_default()
    }

    fn wait_for_no_process_naming(&self, needle: &Path) {
        let deadline = Instant::now() + BOUND;
        while !processes_naming(needle).is_empty() {
            if Instant::now() > deadline {
                for pid in processes_naming(needle) {
                    let _ = kill(pid, Signal::SIGKILL);
                }
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for PrivateDockerd {
    fn drop(&mut self) {
        if self.daemon.is_some() {
            // Its containers first (a stopping daemon would otherwise wait for each).
            if let Ok(out) = Command::new("docker").args(["-H", &self.host(), "ps", "-aq"]).output() {
                let ids = String::from_utf8_lossy(&out.stdout).into_owned();
                let ids: Vec<&str> = ids.split_whitespace().collect();
                if !ids.is_empty() {
                    let _ = Command::new("docker")
                        .args(["-H", &self.host(), "rm", "-f"])
                        .args(&ids)
                        .output();
                }
            }
            let mut daemon = self.daemon.take().unwrap();
            let _ = kill(Pid::from_raw(daemon.id() as i32), Signal::SIGTERM);
            let deadline = Instant::now() + BOUND;
            while matches!(daemon.try_wait(), Ok(None)) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = daemon.kill();
            let _ = daemon.wait();
        }
        // What may outlive a killed daemon: its containerd and shims (their command lines
        // name the directory), then the mounts under it (the daemon mounts its data root
        // on itself), then the directory (`TempDir`'s own drop).
        for pid in processes_naming(self.root()) {
            let _ = kill(pid, Signal::SIGKILL);
        }
        let root = self.root().to_string_lossy().into_owned();
        let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        let mut under: Vec<&str> = mounts
            .lines()
            .filter_map(|l| l.split(' ').nth(4))
            .filter(|m| m.starts_with(&root))
            .collect();
        under.reverse();
        for mount in under {
            let _ = Command::new("umount").args(["-l", mount]).output();
        }
    }
}

/// Live processes (not zombies) whose command line names `needle`.
fn processes_naming(needle: &Path) -> Vec<Pid> {
    let needle = needle.as_os_str().as_encoded_bytes();
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return found;
    };
    for entry in entries.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else {
            continue;
        };
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        if stat.rsplit(") ").next().is_some_and(|rest| rest.starts_with('Z')) {
            continue;
        }
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        if cmdline.windows(needle.len()).any(|w| w == needle) {
            found.push(Pid::from_raw(pid));
        }
    }
    found
}

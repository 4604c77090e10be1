//! Helpers shared by the end-to-end tests: a temporary state directory, bounded runs of
//! the binary, process markers scanned in /proc.

#![allow(dead_code, unreachable_pub)]

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

pub const BIN: &str = env!("CARGO_BIN_EXE_envrt");
pub const LIMIT: Duration = Duration::from_secs(120);

/// A temporary home for one test: state directory and working directory.
pub struct Site {
    pub dir: tempfile::TempDir,
}

/// What a finished invocation did.
#[derive(Debug)]
pub struct Outcome {
    pub code: Option<i32>,
    pub stdout: Vec<u8>,
    pub stderr: String,
}

impl Outcome {
    pub fn stdout_text(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }
}

impl Site {
    pub fn new() -> Site {
        Site {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    pub fn state(&self) -> PathBuf {
        self.path().join("state")
    }

    pub fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::new(BIN);
        c.args(args)
            .current_dir(self.path())
            .env("ENVRT_STATE_DIR", self.state())
            .env_remove("ENVRT_CONFIG")
            .env_remove("ENVRT_SERVER")
            .env_remove("ENVRT_TOKEN")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        c
    }

    /// Runs envrt with `stdin` piped in (or /dev/null), bounded by [`LIMIT`].
    pub fn run_with(&self, args: &[&str], stdin: Option<&[u8]>) -> Outcome {
        self.run_with_env(args, stdin, &[])
    }

    /// [`run_with`](Self::run_with) with these variables set for envrt.
    pub fn run_with_env(&self, args: &[&str], stdin: Option<&[u8]>, env: &[(&str, &str)]) -> Outcome {
        let mut c = self.command(args);
        c.envs(env.iter().copied());
        run_command(c, stdin)
    }

    pub fn run(&self, args: &[&str]) -> Outcome {
        self.run_with(args, None)
    }

    /// Starts `envrt exec [extra…] -- sleep MARK` as a lease holder and waits (bounded)
    /// until its one lease is active and its command runs; returns the holder and lease.
    #[allow(clippy::zombie_processes)] // the holder goes back to the caller, which waits for it
    pub fn start_holder(&self, extra: &[&str], mark: &str) -> (Child, serde_json::Value) {
        let mut args = vec!["exec"];
        args.extend_from_slice(extra);
        args.extend(["--", "sleep", mark]);
        let mut holder = self.command(&args).stdin(Stdio::null()).spawn().unwrap();
        let deadline = Instant::now() + LIMIT;
        loop {
            let active: Vec<_> = self
                .leases_json()
                .into_iter()
                .filter(|l| l["status"] == "active")
                .collect();
            if active.len() == 1 && !sleepers(mark).is_empty() {
                return (holder, active[0].clone());
            }
            if Instant::now() >= deadline {
                let _ = holder.kill();
                let _ = holder.wait();
                panic!("the holder never started its command");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn leases_json(&self) -> Vec<serde_json::Value> {
        let out = self.run(&["lease", "list", "--all", "--json"]);
        assert_eq!(out.code, Some(0), "{}", out.stderr);
        serde_json::from_slice::<serde_json::Value>(&out.stdout)
            .unwrap()
            .as_array()
            .unwrap()
            .clone()
    }
}

/// Runs the command `c` with `stdin` piped in (or /dev/null), bounded by [`LIMIT`].
pub fn run_command(mut c: Command, stdin: Option<&[u8]>) -> Outcome {
    c.stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() });
    let mut child = c.spawn().unwrap();
    let writer = stdin.map(|data| {
        let mut pipe = child.stdin.take().unwrap();
        let data = data.to_vec();
        std::thread::spawn(move || {
            let _ = pipe.write_all(&data);
        })
    });
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = out.read_to_end(&mut v);
        v
    });
    let err_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let status = wait_bounded(&mut child, LIMIT);
    if let Some(w) = writer {
        w.join().unwrap();
    }
    Outcome {
        code: status.code(),
        stdout: reader.join().unwrap(),
        stderr: err_reader.join().unwrap(),
    }
}

pub fn wait_bounded(child: &mut Child, limit: Duration) -> std::process::ExitStatus {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("envrt did not finish within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A `sleep` duration no other process on the machine uses: it marks a process tree.
pub fn marker() -> String {
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    format!(
        "{}.{}{}",
        4000 + COUNTER.fetch_add(1, Ordering::SeqCst),
        std::process::id(),
        7
    )
}

/// Pids whose command line contains `needle`.
pub fn pids_with(needle: &str) -> Vec<u32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        if let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) {
            let text = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            // Zombies have an empty command line; they are already dead.
            if text.contains(needle) {
                found.push(pid);
            }
        }
    }
    found
}

/// Pids of `sleep` processes started with `mark` (not envrt, whose own command line may
/// carry the mark too).
pub fn sleepers(mark: &str) -> Vec<u32> {
    pids_with(mark)
        .into_iter()
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| c.starts_with(format!("sleep\0{mark}").as_bytes()))
        })
        .collect()
}

/// Waits (bounded) until no process carries `needle`; returns the survivors.
pub fn survivors(needle: &str) -> Vec<u32> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let left = pids_with(needle);
        if left.is_empty() || Instant::now() > deadline {
            return left;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Kills what a failed test may have left with our marker (our own processes only).
pub struct Reaper(pub String);

impl Drop for Reaper {
    fn drop(&mut self) {
        for pid in pids_with(&self.0) {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), nix::sys::signal::SIGKILL);
        }
    }
}

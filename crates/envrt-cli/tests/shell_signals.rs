//! `envrt shell` ended by a signal while its command runs: a SIGHUP from a terminal that
//! closed (as `tmux kill-session` does) and a SIGTERM release its ephemeral lease, stop
//! the command (a container is removed) and exit 128+n, as `envrt exec` does. Against the
//! local driver (a real terminal, through its process sessions), Docker and the sandbox
//! worker; the last two fail instead of skipping with `ENVRT_REQUIRE_DOCKER=1` /
//! `ENVRT_REQUIRE_SANDBOX=1`.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

fn lease_statuses(dir: &Path) -> Vec<String> {
    let out = Command::new(common::BIN)
        .args(["lease", "list", "--all", "--json"])
        .current_dir(dir)
        .env("ENVRT_STATE_DIR", dir.join("state"))
        .env_remove("ENVRT_CONFIG")
        .output()
        .unwrap();
    let leases: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    leases
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["status"].as_str().unwrap().to_owned())
        .collect()
}

/// Starts `envrt shell --env-id ENV` on a fresh pseudo-terminal with a command that ticks
/// on stdout and sleeps MARK, waits until the sleep runs, (with `hang_up`) closes the
/// terminal as one that goes away does, and sends `signal`. Returns envrt's exit code.
fn signal_a_running_shell(
    dir: &Path,
    path_dir: Option<&Path>,
    env: &str,
    signal: Signal,
    hang_up: bool,
) -> Option<i32> {
    let mark = common::marker();
    let _reaper = common::Reaper(mark.clone());
    let pty = nix::pty::openpty(None, None).unwrap();
    // Only the test holds the master: closing it must hang the terminal up.
    nix::fcntl::fcntl(
        &pty.master,
        nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::FD_CLOEXEC),
    )
    .unwrap();
    let mut command = Command::new(common::BIN);
    command
        .args([
            "shell",
            "--env-id",
            env,
            "--",
            "sh",
            "-c",
            &format!("while sleep 0.1; do echo tick; done & exec sleep {mark}"),
        ])
        .current_dir(dir)
        .env("ENVRT_STATE_DIR", dir.join("state"))
        .env_remove("ENVRT_CONFIG")
        .stdin(Stdio::from(pty.slave.try_clone().unwrap()))
        .stdout(Stdio::from(pty.slave.try_clone().unwrap()))
        .stderr(Stdio::from(pty.slave.try_clone().unwrap()));
    if let Some(extra) = path_dir {
        let path = std::env::var_os("PATH").unwrap_or_default();
        let mut dirs = vec![extra.to_path_buf()];
        dirs.extend(std::env::split_paths(&path));
        command.env("PATH", std::env::join_paths(dirs).unwrap());
    }
    let mut child = command.spawn().unwrap();
    drop(pty.slave);
    // The session prints next to nothing: the terminal's buffer holds it unread.
    let mut master = Some(pty.master);
    let deadline = Instant::now() + Duration::from_secs(120);
    while common::sleepers(&mark).is_empty() {
        assert!(Instant::now() < deadline, "the shell's command never started");
        assert!(child.try_wait().unwrap().is_none(), "envrt shell ended early");
        std::thread::sleep(Duration::from_millis(20));
    }
    let before = lease_statuses(dir);
    assert_eq!(before.iter().filter(|s| *s == "active").count(), 1, "{before:?}");
    if hang_up {
        // The terminal goes away (every write of envrt's to it fails from now on, and the
        // command's ticks keep coming), then its SIGHUP arrives.
        master.take();
        std::thread::sleep(Duration::from_millis(500));
    }
    kill(Pid::from_raw(child.id() as i32), signal).unwrap();
    let status = common::wait_bounded(&mut child, Duration::from_secs(30));
    assert!(common::survivors(&mark).is_empty(), "the shell's command still runs");
    let after = lease_statuses(dir);
    assert!(
        after.iter().all(|s| s == "released"),
        "the ephemeral lease was released: {after:?}"
    );
    drop(master);
    status.code()
}

#[test]
fn a_hung_up_terminal_ends_a_local_shell_on_a_real_terminal_and_releases_its_lease() {
    let dir = tempfile::tempdir().unwrap();
    let code = signal_a_running_shell(dir.path(), None, "local", Signal::SIGHUP, true);
    assert_eq!(code, Some(129));
    let code = signal_a_running_shell(dir.path(), None, "local", Signal::SIGTERM, false);
    assert_eq!(code, Some(143));
}

fn sandbox_site() -> Option<(tempfile::TempDir, PathBuf)> {
    let worker = envrt_test_support::sandbox::worker_beside_or_skip(common::BIN)?;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("envrt.toml"),
        "[[environment]]\nid = \"box\"\ndriver = \"sandbox\"\n",
    )
    .unwrap();
    Some((dir, worker.parent().unwrap().to_path_buf()))
}

#[test]
fn a_hung_up_terminal_ends_a_sandbox_shell_and_releases_its_lease() {
    let Some((dir, worker_dir)) = sandbox_site() else {
        return;
    };
    let code = signal_a_running_shell(dir.path(), Some(&worker_dir), "box", Signal::SIGHUP, true);
    assert_eq!(code, Some(129));
    let code = signal_a_running_shell(dir.path(), Some(&worker_dir), "box", Signal::SIGTERM, false);
    assert_eq!(code, Some(143));
}

/// The containers of a state dir, removed when the test ends.
struct Containers(String);

impl Containers {
    fn list(&self) -> Vec<String> {
        let filter = format!("label=envrt.cli-state={}", self.0);
        let out = Command::new("docker")
            .args(["ps", "-aq", "--filter", &filter])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::to_owned)
            .collect()
    }
}

impl Drop for Containers {
    fn drop(&mut self) {
        for id in self.list() {
            let _ = Command::new("docker").args(["rm", "-f", "-v", &id]).output();
        }
    }
}

#[test]
fn a_hung_up_terminal_ends_a_docker_shell_and_removes_its_container() {
    let Some(image) = envrt_test_support::docker::image_or_skip() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("envrt.toml"),
        format!("[[environment]]\nid = \"ctr\"\ndriver = \"docker\"\n[environment.config]\nimage = \"{image}\"\n"),
    )
    .unwrap();
    let containers = Containers(dir.path().join("state").display().to_string());
    let code = signal_a_running_shell(dir.path(), None, "ctr", Signal::SIGHUP, true);
    assert_eq!(code, Some(129));
    assert_eq!(containers.list(), Vec::<String>::new(), "the container is gone");
    let code = signal_a_running_shell(dir.path(), None, "ctr", Signal::SIGHUP, false);
    assert_eq!(code, Some(129));
    let code = signal_a_running_shell(dir.path(), None, "ctr", Signal::SIGTERM, false);
    assert_eq!(code, Some(143));
    assert_eq!(containers.list(), Vec::<String>::new(), "the container is gone");
}

//! What the fault-injection tests (`tests/fault_*.rs`) share: a scratch directory laid out
//! the way the soak's leak counter (`envrt_soak::leaks`) reads it, so that "zero leaks"
//! here is the soak's own count (processes, containers, sandboxes, workspaces, active
//! rows), and bounded runs of the `envrt` binary in it.

#![allow(dead_code, unreachable_pub)]

pub mod dockerd;
pub mod trees;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

pub const BIN: &str = env!("CARGO_BIN_EXE_envrt");
/// Bound on one invocation of the binary.
const LIMIT: Duration = Duration::from_secs(60);

/// A scratch directory: `envrt.toml` at its root, the CLI's state in
/// [`envrt_soak::cli_state_dir`].
pub struct Scratch {
    pub dir: tempfile::TempDir,
    /// The Docker engine every run and the leak count use (`DOCKER_HOST`); the default
    /// engine when `None`.
    pub docker_host: Option<String>,
}

impl Scratch {
    /// A scratch directory whose `envrt.toml` is `config`.
    pub fn new(config: &str) -> Scratch {
        let dir = tempfile::Builder::new().prefix("envrt-fault-").tempdir().unwrap();
        std::fs::write(dir.path().join("envrt.toml"), config).unwrap();
        Scratch { dir, docker_host: None }
    }

    /// [`Scratch::new`] whose runs and leak count use the Docker engine at `docker_host`.
    pub fn on_engine(config: &str, docker_host: &str) -> Scratch {
        let mut scratch = Scratch::new(config);
        scratch.docker_host = Some(docker_host.to_owned());
        scratch
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// The CLI's state directory (`ENVRT_STATE_DIR` of every run).
    pub fn state(&self) -> PathBuf {
        envrt_soak::cli_state_dir(self.path())
    }

    /// `envrt ARGS` in the scratch directory, not started yet.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::new(BIN);
        c.args(args)
            .current_dir(self.path())
            .env("ENVRT_STATE_DIR", self.state())
            .env_remove("ENVRT_CONFIG")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if let Some(host) = &self.docker_host {
            c.env("DOCKER_HOST", host);
        }
        c
    }

    /// Runs `envrt ARGS` to its end, bounded by [`LIMIT`].
    pub fn run(&self, args: &[&str]) -> Output {
        run_bounded(self.command(args))
    }

    /// `envrt lease acquire --env-id ENV --detached`: the new lease's id.
    pub fn acquire(&self, env: &str) -> String {
        let out = self.run(&["lease", "acquire", "--env-id", env, "--detached"]);
        assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap().trim().to_owned()
    }

    /// The lease record as `envrt lease show ID --json` gives it.
    pub fn lease(&self, id: &str) -> serde_json::Value {
        let out = self.run(&["lease", "show", id, "--json"]);
        assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()["lease"].clone()
    }

    /// The soak's leak count for driver `key` over this scratch directory.
    pub fn leaks(&self, key: &str) -> envrt_soak::leaks::Leaks {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(envrt_soak::leaks::count_on(
            key,
            self.path(),
            "none",
            self.docker_host.as_deref(),
        ))
    }

    /// Asserts the soak's count finds nothing for driver `key`.
    #[track_caller]
    pub fn assert_no_leaks(&self, key: &str) {
        let leaks = self.leaks(key);
        assert_eq!(leaks.total(), 0, "leaks: {:#?}", leaks.details);
    }

    /// Asserts the soak's count for driver `key` reaches nothing within `bound`, looking
    /// every 100 ms; says on stderr how long it took when the first look found some. For an
    /// engine that finishes clean-up of its own after a restart (it removes an
    /// `AutoRemove` container that died with it by itself, and lists it meanwhile): what
    /// is still there past the bound is a leak.
    #[track_caller]
    pub fn assert_no_leaks_within(&self, key: &str, bound: Duration) {
        let start = std::time::Instant::now();
        for look in 1.. {
            let leaks = self.leaks(key);
            if leaks.total() == 0 {
                if look > 1 {
                    eprintln!("the leak count reached 0 after {:?}", start.elapsed());
                }
                return;
            }
            assert!(start.elapsed() < bound, "leaks after {bound:?}: {:#?}", leaks.details);
            // Nothing to wait on but the engine's own clean-up: look again shortly.
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// A test that failed half-way still ends what it leased: every lease the store still has
/// active or pending is destroyed (or released), best effort, before the directory goes.
impl Drop for Scratch {
    fn drop(&mut self) {
        if !self.state().join("leases.db").exists() {
            return;
        }
        let Ok(out) = self.command(&["lease", "list", "--json"]).output() else {
            return;
        };
        let leases: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap_or_default();
        for lease in leases {
            let Some(id) = lease["id"].as_str() else { continue };
            let destroyed = self.command(&["lease", "destroy", id]).output();
            if !destroyed.is_ok_and(|o| o.status.success()) {
                let _ = self.command(&["lease", "release", id]).output();
            }
        }
    }
}

/// Runs `command` to its end, bounded by [`LIMIT`] (killed and failed past it).
pub fn run_bounded(mut command: Command) -> Output {
    let child = command.spawn().unwrap();
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(LIMIT) {
        Ok(out) => out.unwrap(),
        Err(_) => {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), nix::sys::signal::SIGKILL);
            panic!("envrt did not finish within {LIMIT:?}");
        }
    }
}

/// The last line of an invocation's stderr (the error line of a failed call).
pub fn last_error_line(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr)
        .lines()
        .last()
        .unwrap_or_default()
        .to_owned()
}

/// The `envrt.toml` of one environment `id` on driver `driver`, with `config` lines.
pub fn environment(id: &str, driver: &str, config: &str) -> String {
    let mut text = format!("[[environment]]\nid = \"{id}\"\ndriver = \"{driver}\"\n");
    if !config.is_empty() {
        text.push_str("[environment.config]\n");
        text.push_str(config);
    }
    text
}

/// Waits for `child` to end, bounded by [`LIMIT`] (killed and failed past it).
pub fn wait_bounded(child: &mut std::process::Child) -> std::process::ExitStatus {
    let deadline = std::time::Instant::now() + LIMIT;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("envrt did not finish within {LIMIT:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The `envrt.toml` of an ssh environment `remote` on the test sshd, or `None` (skipped).
pub fn ssh_environment() -> Option<String> {
    let vars = match envrt_test_support::ssh::settings() {
        Ok(vars) => vars,
        Err(e) => {
            envrt_test_support::Component::Ssh.skip_or_fail(
                format_args!("ENVRT_REQUIRE_SSH=1 but no test sshd ({e})"),
                format_args!("SKIPPED: no test sshd ({e})"),
            );
            return None;
        }
    };
    let config = format!(
        "host = \"{}\"\nport = {}\nuser = \"{}\"\nkey = \"{}\"\nknown_hosts = \"{}\"\n",
        vars["ENVRT_TEST_SSH_HOST"],
        vars["ENVRT_TEST_SSH_PORT"],
        vars["ENVRT_TEST_SSH_USER"],
        vars["ENVRT_TEST_SSH_KEY"],
        vars["ENVRT_TEST_SSH_KNOWN_HOSTS"]
    );
    Some(environment("remote", "ssh", &config))
}

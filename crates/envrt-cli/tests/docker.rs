//! The `envrt` binary against a real Docker engine: exit codes through a container, gc
//! after a killed holder, and gc reaping a container no lease owns. Skips loudly when no
//! engine answers (fails instead with `ENVRT_REQUIRE_DOCKER=1`). Every container a test
//! makes carries its own state-dir label and is removed at the end.

use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_envrt");
const STATE_LABEL: &str = "envrt.cli-state";

use envrt_test_support::docker::image;

fn docker(args: &[&str]) -> Option<Output> {
    Command::new("docker").args(args).output().ok()
}

/// Whether an engine and the test image are there; says so loudly when not.
fn docker_ready() -> bool {
    envrt_test_support::docker::image_or_skip().is_some()
}

/// A state dir whose containers are removed when the test ends.
struct Site {
    dir: tempfile::TempDir,
}

impl Site {
    fn new() -> Site {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("envrt.toml"),
            format!(
                "[[environment]]\nid = \"ctr\"\ndriver = \"docker\"\n[environment.config]\nimage = \"{}\"\n",
                image()
            ),
        )
        .unwrap();
        Site { dir }
    }

    fn state(&self) -> PathBuf {
        std::path::absolute(self.dir.path().join("state")).unwrap()
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::new(BIN);
        c.args(args)
            .current_dir(self.dir.path())
            .env("ENVRT_STATE_DIR", self.state())
            .env_remove("ENVRT_CONFIG")
            .stdin(Stdio::null());
        c
    }

    fn run(&self, args: &[&str]) -> Output {
        let mut child = self
            .command(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        wait_bounded(&mut child);
        child.wait_with_output().unwrap()
    }

    /// Containers labelled with this state dir.
    fn containers(&self) -> Vec<String> {
        let filter = format!("label={STATE_LABEL}={}", self.state().display());
        let out = docker(&["ps", "-aq", "--no-trunc", "--filter", &filter]).unwrap();
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::to_owned)
            .collect()
    }

    fn leases(&self) -> Vec<serde_json::Value> {
        let out = self.run(&["lease", "list", "--all", "--json"]);
        serde_json::from_slice::<serde_json::Value>(&out.stdout)
            .unwrap()
            .as_array()
            .unwrap()
            .clone()
    }
}

impl Drop for Site {
    fn drop(&mut self) {
        for id in self.containers() {
            let _ = docker(&["rm", "-f", "-v", &id]);
        }
    }
}

fn wait_bounded(child: &mut Child) {
    let deadline = Instant::now() + Duration::from_secs(180);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("envrt did not finish in time");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn exit_codes_and_stdin_through_a_container() {
    if !docker_ready() {
        return;
    }
    let site = Site::new();
    let three = site.run(&["exec", "--env-id", "ctr", "--", "sh", "-c", "echo in-ctr; exit 3"]);
    assert_eq!(
        three.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&three.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&three.stdout), "in-ctr\n");
    let missing = site.run(&["exec", "--env-id", "ctr", "--", "envrt-no-such-program"]);
    assert_eq!(missing.status.code(), Some(127));
    let timeout = site.run(&["exec", "--env-id", "ctr", "--timeout", "1", "--", "sleep", "60"]);
    assert_eq!(timeout.status.code(), Some(124));
    let mut child = site
        .command(&["exec", "--env-id", "ctr", "--", "wc", "-c"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(&vec![7u8; 300_000]).unwrap();
    }
    wait_bounded(&mut child);
    let out = child.wait_with_output().unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "300000");
    // Every ephemeral lease released, every container removed.
    assert!(site.leases().iter().all(|l| l["status"] == "released"));
    assert_eq!(site.containers(), Vec::<String>::new());
}

#[test]
fn gc_removes_the_container_of_a_killed_holder_and_orphans() {
    if !docker_ready() {
        return;
    }
    let site = Site::new();
    let mut holder = site
        .command(&["exec", "--env-id", "ctr", "--", "sleep", "600"])
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    let lease = loop {
        let active: Vec<_> = site.leases().into_iter().filter(|l| l["status"] == "active").collect();
        if active.len() == 1 && site.containers().len() == 1 {
            break active[0].clone();
        }
        assert!(Instant::now() < deadline, "the holder never got its container");
        std::thread::sleep(Duration::from_millis(50));
    };
    holder.kill().unwrap();
    holder.wait().unwrap();
    assert_eq!(site.containers().len(), 1);

    // A container of this state dir that no lease owns (a crash before the record).
    let state_label = format!("{STATE_LABEL}={}", site.state().display());
    let orphan = docker(&[
        "run",
        "-d",
        "--network",
        "none",
        "--label",
        "envrt.managed=true",
        "--label",
        "envrt.lease-id=ghost-lease",
        "--label",
        &state_label,
        &image(),
        "sleep",
        "600",
    ])
    .unwrap();
    assert!(orphan.status.success(), "{}", String::from_utf8_lossy(&orphan.stderr));
    let orphan_id = String::from_utf8_lossy(&orphan.stdout).trim().to_owned();
    assert_eq!(site.containers().len(), 2);

    let gc = site.run(&["gc"]);
    let text = String::from_utf8_lossy(&gc.stdout).into_owned();
    assert_eq!(
        gc.status.code(),
        Some(0),
        "{text}{}",
        String::from_utf8_lossy(&gc.stderr)
    );
    let id = lease["id"].as_str().unwrap();
    assert!(
        text.contains(&format!(
            "released lease {id} (its holder, pid {}, is gone)",
            holder.id()
        )),
        "{text}"
    );
    assert!(
        text.contains(&format!("removed orphan container {orphan_id}")),
        "{text}"
    );
    assert!(text.ends_with("gc: 2 released, 0 failed\n"), "{text}");
    assert_eq!(site.containers(), Vec::<String>::new());
}

#[test]
fn a_container_leased_with_a_ttl_ends_at_expiry_after_its_holder_is_sigkilled() {
    if !docker_ready() {
        return;
    }
    let site = Site::new();
    // The holder: a shell that takes the lease (holder = the shell) and then waits.
    let script = format!("\"{BIN}\" lease acquire --env-id ctr --ttl 3s --json > lease.json && exec sleep 600");
    let mut holder = Command::new("sh")
        .args(["-c", &script])
        .current_dir(site.dir.path())
        .env("ENVRT_STATE_DIR", site.state())
        .env_remove("ENVRT_CONFIG")
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    let lease: serde_json::Value = loop {
        let text = std::fs::read(site.dir.path().join("lease.json")).unwrap_or_default();
        if let Ok(lease) = serde_json::from_slice(&text) {
            break lease;
        }
        assert!(Instant::now() < deadline, "the holder never got its lease");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(site.containers().len(), 1);
    holder.kill().unwrap();
    holder.wait().unwrap();
    // Nobody releases the lease; the container ends by itself at expiry.
    let deadline = Instant::now() + Duration::from_secs(30);
    while !site.containers().is_empty() {
        assert!(Instant::now() < deadline, "the container outlived the expiry");
        std::thread::sleep(Duration::from_millis(100));
    }
    let id = lease["id"].as_str().unwrap();
    let at = envrt::Timestamp(lease["expiresAt"].as_u64().unwrap()).to_rfc3339();
    let refused = site.run(&["exec", "--lease", id, "--", "true"]);
    assert_eq!(refused.status.code(), Some(2));
    assert_eq!(
        String::from_utf8_lossy(&refused.stderr),
        format!("Lease \"{id}\" expired at {at}.\n")
    );
    let gc = site.run(&["gc"]);
    assert_eq!(
        String::from_utf8_lossy(&gc.stdout),
        format!("released lease {id} (it expired)\ngc: 1 released, 0 failed\n")
    );
}

/// Processes of `container` (as the host sees them) whose command line contains `needle`.
fn container_processes(container: &str, needle: &str) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let path = entry.path();
        if !std::fs::read_to_string(path.join("cgroup")).is_ok_and(|c| c.contains(container)) {
            continue;
        }
        let stat = std::fs::read_to_string(path.join("stat")).unwrap_or_default();
        if stat.rsplit(") ").next().is_some_and(|rest| rest.starts_with('Z')) {
            continue;
        }
        let cmdline =
            String::from_utf8_lossy(&std::fs::read(path.join("cmdline")).unwrap_or_default()).replace('\0', " ");
        if cmdline.contains(needle) {
            found.push(cmdline);
        }
    }
    found
}

#[test]
fn sigint_to_exec_on_a_held_lease_leaves_no_command_in_the_container() {
    if !docker_ready() {
        return;
    }
    let site = Site::new();
    let acquired = site.run(&["lease", "acquire", "--env-id", "ctr", "--json"]);
    assert!(
        acquired.status.success(),
        "{}",
        String::from_utf8_lossy(&acquired.stderr)
    );
    let lease: serde_json::Value = serde_json::from_slice(&acquired.stdout).unwrap();
    let id = lease["id"].as_str().unwrap().to_owned();
    let container = site.containers().pop().expect("the lease's container");
    let mut child = site
        .command(&["exec", "--lease", &id, "--", "sleep", "301"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while container_processes(&container, "sleep 301").is_empty() {
        assert!(Instant::now() < deadline, "the command never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), nix::sys::signal::SIGINT).unwrap();
    wait_bounded(&mut child);
    let output = child.wait_with_output().unwrap();
    assert_eq!(output.status.code(), Some(130));
    assert_eq!(
        String::from_utf8_lossy(&output.stderr),
        "envrt: interrupted by SIGINT\n"
    );
    // The contract's bound for a dropped execute.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !container_processes(&container, "sleep 301").is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(container_processes(&container, "sleep 301"), Vec::<String>::new());
    let released = site.run(&["lease", "release", &id]);
    assert!(
        released.status.success(),
        "{}",
        String::from_utf8_lossy(&released.stderr)
    );
}

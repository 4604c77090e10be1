//! `sshd` restarted under a running command, on an `sshd` of the test's own (the shared
//! test server's keys and configuration on another port; never the shared one): a restart
//! that keeps the sessions (the listener alone replaced, as a service restart does) lets
//! the command finish and the lease go on; one that kills the sessions too fails the call
//! with the exact broken-connection text, kills the command on the remote side, and the
//! next call reaches the new `sshd`. Either way the release leaves nothing on the host.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use envrt_runtime_core::{ExecuteRequest, LeaseStatus};

use common::{Server, acquire, processes_with, runtime, server, survivors};

/// Bound on the command starting and on an `sshd` answering.
const BOUND: Duration = Duration::from_secs(30);

fn state_dir() -> PathBuf {
    let env = std::env::var("ENVRT_TEST_SSH_ENV").unwrap_or_else(|_| "/var/lib/envrt-test-ssh/env".into());
    Path::new(&env).parent().unwrap().to_path_buf()
}

/// An `sshd` of the test's own on a free port; killed with its sessions on drop.
struct OwnSshd {
    child: Option<Child>,
    dir: tempfile::TempDir,
    server: Server,
}

impl OwnSshd {
    fn start(base: &Server) -> OwnSshd {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let dir = tempfile::tempdir().unwrap();
        let shared = std::fs::read_to_string(state_dir().join("sshd_config")).unwrap();
        let mut config: Vec<String> = shared
            .lines()
            .filter(|l| !l.starts_with("Port ") && !l.starts_with("PidFile "))
            .map(str::to_owned)
            .collect();
        config.push(format!("Port {port}"));
        config.push(format!("PidFile {}/sshd.pid", dir.path().display()));
        std::fs::write(dir.path().join("sshd_config"), config.join("\n") + "\n").unwrap();
        let key = std::fs::read_to_string(state_dir().join("ssh_host_ed25519_key.pub")).unwrap();
        let key: Vec<&str> = key.split_whitespace().take(2).collect();
        let known = dir.path().join("known_hosts");
        std::fs::write(&known, format!("[127.0.0.1]:{port} {}\n", key.join(" "))).unwrap();
        let server = Server {
            host: "127.0.0.1".into(),
            port,
            user: base.user.clone(),
            key: base.key.clone(),
            known_hosts: known.to_string_lossy().into_owned(),
        };
        let mut sshd = OwnSshd {
            child: None,
            dir,
            server,
        };
        sshd.launch();
        sshd
    }

    /// Starts the listener and waits (bounded) until it accepts.
    fn launch(&mut self) {
        let child = Command::new("/usr/sbin/sshd")
            .arg("-D")
            .arg("-f")
            .arg(self.dir.path().join("sshd_config"))
            .arg("-E")
            .arg(self.dir.path().join("sshd.log"))
            .spawn()
            .unwrap();
        self.child = Some(child);
        let deadline = Instant::now() + BOUND;
        while std::net::TcpStream::connect(("127.0.0.1", self.server.port)).is_err() {
            assert!(Instant::now() < deadline, "the test's sshd did not listen");
            // Nothing to await but the port accepting: try again shortly.
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The listener's pid.
    fn pid(&self) -> u32 {
        self.child.as_ref().unwrap().id()
    }

    /// Ends the listener with `signal` (its sessions live on, as in a service restart).
    fn stop_listener(&mut self, signal: &str) {
        let mut child = self.child.take().unwrap();
        kill(signal, child.id());
        let _ = child.wait();
    }

    /// SIGKILLs the listener and every session process it forked.
    fn kill_with_sessions(&mut self) {
        let sessions = descendants(self.pid());
        self.stop_listener("KILL");
        for pid in sessions {
            kill("KILL", pid);
        }
    }
}

impl Drop for OwnSshd {
    fn drop(&mut self) {
        if self.child.is_some() {
            self.kill_with_sessions();
        }
    }
}

fn kill(signal: &str, pid: u32) {
    let _ = Command::new("kill")
        .args([&format!("-{signal}"), &pid.to_string()])
        .status();
}

/// Every live descendant of `root`.
fn descendants(root: u32) -> Vec<u32> {
    let mut parents = std::collections::HashMap::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let status = std::fs::read_to_string(entry.path().join("status")).unwrap_or_default();
        if let Some(ppid) = status
            .lines()
            .find_map(|l| l.strip_prefix("PPid:\t")?.parse::<u32>().ok())
        {
            parents.insert(pid, ppid);
        }
    }
    let mut found = vec![root];
    let mut grew = true;
    while grew {
        grew = false;
        for (pid, ppid) in &parents {
            if found.contains(ppid) && !found.contains(pid) {
                found.push(*pid);
                grew = true;
            }
        }
    }
    found.retain(|p| *p != root);
    found
}

/// Waits (bounded) until a process carries `marker`.
async fn started(marker: &str) {
    let deadline = Instant::now() + BOUND;
    while processes_with(marker).is_empty() {
        assert!(Instant::now() < deadline, "the command did not start");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Entries left under the test's remote root.
fn left_under(server: &Server, root: &common::Root) -> Vec<String> {
    std::fs::read_dir(format!("{}/{root}", server.home()))
        .map(|entries| {
            entries
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_sshd_restart_that_keeps_sessions_lets_the_command_finish() {
    let Some(base) = server() else { return };
    let mut sshd = OwnSshd::start(&base);
    let (driver, rt, root) = runtime(&sshd.server, "sshd-restart", |_| {}).await;
    let lease = acquire(&rt).await;
    let marker = format!("envrt-sshd-restart-{}", common::uuid_like());
    let go = tempfile::NamedTempFile::new().unwrap().into_temp_path();
    let go_path = go.to_string_lossy().into_owned();
    std::fs::remove_file(&go).unwrap();
    let script = format!("while [ ! -e {go_path} ]; do sleep 0.05; done; echo finished");
    let call = {
        let rt = &rt;
        let id = lease.id.clone();
        let args = vec!["-c".to_owned(), script, marker.clone()];
        async move { rt.execute(&id, ExecuteRequest::new("sh", args)).await }
    };
    let restart = async {
        started(&marker).await;
        sshd.stop_listener("TERM");
        sshd.launch();
        std::fs::write(&go_path, b"").unwrap();
    };
    let (result, ()) = tokio::join!(call, restart);
    let result = result.expect("the command outlived the restart");
    assert_eq!(result.stdout, b"finished\n");
    assert_eq!(result.exit_code, Some(0));
    let again = rt
        .execute(&lease.id, ExecuteRequest::new("echo", ["again"]))
        .await
        .unwrap();
    assert_eq!(again.stdout, b"again\n");
    rt.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
    assert_eq!(left_under(&sshd.server, &root), Vec::<String>::new());
    driver.shutdown().await;
    let _ = std::fs::remove_file(&go_path);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_sshd_killed_with_its_sessions_reports_the_command_and_leaves_nothing() {
    let Some(base) = server() else { return };
    let mut sshd = OwnSshd::start(&base);
    let (driver, rt, root) = runtime(&sshd.server, "sshd-killed", |_| {}).await;
    let lease = acquire(&rt).await;
    let marker = format!("envrt-sshd-killed-{}", common::uuid_like());
    let args = vec!["-c".to_owned(), "while :; do sleep 1; done".to_owned(), marker.clone()];
    let call = {
        let rt = &rt;
        let id = lease.id.clone();
        let args = args.clone();
        async move {
            let mut request = ExecuteRequest::new("sh", args);
            request.timeout = Some(Duration::from_secs(120));
            rt.execute(&id, request).await
        }
    };
    let restart = async {
        started(&marker).await;
        sshd.kill_with_sessions();
        sshd.launch();
    };
    let (result, ()) = tokio::join!(call, restart);
    let err = result.unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "SSH host {}: the connection broke during the command: sh {args:?}",
            sshd.server.target().shown()
        )
    );
    assert_eq!(
        survivors(&marker).await,
        Vec::<u32>::new(),
        "the command outlived its session"
    );
    let again = rt
        .execute(&lease.id, ExecuteRequest::new("echo", ["again"]))
        .await
        .unwrap();
    assert_eq!(again.stdout, b"again\n", "the next call reached the new sshd");
    rt.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
    assert_eq!(left_under(&sshd.server, &root), Vec::<String>::new());
    driver.shutdown().await;
}

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
    /// The network namespace it runs in (a test host's), or this machine's.
    netns: Option<String>,
}

impl OwnSshd {
    fn start(base: &Server) -> OwnSshd {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        OwnSshd::start_at(base, "127.0.0.1", port, None)
    }

    /// One listening on `address:port`, in the network namespace `netns` when given.
    fn start_at(base: &Server, address: &str, port: u16, netns: Option<&str>) -> OwnSshd {
        let dir = tempfile::tempdir().unwrap();
        let shared = std::fs::read_to_string(state_dir().join("sshd_config")).unwrap();
        let mut config: Vec<String> = shared
            .lines()
            .filter(|l| !l.starts_with("Port ") && !l.starts_with("PidFile ") && !l.starts_with("ListenAddress "))
            .map(str::to_owned)
            .collect();
        config.push(format!("ListenAddress {address}"));
        config.push(format!("Port {port}"));
        config.push(format!("PidFile {}/sshd.pid", dir.path().display()));
        std::fs::write(dir.path().join("sshd_config"), config.join("\n") + "\n").unwrap();
        let key = std::fs::read_to_string(state_dir().join("ssh_host_ed25519_key.pub")).unwrap();
        let key: Vec<&str> = key.split_whitespace().take(2).collect();
        let known = dir.path().join("known_hosts");
        std::fs::write(&known, format!("[{address}]:{port} {}\n", key.join(" "))).unwrap();
        let server = Server {
            host: address.into(),
            port,
            user: base.user.clone(),
            key: base.key.clone(),
            known_hosts: known.to_string_lossy().into_owned(),
        };
        let mut sshd = OwnSshd {
            child: None,
            dir,
            server,
            netns: netns.map(str::to_owned),
        };
        sshd.launch();
        sshd
    }

    /// Starts the listener and waits (bounded) until it accepts.
    fn launch(&mut self) {
        let mut command = match &self.netns {
            Some(ns) => {
                let mut command = Command::new("ip");
                command.args(["netns", "exec", ns, "/usr/sbin/sshd"]);
                command
            }
            None => Command::new("/usr/sbin/sshd"),
        };
        let child = command
            .arg("-D")
            .arg("-f")
            .arg(self.dir.path().join("sshd_config"))
            .arg("-E")
            .arg(self.dir.path().join("sshd.log"))
            .spawn()
            .unwrap();
        self.child = Some(child);
        let deadline = Instant::now() + BOUND;
        let at: std::net::SocketAddr = format!("{}:{}", self.server.host, self.server.port).parse().unwrap();
        while std::net::TcpStream::connect_timeout(&at, Duration::from_millis(200)).is_err() {
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

/// The network to the host cut for a while (a test host's end of its link taken down: every
/// packet lost, no socket told), on an `sshd` of the test's own inside that host's
/// namespace.
mod network_cut {
    use super::*;
    use envrt_test_support::network::TestHost;

    /// Longer than the driver's master keeps a silent server (`ServerAliveInterval` 5 s,
    /// three unanswered: 15 s).
    const LONG_CUT: Duration = Duration::from_secs(20);

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_short_cut_during_an_acquire_is_ridden_out() {
        let Some(base) = server() else { return };
        let Some(host) = TestHost::new(&[], "") else { return };
        let sshd = OwnSshd::start_at(&base, &host.address, 22022, Some(host.namespace()));
        let (driver, rt, root) = runtime(&sshd.server, "cut-acquire", |_| {}).await;
        host.set_link(false).unwrap();
        let restore = async {
            tokio::time::sleep(Duration::from_millis(1500)).await;
            host.set_link(true).unwrap();
        };
        let (lease, ()) = tokio::join!(
            tokio::time::timeout(
                BOUND,
                rt.acquire_lease(envrt_runtime_core::AcquireRequest::new("env-ssh", "acme"))
            ),
            restore
        );
        let lease = lease
            .expect("bounded by the connect retry")
            .expect("the acquire rode the cut out");
        let r = rt
            .execute(&lease.id, ExecuteRequest::new("echo", ["up"]))
            .await
            .unwrap();
        assert_eq!(r.stdout, b"up\n");
        rt.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
        assert_eq!(left_under(&sshd.server, &root), Vec::<String>::new());
        driver.shutdown().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_long_cut_under_a_command_reports_it_and_the_next_call_leaves_nothing_running() {
        let Some(base) = server() else { return };
        let Some(host) = TestHost::new(&[], "") else { return };
        let sshd = OwnSshd::start_at(&base, &host.address, 22022, Some(host.namespace()));
        let (driver, rt, root) = runtime(&sshd.server, "cut-command", |_| {}).await;
        let lease = acquire(&rt).await;
        let marker = format!("envrt-cut-{}", common::uuid_like());
        // A silent command: the server has nothing to send and the test sshd has no
        // ClientAliveInterval, so it learns the client is gone only once the link is back
        // (the dead master's FIN, retransmitted, reaches it) or from the driver's next
        // master, whichever comes first (the test below takes the first away).
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
        let cut = async {
            started(&marker).await;
            host.set_link(false).unwrap();
        };
        let (result, ()) = tokio::join!(tokio::time::timeout(LONG_CUT * 3, call), cut);
        let err = result.expect("the driver notices a silent server").unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "SSH host {}: the connection broke during the command: sh {args:?}",
                sshd.server.target().shown()
            )
        );
        host.set_link(true).unwrap();
        // The next call reaches the host on a new master, which first kills what the
        // broken one left running.
        let again = rt
            .execute(&lease.id, ExecuteRequest::new("echo", ["again"]))
            .await
            .unwrap();
        assert_eq!(again.stdout, b"again\n");
        assert_eq!(
            survivors(&marker).await,
            Vec::<u32>::new(),
            "the command outlived its connection"
        );
        rt.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
        assert_eq!(left_under(&sshd.server, &root), Vec::<String>::new());
        driver.shutdown().await;
    }
}

/// Whether `pid` runs `sshd` (its `comm`).
fn is_sshd(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == "sshd")
}

/// The pids of the `ssh` masters whose command line names `port`.
fn masters_on(port: u16) -> Vec<u32> {
    let wanted = format!("-p\0{port}\0");
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let cmdline =
            String::from_utf8_lossy(&std::fs::read(entry.path().join("cmdline")).unwrap_or_default()).into_owned();
        if cmdline.starts_with("ssh\0") && cmdline.contains("\0-M\0") && cmdline.contains(&wanted) {
            found.push(pid);
        }
    }
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_whose_server_never_notices_the_broken_connection_is_ended_by_the_next_master() {
    let Some(base) = server() else { return };
    let mut sshd = OwnSshd::start(&base);
    let (driver, rt, root) = runtime(&sshd.server, "orphan", |_| {}).await;
    let lease = acquire(&rt).await;
    let marker = format!("envrt-orphan-{}", common::uuid_like());
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
    let listener = sshd.pid();
    let port = sshd.server.port;
    let break_it = async {
        started(&marker).await;
        // The server side can no longer notice anything (its session processes stopped,
        // the command's watchdog among them: it waits for the session), then the client's
        // master dies.
        for pid in descendants(listener) {
            if is_sshd(pid) {
                kill("STOP", pid);
            }
        }
        let masters = masters_on(port);
        assert_eq!(masters.len(), 1, "{masters:?}");
        kill("KILL", masters[0]);
    };
    let (result, ()) = tokio::join!(call, break_it);
    let err = result.unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "SSH host {}: the connection broke during the command: sh {args:?}",
            sshd.server.target().shown()
        )
    );
    assert!(
        !processes_with(&marker).is_empty(),
        "the command ended with its connection"
    );
    // The next call's new master ends it first.
    let again = rt
        .execute(&lease.id, ExecuteRequest::new("echo", ["again"]))
        .await
        .unwrap();
    assert_eq!(again.stdout, b"again\n");
    assert_eq!(
        survivors(&marker).await,
        Vec::<u32>::new(),
        "the command outlived its connection"
    );
    rt.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
    assert_eq!(left_under(&sshd.server, &root), Vec::<String>::new());
    driver.shutdown().await;
    sshd.kill_with_sessions();
}

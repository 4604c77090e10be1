//! `envrt shell` driven through a pseudo-terminal, against the sandbox worker (and Docker
//! when its driver grants duplex). Each backend's test skips loudly when the backend is
//! not there, and fails instead when `ENVRT_REQUIRE_SANDBOX=1` / `ENVRT_REQUIRE_DOCKER=1`.

use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use nix::sys::termios::{self, LocalFlags};

const BIN: &str = env!("CARGO_BIN_EXE_envrt");

/// envrt running on the slave side of a fresh pseudo-terminal.
struct PtySession {
    child: Child,
    slave: Option<OwnedFd>,
    output: mpsc::Receiver<Vec<u8>>,
    writer: std::fs::File,
    seen: Vec<u8>,
}

impl PtySession {
    fn start(dir: &Path, path_dir: Option<&Path>, args: &[&str]) -> PtySession {
        Self::start_on(dir, path_dir, args, None)
    }

    /// envrt as the leader of a new session whose controlling terminal is a fresh one of
    /// `rows` x `cols` (through util-linux `setsid --ctty --wait`), so that a change of the
    /// terminal's size signals it as a real terminal does.
    fn start_controlling(dir: &Path, args: &[&str], rows: u16, cols: u16) -> PtySession {
        let size = nix::pty::Winsize {
            ws_row: rows,
            ws_col: cols,
            ws_xpixel: 0,
            ws_ypixel: 0,
        };
        Self::start_on(dir, None, args, Some(size))
    }

    fn start_on(dir: &Path, path_dir: Option<&Path>, args: &[&str], ctty: Option<nix::pty::Winsize>) -> PtySession {
        let pty = nix::pty::openpty(ctty.as_ref(), None).unwrap();
        let mut command = match ctty {
            Some(_) => {
                let mut setsid = Command::new("setsid");
                setsid.args(["--ctty", "--wait", BIN]);
                setsid
            }
            None => Command::new(BIN),
        };
        command
            .args(args)
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
        let child = command.spawn().unwrap();
        let master = std::fs::File::from(pty.master);
        let writer = master.try_clone().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut master = master;
            let mut buf = [0u8; 4096];
            // Ends with EIO once every slave descriptor is closed.
            while let Ok(n) = master.read(&mut buf) {
                if n == 0 || tx.send(buf[..n].to_vec()).is_err() {
                    break;
                }
            }
        });
        PtySession {
            child,
            slave: Some(pty.slave),
            output: rx,
            writer,
            seen: Vec::new(),
        }
    }

    fn type_keys(&mut self, keys: &[u8]) {
        self.writer.write_all(keys).unwrap();
    }

    /// Changes the terminal's size, as a resized window does (its session gets SIGWINCH).
    fn resize(&self, rows: u16, cols: u16) {
        let size = rustix::termios::Winsize {
            ws_row: rows,
            ws_col: cols,
            ws_xpixel: 0,
            ws_ypixel: 0,
        };
        rustix::termios::tcsetwinsize(&self.writer, size).unwrap();
    }

    /// Reads until `needle` shows up (bounded).
    fn expect(&mut self, needle: &str) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while !String::from_utf8_lossy(&self.seen).contains(needle) {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.output.recv_timeout(left.max(Duration::from_millis(1))) {
                Ok(chunk) => self.seen.extend(chunk),
                Err(_) => {
                    let _ = self.child.kill();
                    let _ = self.child.wait();
                    panic!(
                        "never saw {needle:?}; terminal showed {:?}",
                        String::from_utf8_lossy(&self.seen)
                    );
                }
            }
        }
    }

    fn wait(&mut self) -> Option<i32> {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status.code();
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!("envrt shell did not exit");
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn slave(&self) -> &OwnedFd {
        self.slave.as_ref().unwrap()
    }
}

impl Drop for PtySession {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        // Closing the last slave descriptor ends the reader thread.
        self.slave.take();
    }
}

/// A full interactive round on `env_id`: raw mode while it runs, typed keys echoed, Enter
/// as a newline, the command's stderr shown in order with its stdout, the command's exit
/// code passed through, the terminal restored.
fn interactive_round(dir: &Path, path_dir: Option<&Path>, env_id: &str) {
    let mut session = PtySession::start(dir, path_dir, &["shell", "--env-id", env_id]);
    let before = termios::tcgetattr(session.slave()).unwrap();
    assert!(before.local_flags.contains(LocalFlags::ICANON));
    // A real Enter key sends CR.
    session.type_keys(b"echo pty-$((6*7))\r");
    session.expect("pty-42");
    // What the command writes to stderr shows too, where it wrote it among its stdout.
    session.type_keys(b"echo o-$((1+1)); echo e-$((1+2)) >&2; echo o-$((1+3))\r");
    session.expect("o-2\r\ne-3\r\no-4");
    // While the session runs the terminal is raw (no canonical mode, no signals).
    let during = termios::tcgetattr(session.slave()).unwrap();
    assert!(!during.local_flags.contains(LocalFlags::ICANON));
    assert!(!during.local_flags.contains(LocalFlags::ISIG));
    // Ctrl-C is a byte for the command, not a signal for envrt: the session goes on (the
    // shell, reading a pipe, sees one junk line).
    session.type_keys(b"\x03\r");
    session.type_keys(b"echo still-$((40+2))\r");
    session.expect("still-42");
    session.type_keys(b"exit 7\r");
    assert_eq!(session.wait(), Some(7));
    let after = termios::tcgetattr(session.slave()).unwrap();
    assert_eq!(after.local_flags, before.local_flags);
    assert_eq!(after.input_flags, before.input_flags);
    assert_eq!(after.output_flags, before.output_flags);

    // Ctrl-D closes the command's input: the shell ends with 0.
    let mut eof = PtySession::start(dir, path_dir, &["shell", "--env-id", env_id, "--", "cat"]);
    eof.type_keys(b"round trip\r");
    eof.expect("round trip\r\nround trip");
    eof.type_keys(b"\x04");
    assert_eq!(eof.wait(), Some(0));
}

/// On a lease with process sessions (local here) the command gets a real terminal: a
/// `/dev/pts/N` of this terminal's size that follows its changes, the far side's echo,
/// Ctrl-C interrupting the foreground job and not envrt, the exit code passed through,
/// this terminal restored and the ephemeral lease released.
#[test]
fn shell_on_a_lease_with_processes_gets_a_real_terminal_of_this_terminals_size() {
    let dir = tempfile::tempdir().unwrap();
    let mut session = PtySession::start_controlling(dir.path(), &["shell"], 30, 100);
    let before = termios::tcgetattr(session.slave()).unwrap();
    session.type_keys(b"tty; echo size-$(stty size | tr ' ' x)\r");
    session.expect("size-30x100");
    let shown = String::from_utf8_lossy(&session.seen).into_owned();
    assert!(shown.contains("/dev/pts/"), "{shown:?}");
    assert!(!shown.contains("not a tty"), "{shown:?}");
    // Full raw mode here: the far side's terminal echoes and turns Enter into a newline.
    let during = termios::tcgetattr(session.slave()).unwrap();
    assert!(!during.local_flags.contains(LocalFlags::ECHO));
    assert!(!during.local_flags.contains(LocalFlags::ICANON));
    assert!(!during.local_flags.contains(LocalFlags::ISIG));
    session.resize(40, 120);
    // The size reaches the far side's terminal through SIGWINCH and `resize`: asked until
    // it shows (the signal and the resize race the next command line).
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut round = 0;
    loop {
        round += 1;
        session.type_keys(format!("echo r{round}-$(stty size | tr ' ' x)\r").as_bytes());
        session.expect(&format!("r{round}-"));
        std::thread::sleep(Duration::from_millis(200));
        while let Ok(chunk) = session.output.try_recv() {
            session.seen.extend(chunk);
        }
        if String::from_utf8_lossy(&session.seen).contains(&format!("r{round}-40x120")) {
            break;
        }
        assert!(Instant::now() < deadline, "the new size never reached the far side");
    }
    // Ctrl-C kills the foreground job (its marker says it runs), not the shell or envrt.
    session.type_keys(b"sh -c 'echo job-$((2+2)); exec sleep 3600'\r");
    session.expect("job-4");
    session.type_keys(b"\x03");
    session.type_keys(b"echo after-$((1+1))\r");
    session.expect("after-2");
    session.type_keys(b"exit 7\r");
    assert_eq!(session.wait(), Some(7));
    let after = termios::tcgetattr(session.slave()).unwrap();
    assert_eq!(after.local_flags, before.local_flags);
    assert_eq!(after.input_flags, before.input_flags);
    assert_eq!(after.output_flags, before.output_flags);
    let leases = Command::new(BIN)
        .args(["lease", "list", "--json"])
        .current_dir(dir.path())
        .env("ENVRT_STATE_DIR", dir.path().join("state"))
        .env_remove("ENVRT_CONFIG")
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&leases.stdout).trim(), "[]");
}

#[test]
fn shell_through_a_pty_against_the_sandbox_worker() {
    let Some(worker) = envrt_test_support::sandbox::worker_beside_or_skip(BIN) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("envrt.toml"),
        "[[environment]]\nid = \"box\"\ndriver = \"sandbox\"\n",
    )
    .unwrap();
    interactive_round(dir.path(), worker.parent(), "box");
}

#[test]
fn shell_through_a_pty_against_docker() {
    let image = envrt_test_support::docker::image();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("envrt.toml"),
        format!("[[environment]]\nid = \"ctr\"\ndriver = \"docker\"\n[environment.config]\nimage = \"{image}\"\n"),
    )
    .unwrap();
    let caps = Command::new(BIN)
        .args(["caps", "--json"])
        .current_dir(dir.path())
        .env("ENVRT_STATE_DIR", dir.path().join("state"))
        .output()
        .unwrap();
    let columns: serde_json::Value = serde_json::from_slice(&caps.stdout).unwrap();
    let duplex = columns
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["environment"] == "ctr")
        .and_then(|c| c["capabilities"]["duplexCommandStream"].as_bool());
    if duplex != Some(true) {
        envrt_test_support::Component::Docker.skip_or_fail(
            format_args!("ENVRT_REQUIRE_DOCKER=1 but Docker does not grant duplex: {columns}"),
            format_args!("SKIPPED: the Docker environment does not grant duplex here: {columns}"),
        );
        return;
    }
    interactive_round(dir.path(), None, "ctr");
    let leases = Command::new(BIN)
        .args(["lease", "list", "--json"])
        .current_dir(dir.path())
        .env("ENVRT_STATE_DIR", dir.path().join("state"))
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&leases.stdout).trim(), "[]");
}

#[test]
fn cp_shows_progress_on_a_terminal_and_nothing_with_quiet() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("data.txt"), b"hello").unwrap();
    let acquired = Command::new(BIN)
        .args(["lease", "acquire"])
        .current_dir(dir.path())
        .env("ENVRT_STATE_DIR", dir.path().join("state"))
        .env_remove("ENVRT_CONFIG")
        .output()
        .unwrap();
    assert!(acquired.status.success());
    let id = String::from_utf8_lossy(&acquired.stdout).trim().to_owned();
    let target = format!("lease:{id}:data.txt");

    let mut shown = PtySession::start(dir.path(), None, &["cp", "data.txt", &target]);
    shown.expect(&format!("copied 1 file, 5 bytes: data.txt → {target}"));
    assert_eq!(shown.wait(), Some(0));
    let text = String::from_utf8_lossy(&shown.seen).into_owned();
    // The size of a host source is known: the line shows it.
    let progress = format!("\r\x1b[2K| copying data.txt → {target} 5 B (0.0 s)");
    assert!(text.starts_with(&progress), "{text:?}");
    // The progress line is cleared before the summary.
    assert!(text.contains("\r\x1b[2Kcopied 1 file"), "{text:?}");

    let mut quiet = PtySession::start(dir.path(), None, &["cp", "--quiet", "data.txt", &target]);
    assert_eq!(quiet.wait(), Some(0));
    // Closing the slave ends the reader; then everything the terminal got is in.
    quiet.slave.take();
    while let Ok(chunk) = quiet.output.recv_timeout(Duration::from_secs(10)) {
        quiet.seen.extend(chunk);
    }
    assert_eq!(String::from_utf8_lossy(&quiet.seen), "");
}

#[test]
fn cp_out_of_a_lease_shows_bytes_of_the_known_total_and_a_rate() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("out")).unwrap();
    let envrt = |args: &[&str]| {
        let out = Command::new(BIN)
            .args(args)
            .current_dir(dir.path())
            .env("ENVRT_STATE_DIR", dir.path().join("state"))
            .env_remove("ENVRT_CONFIG")
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    };
    let id = envrt(&["lease", "acquire"]);
    envrt(&[
        "exec",
        "--lease",
        &id,
        "--",
        "sh",
        "-c",
        "mkdir src && head -c 8192 /dev/zero > src/f",
    ]);
    let source = format!("lease:{id}:src");

    let mut shown = PtySession::start(dir.path(), None, &["cp", &source, "out"]);
    shown.expect(&format!("copied 1 file, 8192 bytes: {source} → out"));
    assert_eq!(shown.wait(), Some(0));
    let text = String::from_utf8_lossy(&shown.seen).into_owned();
    // The lease's size is known (its du -sk, in KiB): the first frame shows the bytes
    // landed so far of that total and the rate (an ETA joins once a rate is measured).
    let first = format!("\r\x1b[2K| copying {source} → out ");
    assert!(text.starts_with(&first), "{text:?}");
    // `DONE of TOTAL, RATE/s[, ETA N s] (ELAPSED s)`; how far the copy got when the first
    // frame was drawn is not pinned.
    let frame = text[first.len()..].split('\r').next().unwrap();
    let (done, rest) = frame.split_once(" of ").unwrap_or_else(|| panic!("{frame:?}"));
    let (total, rest) = rest.split_once(", ").unwrap_or_else(|| panic!("{frame:?}"));
    assert!(done.ends_with(" B") || done.ends_with(" KiB"), "{frame:?}");
    assert!(total.ends_with(" KiB") && total != "0 B", "{frame:?}");
    assert!(rest.contains("/s") && rest.ends_with(" s)"), "{frame:?}");
    assert_eq!(std::fs::read(dir.path().join("out/src/f")).unwrap().len(), 8192);
    envrt(&["lease", "release", &id]);
}

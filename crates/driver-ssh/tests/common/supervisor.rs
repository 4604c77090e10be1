//! What the process-session tests share: a driver with its own control directory behind a
//! runtime (optionally on another runtime's store), and what they look at on the remote
//! host (this machine is the server): the supervisor's pid, socket and liveness, the
//! processes in a directory, a process's output.

use std::sync::Arc;
use std::time::Duration;

use envrt_driver_ssh::{SshConfig, SshDriver};
use envrt_runtime_core::{Environment, EnvironmentRuntime, Offsets, OutputEvent, ProcessStream, SpawnRequest};

use super::{Root, Server};

/// How long any one call here may take before the test fails instead of hanging.
pub const BOUND: Duration = Duration::from_secs(60);

pub fn sh(script: &str) -> SpawnRequest {
    SpawnRequest::new(["sh", "-c", script])
}

/// A driver on `root` with its own control directory, behind a runtime on `store`.
pub async fn runtime_on(
    server: &Server,
    root: &str,
    control: &std::path::Path,
    store: Option<Arc<dyn envrt_runtime_core::LeaseStore>>,
    tune: impl FnOnce(&mut SshConfig),
) -> (Arc<SshDriver>, EnvironmentRuntime) {
    let mut config = SshConfig {
        root: root.to_owned(),
        control_dir: Some(control.to_path_buf()),
        ..SshConfig::default()
    };
    tune(&mut config);
    let driver = Arc::new(SshDriver::new(config).unwrap());
    let runtime = match store {
        Some(store) => EnvironmentRuntime::with_store(store),
        None => EnvironmentRuntime::new(),
    };
    runtime.register_driver(driver.clone());
    runtime
        .put_environment(Environment::new("env-ssh", "Remote", "ssh").with_config(server.config()))
        .await
        .unwrap();
    (driver, runtime)
}

pub fn root_guard(server: &Server, relative: String) -> Root {
    super::root_at(server, relative)
}

/// A private control directory for one driver (`0700`, as the driver requires).
pub fn control_dir() -> tempfile::TempDir {
    let dir = tempfile::Builder::new().prefix("essh").tempdir_in("/tmp").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    dir
}

/// The processes of the remote user whose working directory lies in `dir`.
pub fn processes_in(dir: &str) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        if entry.file_name().to_string_lossy().parse::<u32>().is_err() {
            continue;
        }
        if let Ok(cwd) = std::fs::read_link(entry.path().join("cwd"))
            && cwd.starts_with(dir)
        {
            found.push(format!("{} in {}", entry.path().display(), cwd.display()));
        }
    }
    found
}

/// The pid recorded for the lease's supervisor, while its directory exists.
pub fn agent_pid(workspace: &str) -> Option<u32> {
    let dir = workspace.trim_end_matches("/work");
    std::fs::read_to_string(format!("{dir}/agent.pid"))
        .ok()
        .and_then(|p| p.trim().parse().ok())
}

/// Whether `pid` runs (a zombie has ended: the test machine's PID 1 may not reap it soon).
pub fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| stat.rsplit_once(") ").map(|(_, rest)| !rest.starts_with('Z')))
        .unwrap_or(false)
}

/// The socket the supervisor `pid` listens on (from its command line).
pub fn socket_of(pid: u32) -> std::path::PathBuf {
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap();
    let args: Vec<String> = cmdline
        .split(|b| *b == 0)
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    let at = args.iter().position(|a| a == "--socket").expect("--socket");
    std::path::PathBuf::from(&args[at + 1])
}

/// Reads `id`'s stdout from 0 until it holds `want` (bounded).
pub async fn stdout_until(rt: &EnvironmentRuntime, id: &str, want: &str) -> String {
    let mut output = rt.output(id, &Offsets::zero()).await.unwrap();
    let mut text = Vec::new();
    while !String::from_utf8_lossy(&text).contains(want) {
        match tokio::time::timeout(BOUND, output.next()).await.unwrap().unwrap() {
            Some(OutputEvent::Chunk(c)) if c.stream == ProcessStream::Stdout => text.extend(c.bytes),
            Some(OutputEvent::Chunk(_)) => {}
            other => panic!(
                "expected {want:?}, got {other:?} after {:?}",
                String::from_utf8_lossy(&text)
            ),
        }
    }
    String::from_utf8_lossy(&text).into_owned()
}

/// The supervisor built in this target directory.
pub fn envrt_driver_agent_path() -> std::path::PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.ancestors()
        .skip(1)
        .take(2)
        .map(|d| d.join("envrt-agent"))
        .find(|p| p.is_file())
        .expect("envrt-agent is built in this target directory (cargo build -p envrt-agent)")
}

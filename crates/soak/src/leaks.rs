//! What a soak left behind: processes, containers, sandboxes, workspaces and active store
//! rows, each found by the scratch directory or run label that scopes it (so another run
//! on the same machine never counts).

use std::collections::BTreeSet;
use std::path::Path;
use std::time::{Duration, Instant};

use envrt_runtime_core::{LeaseFilter, LeaseStatus, LeaseStore};
use envrt_store_sqlite::SqliteStore;

use crate::{RUN_LABEL, cli_state_dir as state_dir};

/// Counts per kind, and a line per thing found.
#[derive(Debug, Default)]
pub struct Leaks {
    /// Live processes whose command line, cwd or `HOME` is under the scratch directory.
    pub processes: usize,
    /// Docker containers with the run's label or the CLI state directory's.
    pub containers: usize,
    /// Sandbox lease directories left.
    pub sandboxes: usize,
    /// Local workspaces left.
    pub workspaces: usize,
    /// Lease rows still `active` or `pending_cleanup`.
    pub active_rows: usize,
    /// Lease directories left on the ssh host (an ssh soak's: [`crate::ssh`]).
    pub remote_dirs: usize,
    /// One line per thing found.
    pub details: Vec<String>,
    /// Containers the engine lists as `dead` but answers "no such container" for (an
    /// engine ghost after a restart: nothing of them is left to remove, and the Docker
    /// driver's recovery leaves them out). Not leaks, so not in [`Leaks::total`]: a caller
    /// that can look at the engine's own files checks that nothing of them is left.
    pub engine_ghosts: Vec<String>,
}

impl Leaks {
    /// Every leak of every kind.
    pub fn total(&self) -> usize {
        self.processes + self.containers + self.sandboxes + self.workspaces + self.active_rows + self.remote_dirs
    }
}

/// How long processes and containers get to go away after the last release.
const SETTLE: Duration = Duration::from_secs(15);

/// What driver `key`'s leases left under `scratch` (its soak layout: `local/`, `sandbox/`,
/// `state/leases.db`, and the CLI's state directory [`state_dir`]) and, on Docker, in
/// containers labelled with `run` or that CLI state directory. Processes get 15 s
/// to go away first.
pub async fn count(key: &str, scratch: &Path, run: &str) -> Leaks {
    count_on(key, scratch, run, None).await
}

/// [`count`], asking the Docker engine at `docker_host` (a `DOCKER_HOST` address) for
/// containers instead of the `docker` CLI's default one: for a test that runs an engine
/// of its own.
pub async fn count_on(key: &str, scratch: &Path, run: &str, docker_host: Option<&str>) -> Leaks {
    let mut leaks = Leaks::default();
    let deadline = Instant::now() + SETTLE;
    let (remote, remote_roots) = crate::ssh::leftovers(scratch);
    let processes = loop {
        let mut found = processes_under(scratch, &BTreeSet::new());
        for (root, before) in &remote_roots {
            found.extend(processes_under(root, before));
        }
        if found.is_empty() || Instant::now() >= deadline {
            break found;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    leaks.processes = processes.len();
    leaks
        .details
        .extend(processes.into_iter().map(|p| format!("process {p}")));

    if key == "docker" {
        let cli_state = format!("envrt.cli-state={}", state_dir(scratch).display());
        for filter in [format!("{RUN_LABEL}={run}"), cli_state] {
            let (ids, ghosts) = containers(&filter, docker_host);
            leaks.engine_ghosts.extend(ghosts);
            leaks.containers += ids.len();
            leaks
                .details
                .extend(ids.into_iter().map(|id| format!("container {id} ({filter})")));
        }
    }
    for dir in [scratch.join("sandbox"), state_dir(scratch).join("sandbox")] {
        let entries = entries(&dir);
        leaks.sandboxes += entries.len();
        leaks
            .details
            .extend(entries.into_iter().map(|e| format!("sandbox dir {e}")));
    }
    for dir in [scratch.join("local"), state_dir(scratch).join("workspaces")] {
        let entries = entries(&dir);
        leaks.workspaces += entries.len();
        leaks
            .details
            .extend(entries.into_iter().map(|e| format!("workspace {e}")));
    }
    leaks.remote_dirs = remote.len();
    leaks
        .details
        .extend(remote.into_iter().map(|d| format!("ssh lease dir {}", d.display())));
    for db in [scratch.join("state/leases.db"), state_dir(scratch).join("leases.db")] {
        if !db.exists() {
            continue;
        }
        match active_rows(&db).await {
            Ok(ids) => {
                leaks.active_rows += ids.len();
                leaks.details.extend(
                    ids.into_iter()
                        .map(|id| format!("active lease {id} in {}", db.display())),
                );
            }
            Err(e) => {
                leaks.active_rows += 1;
                leaks.details.push(format!("cannot read {}: {e}", db.display()));
            }
        }
    }
    leaks
}

/// Live processes (not zombies, not this one) whose command line, working directory or
/// `HOME` names something under `scratch`, other than the entries of it named in `except`
/// (what was there before a run).
fn processes_under(scratch: &Path, except: &BTreeSet<String>) -> Vec<String> {
    let me = std::process::id();
    let needle = scratch.as_os_str().as_encoded_bytes();
    // Whether `text` names something under `scratch` that is not one of `except`.
    let names = |text: &[u8]| -> bool {
        let mut rest = text;
        while let Some(at) = rest.windows(needle.len().max(1)).position(|w| w == needle) {
            let after = &rest[at + needle.len()..];
            let entry = after
                .strip_prefix(b"/")
                .map(|tail| tail.split(|b| *b == b'/' || *b == b' ').next().unwrap_or_default());
            match entry {
                Some(entry) if except.contains(String::from_utf8_lossy(entry).as_ref()) => {}
                _ => return true,
            }
            rest = after;
        }
        false
    };
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return found;
    };
    for entry in entries.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        if pid == me {
            continue;
        }
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        if stat.rsplit(") ").next().is_some_and(|rest| rest.starts_with('Z')) {
            continue;
        }
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let by_cmdline = cmdline.split(|b| *b == 0).any(names);
        let by_cwd =
            std::fs::read_link(format!("/proc/{pid}/cwd")).is_ok_and(|cwd| names(cwd.as_os_str().as_encoded_bytes()));
        let by_home = std::fs::read(format!("/proc/{pid}/environ")).is_ok_and(|env| {
            env.split(|b| *b == 0).any(|var| {
                var.strip_prefix(b"HOME=")
                    .is_some_and(|home| home.starts_with(needle) && names(home))
            })
        });
        if by_cmdline || by_cwd || by_home {
            let shown = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            found.push(format!("{pid}: {}", shown.trim()));
        }
    }
    found
}

/// Container ids (running or not) matching a docker `label=` filter, and apart from them
/// the engine's ghosts among them (listed `dead`, but "no such container" to an inspect).
fn containers(label: &str, docker_host: Option<&str>) -> (Vec<String>, Vec<String>) {
    let docker = || {
        let mut docker = std::process::Command::new("docker");
        if let Some(host) = docker_host {
            docker.args(["-H", host]);
        }
        docker
    };
    let out = docker()
        .args(["ps", "-a", "--no-trunc", "--format", "{{.ID}} {{.State}}"])
        .args(["--filter", &format!("label={label}")])
        .output();
    let listed = match out {
        Ok(out) if out.status.success() => String::from_utf8_lossy(&out.stdout).into_owned(),
        Ok(out) => {
            let why = String::from_utf8_lossy(&out.stderr).trim().to_owned();
            return (vec![format!("(docker ps failed: {why})")], Vec::new());
        }
        Err(e) => return (vec![format!("(docker ps failed: {e})")], Vec::new()),
    };
    let (mut ids, mut ghosts) = (Vec::new(), Vec::new());
    for line in listed.lines() {
        let Some((id, state)) = line.split_once(' ') else {
            continue;
        };
        let ghost = state == "dead"
            && docker()
                .args(["inspect", "--format", "{{.Id}}", id])
                .output()
                .is_ok_and(|o| !o.status.success() && String::from_utf8_lossy(&o.stderr).contains("No such"));
        if ghost { &mut ghosts } else { &mut ids }.push(id.to_owned());
    }
    (ids, ghosts)
}

fn entries(dir: &Path) -> Vec<String> {
    match std::fs::read_dir(dir) {
        Ok(entries) => entries.flatten().map(|e| e.path().display().to_string()).collect(),
        Err(_) => Vec::new(),
    }
}

async fn active_rows(db: &Path) -> Result<Vec<String>, String> {
    let store = SqliteStore::open(db).await.map_err(|e| e.to_string())?;
    let filter = LeaseFilter {
        statuses: vec![LeaseStatus::Active, LeaseStatus::PendingCleanup],
        ..Default::default()
    };
    Ok(store
        .list_leases(&filter)
        .await
        .map_err(|e| e.to_string())?
        .into_iter()
        .map(|l| l.id)
        .collect())
}

//! The reference sandbox worker for tests: `ENVRT_SANDBOX_WORKER`, or the binary built in
//! the test's own target directory, and the preamble "the worker, or skip (fail when
//! `ENVRT_REQUIRE_SANDBOX=1`)".

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use crate::Component;

/// The reference worker's binary name (`envrt_driver_plugin_sandbox::REFERENCE_WORKER_BINARY`).
pub const WORKER_BINARY: &str = "envrt-sandbox-worker";

/// The variable that names a worker binary to use instead of the built one.
pub const WORKER_VAR: &str = "ENVRT_SANDBOX_WORKER";

/// The target directory's profile directory of the running test (`target/<profile>`;
/// a test binary runs from `target/<profile>/deps`).
fn profile_dir() -> Result<PathBuf, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    exe.parent()
        .and_then(Path::parent)
        .map(Path::to_path_buf)
        .ok_or_else(|| "no target directory".to_owned())
}

/// The worker a test runs: `ENVRT_SANDBOX_WORKER` as given, or the one built in this
/// target directory; an error, with the command that builds it, when that one is not built
/// (`{path} is not built; run `cargo build -p envrt-sandbox-worker``).
pub fn built_worker() -> Result<PathBuf, String> {
    if let Some(path) = std::env::var_os(WORKER_VAR) {
        return Ok(PathBuf::from(path));
    }
    let path = profile_dir()?.join(WORKER_BINARY);
    if path.is_file() {
        Ok(path)
    } else {
        Err(not_built(&path))
    }
}

fn not_built(path: &Path) -> String {
    format!(
        "{} is not built; run `cargo build -p envrt-sandbox-worker`",
        path.display()
    )
}

/// [`built_worker`], and, when it is the built one, no older than the sources of the
/// worker and of `plugin-protocol` (an error says which and how to rebuild): for the tests
/// whose result depends on the worker being the current one.
pub fn fresh_worker() -> Result<PathBuf, String> {
    if let Some(path) = std::env::var_os(WORKER_VAR) {
        return Ok(PathBuf::from(path));
    }
    let path = profile_dir()?.join(WORKER_BINARY);
    let built = std::fs::metadata(&path)
        .and_then(|m| m.modified())
        .map_err(|_| not_built(&path))?;
    let crates = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .ok_or("no crates directory")?;
    for sources in ["sandbox-worker/src", "plugin-protocol/src"] {
        if newest_mtime(&crates.join(sources)).is_some_and(|newest| newest > built) {
            return Err(format!(
                "{} is older than crates/{sources}; run `cargo build -p envrt-sandbox-worker`",
                path.display()
            ));
        }
    }
    Ok(path)
}

/// The newest modification time of a file under `dir`.
fn newest_mtime(dir: &Path) -> Option<SystemTime> {
    let mut newest = None;
    for entry in std::fs::read_dir(dir).ok()?.flatten() {
        let path = entry.path();
        let time = if path.is_dir() {
            newest_mtime(&path)
        } else {
            entry.metadata().and_then(|m| m.modified()).ok()
        };
        newest = newest.max(time);
    }
    newest
}

/// The worker for a test of the `envrt` binary `bin`: `ENVRT_SANDBOX_WORKER`, else the one
/// next to `bin`, when it is a file; otherwise fails with
/// `ENVRT_REQUIRE_SANDBOX=1 but envrt-sandbox-worker was not found` when the sandbox is
/// required, or says it is skipped and returns `None`.
#[track_caller]
pub fn worker_beside_or_skip(bin: &str) -> Option<PathBuf> {
    let worker = std::env::var_os(WORKER_VAR)
        .map(PathBuf::from)
        .or_else(|| Some(Path::new(bin).parent()?.join(WORKER_BINARY)))
        .filter(|p| p.is_file());
    if worker.is_none() {
        Component::Sandbox.skip_or_fail(
            "ENVRT_REQUIRE_SANDBOX=1 but envrt-sandbox-worker was not found",
            "SKIPPED: no envrt-sandbox-worker (set ENVRT_SANDBOX_WORKER or build it next to envrt)",
        );
    }
    worker
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_worker_names_the_command_that_builds_it() {
        assert_eq!(
            not_built(Path::new("/t/debug/envrt-sandbox-worker")),
            "/t/debug/envrt-sandbox-worker is not built; run `cargo build -p envrt-sandbox-worker`"
        );
    }

    #[test]
    fn the_newest_time_is_of_the_newest_file_at_any_depth() {
        let dir = std::env::temp_dir().join(format!("envrt-test-support-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("a/b")).unwrap();
        std::fs::write(dir.join("top"), "").unwrap();
        std::fs::write(dir.join("a/b/deep"), "").unwrap();
        let deep = std::fs::metadata(dir.join("a/b/deep")).unwrap().modified().unwrap();
        let top = std::fs::metadata(dir.join("top")).unwrap().modified().unwrap();
        assert_eq!(newest_mtime(&dir), Some(deep.max(top)));
        assert_eq!(newest_mtime(&dir.join("missing")), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

//! Where the reference worker `envrt-sandbox-worker` is: `[sandbox] worker` when set,
//! else next to the running executable, else in a directory a host program added (the
//! Python package adds its own), else on `PATH`.

use std::path::{Path, PathBuf};

use envrt_driver_api::descriptor::{find_in_path, is_executable};

use crate::REFERENCE_WORKER_BINARY as WORKER;

/// Directories a host program added to the reference worker's search.
static WORKER_DIRS: std::sync::Mutex<Vec<PathBuf>> = std::sync::Mutex::new(Vec::new());

/// Adds `dir` to the directories searched for the reference worker, after the one of the
/// running executable and before `PATH`. The Python package adds its own directory (where
/// its wheel installs the worker): its executable is the interpreter.
pub fn add_worker_search_dir(dir: impl Into<PathBuf>) {
    let dir = dir.into();
    let mut dirs = WORKER_DIRS.lock().unwrap_or_else(|e| e.into_inner());
    if !dirs.contains(&dir) {
        dirs.push(dir);
    }
}

/// The directories searched before `PATH`: the running executable's, then the added ones.
fn worker_search_dirs() -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(Path::to_path_buf))
        .into_iter()
        .collect();
    for dir in WORKER_DIRS.lock().unwrap_or_else(|e| e.into_inner()).iter() {
        if !dirs.contains(dir) {
            dirs.push(dir.clone());
        }
    }
    dirs
}

/// The reference worker `envrt-sandbox-worker`: next to the running executable, else in a
/// directory added with [`add_worker_search_dir`], else on `PATH`.
pub fn reference_worker() -> Option<PathBuf> {
    locate_reference_worker(None).ok()
}

/// The reference worker to run: `configured` (`[sandbox] worker`) when set, else found as
/// [`reference_worker`] does. The error is the exact text saying which binary, where it
/// was looked for and how to set it.
pub fn locate_reference_worker(configured: Option<&Path>) -> Result<PathBuf, String> {
    locate_in(configured, &worker_search_dirs(), find_in_path(WORKER))
}

fn locate_in(configured: Option<&Path>, dirs: &[PathBuf], on_path: Option<PathBuf>) -> Result<PathBuf, String> {
    if let Some(path) = configured {
        return match is_executable(path) {
            true => Ok(path.to_path_buf()),
            false => Err(format!(
                "Sandbox worker \"{}\" (set by [sandbox] worker in envrt.toml) is not an executable file.",
                path.display()
            )),
        };
    }
    if let Some(found) = dirs.iter().map(|dir| dir.join(WORKER)).find(|p| is_executable(p)) {
        return Ok(found);
    }
    on_path.ok_or_else(|| {
        let looked: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
        format!(
            "Sandbox worker \"{WORKER}\" was not found (looked in {}, and on PATH); set [sandbox] worker = \"/path/to/{WORKER}\" in envrt.toml, or put it on PATH.",
            looked.join(", ")
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reference_worker_is_the_configured_one_else_found_in_the_search_dirs() {
        let dir = std::env::temp_dir().join(format!("envrt-worker-lookup-{}", std::process::id()));
        let (empty, full) = (dir.join("empty"), dir.join("full"));
        std::fs::create_dir_all(&empty).unwrap();
        std::fs::create_dir_all(&full).unwrap();
        let worker = full.join(WORKER);
        std::fs::write(&worker, "#!/bin/sh\n").unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&worker, std::fs::Permissions::from_mode(0o755)).unwrap();
        let dirs = [empty.clone(), full.clone()];
        assert_eq!(locate_in(None, &dirs, None), Ok(worker.clone()));
        assert_eq!(locate_in(Some(&worker), &[], None), Ok(worker.clone()));
        let on_path = PathBuf::from("/somewhere/envrt-sandbox-worker");
        assert_eq!(
            locate_in(None, std::slice::from_ref(&empty), Some(on_path.clone())),
            Ok(on_path)
        );
        assert_eq!(
            locate_in(None, &[empty.clone(), dir.clone()], None),
            Err(format!(
                "Sandbox worker \"envrt-sandbox-worker\" was not found (looked in {}, {}, and on PATH); set [sandbox] worker = \"/path/to/envrt-sandbox-worker\" in envrt.toml, or put it on PATH.",
                empty.display(),
                dir.display()
            ))
        );
        // a configured path is the only one tried
        let missing = empty.join(WORKER);
        assert_eq!(
            locate_in(Some(&missing), &dirs, None),
            Err(format!(
                "Sandbox worker \"{}\" (set by [sandbox] worker in envrt.toml) is not an executable file.",
                missing.display()
            ))
        );
        std::fs::set_permissions(&worker, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(locate_in(Some(&worker), &dirs, None).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

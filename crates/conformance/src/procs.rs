//! Looks for processes on this machine by a marker in their command line. Containers and
//! sandboxes share the kernel, so their processes show up in `/proc` too. When `/proc`
//! cannot be read the look says so instead of answering "none".

use std::path::Path;

/// The pids whose `/proc/<pid>/cmdline` contains `marker` (empty when `/proc` cannot be
/// read; use [`processes_with_marker_in`] to tell the two apart).
pub fn processes_with_marker(marker: &str) -> Vec<u32> {
    processes_with_marker_in(Path::new("/proc"), marker).unwrap_or_default()
}

/// The pids under the proc file system at `proc` whose command line contains `marker`;
/// an error when that file system cannot be read (not mounted, no permission), proven by
/// not finding this very process in it.
pub fn processes_with_marker_in(proc: &Path, marker: &str) -> Result<Vec<u32>, String> {
    let me = std::process::id();
    let entries = std::fs::read_dir(proc).map_err(|e| format!("{} cannot be read: {e}", proc.display()))?;
    let cmdline = |pid: u32| std::fs::read(proc.join(pid.to_string()).join("cmdline"));
    match cmdline(me) {
        Ok(own) if !own.is_empty() => {}
        Ok(_) => return Err(format!("{} shows no command line for this process", proc.display())),
        Err(e) => {
            return Err(format!("{} does not show this process ({me}): {e}", proc.display()));
        }
    }
    let needle = marker.as_bytes();
    Ok(entries
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()))
        .filter(|pid| *pid != me)
        .filter(|pid| {
            cmdline(*pid)
                .map(|cmd| cmd.windows(needle.len()).any(|w| w == needle))
                .unwrap_or(false)
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unreadable_proc_is_an_error_not_an_empty_answer() {
        let missing = Path::new("/nonexistent-proc-for-envrt");
        let error = processes_with_marker_in(missing, "x").unwrap_err();
        assert!(
            error.starts_with("/nonexistent-proc-for-envrt cannot be read: "),
            "{error}"
        );
        let empty = tempfile::tempdir().unwrap();
        let error = processes_with_marker_in(empty.path(), "x").unwrap_err();
        assert!(error.contains("does not show this process"), "{error}");
        assert_eq!(
            processes_with_marker_in(Path::new("/proc"), "no-such-marker-xyzzy"),
            Ok(vec![])
        );
    }
}

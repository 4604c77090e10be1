//! Sweeping the per-process scratch directories that a killed process could not remove.

use std::path::Path;

/// Removes every directory in `parent` named `{prefix}{pid}-…` whose `pid` no longer
/// names a live process (best effort: another process may be sweeping at the same time,
/// and a name that does not parse is left alone). Returns how many were removed.
///
/// A pid can be reused, so a directory whose owner died may survive until that pid is
/// free again; it is never removed while its owner lives.
pub fn remove_dirs_of_dead_pids(parent: &Path, prefix: &str) -> usize {
    let Ok(entries) = std::fs::read_dir(parent) else {
        return 0;
    };
    let mut removed = 0;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix(prefix))
            .and_then(|rest| rest.split('-').next())
            .and_then(|pid| pid.parse::<u32>().ok())
        else {
            continue;
        };
        if !Path::new(&format!("/proc/{pid}")).exists() && std::fs::remove_dir_all(entry.path()).is_ok() {
            removed += 1;
        }
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::remove_dirs_of_dead_pids;

    #[test]
    fn only_the_directories_of_dead_pids_with_the_prefix_go() {
        let parent = tempfile::tempdir().unwrap();
        let live = std::process::id();
        // a pid past the kernel's maximum (4194304) is never alive
        let dead = 4_194_305_u32;
        for name in [
            format!("sweep-{live}-a"),
            format!("sweep-{dead}-b"),
            format!("other-{dead}-c"),
            "sweep-notapid-d".to_owned(),
        ] {
            std::fs::create_dir(parent.path().join(&name)).unwrap();
            std::fs::write(parent.path().join(&name).join("f"), b"x").unwrap();
        }
        assert_eq!(remove_dirs_of_dead_pids(parent.path(), "sweep-"), 1);
        let mut left: Vec<String> = std::fs::read_dir(parent.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        left.sort();
        assert_eq!(
            left,
            [
                format!("other-{dead}-c"),
                format!("sweep-{live}-a"),
                "sweep-notapid-d".to_owned()
            ]
        );
    }
}

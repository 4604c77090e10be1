//! Sweeping the per-process scratch directories that a killed process could not remove.

use std::path::Path;

/// Whether `pid` names a live process of this pid namespace.
pub fn pid_is_live(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

/// The pid a name `{prefix}{pid}-{rest}` carries, and the rest; `None` for any other name.
pub fn named_pid<'a>(name: &'a str, prefix: &str) -> Option<(u32, &'a str)> {
    let (pid, rest) = name.strip_prefix(prefix)?.split_once('-')?;
    Some((pid.parse().ok()?, rest))
}

/// Eight hex digits naming this machine's boot and this process's pid namespace. A name
/// that carries a pid for a sweep elsewhere than on this host's file system (inside a
/// container) carries this tag too: only a process that sees the same pids (the same
/// tag) may judge whether that pid lives.
pub fn pid_scope_tag() -> String {
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap_or_default();
    let namespace = std::fs::read_link("/proc/self/ns/pid")
        .map(|link| link.display().to_string())
        .unwrap_or_default();
    // FNV-1a: a name, not a secret.
    let mut hash: u32 = 0x811c_9dc5;
    for byte in boot.trim().bytes().chain([0]).chain(namespace.bytes()) {
        hash ^= u32::from(byte);
        hash = hash.wrapping_mul(0x0100_0193);
    }
    format!("{hash:08x}")
}

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
        let Some((pid, _)) = name.to_str().and_then(|n| named_pid(n, prefix)) else {
            continue;
        };
        if !pid_is_live(pid) && std::fs::remove_dir_all(entry.path()).is_ok() {
            removed += 1;
        }
    }
    removed
}

/// The entries of `parent` named `{prefix}{pid}-…` whose `pid` names no live process (a
/// name that does not parse is left out): what a killed process left there.
pub fn entries_of_dead_pids(parent: &Path, prefix: &str) -> Vec<std::path::PathBuf> {
    let Ok(entries) = std::fs::read_dir(parent) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter(|entry| {
            let name = entry.file_name();
            name.to_str()
                .and_then(|n| named_pid(n, prefix))
                .is_some_and(|(pid, _)| !pid_is_live(pid))
        })
        .map(|entry| entry.path())
        .collect()
}

/// Like [`remove_dirs_of_dead_pids`], for entries of any kind: every entry of `parent`
/// named `{prefix}{pid}-…` whose `pid` names no live process is removed (a directory
/// with what it holds, anything else unlinked; links are not followed). This is how a
/// staged sync entry a killed writer left beside its target goes. Returns how many went.
pub fn remove_entries_of_dead_pids(parent: &Path, prefix: &str) -> usize {
    let mut removed = 0;
    for path in entries_of_dead_pids(parent, prefix) {
        let gone = match std::fs::symlink_metadata(&path) {
            Ok(meta) if meta.is_dir() => std::fs::remove_dir_all(&path).is_ok(),
            Ok(_) => std::fs::remove_file(&path).is_ok(),
            Err(_) => false,
        };
        removed += usize::from(gone);
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::{remove_dirs_of_dead_pids, remove_entries_of_dead_pids};

    #[test]
    fn entries_of_every_kind_of_dead_pids_with_the_prefix_go() {
        let parent = tempfile::tempdir().unwrap();
        let live = std::process::id();
        let dead = 4_194_305_u32;
        let p = parent.path();
        std::fs::create_dir(p.join(format!(".s-{dead}-dir"))).unwrap();
        std::fs::write(p.join(format!(".s-{dead}-dir/f")), b"x").unwrap();
        std::fs::write(p.join(format!(".s-{dead}-file")), b"x").unwrap();
        std::os::unix::fs::symlink(p.join("elsewhere"), p.join(format!(".s-{dead}-link"))).unwrap();
        std::fs::create_dir(p.join("elsewhere")).unwrap();
        for kept in [format!(".s-{live}-mine"), format!(".s-{dead}"), format!(".t-{dead}-x")] {
            std::fs::write(p.join(kept), b"x").unwrap();
        }
        assert_eq!(remove_entries_of_dead_pids(p, ".s-"), 3);
        let mut left: Vec<String> = std::fs::read_dir(p)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        left.sort();
        let mut expected = vec![
            format!(".s-{dead}"),
            format!(".s-{live}-mine"),
            format!(".t-{dead}-x"),
            "elsewhere".to_owned(),
        ];
        expected.sort();
        assert_eq!(left, expected);
    }

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

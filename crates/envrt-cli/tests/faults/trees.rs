//! Trees whose every file says one byte, for the kill-mid-sync tests: a half-written file
//! or tree never compares equal to a whole one.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Files in each tree, and the size of each (one far larger: a kill after a small file
/// lands while the large one is still to come).
pub const FILES: usize = 12;

/// A tree of [`FILES`] files whose bytes all say `tag`, under `dir`.
pub fn write_tree(dir: &Path, tag: u8) {
    std::fs::create_dir_all(dir.join("sub")).unwrap();
    for i in 0..FILES {
        let size = if i == FILES / 2 { 4 << 20 } else { 64 << 10 };
        let place = if i % 2 == 0 {
            dir.join(format!("f{i:02}"))
        } else {
            dir.join(format!("sub/f{i:02}"))
        };
        std::fs::write(place, vec![tag; size]).unwrap();
    }
}

/// Every entry under `dir`: a directory as `dir`, a file as `{len} x {byte}` when all its
/// bytes are one (else `mixed`), so a half-written file or tree never compares equal.
pub fn read_tree(dir: &Path) -> BTreeMap<PathBuf, String> {
    let mut found = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(at) = stack.pop() {
        for entry in std::fs::read_dir(&at).unwrap() {
            let entry = entry.unwrap();
            let rel = entry.path().strip_prefix(dir).unwrap().to_path_buf();
            if entry.file_type().unwrap().is_dir() {
                found.insert(rel, "dir".to_owned());
                stack.push(entry.path());
            } else {
                let bytes = std::fs::read(entry.path()).unwrap();
                let shown = match bytes.first() {
                    Some(b) if bytes.iter().all(|x| x == b) => format!("{} x {b}", bytes.len()),
                    None => "empty".to_owned(),
                    Some(_) => "mixed".to_owned(),
                };
                found.insert(rel, shown);
            }
        }
    }
    found
}

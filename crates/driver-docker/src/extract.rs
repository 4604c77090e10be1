//! Extracting a tar stream into a host target through a temporary sibling, refusing every
//! entry or link that would land outside the target.

use std::ffi::OsStr;
use std::fs;
use std::io::{self, Read};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

use envrt_runtime_core::sync::ExcludeSet;
use envrt_runtime_core::tree;
use envrt_runtime_core::{DriverError, SyncKind};

use crate::archive::{ArchiveError, Counts, io_at, link_stays_inside};

/// Where an extraction puts things and which entries it skips.
pub(crate) struct Extraction<'a> {
    /// Host target.
    pub(crate) target: &'a Path,
    pub(crate) kind: SyncKind,
    pub(crate) mode: Option<u32>,
    pub(crate) exclude: &'a ExcludeSet,
    /// The target as the caller gave it (for messages).
    pub(crate) target_text: &'a str,
    /// The source as the caller gave it (for messages).
    pub(crate) source_text: &'a str,
}

/// Extracts `archive` (whose entries all start with one top name) into a temporary
/// sibling of the target, then moves it into place. Nothing is written outside the
/// target; on any failure the target is left as it was.
pub(crate) fn extract<R: Read>(archive: R, plan: &Extraction<'_>) -> Result<Counts, ArchiveError> {
    let parent = match plan.target.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    fs::create_dir_all(&parent).map_err(io_at(format!("Creating {}", parent.display())))?;
    let staging = tempfile::Builder::new()
        .prefix(".envrt-sync-")
        .tempdir_in(&parent)
        .map_err(io_at(format!("Creating a temporary directory in {}", parent.display())))?;
    // The tree root inside the staging directory.
    let root = staging.path().join("t");
    let mut counts = Counts::default();
    let mut modes: Vec<(PathBuf, u32)> = Vec::new();
    let mut links: Vec<(PathBuf, PathBuf, bool)> = Vec::new();
    let mut skipped: Vec<PathBuf> = Vec::new();
    let mut top_mode = None;
    let mut saw_top = false;
    let escapes = |entry: &str| {
        ArchiveError::Refused(DriverError::EntryEscapesTarget {
            entry: entry.to_owned(),
            target: plan.target_text.to_owned(),
        })
    };
    let mut archive = tar::Archive::new(archive);
    for entry in archive.entries().map_err(io_at("Reading the archive"))? {
        let mut entry = entry.map_err(io_at("Reading the archive"))?;
        // Names are bytes (a file name need not be UTF-8); text only for messages.
        let raw_bytes = entry.path_bytes().into_owned();
        let raw = String::from_utf8_lossy(&raw_bytes).into_owned();
        let rel = relative_name(&raw_bytes).ok_or_else(|| escapes(&raw))?;
        if rel.components().count() > tree::MAX_TREE_DEPTH {
            return Err(ArchiveError::Refused(tree::too_deep(plan.source_text)));
        }
        let kind = entry.header().entry_type();
        let mode = entry.header().mode().unwrap_or(0o644) & 0o777;
        if rel.as_os_str().is_empty() {
            saw_top = true;
            top_mode = Some(mode);
            match (plan.kind, kind) {
                (SyncKind::Directory, tar::EntryType::Directory) => {
                    fs::create_dir(&root).map_err(io_at("Extracting"))?;
                }
                (SyncKind::File, tar::EntryType::Regular | tar::EntryType::Continuous) => {
                    let n = write_file(&mut entry, &root)?;
                    counts.files += 1;
                    counts.bytes += n;
                }
                (SyncKind::Directory, _) | (SyncKind::File, _) => {
                    return Err(ArchiveError::Refused(DriverError::SourceKind {
                        path: plan.source_text.to_owned(),
                        expected: if plan.kind == SyncKind::File {
                            "file"
                        } else {
                            "directory"
                        },
                    }));
                }
            }
            continue;
        }
        if plan.kind == SyncKind::File || !saw_top {
            return Err(escapes(&raw));
        }
        let rel_text = rel.to_string_lossy();
        if skipped.iter().any(|s| rel.starts_with(s)) || plan.exclude.is_excluded(&rel_text) {
            if kind == tar::EntryType::Directory {
                skipped.push(rel.clone());
            }
            continue;
        }
        let dest = root.join(&rel);
        match kind {
            tar::EntryType::Directory => {
                fs::create_dir_all(&dest).map_err(io_at(format!("Extracting {rel_text}")))?;
                modes.push((dest, mode));
            }
            tar::EntryType::Regular | tar::EntryType::Continuous => {
                if let Some(p) = dest.parent() {
                    fs::create_dir_all(p).map_err(io_at(format!("Extracting {rel_text}")))?;
                }
                let n = write_file(&mut entry, &dest)?;
                counts.files += 1;
                counts.bytes += n;
                modes.push((dest, mode));
            }
            tar::EntryType::Symlink => {
                let link = entry
                    .link_name()
                    .map_err(io_at("Reading the archive"))?
                    .map(|l| l.into_owned())
                    .unwrap_or_default();
                if !link_stays_inside(&rel, &link) {
                    return Err(escapes(&format!("{rel_text} -> {}", link.display())));
                }
                links.push((dest, link, true));
            }
            tar::EntryType::Link => {
                let link = entry.link_name_bytes().map(|b| b.into_owned()).unwrap_or_default();
                let inside = relative_name(&link)
                    .filter(|l| !l.as_os_str().is_empty())
                    .ok_or_else(|| escapes(&format!("{rel_text} => {}", String::from_utf8_lossy(&link))))?;
                links.push((dest, root.join(inside), false));
            }
            // Devices, fifos and the like are not recreated.
            _ => {}
        }
    }
    if !saw_top {
        return Err(ArchiveError::Refused(DriverError::SourceMissing {
            path: plan.source_text.to_owned(),
        }));
    }
    // Links last, so no entry was ever written through one.
    for (dest, link, symbolic) in links {
        if let Some(p) = dest.parent() {
            fs::create_dir_all(p).map_err(io_at("Extracting a link"))?;
        }
        let result = if symbolic {
            std::os::unix::fs::symlink(&link, &dest)
        } else {
            fs::hard_link(&link, &dest).map(|_| {
                counts.files += 1;
                counts.bytes += fs::metadata(&dest).map(|m| m.len()).unwrap_or(0);
            })
        };
        result.map_err(io_at(format!("Extracting a link at {}", dest.display())))?;
    }
    // Each link was checked alone above; together they may still lead out (`a/d0 -> ..`
    // then `up2 -> a/d0/../..`): resolve them step by step against the tree as written.
    if plan.kind == SyncKind::Directory {
        tree::check_tree_links(&root, plan.target, plan.source_text, plan.target_text)
            .map_err(ArchiveError::Refused)?;
    }
    // Modes deepest first, the top last (from the request when given).
    modes.sort_by_key(|(p, _)| std::cmp::Reverse(p.components().count()));
    for (path, mode) in modes {
        fs::set_permissions(&path, fs::Permissions::from_mode(mode)).map_err(io_at("Setting a mode"))?;
    }
    let final_mode = plan.mode.or(top_mode).unwrap_or(0o755) & 0o7777;
    fs::set_permissions(&root, fs::Permissions::from_mode(final_mode)).map_err(io_at("Setting the mode"))?;
    put_in_place(&root, plan.target, &parent)?;
    Ok(counts)
}

/// `raw` without its first component; `None` when it is absolute or has `..`.
fn relative_name(raw: &[u8]) -> Option<PathBuf> {
    let path = Path::new(OsStr::from_bytes(raw));
    let mut out = PathBuf::new();
    let mut first = true;
    for c in path.components() {
        match c {
            Component::Normal(p) => {
                if first {
                    first = false;
                } else {
                    out.push(p);
                }
            }
            Component::CurDir => {}
            _ => return None,
        }
    }
    if first { None } else { Some(out) }
}

fn write_file<R: Read>(entry: &mut R, dest: &Path) -> Result<u64, ArchiveError> {
    let mut file = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(dest)
        .map_err(io_at(format!("Creating {}", dest.display())))?;
    io::copy(entry, &mut file).map_err(io_at(format!("Writing {}", dest.display())))
}

/// Replaces `target` with `staged` (same parent directory, so a rename).
fn put_in_place(staged: &Path, target: &Path, parent: &Path) -> Result<(), ArchiveError> {
    let existing = fs::symlink_metadata(target).ok();
    match existing {
        Some(meta) if meta.is_dir() => {
            let trash = parent.join(format!(".envrt-old-{}", uuid::Uuid::new_v4()));
            fs::rename(target, &trash).map_err(io_at(format!("Replacing {}", target.display())))?;
            if let Err(e) = fs::rename(staged, target) {
                let _ = fs::rename(&trash, target);
                return Err(ArchiveError::Io(format!("Replacing {}", target.display()), e));
            }
            let _ = fs::remove_dir_all(&trash);
        }
        _ => fs::rename(staged, target).map_err(io_at(format!("Replacing {}", target.display())))?,
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_names_drop_the_top_and_refuse_escapes() {
        assert_eq!(relative_name(b"top"), Some(PathBuf::new()));
        assert_eq!(relative_name(b"top/a/b"), Some(PathBuf::from("a/b")));
        assert_eq!(relative_name(b"./top/a"), Some(PathBuf::from("a")));
        assert_eq!(relative_name(b"top/../x"), None);
        assert_eq!(relative_name(b"/top/a"), None);
        assert_eq!(relative_name(b""), None);
        assert_eq!(
            relative_name(b"top/caf\xe9"),
            Some(PathBuf::from(OsStr::from_bytes(b"caf\xe9")))
        );
    }

    fn raw_tar(entries: &[(&str, tar::EntryType, &[u8], Option<&str>)]) -> Vec<u8> {
        // Headers written by hand so that hostile names survive (the builder refuses them).
        let mut out = Vec::new();
        for (name, kind, data, link) in entries {
            let mut h = tar::Header::new_old();
            h.as_old_mut().name[..name.len()].copy_from_slice(name.as_bytes());
            if let Some(link) = link {
                h.as_old_mut().linkname[..link.len()].copy_from_slice(link.as_bytes());
            }
            h.set_entry_type(*kind);
            h.set_mode(0o644);
            h.set_size(data.len() as u64);
            h.set_cksum();
            out.extend_from_slice(h.as_bytes());
            out.extend_from_slice(data);
            out.resize(out.len().div_ceil(512) * 512, 0);
        }
        out.resize(out.len() + 1024, 0);
        out
    }

    fn try_extract(bytes: &[u8], target: &Path) -> Result<Counts, String> {
        let exclude = ExcludeSet::new(&[]).unwrap();
        let plan = Extraction {
            target,
            kind: SyncKind::Directory,
            mode: None,
            exclude: &exclude,
            target_text: "out",
            source_text: "/workspace/src",
        };
        extract(bytes, &plan).map_err(|e| e.into_driver().to_string())
    }

    #[test]
    fn hostile_archives_are_refused_and_leave_nothing() {
        use tar::EntryType::{Directory, Link, Regular, Symlink};
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("out");
        let cases: Vec<(Vec<u8>, &str)> = vec![
            (
                raw_tar(&[("top/", Directory, b"", None), ("top/../evil", Regular, b"x", None)]),
                "Entry \"top/../evil\" would be written outside the target \"out\".",
            ),
            (
                raw_tar(&[("top/", Directory, b"", None), ("/abs/evil", Regular, b"x", None)]),
                "Entry \"/abs/evil\" would be written outside the target \"out\".",
            ),
            (
                raw_tar(&[
                    ("top/", Directory, b"", None),
                    ("top/l", Symlink, b"", Some("../../etc")),
                ]),
                "Entry \"l -> ../../etc\" would be written outside the target \"out\".",
            ),
            (
                raw_tar(&[
                    ("top/", Directory, b"", None),
                    ("top/l", Symlink, b"", Some("/etc/passwd")),
                ]),
                "Entry \"l -> /etc/passwd\" would be written outside the target \"out\".",
            ),
            (
                raw_tar(&[("top/", Directory, b"", None), ("top/h", Link, b"", Some("../x"))]),
                "Entry \"h => ../x\" would be written outside the target \"out\".",
            ),
            // Each link stays inside alone; together `up2` leads two levels out.
            (
                raw_tar(&[
                    ("top/", Directory, b"", None),
                    ("top/a/", Directory, b"", None),
                    ("top/a/d0", Symlink, b"", Some("..")),
                    ("top/up2", Symlink, b"", Some("a/d0/../..")),
                ]),
                "Entry \"up2\" would be written outside the target \"out\".",
            ),
        ];
        for (bytes, expected) in cases {
            assert_eq!(try_extract(&bytes, &target).unwrap_err(), expected);
            assert!(!target.exists());
            assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 0, "no staging left behind");
        }
        let ok = raw_tar(&[
            ("top/", Directory, b"", None),
            ("top/a", Regular, b"hello", None),
            ("top/l", Symlink, b"", Some("a")),
        ]);
        assert_eq!(try_extract(&ok, &target).unwrap(), Counts { files: 1, bytes: 5 });
        assert_eq!(fs::read(target.join("l")).unwrap(), b"hello");
    }
}

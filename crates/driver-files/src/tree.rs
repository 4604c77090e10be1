//! Host-side checks of a tree a sync has just written, shared by every driver: where each
//! copied link really leads, resolved step by step against the tree being written the way
//! the kernel would (so `d0 -> ..` followed by `d0/../..` is caught, which a textual check
//! of each link alone misses), and a bound on how deep a synced tree may be.
//!
//! Walks here are iterative (an explicit stack, never recursion), so a hostile tree of any
//! depth cannot overflow a thread's stack; past [`MAX_TREE_DEPTH`] levels a walk stops with
//! [`DriverError::TreeTooDeep`].

use std::collections::VecDeque;
use std::ffi::{OsStr, OsString};
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use envrt_driver_api::error::DriverError;

/// Most links followed while resolving where one copied link leads (the kernel's ELOOP
/// bound); a chain longer than this counts as an escape.
pub const MAX_LINK_HOPS: usize = 40;

/// Deepest directory nesting a synced tree may have (the top entry is level 0). Deeper
/// trees are refused with [`DriverError::TreeTooDeep`] before anything lands.
pub const MAX_TREE_DEPTH: usize = 1000;

/// The refusal for a tree nested deeper than [`MAX_TREE_DEPTH`]; `source` as the caller
/// gave it.
pub fn too_deep(source: &str) -> DriverError {
    DriverError::TreeTooDeep {
        path: source.to_owned(),
        limit: MAX_TREE_DEPTH,
    }
}

/// The `/`-joined text of a relative path given as components (lossy for messages).
pub fn shown(relative: &[OsString]) -> String {
    relative
        .iter()
        .map(|c| c.to_string_lossy())
        .collect::<Vec<_>>()
        .join("/")
}

/// Whether a link written at `relative` (components below the tree `root`, which will be
/// found at `final_root` once in place) resolves to a place outside the tree.
///
/// Resolution walks the link's text one component at a time from the link's directory,
/// following every link of the tree it meets. A `..` above the tree's top, an absolute text
/// not under `final_root` or an unreadable link is an escape. A loop (more than
/// [`MAX_LINK_HOPS`] links met) is not: the kernel counts the link itself and every link
/// it meets the same way and gives up with `ELOOP` at 40, so nothing can be reached through
/// it, as through a dangling link. A component that does not exist stops the kernel too;
/// the rest of the text is then only checked lexically (nothing more will be written into
/// the tree).
pub fn link_escapes(root: &Path, final_root: &Path, relative: &[OsString], text: &Path) -> bool {
    let mut stack: Vec<OsString> = relative[..relative.len().saturating_sub(1)].to_vec();
    let mut queue: VecDeque<OsString> = VecDeque::new();
    if !push_link_text(text, final_root, &mut stack, &mut queue) {
        return true;
    }
    let mut hops = 0;
    while let Some(part) = queue.pop_front() {
        if part == ".." {
            if stack.pop().is_none() {
                return true;
            }
            continue;
        }
        stack.push(part);
        let here: PathBuf = stack.iter().fold(root.to_path_buf(), |p, c| p.join(c));
        let Ok(meta) = fs::symlink_metadata(&here) else {
            continue;
        };
        if meta.file_type().is_symlink() {
            hops += 1;
            if hops > MAX_LINK_HOPS {
                // The kernel gives up earlier still (it counts this link too): ELOOP.
                return false;
            }
            stack.pop();
            let Ok(next) = fs::read_link(&here) else { return true };
            if !push_link_text(&next, final_root, &mut stack, &mut queue) {
                return true;
            }
        }
    }
    false
}

/// Puts a link's components in front of `queue`; an absolute text restarts at the tree's
/// top when it names a place under `final_root`, and is an escape (false) otherwise.
fn push_link_text(text: &Path, final_root: &Path, stack: &mut Vec<OsString>, queue: &mut VecDeque<OsString>) -> bool {
    let rest = if text.is_absolute() {
        let Ok(inside) = text.strip_prefix(final_root) else {
            return false;
        };
        stack.clear();
        inside
    } else {
        text
    };
    let mut parts = Vec::new();
    for component in rest.components() {
        match component {
            Component::Normal(p) => parts.push(p.to_os_string()),
            Component::ParentDir => parts.push(OsString::from("..")),
            Component::CurDir | Component::RootDir => {}
            Component::Prefix(_) => return false,
        }
    }
    for part in parts.into_iter().rev() {
        queue.push_front(part);
    }
    true
}

/// The links found in a tree: where each sits (components below the top) and its text.
#[derive(Debug, Default)]
pub struct TreeLinks {
    /// `(relative components, link text)`, sorted by path.
    pub links: Vec<(Vec<OsString>, PathBuf)>,
}

/// Lists every symbolic link below `root` without following any, iteratively; a tree
/// deeper than [`MAX_TREE_DEPTH`] is refused with [`too_deep`]`(source_shown)`.
pub fn find_links(root: &Path, source_shown: &str) -> Result<TreeLinks, DriverError> {
    find_links_except(root, source_shown, &|_| false)
}

/// [`find_links`], leaving out every entry (and everything below a directory) whose
/// `/`-joined relative path `skip` accepts (a sync's exclude globs).
pub fn find_links_except(
    root: &Path,
    source_shown: &str,
    skip: &dyn Fn(&str) -> bool,
) -> Result<TreeLinks, DriverError> {
    let io = |what: &Path, e| DriverError::io(format!("cannot read {}", what.display()), e);
    let mut found = TreeLinks::default();
    let mut pending: Vec<Vec<OsString>> = vec![Vec::new()];
    while let Some(relative) = pending.pop() {
        if relative.len() > MAX_TREE_DEPTH {
            return Err(too_deep(source_shown));
        }
        let dir: PathBuf = relative.iter().fold(root.to_path_buf(), |p, c| p.join(c));
        for entry in fs::read_dir(&dir).map_err(|e| io(&dir, e))? {
            let entry = entry.map_err(|e| io(&dir, e))?;
            let kind = entry.file_type().map_err(|e| io(&entry.path(), e))?;
            let mut child = relative.clone();
            child.push(entry.file_name());
            if skip(&shown(&child)) {
                continue;
            }
            if kind.is_symlink() {
                let text = fs::read_link(entry.path()).map_err(|e| io(&entry.path(), e))?;
                found.links.push((child, text));
            } else if kind.is_dir() {
                pending.push(child);
            }
        }
    }
    found.links.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(found)
}

/// Checks every link of the tree just written at `root` (to be moved to `final_root`):
/// the first one, in path order, that resolves outside the tree is refused with
/// [`DriverError::EntryEscapesTarget`] naming it relative to the tree and `target_shown`,
/// the text every driver's sync out uses. A tree deeper than [`MAX_TREE_DEPTH`] is refused
/// with [`too_deep`]`(source_shown)`.
pub fn check_tree_links(
    root: &Path,
    final_root: &Path,
    source_shown: &str,
    target_shown: &str,
) -> Result<(), DriverError> {
    check_tree_links_except(root, final_root, source_shown, target_shown, &|_| false)
}

/// [`check_tree_links`] over the entries `skip` does not leave out (see
/// [`find_links_except`]): for a source tree about to be sent, checked before sending.
pub fn check_tree_links_except(
    root: &Path,
    final_root: &Path,
    source_shown: &str,
    target_shown: &str,
    skip: &dyn Fn(&str) -> bool,
) -> Result<(), DriverError> {
    let meta = fs::symlink_metadata(root).map_err(|e| DriverError::io(format!("cannot read {}", root.display()), e))?;
    if !meta.is_dir() {
        return Ok(());
    }
    for (relative, text) in find_links_except(root, source_shown, skip)?.links {
        if link_escapes(root, final_root, &relative, &text) {
            return Err(DriverError::EntryEscapesTarget {
                entry: shown(&relative),
                target: target_shown.to_owned(),
            });
        }
    }
    Ok(())
}

/// A relative path's components from raw bytes (as a tar header carries them).
pub fn components_of(bytes: &[u8]) -> Vec<OsString> {
    Path::new(OsStr::from_bytes(bytes))
        .components()
        .filter_map(|c| match c {
            Component::Normal(p) => Some(p.to_os_string()),
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn scratch(tag: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("envrt-core-tree-{tag}-{}", uuid::Uuid::new_v4().simple()));
        fs::create_dir(&dir).unwrap();
        dir
    }

    #[test]
    fn resolution_follows_the_tree_links_like_the_kernel() {
        let root = scratch("links");
        symlink(".", root.join("d")).unwrap();
        fs::create_dir(root.join("sub")).unwrap();
        let final_root = Path::new("/final/t");
        let at = |name: &str| vec![OsString::from(name)];
        assert!(link_escapes(&root, final_root, &at("e"), Path::new("d/../x")));
        assert!(link_escapes(&root, final_root, &at("e"), Path::new("../x")));
        assert!(link_escapes(&root, final_root, &at("e"), Path::new("/etc/passwd")));
        assert!(!link_escapes(&root, final_root, &at("e"), Path::new("/final/t/sub")));
        assert!(!link_escapes(&root, final_root, &at("e"), Path::new("sub/../x")));
        let nested = vec![OsString::from("sub"), OsString::from("l")];
        assert!(!link_escapes(&root, final_root, &nested, Path::new("../d")));
        assert!(link_escapes(&root, final_root, &nested, Path::new("../../x")));
        // Loops resolve nowhere (ELOOP), like a dangling link: not an escape.
        symlink("loop", root.join("loop")).unwrap();
        assert!(!link_escapes(&root, final_root, &at("e"), Path::new("loop")));
        symlink("pong", root.join("ping")).unwrap();
        symlink("ping", root.join("pong")).unwrap();
        assert!(!link_escapes(&root, final_root, &at("e"), Path::new("ping/../../x")));
        // A chain that ends outside is an escape however long, up to the kernel's limit.
        let mut previous = "../outside".to_string();
        for n in 0..(MAX_LINK_HOPS - 1) {
            let name = format!("c{n}");
            symlink(&previous, root.join(&name)).unwrap();
            previous = name;
        }
        assert!(link_escapes(&root, final_root, &at("e"), Path::new(&previous)));
        fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn the_chain_of_finding_3_is_refused_naming_the_escaping_link() {
        let root = scratch("chain");
        fs::create_dir(root.join("a")).unwrap();
        symlink("..", root.join("a/d0")).unwrap();
        symlink("a/d0/../..", root.join("up2")).unwrap();
        symlink("a/b/c/d/e/f/g/../../../../../../..", root.join("root")).unwrap();
        let err = check_tree_links(&root, Path::new("/host/out"), "/workspace/src", "/host/out").unwrap_err();
        assert_eq!(
            err.to_string(),
            "Entry \"up2\" would be written outside the target \"/host/out\"."
        );
        fs::remove_file(root.join("up2")).unwrap();
        // `a/d0` alone leads to the tree's top and `root` dangles inside it: both stay.
        check_tree_links(&root, Path::new("/host/out"), "/workspace/src", "/host/out").unwrap();
        fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn deep_trees_walk_without_recursion_and_past_the_bound_are_refused() {
        let root = scratch("deep");
        let mut dir = root.clone();
        for _ in 0..600 {
            dir.push("d");
        }
        fs::create_dir_all(&dir).unwrap();
        symlink("../../..", dir.join("l")).unwrap();
        let links = find_links(&root, "src").unwrap();
        assert_eq!(links.links.len(), 1);
        assert_eq!(links.links[0].0.len(), 601);
        check_tree_links(&root, Path::new("/t"), "src", "/t").unwrap();
        let mut deeper = dir.clone();
        for _ in 0..(MAX_TREE_DEPTH - 600 + 1) {
            deeper.push("d");
        }
        fs::create_dir_all(&deeper).unwrap();
        assert_eq!(
            find_links(&root, "src").unwrap_err().to_string(),
            format!("Sync source \"src\" is nested deeper than {MAX_TREE_DEPTH} directory levels.")
        );
        fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn components_keep_raw_bytes() {
        assert_eq!(
            components_of(b"a/caf\xe9/./b"),
            vec![
                OsString::from("a"),
                OsStr::from_bytes(b"caf\xe9").to_os_string(),
                OsString::from("b")
            ]
        );
    }
}

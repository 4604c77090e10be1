//! Generated file trees for the sync checks, written to and read back from disk. A tree is
//! a map from a `/`-separated relative path to what is there; the generator guarantees it
//! is consistent (every parent of an entry is a directory in the tree, no name is used as
//! both a file and a directory), so a failure is always the driver's.

use std::collections::BTreeMap;
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::Path;

use proptest::prelude::*;

/// One generated entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Node {
    Dir,
    File { content: Vec<u8>, mode: u32 },
    Link(String),
}

fn name() -> impl Strategy<Value = String> {
    proptest::string::string_regex("[a-zA-Z0-9_ éüß-]{1,8}")
        .expect("valid regex")
        .prop_filter("not . or ..", |s| {
            s != "." && s != ".." && !s.starts_with(' ') && !s.ends_with(' ')
        })
}

/// Adds `segments` (a file `node`, or a directory when `as_dir`) to `tree` unless one of
/// its parents is already something other than a directory, or the path itself is taken.
/// Nothing is inserted for a refused path: not even the parents that were fine.
fn add(tree: &mut BTreeMap<String, Node>, segments: &[String], node: Node, as_dir: bool) {
    let mut parents = Vec::new();
    for depth in 1..segments.len() {
        let prefix = segments[..depth].join("/");
        match tree.get(&prefix) {
            None => parents.push(prefix),
            Some(Node::Dir) => {}
            Some(_) => return,
        }
    }
    let path = segments.join("/");
    if tree.contains_key(&path) {
        return;
    }
    for parent in parents {
        tree.insert(parent, Node::Dir);
    }
    tree.insert(path, if as_dir { Node::Dir } else { node });
}

/// Trees of 1 to 12 entries up to 3 deep, with modes, non-ASCII names, empty files and
/// directories, and a relative link beside the first file.
pub(super) fn tree() -> impl Strategy<Value = BTreeMap<String, Node>> {
    let file = (
        proptest::collection::vec(any::<u8>(), 0..2048),
        prop_oneof![Just(0o644u32), Just(0o600), Just(0o755), Just(0o700), Just(0o444)],
    )
        .prop_map(|(content, mode)| Node::File { content, mode });
    let entry = (proptest::collection::vec(name(), 1..4), file, any::<bool>());
    proptest::collection::vec(entry, 1..12).prop_map(|entries| {
        let mut tree = BTreeMap::new();
        for (segments, node, as_dir) in entries {
            add(&mut tree, &segments, node, as_dir);
        }
        let first_file = tree
            .iter()
            .find(|(_, n)| matches!(n, Node::File { .. }))
            .map(|(p, _)| p.clone());
        if let Some(file) = first_file {
            let (dir, base) = match file.rsplit_once('/') {
                Some((d, b)) => (d.split('/').map(String::from).collect::<Vec<_>>(), b.to_owned()),
                None => (Vec::new(), file.clone()),
            };
            let mut segments = dir;
            segments.push(format!("link-to-{base}"));
            add(&mut tree, &segments, Node::Link(base), false);
        }
        tree
    })
}

/// Why `tree` is not consistent (a parent that is not a directory), if it is not.
pub(super) fn inconsistency(tree: &BTreeMap<String, Node>) -> Option<String> {
    for path in tree.keys() {
        let mut prefix = String::new();
        for segment in path.split('/').collect::<Vec<_>>().split_last()?.1 {
            prefix = if prefix.is_empty() {
                (*segment).to_owned()
            } else {
                format!("{prefix}/{segment}")
            };
            match tree.get(&prefix) {
                Some(Node::Dir) => {}
                Some(Node::File { .. }) => return Some(format!("{path:?} lies under {prefix:?}, which is a file")),
                Some(Node::Link(_)) => return Some(format!("{path:?} lies under {prefix:?}, which is a link")),
                None => return Some(format!("{path:?} has no parent entry {prefix:?}")),
            }
        }
    }
    None
}

pub(super) fn write_tree(root: &Path, tree: &BTreeMap<String, Node>) -> std::io::Result<()> {
    std::fs::create_dir_all(root)?;
    for (path, node) in tree {
        let full = root.join(path);
        match node {
            Node::Dir => std::fs::create_dir_all(&full)?,
            Node::File { content, mode } => {
                std::fs::write(&full, content)?;
                std::fs::set_permissions(&full, std::fs::Permissions::from_mode(*mode))?;
            }
            Node::Link(target) => symlink(target, &full)?,
        }
    }
    Ok(())
}

pub(super) fn read_tree(root: &Path) -> std::io::Result<BTreeMap<String, Node>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir)? {
            let entry = entry?;
            let path = entry.path();
            let rel = path
                .strip_prefix(root)
                .expect("under root")
                .to_string_lossy()
                .into_owned();
            let meta = std::fs::symlink_metadata(&path)?;
            let node = if meta.file_type().is_symlink() {
                Node::Link(std::fs::read_link(&path)?.to_string_lossy().into_owned())
            } else if meta.is_dir() {
                stack.push(path.clone());
                Node::Dir
            } else {
                Node::File {
                    content: std::fs::read(&path)?,
                    mode: meta.permissions().mode() & 0o7777,
                }
            };
            out.insert(rel, node);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};

    use super::*;

    fn file() -> Node {
        Node::File {
            content: b"x".to_vec(),
            mode: 0o644,
        }
    }

    fn segs(path: &str) -> Vec<String> {
        path.split('/').map(String::from).collect()
    }

    /// The case seen in the wild: a file `ü`, then `ü/__ß-éß` and deeper
    /// entries under it; and the reverse order.
    #[test]
    fn a_name_is_never_both_a_file_and_a_directory() {
        let mut tree = BTreeMap::new();
        add(&mut tree, &segs("ü"), file(), false);
        add(&mut tree, &segs("ü/__ß-éß"), file(), false);
        add(&mut tree, &segs("ü/__ß-éß/deeper"), file(), true);
        assert_eq!(tree.keys().collect::<Vec<_>>(), ["ü"]);
        let mut tree = BTreeMap::new();
        add(&mut tree, &segs("a/b/c"), file(), false);
        add(&mut tree, &segs("a/b"), file(), false);
        add(&mut tree, &segs("a/b/c/d"), file(), false);
        assert_eq!(tree.keys().collect::<Vec<_>>(), ["a", "a/b", "a/b/c"]);
        assert_eq!(inconsistency(&tree), None);
    }

    #[test]
    fn inconsistency_names_the_collision() {
        let tree = BTreeMap::from([("ü".to_string(), file()), ("ü/x".to_string(), Node::Dir)]);
        assert_eq!(
            inconsistency(&tree).unwrap(),
            "\"ü/x\" lies under \"ü\", which is a file"
        );
    }

    /// Many seeds of the real generator: every tree is consistent and can be written.
    #[test]
    fn generated_trees_are_consistent_for_many_seeds() {
        let strategy = tree();
        for seed in 0..2000u64 {
            let mut bytes = [0u8; 32];
            bytes[..8].copy_from_slice(&seed.to_le_bytes());
            let rng = TestRng::from_seed(RngAlgorithm::ChaCha, &bytes);
            let mut runner = TestRunner::new_with_rng(Config::default(), rng);
            let tree = strategy.new_tree(&mut runner).expect("a tree").current();
            if let Some(why) = inconsistency(&tree) {
                panic!("seed {seed}: {why}\n{tree:?}");
            }
        }
    }

    #[test]
    fn a_generated_tree_round_trips_through_the_disk() {
        let strategy = tree();
        let mut runner = TestRunner::deterministic();
        for _ in 0..64 {
            let tree = strategy.new_tree(&mut runner).expect("a tree").current();
            let dir = tempfile::tempdir().unwrap();
            write_tree(dir.path(), &tree).unwrap();
            assert_eq!(read_tree(dir.path()).unwrap(), tree);
        }
    }
}

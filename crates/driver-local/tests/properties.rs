//! Generated inputs through real processes: argv, environment maps, stdin bytes and exit
//! codes come back unchanged. (The cross-driver suite has its own; these pin the local
//! driver on its own.)

mod common;

use std::collections::BTreeMap;

use common::Harness;
use envrt_runtime_core::{EnvValue, ExecuteRequest, Lease, LeaseStatus, Secret};
use proptest::prelude::*;

struct Fixture {
    rt: tokio::runtime::Runtime,
    h: Harness,
    lease: Lease,
}

impl Fixture {
    fn new() -> Fixture {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let (h, lease) = rt.block_on(async {
            let h = Harness::new().await;
            let lease = h.lease().await;
            (h, lease)
        });
        Fixture { rt, h, lease }
    }

    fn run(&self, request: ExecuteRequest) -> envrt_runtime_core::ExecuteResult {
        self.rt.block_on(self.h.execute(&self.lease, request))
    }

    fn finish(self) {
        self.rt
            .block_on(self.h.runtime.release_lease(&self.lease.id, LeaseStatus::Released))
            .unwrap();
        self.h.finish();
    }
}

fn no_nul() -> impl Strategy<Value = String> {
    proptest::string::string_regex("[^\u{0}]{0,40}").unwrap()
}

#[test]
fn generated_inputs_come_back_unchanged() {
    let fx = Fixture::new();
    let config = ProptestConfig {
        cases: 48,
        failure_persistence: None,
        ..ProptestConfig::default()
    };
    let mut runner = proptest::test_runner::TestRunner::new(config.clone());
    runner
        .run(&proptest::collection::vec(no_nul(), 0..12), |args| {
            // Every argument followed by NUL, unchanged.
            let script = "for a in \"$@\"; do printf '%s\\0' \"$a\"; done";
            let mut argv = vec!["-c".to_string(), script.into(), "sh".into()];
            argv.extend(args.iter().cloned());
            let out = fx.run(ExecuteRequest::new("sh", argv));
            let expected: Vec<u8> = args.iter().flat_map(|a| a.bytes().chain([0])).collect();
            prop_assert_eq!(out.stdout, expected);
            Ok(())
        })
        .unwrap();

    let key = proptest::string::string_regex("[A-Za-z_][A-Za-z0-9_]{0,15}").unwrap();
    let mut runner = proptest::test_runner::TestRunner::new(config.clone());
    runner
        .run(
            &(proptest::collection::btree_map(key, no_nul(), 0..8), any::<bool>()),
            |(env, secret)| {
                let mut request = ExecuteRequest::new("env", ["-0"]);
                request.env = env
                    .iter()
                    .map(|(k, v)| {
                        let value = if secret {
                            EnvValue::from(Secret::new(v.clone()))
                        } else {
                            EnvValue::from(v.clone())
                        };
                        (k.clone(), value)
                    })
                    .collect();
                let out = fx.run(request);
                let seen: BTreeMap<String, String> = out
                    .stdout
                    .split(|b| *b == 0)
                    .filter(|e| !e.is_empty())
                    .filter_map(|e| {
                        let e = String::from_utf8(e.to_vec()).ok()?;
                        e.split_once('=').map(|(k, v)| (k.to_owned(), v.to_owned()))
                    })
                    .collect();
                for (k, v) in &env {
                    prop_assert_eq!(seen.get(k), Some(v));
                }
                Ok(())
            },
        )
        .unwrap();

    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig {
        cases: 16,
        ..config.clone()
    });
    runner
        .run(
            &(proptest::collection::vec(any::<u8>(), 0..1024 * 1024), 0..=255i32),
            |(stdin, code)| {
                let mut request = ExecuteRequest::new("sh", ["-c", "cat; exit $0", &code.to_string()]);
                request.stdin = Some(stdin.clone());
                let out = fx.run(request);
                prop_assert_eq!(out.exit_code, Some(code));
                prop_assert!(out.stdout == stdin, "stdin came back changed ({} bytes)", stdin.len());
                Ok(())
            },
        )
        .unwrap();
    fx.finish();
}

#[derive(Clone, Debug)]
enum Node {
    File(Vec<u8>, u32),
    Dir(u32),
    Link(usize),
}

fn name() -> impl Strategy<Value = String> {
    proptest::sample::select(vec!["a", "b c", "ünï", "日本", "x.log", "-dash", "deep", "e m p t y"])
        .prop_map(String::from)
}

fn node() -> impl Strategy<Value = Node> {
    prop_oneof![
        (
            proptest::collection::vec(any::<u8>(), 0..2000),
            proptest::sample::select(vec![0o644u32, 0o600, 0o755, 0o400, 0o4755])
        )
            .prop_map(|(c, m)| Node::File(c, m)),
        proptest::sample::select(vec![0o755u32, 0o700, 0o750, 0o1777]).prop_map(Node::Dir),
        any::<usize>().prop_map(Node::Link),
    ]
}

/// Builds a tree from generated entries; links point (relatively) at another entry.
///
/// An entry whose parent path goes through a link is skipped: `create_dir_all` would follow
/// the link, so the entry would land somewhere else than its path says, and a link text of
/// `"../".repeat(depth - 1)` could then climb out of the tree for real (`日本/deep ->
/// ../日本` puts `日本/deep/-dash` at `日本/-dash`, where `../../X` is outside), which a
/// sync rightly refuses (see `a_link_made_through_a_linked_parent_really_escapes`). With
/// every parent a real directory, each link resolves inside the tree.
fn build(root: &std::path::Path, entries: &[(Vec<String>, Node)]) {
    use std::os::unix::fs::PermissionsExt;
    let mut made: Vec<Vec<String>> = Vec::new();
    let mut dirs: Vec<(std::path::PathBuf, u32)> = Vec::new();
    for (path, node) in entries {
        let through_link = (1..path.len()).any(|n| {
            std::fs::symlink_metadata(root.join(path[..n].join("/"))).is_ok_and(|m| m.file_type().is_symlink())
        });
        if through_link {
            continue;
        }
        let parent = root.join(path[..path.len() - 1].join("/"));
        if std::fs::create_dir_all(&parent).is_err() {
            continue; // a file is in the way
        }
        let full = root.join(path.join("/"));
        if std::fs::symlink_metadata(&full).is_ok() {
            continue;
        }
        match node {
            Node::File(content, mode) => {
                std::fs::write(&full, content).unwrap();
                std::fs::set_permissions(&full, std::fs::Permissions::from_mode(*mode)).unwrap();
            }
            Node::Dir(mode) => {
                std::fs::create_dir(&full).unwrap();
                dirs.push((full.clone(), *mode));
            }
            Node::Link(pick) => {
                let to = if made.is_empty() {
                    vec!["dangling".to_string()]
                } else {
                    made[pick % made.len()].clone()
                };
                let ups = "../".repeat(path.len() - 1);
                std::os::unix::fs::symlink(format!("{ups}{}", to.join("/")), &full).unwrap();
            }
        }
        made.push(path.clone());
    }
    for (dir, mode) in dirs.into_iter().rev() {
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(mode)).unwrap();
    }
}

fn snapshot(root: &std::path::Path) -> Vec<(String, String, u32, Vec<u8>)> {
    use std::os::unix::fs::PermissionsExt;
    common::tree(root)
        .into_iter()
        .map(|rel| {
            let p = root.join(&rel);
            let meta = std::fs::symlink_metadata(&p).unwrap();
            if meta.file_type().is_symlink() {
                (
                    rel,
                    "link".into(),
                    0,
                    std::fs::read_link(&p).unwrap().into_os_string().into_encoded_bytes(),
                )
            } else if meta.is_dir() {
                (rel, "dir".into(), meta.permissions().mode() & 0o7777, Vec::new())
            } else {
                (
                    rel,
                    "file".into(),
                    meta.permissions().mode() & 0o7777,
                    std::fs::read(&p).unwrap(),
                )
            }
        })
        .collect()
}

#[test]
fn generated_trees_survive_sync_in_then_out() {
    use envrt_runtime_core::{SyncFile, SyncOperation};
    let fx = Fixture::new();
    let config = ProptestConfig {
        cases: 24,
        failure_persistence: None,
        ..ProptestConfig::default()
    };
    let entries = proptest::collection::vec((proptest::collection::vec(name(), 1..4), node()), 0..24);
    let mut runner = proptest::test_runner::TestRunner::new(config);
    runner
        .run(&entries, |entries| {
            let host = common::Scratch::new("prop-tree");
            let source = host.join("src");
            std::fs::create_dir(&source).unwrap();
            build(&source, &entries);
            // The generated modes include set-uid and sticky bits: kept on request only.
            let op = |id: &str, mut file: SyncFile| {
                file.keep_special_bits = Some(true);
                SyncOperation {
                    operation_id: id.into(),
                    files: vec![file],
                    post_upload_commands: Vec::new(),
                }
            };
            let target = format!("t-{}", uuid::Uuid::new_v4().simple());
            let into = op("in", SyncFile::directory(source.to_string_lossy(), &target));
            let sent = fx.rt.block_on(fx.h.runtime.sync_in(&fx.lease.id, &[into])).unwrap();
            let back = op("out", SyncFile::directory(&target, host.s("back")));
            let got = fx.rt.block_on(fx.h.runtime.sync_out(&fx.lease.id, &[back])).unwrap();
            prop_assert_eq!(
                &sent.operations[0].files_transferred,
                &got.operations[0].files_transferred
            );
            prop_assert_eq!(
                &sent.operations[0].bytes_transferred,
                &got.operations[0].bytes_transferred
            );
            prop_assert_eq!(snapshot(&source), snapshot(&host.join("back")));
            Ok(())
        })
        .unwrap();
    fx.finish();
}

/// The shape the generator used to make (a CI failure): a link made below a parent that is
/// itself a link lands elsewhere, where its `../` climbs out of the tree. Sync in refuses
/// it by name, and `build` no longer makes it.
#[test]
fn a_link_made_through_a_linked_parent_really_escapes() {
    use envrt_runtime_core::{DriverError, RuntimeError, SyncFile, SyncOperation};
    let entries = vec![
        (vec!["日本".to_string()], Node::Dir(0o755)),
        (vec!["日本".to_string(), "deep".to_string()], Node::Link(0)),
        (
            vec!["日本".to_string(), "deep".to_string(), "-dash".to_string()],
            Node::Link(0),
        ),
    ];
    let host = common::Scratch::new("prop-escape");
    let built = host.join("built");
    std::fs::create_dir(&built).unwrap();
    build(&built, &entries);
    assert_eq!(
        snapshot(&built),
        vec![
            ("日本".to_string(), "dir".to_string(), 0o755, Vec::new()),
            (
                "日本/deep".to_string(),
                "link".to_string(),
                0,
                "../日本".as_bytes().to_vec()
            ),
        ]
    );

    // What the generator made before: `日本/deep/-dash` created through `日本/deep`.
    let source = host.join("src");
    std::fs::create_dir_all(source.join("日本")).unwrap();
    std::os::unix::fs::symlink("../日本", source.join("日本/deep")).unwrap();
    std::os::unix::fs::symlink("../../日本", source.join("日本/deep/-dash")).unwrap();
    assert!(
        std::fs::symlink_metadata(source.join("日本/-dash"))
            .unwrap()
            .file_type()
            .is_symlink()
    );

    let fx = Fixture::new();
    let target = format!("t-{}", uuid::Uuid::new_v4().simple());
    let into = SyncOperation {
        operation_id: "in".into(),
        files: vec![SyncFile::directory(source.to_string_lossy(), &target)],
        post_upload_commands: Vec::new(),
    };
    let err = fx.rt.block_on(fx.h.runtime.sync_in(&fx.lease.id, &[into])).unwrap_err();
    match err {
        RuntimeError::Driver(e @ DriverError::EntryEscapesTarget { .. }) => assert_eq!(
            e.to_string(),
            format!("Entry \"日本/-dash\" would be written outside the target \"{target}\".")
        ),
        other => panic!("expected EntryEscapesTarget, got {other:?}"),
    }
    fx.finish();
}

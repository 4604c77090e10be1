//! File sync (contract section 6): generated trees round-trip byte for byte with their
//! modes, every escape is refused with its exact error and writes nothing, failed
//! operations leave no half-written target, excludes, modes, post-upload commands, and
//! set-uid/set-gid bits cleared both ways unless a request keeps them.

use std::collections::BTreeMap;
use std::os::unix::fs::symlink;
use std::path::Path;

use super::tree::{Node, inconsistency, read_tree, tree, write_tree};
use super::{Check, has_sync_and_execute, has_sync_both, property};
use crate::context::{Ctx, ensure, ensure_eq};
use envrt_runtime_core::{Lease, LeasePolicy, SyncFile, SyncOperation, WorkspaceRequest, sync::PostUploadCommand};

pub(super) const CHECKS: &[Check] = &[
    Check::new("sync_tree_roundtrip", has_sync_both, tree_roundtrip)
        .promise("A directory tree synced in and back out comes back unchanged."),
    Check::new("sync_in_refuses_parent_target", has_sync_both, refuses_parent)
        .promise("A sync-in target with `..` is refused and nothing is written."),
    Check::new("sync_in_refuses_absolute_target", has_sync_both, refuses_absolute)
        .promise("An absolute sync-in target outside the path scope is refused; the host never gets it."),
    Check::new("sync_out_refuses_parent_source", has_sync_both, refuses_parent_source)
        .promise("A sync-out source with `..` is refused."),
    Check::new("sync_in_refuses_symlink_out", has_sync_and_execute, refuses_symlink_out)
        .promise("Sync in never writes through a link in the environment that leads out of the target."),
    Check::new(
        "sync_in_refuses_escaping_link_in_source",
        has_sync_both,
        refuses_escaping_source_link,
    )
    .promise("A link in the host source that leads out of it is refused."),
    Check::new(
        "sync_out_refuses_escaping_link",
        has_sync_and_execute,
        refuses_escaping_env_link,
    )
    .promise("A link in the environment source that leads out of it is refused."),
    Check::new(
        "sync_post_upload_cwd_refused",
        has_sync_and_execute,
        post_upload_cwd_refused,
    )
    .promise("A post-upload cwd not under one of the operation's targets is refused before anything is sent."),
    Check::new("sync_post_upload_commands", has_post_upload, post_upload_commands)
        .promise("Post-upload commands run after the files land, in order, stopping at the first failure."),
    Check::new("sync_no_half_written_target", has_sync_both, no_half_written)
        .promise("A failed sync operation leaves no half-written target behind."),
    Check::new("sync_exclude_and_mode", has_sync_and_execute, exclude_and_mode)
        .promise("Exclude globs leave files out and mode is the target's final mode."),
    Check::new("sync_clears_special_bits", has_sync_and_execute, clears_special_bits)
        .promise("Set-uid, set-gid and sticky bits are cleared unless keepSpecialBits."),
];

fn has_post_upload(p: &crate::Profile) -> bool {
    has_sync_and_execute(p) && p.has_realize
}

fn op(id: &str, files: Vec<SyncFile>) -> Vec<SyncOperation> {
    vec![SyncOperation {
        operation_id: id.into(),
        files,
        post_upload_commands: Vec::new(),
    }]
}

fn host_dir() -> Result<tempfile::TempDir, String> {
    tempfile::Builder::new()
        .prefix("envrt-conformance-")
        .tempdir()
        .map_err(|e| format!("temp dir: {e}"))
}

fn path_str(path: &Path) -> String {
    path.to_string_lossy().into_owned()
}

fn tree_roundtrip(ctx: &Ctx) -> Result<(), String> {
    ctx.with_lease_blocking(LeasePolicy::Ephemeral, |lease| {
        property(ctx, tree(), |tree| {
            if let Some(why) = inconsistency(&tree) {
                return Err(format!("the kit generated an inconsistent tree (a kit bug): {why}"));
            }
            let host = host_dir()?;
            let source = host.path().join("source");
            write_tree(&source, &tree).map_err(|e| format!("writing the tree: {e}"))?;
            let target = ctx.marker("tree");
            ctx.block_on(async {
                let result = ctx
                    .runtime
                    .sync_in(
                        &lease.id,
                        &op("in", vec![SyncFile::directory(path_str(&source), &target)]),
                    )
                    .await
                    .map_err(|e| format!("sync_in: {e}"))?;
                let files: Vec<&Node> = tree.values().filter(|n| matches!(n, Node::File { .. })).collect();
                let bytes: usize = files
                    .iter()
                    .map(|n| match n {
                        Node::File { content, .. } => content.len(),
                        _ => 0,
                    })
                    .sum();
                ensure_eq(
                    result.operations[0].files_transferred,
                    files.len() as u64,
                    "files transferred in",
                )?;
                ensure_eq(
                    result.operations[0].bytes_transferred,
                    bytes as u64,
                    "bytes transferred in",
                )?;
                let back = host.path().join("back");
                ctx.runtime
                    .sync_out(
                        &lease.id,
                        &op("out", vec![SyncFile::directory(&target, path_str(&back))]),
                    )
                    .await
                    .map_err(|e| format!("sync_out: {e}"))?;
                let got = read_tree(&back).map_err(|e| format!("reading the result: {e}"))?;
                ensure(got == tree, || diff(&tree, &got))
            })
        })
    })
}

fn diff(want: &BTreeMap<String, Node>, got: &BTreeMap<String, Node>) -> String {
    let mut lines = Vec::new();
    for (k, v) in want {
        match got.get(k) {
            None => lines.push(format!("missing {k:?}")),
            Some(g) if g != v => lines.push(format!("differs {k:?}: want {v:?} got {g:?}")),
            _ => {}
        }
    }
    for k in got.keys().filter(|k| !want.contains_key(*k)) {
        lines.push(format!("extra {k:?}"));
    }
    format!("tree differs after the round trip: {}", lines.join("; "))
}

async fn expect_refusal(
    result: Result<envrt_runtime_core::SyncResult, envrt_runtime_core::RuntimeError>,
    text: &str,
) -> Result<(), String> {
    match result {
        Ok(_) => Err(format!("accepted; expected the refusal {text:?}")),
        Err(e) => ensure_eq(e.to_string().as_str(), text, "refusal"),
    }
}

fn one_file_source() -> Result<(tempfile::TempDir, String), String> {
    let host = host_dir()?;
    let file = host.path().join("payload.txt");
    std::fs::write(&file, b"payload").map_err(|e| e.to_string())?;
    let path = path_str(&file);
    Ok((host, path))
}

fn refuses_parent(ctx: &Ctx) -> Result<(), String> {
    let (_host, file) = one_file_source()?;
    ctx.with_lease(LeasePolicy::Ephemeral, |lease| async move {
        let target = format!("../{}", ctx.marker("escape"));
        let result = ctx
            .runtime
            .sync_in(&lease.id, &op("esc", vec![SyncFile::file(&file, &target)]))
            .await;
        expect_refusal(result, &format!("Path \"{target}\" is outside the lease workspace.")).await
    })
}

fn refuses_absolute(ctx: &Ctx) -> Result<(), String> {
    let (_host, file) = one_file_source()?;
    ctx.with_lease(LeasePolicy::Ephemeral, |lease| async move {
        let target = format!("/tmp/{}", ctx.marker("escape-abs"));
        let result = ctx
            .runtime
            .sync_in(&lease.id, &op("esc", vec![SyncFile::file(&file, &target)]))
            .await;
        // A whole isolated environment takes the path as its own; the host never sees it.
        let whole = ctx.whole_environment();
        if whole {
            result.map_err(|e| format!("{target} refused: {e}"))?;
        } else {
            expect_refusal(result, &format!("Path \"{target}\" is outside the lease workspace.")).await?;
        }
        ensure(!Path::new(&target).exists(), || {
            format!("{target} was written on the host")
        })?;
        if ctx.profile.has_execute && !whole {
            ensure_absent(ctx, &lease, &target, "target written in the environment").await?;
        }
        Ok(())
    })
}

fn refuses_parent_source(ctx: &Ctx) -> Result<(), String> {
    let host = host_dir()?;
    ctx.with_lease(LeasePolicy::Ephemeral, |lease| async move {
        let out = path_str(&host.path().join("out"));
        let sources: &[&str] = if ctx.whole_environment() {
            &["../etc"]
        } else {
            &["../etc", "/etc"]
        };
        for source in sources.iter().copied() {
            let result = ctx
                .runtime
                .sync_out(&lease.id, &op("esc", vec![SyncFile::directory(source, &out)]))
                .await;
            expect_refusal(result, &format!("Path \"{source}\" is outside the lease workspace.")).await?;
        }
        ensure(!host.path().join("out").exists(), || {
            "the host target was created".into()
        })
    })
}

fn refuses_symlink_out(ctx: &Ctx) -> Result<(), String> {
    let (_host, file) = one_file_source()?;
    ctx.with_lease(LeasePolicy::Ephemeral, |lease| async move {
        let link = ctx.marker("link-out");
        let name = ctx.marker("through-link");
        ctx.sh(&lease, &format!("ln -s /tmp '{link}'")).await?;
        let target = format!("{link}/{name}");
        let result = ctx
            .runtime
            .sync_in(&lease.id, &op("esc", vec![SyncFile::file(&file, &target)]))
            .await;
        if ctx.whole_environment() {
            // The link leads elsewhere in the environment: that is where the file lands.
            result.map_err(|e| format!("{target} refused: {e}"))?;
        } else {
            expect_refusal(result, &format!("Path \"{target}\" is outside the lease workspace.")).await?;
            ensure_absent(ctx, &lease, &format!("/tmp/{name}"), "file written through the link").await?;
        }
        ensure(!Path::new(&format!("/tmp/{name}")).exists(), || {
            "written on the host".into()
        })
    })
}

/// Fails unless `path` does not exist in the environment.
async fn ensure_absent(ctx: &Ctx, lease: &Lease, path: &str, what: &str) -> Result<(), String> {
    let seen = ctx
        .sh(lease, &format!("test -e '{path}' && echo yes || echo no"))
        .await?;
    ensure_eq(String::from_utf8_lossy(&seen).trim(), "no", what)
}

fn is_entry_escape(error: &str) -> bool {
    error.starts_with("Entry \"") && error.contains("\" would be written outside the target \"")
}

fn refuses_escaping_source_link(ctx: &Ctx) -> Result<(), String> {
    let host = host_dir()?;
    let source = host.path().join("src");
    std::fs::create_dir_all(&source).map_err(|e| e.to_string())?;
    std::fs::write(source.join("ok.txt"), b"ok").map_err(|e| e.to_string())?;
    symlink("/etc/passwd", source.join("evil")).map_err(|e| e.to_string())?;
    ctx.with_lease(LeasePolicy::Ephemeral, |lease| async move {
        let target = ctx.marker("evil-in");
        let result = ctx
            .runtime
            .sync_in(
                &lease.id,
                &op("esc", vec![SyncFile::directory(path_str(&source), &target)]),
            )
            .await;
        let error = result.err().ok_or("an escaping link was copied in")?.to_string();
        ensure(is_entry_escape(&error), || format!("unexpected error: {error}"))?;
        if ctx.profile.has_execute {
            ensure_absent(ctx, &lease, &target, "target after a refused operation").await?;
        }
        Ok(())
    })
}

fn refuses_escaping_env_link(ctx: &Ctx) -> Result<(), String> {
    let host = host_dir()?;
    ctx.with_lease(LeasePolicy::Ephemeral, |lease| async move {
        let dir = ctx.marker("evil-out");
        ctx.sh(
            &lease,
            &format!("mkdir '{dir}' && printf ok > '{dir}/ok' && ln -s /etc/passwd '{dir}/evil'"),
        )
        .await?;
        let out = host.path().join("out");
        let result = ctx
            .runtime
            .sync_out(&lease.id, &op("esc", vec![SyncFile::directory(&dir, path_str(&out))]))
            .await;
        let error = result.err().ok_or("an escaping link was copied out")?.to_string();
        ensure(is_entry_escape(&error), || format!("unexpected error: {error}"))?;
        ensure(!out.exists(), || "a half-written host target remains".into())
    })
}

fn post_upload_cwd_refused(ctx: &Ctx) -> Result<(), String> {
    let (_host, file) = one_file_source()?;
    ctx.with_lease(LeasePolicy::Ephemeral, |lease| async move {
        let target = ctx.marker("post-cwd");
        for cwd in ["/", "relative/dir", "/tmp/../etc"] {
            let operations = vec![SyncOperation {
                operation_id: "post".into(),
                files: vec![SyncFile::file(&file, &target)],
                post_upload_commands: vec![PostUploadCommand {
                    command: "touch ran".into(),
                    cwd: Some(cwd.into()),
                    timeout_ms: None,
                }],
            }];
            let result = ctx.runtime.sync_in(&lease.id, &operations).await;
            expect_refusal(
                result,
                &format!(
                    "Post-upload command cwd \"{cwd}\" must be an absolute path under one of the operation's targets."
                ),
            )
            .await?;
        }
        ensure_absent(ctx, &lease, &target, "target written before the refusal").await
    })
}

fn post_upload_commands(ctx: &Ctx) -> Result<(), String> {
    let (host, _file) = one_file_source()?;
    let source = path_str(host.path());
    ctx.with_lease(LeasePolicy::Ephemeral, |lease| async move {
        let workspace = ctx
            .runtime
            .realize_workspace(&lease.id, &WorkspaceRequest::default())
            .await
            .map_err(|e| format!("realize: {e}"))?
            .cwd;
        let dir = ctx.marker("post");
        let abs = format!("{}/{dir}", workspace.trim_end_matches('/'));
        let command = |c: &str| PostUploadCommand {
            command: c.into(),
            cwd: Some(abs.clone()),
            timeout_ms: Some(30_000),
        };
        let operations = vec![SyncOperation {
            operation_id: "post".into(),
            files: vec![SyncFile::directory(&source, &dir)],
            post_upload_commands: vec![
                command("cat payload.txt > copy.txt"),
                command("exit 3"),
                command("touch never"),
            ],
        }];
        let result = ctx.runtime.sync_in(&lease.id, &operations).await;
        expect_refusal(result, "Post-upload command \"exit 3\" failed with exit code 3.").await?;
        let seen = ctx
            .sh(
                &lease,
                &format!("cat '{dir}/copy.txt'; test -e '{dir}/never' && echo never-ran-wrongly || true"),
            )
            .await?;
        ensure_eq(
            String::from_utf8_lossy(&seen).as_ref(),
            "payload",
            "post-upload effects",
        )
    })
}

fn no_half_written(ctx: &Ctx) -> Result<(), String> {
    let (host, file) = one_file_source()?;
    let missing = path_str(&host.path().join("missing.bin"));
    ctx.with_lease(LeasePolicy::Ephemeral, |lease| async move {
        let dir = ctx.marker("half");
        let files = vec![
            SyncFile::file(&file, format!("{dir}/first.txt")),
            SyncFile::file(&missing, format!("{dir}/second.txt")),
        ];
        let result = ctx.runtime.sync_in(&lease.id, &op("half", files)).await;
        expect_refusal(result, &format!("Sync source \"{missing}\" does not exist.")).await?;
        let back = host.path().join("back");
        let out = ctx
            .runtime
            .sync_out(&lease.id, &op("look", vec![SyncFile::directory(".", path_str(&back))]))
            .await
            .map_err(|e| format!("sync_out of the workspace: {e}"))?;
        let _ = out;
        let leftovers: Vec<String> = read_tree(&back)
            .map_err(|e| e.to_string())?
            .into_keys()
            .filter(|k| k.starts_with(&dir) && k != &dir && k != &format!("{dir}/first.txt"))
            .collect();
        ensure(leftovers.is_empty(), || {
            format!("half-written entries remain: {leftovers:?}")
        })
    })
}

fn exclude_and_mode(ctx: &Ctx) -> Result<(), String> {
    let host = host_dir()?;
    let source = host.path().join("src");
    let tree: BTreeMap<String, Node> = [
        ("a.log", b"log".to_vec()),
        ("b.txt", b"keep".to_vec()),
        ("sub/c.log", b"log".to_vec()),
        ("sub/d.txt", b"keep2".to_vec()),
        ("node_modules/x.js", b"x".to_vec()),
    ]
    .into_iter()
    .map(|(p, c)| {
        (
            p.to_string(),
            Node::File {
                content: c,
                mode: 0o644,
            },
        )
    })
    .chain([("sub".to_string(), Node::Dir), ("node_modules".to_string(), Node::Dir)])
    .collect();
    write_tree(&source, &tree).map_err(|e| e.to_string())?;
    let single = host.path().join("single.txt");
    std::fs::write(&single, b"mode").map_err(|e| e.to_string())?;
    ctx.with_lease(LeasePolicy::Ephemeral, |lease| async move {
        let dir = ctx.marker("exclude");
        let mut entry = SyncFile::directory(path_str(&source), &dir);
        entry.exclude = vec!["*.log".into(), "node_modules".into()];
        let mut file = SyncFile::file(path_str(&single), format!("{dir}-single.txt"));
        file.mode = Some(0o640);
        let result = ctx
            .runtime
            .sync_in(&lease.id, &op("ex", vec![entry, file]))
            .await
            .map_err(|e| format!("sync_in: {e}"))?;
        ensure_eq(result.operations[0].files_transferred, 3, "files transferred")?;
        ensure_eq(result.operations[0].bytes_transferred, 4 + 5 + 4, "bytes transferred")?;
        let listing = ctx.sh(&lease, &format!("cd '{dir}' && find . | sort")).await?;
        ensure_eq(
            String::from_utf8_lossy(&listing).as_ref(),
            ".\n./b.txt\n./sub\n./sub/d.txt\n",
            "files after excludes",
        )?;
        let mode = ctx.sh(&lease, &format!("stat -c %a '{dir}-single.txt'")).await?;
        ensure_eq(String::from_utf8_lossy(&mode).trim(), "640", "mode of the target")
    })
}

/// A set-uid file and a set-gid directory lose those bits in both directions (a copy is
/// written by a privileged host or worker: a kept bit would hand out its privilege).
fn clears_special_bits(ctx: &Ctx) -> Result<(), String> {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let host = host_dir()?;
    let source = host.path().join("bits");
    let set = |path: &Path, mode: u32| {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).map_err(|e| e.to_string())
    };
    std::fs::create_dir_all(source.join("g")).map_err(|e| e.to_string())?;
    std::fs::write(source.join("su"), b"#!/bin/sh\n").map_err(|e| e.to_string())?;
    set(&source.join("su"), 0o4755)?;
    set(&source.join("g"), 0o2777)?;
    ctx.with_lease(LeasePolicy::Ephemeral, |lease| async move {
        let dir = ctx.marker("bits");
        ctx.runtime
            .sync_in(&lease.id, &op("in", vec![SyncFile::directory(path_str(&source), &dir)]))
            .await
            .map_err(|e| format!("sync_in: {e}"))?;
        let modes = ctx.sh(&lease, &format!("cd '{dir}' && stat -c '%a %n' su g")).await?;
        ensure_eq(
            String::from_utf8_lossy(&modes).as_ref(),
            "755 su\n777 g\n",
            "modes after sync in (special bits cleared)",
        )?;
        ctx.sh(&lease, &format!("cd '{dir}' && chmod 4755 su && chmod 2777 g"))
            .await?;
        let back = host.path().join("back");
        ctx.runtime
            .sync_out(&lease.id, &op("out", vec![SyncFile::directory(&dir, path_str(&back))]))
            .await
            .map_err(|e| format!("sync_out: {e}"))?;
        let mode = |p: &Path| {
            std::fs::symlink_metadata(p)
                .map(|m| m.mode() & 0o7777)
                .map_err(|e| e.to_string())
        };
        ensure_eq(
            (mode(&back.join("su"))?, mode(&back.join("g"))?),
            (0o755, 0o777),
            "modes after sync out (special bits cleared)",
        )
    })
}

//! Valid inputs sent positively, and checked to take effect: a subdirectory cwd (the
//! command's `pwd`), env values containing `=`, non-UTF-8 file names synced in and out
//! (binary-safe targets only), and empty directories synced and present.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::Path;

use envrt_runtime_core::{EnvValue, ExecuteRequest, LeasePolicy, SyncFile, SyncOperation, WorkspaceRequest};

use super::{Check, has_execute, has_sync_both};
use crate::context::{Ctx, ensure, ensure_eq};

pub(super) const CHECKS: &[Check] = &[
    Check::new("execute_cwd_subdirectory", has_execute, cwd_subdirectory)
        .promise("A relative subdirectory cwd is where the command runs (`pwd` prints it)."),
    Check::new("execute_env_values_with_equals", has_execute, env_with_equals)
        .promise("Env values containing `=` reach the command unchanged."),
    Check::new("sync_non_utf8_names", has_binary_sync, non_utf8_names)
        .promise("File names that are not UTF-8 sync in and out unchanged."),
    Check::new("sync_empty_directories", has_sync_both, empty_directories)
        .promise("Empty directories sync in and out."),
];

fn has_binary_sync(p: &crate::Profile) -> bool {
    has_sync_both(p) && p.binary_safe
}

fn cwd_subdirectory(ctx: &Ctx) -> Result<(), String> {
    ctx.with_lease(LeasePolicy::Ephemeral, |lease| async move {
        let dir = format!("{}/sub dir/é", ctx.marker("cwd"));
        ctx.sh(&lease, &format!("mkdir -p '{dir}'")).await?;
        for cwd in [dir.clone(), format!("{dir}/"), format!("./{dir}")] {
            let mut request = ExecuteRequest::new("pwd", Vec::<String>::new());
            request.cwd = Some(cwd.clone());
            let result = ctx.exec(&lease, request).await?;
            ensure_eq(result.exit_code, Some(0), &format!("exit code of pwd in {cwd:?}"))?;
            let seen = String::from_utf8_lossy(&result.stdout)
                .trim_end_matches('\n')
                .to_owned();
            ensure(seen.ends_with(&format!("/{dir}")), || {
                format!("pwd with cwd {cwd:?} printed {seen:?}")
            })?;
            if ctx.profile.has_realize {
                let workspace = ctx
                    .runtime
                    .realize_workspace(&lease.id, &WorkspaceRequest::default())
                    .await
                    .map_err(|e| format!("realize: {e}"))?
                    .cwd;
                ensure_eq(
                    seen.as_str(),
                    format!("{}/{dir}", workspace.trim_end_matches('/')).as_str(),
                    "pwd under the realized workspace",
                )?;
            }
        }
        Ok(())
    })
}

fn env_with_equals(ctx: &Ctx) -> Result<(), String> {
    let vars: BTreeMap<&str, &str> = BTreeMap::from([
        ("ENVRT_EQ_A", "a=b"),
        ("ENVRT_EQ_B", "="),
        ("ENVRT_EQ_C", "x==y=z"),
        ("ENVRT_EQ_D", "=leading"),
        ("ENVRT_EQ_E", "trailing="),
        ("ENVRT_EQ_F", "k=v; other=w"),
    ]);
    ctx.with_lease(LeasePolicy::Ephemeral, |lease| async move {
        let script: String = vars.keys().map(|k| format!(" \"${k}\"")).collect();
        let mut request = ExecuteRequest::new("sh", ["-c".to_string(), format!("printf '%s\\n'{script}")]);
        request.env = vars.iter().map(|(k, v)| (k.to_string(), EnvValue::from(*v))).collect();
        let result = ctx.exec(&lease, request).await?;
        let expected: String = vars.values().map(|v| format!("{v}\n")).collect();
        ensure_eq(
            String::from_utf8_lossy(&result.stdout).as_ref(),
            expected.as_str(),
            "values containing = seen by the command",
        )
    })
}

fn host_dir() -> Result<tempfile::TempDir, String> {
    tempfile::Builder::new()
        .prefix("envrt-conformance-")
        .tempdir()
        .map_err(|e| format!("temp dir: {e}"))
}

fn op(id: &str, file: SyncFile) -> Vec<SyncOperation> {
    vec![SyncOperation {
        operation_id: id.into(),
        files: vec![file],
        post_upload_commands: Vec::new(),
    }]
}

/// Every entry under `root`: relative raw name bytes → file content (`None` for a dir).
fn listing(root: &Path) -> std::io::Result<BTreeMap<Vec<u8>, Option<Vec<u8>>>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir)? {
            let path = entry?.path();
            let rel = path
                .strip_prefix(root)
                .expect("under root")
                .as_os_str()
                .as_bytes()
                .to_vec();
            if std::fs::symlink_metadata(&path)?.is_dir() {
                stack.push(path);
                out.insert(rel, None);
            } else {
                out.insert(rel, Some(std::fs::read(&path)?));
            }
        }
    }
    Ok(out)
}

fn shown(listing: &BTreeMap<Vec<u8>, Option<Vec<u8>>>) -> Vec<String> {
    listing
        .iter()
        .map(|(k, v)| format!("{}{}", k.escape_ascii(), if v.is_none() { "/" } else { "" }))
        .collect()
}

fn non_utf8_names(ctx: &Ctx) -> Result<(), String> {
    let host = host_dir()?;
    let source = host.path().join("src");
    let raw = |bytes: &[u8]| source.join(OsString::from_vec(bytes.to_vec()));
    let setup = || -> std::io::Result<()> {
        std::fs::create_dir_all(raw(b"dir-\xff\xfe"))?;
        std::fs::write(raw(b"caf\xe9.txt"), b"latin-1 name")?;
        std::fs::write(raw(b"\x80\x81"), b"bare continuation bytes")?;
        std::fs::write(raw(b"dir-\xff\xfe/inner-\xc3\x28"), b"inner")?;
        std::fs::write(raw(b"plain.txt"), b"plain")
    };
    setup().map_err(|e| format!("writing the source: {e}"))?;
    let want = listing(&source).map_err(|e| e.to_string())?;
    ctx.with_lease(LeasePolicy::Ephemeral, |lease| async move {
        let target = ctx.marker("non-utf8");
        let source_str = source.to_string_lossy().into_owned();
        let result = ctx
            .runtime
            .sync_in(&lease.id, &op("in", SyncFile::directory(&source_str, &target)))
            .await
            .map_err(|e| format!("sync_in of non-UTF-8 names: {e}"))?;
        ensure_eq(result.operations[0].files_transferred, 4, "files transferred in")?;
        if ctx.profile.has_execute {
            let count = ctx.sh(&lease, &format!("find '{target}' -type f | wc -l")).await?;
            ensure_eq(String::from_utf8_lossy(&count).trim(), "4", "files in the environment")?;
        }
        let back = host.path().join("back");
        ctx.runtime
            .sync_out(
                &lease.id,
                &op("out", SyncFile::directory(&target, back.to_string_lossy())),
            )
            .await
            .map_err(|e| format!("sync_out of non-UTF-8 names: {e}"))?;
        let got = listing(&back).map_err(|e| format!("reading the result: {e}"))?;
        ensure(got == want, || {
            format!(
                "names after the round trip: want {:?}, got {:?}",
                shown(&want),
                shown(&got)
            )
        })
    })
}

fn empty_directories(ctx: &Ctx) -> Result<(), String> {
    let host = host_dir()?;
    let source = host.path().join("src");
    let dirs = ["empty", "nested/empty", "nested/deeper/empty", "with file/empty"];
    let setup = || -> std::io::Result<()> {
        for d in dirs {
            std::fs::create_dir_all(source.join(d))?;
        }
        std::fs::write(source.join("with file/f.txt"), b"f")
    };
    setup().map_err(|e| format!("writing the source: {e}"))?;
    ctx.with_lease(LeasePolicy::Ephemeral, |lease| async move {
        let target = ctx.marker("empty-dirs");
        ctx.runtime
            .sync_in(
                &lease.id,
                &op("in", SyncFile::directory(source.to_string_lossy(), &target)),
            )
            .await
            .map_err(|e| format!("sync_in: {e}"))?;
        if ctx.profile.has_execute {
            let tests: Vec<String> = dirs.iter().map(|d| format!("test -d '{target}/{d}'")).collect();
            ctx.sh(&lease, &tests.join(" && "))
                .await
                .map_err(|e| format!("an empty directory is missing in the environment: {e}"))?;
        }
        let back = host.path().join("back");
        ctx.runtime
            .sync_out(
                &lease.id,
                &op("out", SyncFile::directory(&target, back.to_string_lossy())),
            )
            .await
            .map_err(|e| format!("sync_out: {e}"))?;
        let missing: Vec<&str> = dirs.iter().copied().filter(|d| !back.join(d).is_dir()).collect();
        ensure(missing.is_empty(), || {
            format!("empty directories missing after the round trip: {missing:?}")
        })
    })
}

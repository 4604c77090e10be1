//! Channels nobody reads in the normal course: the driver's tracing output (a secret env
//! value must never show there) and the file system while a sync writes (a file must never
//! be readable with a looser mode than the one requested, not even for a moment).

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use envrt_runtime_core::{EnvValue, ExecuteRequest, Lease, LeasePolicy, Secret, SyncFile, SyncOperation};

use super::{Check, Checked, has_execute, has_sync_and_execute};
use crate::capture::Watch;
use crate::context::{Ctx, ensure, ensure_eq};

pub(super) const CHECKS: &[Check] = &[
    Check::maybe("execute_secrets_not_logged", has_execute, secrets_not_logged)
        .promise("A secret env value never reaches tracing or log output."),
    Check::maybe("sync_in_mode_never_looser", has_sync_and_execute, sync_in_mode)
        .promise("A file synced in is never readable with a looser mode than requested while written."),
    Check::new("sync_out_mode_never_looser", has_sync_and_execute, sync_out_mode)
        .promise("A file synced out is never readable on the host with a looser mode than requested while written."),
];

fn secrets_not_logged(ctx: &Ctx) -> Result<Checked, String> {
    ctx.with_lease(LeasePolicy::Ephemeral, |lease| async move {
        let secret = ctx.marker("logged-secret");
        let watch = match Watch::open(vec![secret.clone(), lease.id.clone()]) {
            Ok(watch) => watch,
            Err(why) => {
                return Ok(Checked::NotChecked(format!(
                    "cannot capture tracing and log output: {why}"
                )));
            }
        };
        exercise_secret(ctx, &lease, &secret).await?;
        let seen_secret = watch.seen(0);
        let seen_lease = watch.seen(1);
        drop(watch);
        ensure(seen_secret.is_empty(), || {
            format!(
                "a secret env value appeared in the tracing or log output {} time(s), in: {:?}",
                seen_secret.len(),
                seen_secret
            )
        })?;
        if seen_lease.is_empty() {
            return Ok(Checked::NotChecked(
                "no tracing output mentioned the lease: the capture sees nothing of this run".into(),
            ));
        }
        Ok(Checked::Yes)
    })
}

/// An execute environment carrying `secret` as `TOKEN` beside a plain `OTHER`.
pub(super) fn secret_env(secret: &str) -> [(String, EnvValue); 2] {
    [
        ("TOKEN".to_owned(), Secret::new(secret.to_owned()).into()),
        ("OTHER".to_owned(), "plain".into()),
    ]
}

/// Runs executes carrying `secret` down the paths that say the most: one that checks the
/// command sees it (its length), then a refused cwd, a missing program and a timeout. The
/// checks that watch an output channel for the secret run this while they watch.
pub(super) async fn exercise_secret(ctx: &Ctx, lease: &Lease, secret: &str) -> Result<(), String> {
    let request = |command: &str, args: &[&str]| {
        let mut request = ExecuteRequest::new(command, args.iter().copied());
        request.env.extend(secret_env(secret));
        request
    };
    let result = ctx
        .exec(lease, request("sh", &["-c", "printf %s \"$TOKEN\" | wc -c"]))
        .await?;
    ensure_eq(
        String::from_utf8_lossy(&result.stdout).trim(),
        secret.len().to_string().as_str(),
        "length of the secret seen by the command",
    )?;
    let mut refused = request("true", &[]);
    refused.cwd = Some("../outside".into());
    let _ = ctx.runtime.execute(&lease.id, refused).await;
    let missing = ctx.marker("no-such-program");
    let _ = ctx.runtime.execute(&lease.id, request(&missing, &[])).await;
    let mut slow = request("sleep", &["30"]);
    slow.timeout = Some(Duration::from_millis(300));
    let _ = ctx.runtime.execute(&lease.id, slow).await;
    Ok(())
}

const SIZE: usize = 8 * 1024 * 1024;
const FILES: usize = 3;

fn host_sources(dir: &Path) -> Result<Vec<PathBuf>, String> {
    (0..FILES)
        .map(|i| {
            let path = dir.join(format!("big-{i}.bin"));
            std::fs::write(&path, vec![b'm'; SIZE]).map_err(|e| e.to_string())?;
            // Looser at the source than the requested 0600: a driver that copies the
            // source mode first and tightens it later shows it.
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).map_err(|e| e.to_string())?;
            Ok(path)
        })
        .collect()
}

fn operation(files: Vec<SyncFile>) -> Vec<SyncOperation> {
    vec![SyncOperation {
        operation_id: "mode".into(),
        files,
        post_upload_commands: Vec::new(),
    }]
}

/// While large 0600 files are synced in, a loop inside the environment looks for any file
/// in the (fresh) workspace with group or other bits: the targets and any staging files
/// beside them.
fn sync_in_mode(ctx: &Ctx) -> Result<Checked, String> {
    let host = tempfile::tempdir().map_err(|e| e.to_string())?;
    let sources = host_sources(host.path())?;
    ctx.with_lease(LeasePolicy::Ephemeral, |lease| async move {
        let dir = ctx.marker("mode-in");
        // The sampler's own tool must see a loose file, or it cannot look at all.
        let control = ctx
            .sh(
                &lease,
                &format!(
                    "mkdir -p '{dir}' '{dir}.control' && touch '{dir}.control/f' && chmod 644 '{dir}.control/f' \
                     && find '{dir}.control' -type f -perm /077 && rm -r '{dir}.control'"
                ),
            )
            .await;
        if !control.as_ref().is_ok_and(|out| !out.is_empty()) {
            return Ok(Checked::NotChecked(format!(
                "`find -perm /077` does not work in this environment: {control:?}"
            )));
        }
        let sampler = format!(
            "touch '{dir}.started'; while [ ! -e '{dir}.done' ]; do \
             find . -type f -perm /077 ! -name '{dir}.started' ! -name '{dir}.done'; done; exit 0"
        );
        let mut request = ExecuteRequest::new("sh", ["-c".to_string(), sampler]);
        request.timeout = Some(Duration::from_secs(60));
        let sampling = ctx.exec(&lease, request);
        let syncing = async {
            let mut started = false;
            for _ in 0..50 {
                let script = format!("test -e '{dir}.started' && echo y || true");
                let look = ctx.sh(&lease, &script);
                if let Ok(Ok(out)) = tokio::time::timeout(Duration::from_secs(2), look).await {
                    if out == b"y\n" {
                        started = true;
                        break;
                    }
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            let outcome: Result<bool, String> = if started {
                let files = sources
                    .iter()
                    .enumerate()
                    .map(|(i, s)| {
                        let mut f = SyncFile::file(s.to_string_lossy(), format!("{dir}/big-{i}.bin"));
                        f.mode = Some(0o600);
                        f
                    })
                    .collect();
                ctx.runtime
                    .sync_in(&lease.id, &operation(files))
                    .await
                    .map(|_| true)
                    .map_err(|e| format!("sync_in: {e}"))
            } else {
                Ok(false)
            };
            let script = format!("touch '{dir}.done'");
            let done = ctx.sh(&lease, &script);
            let _ = tokio::time::timeout(Duration::from_secs(5), done).await;
            outcome
        };
        let (sampled, synced) = tokio::join!(sampling, syncing);
        if !synced? {
            return Ok(Checked::NotChecked(
                "the sampler could not run beside the sync (see execute_concurrent_overlap)".into(),
            ));
        }
        let sampled = sampled?;
        let loose: std::collections::BTreeSet<String> = String::from_utf8_lossy(&sampled.stdout)
            .lines()
            .map(String::from)
            .collect();
        ensure(loose.is_empty(), || {
            format!("files were readable with a looser mode than 0600 while the sync wrote them: {loose:?}")
        })?;
        let modes = ctx.sh(&lease, &format!("stat -c %a '{dir}'/big-*.bin")).await?;
        ensure_eq(
            String::from_utf8_lossy(&modes).as_ref(),
            "600\n".repeat(FILES).as_str(),
            "final modes",
        )?;
        Ok(Checked::Yes)
    })
}

/// Looks (from a thread, as fast as it can) for any file under `dir` with group or other
/// bits until `done`; returns what it saw.
fn host_sampler(dir: PathBuf, done: Arc<AtomicBool>) -> std::thread::JoinHandle<Vec<String>> {
    std::thread::spawn(move || {
        let mut seen = std::collections::BTreeSet::new();
        while !done.load(Ordering::Acquire) {
            let mut stack = vec![dir.clone()];
            while let Some(d) = stack.pop() {
                let Ok(entries) = std::fs::read_dir(&d) else { continue };
                for entry in entries.flatten() {
                    let Ok(meta) = entry.path().symlink_metadata() else {
                        continue;
                    };
                    if meta.is_dir() {
                        stack.push(entry.path());
                    } else if meta.is_file() && meta.permissions().mode() & 0o077 != 0 {
                        seen.insert(format!(
                            "{} ({:o})",
                            entry.path().display(),
                            meta.permissions().mode() & 0o7777
                        ));
                    }
                }
            }
        }
        seen.into_iter().collect()
    })
}

/// While large files are synced out with mode 0600 to the host, a thread looks for any
/// file under the host target with group or other bits.
fn sync_out_mode(ctx: &Ctx) -> Result<(), String> {
    let host = tempfile::tempdir().map_err(|e| e.to_string())?;
    let out = host.path().join("out");
    std::fs::create_dir_all(&out).map_err(|e| e.to_string())?;
    ctx.with_lease(LeasePolicy::Ephemeral, |lease| async move {
        let dir = ctx.marker("mode-out");
        ctx.sh(
            &lease,
            &format!(
                "mkdir -p '{dir}' && for i in {}; do head -c {SIZE} /dev/zero > '{dir}/big-'$i.bin; chmod 644 '{dir}/big-'$i.bin; done",
                (0..FILES).map(|i| i.to_string()).collect::<Vec<_>>().join(" ")
            ),
        )
        .await?;
        let files = (0..FILES)
            .map(|i| {
                let mut f = SyncFile::file(format!("{dir}/big-{i}.bin"), out.join(format!("big-{i}.bin")).to_string_lossy());
                f.mode = Some(0o600);
                f
            })
            .collect();
        let done = Arc::new(AtomicBool::new(false));
        let sampler = host_sampler(out.clone(), done.clone());
        let synced = ctx.runtime.sync_out(&lease.id, &operation(files)).await;
        done.store(true, Ordering::Release);
        let loose = sampler.join().map_err(|_| "the sampler panicked".to_string())?;
        synced.map_err(|e| format!("sync_out: {e}"))?;
        ensure(loose.is_empty(), || {
            format!("host files were readable with a looser mode than 0600 while the sync wrote them: {loose:?}")
        })?;
        for i in 0..FILES {
            let mode = std::fs::metadata(out.join(format!("big-{i}.bin")))
                .map_err(|e| e.to_string())?
                .permissions()
                .mode()
                & 0o7777;
            ensure_eq(mode, 0o600, "final mode on the host")?;
        }
        Ok(())
    })
}

//! `sync_in` (host → container, contract section 6) through the archive API.
//!
//! Every entry is validated before anything is sent. Each entry is then streamed as a tar
//! into a hidden sibling of its target (`.envrt-sync-{tag}-{pid}-{uuid}`, extracted by the
//! engine; the tag names this host's boot and pid namespace), and only when every entry
//! of the operation has landed are the targets replaced, by renames inside the container;
//! a failure removes the staged copies and leaves the targets as they were. What a host
//! program killed mid-sync staged is removed by the next sync in beside the same target
//! from this host (its pid no longer lives). A directory target is replaced as a whole
//! (its old content goes); the workspace root, which cannot be renamed, gets its content
//! replaced instead.

use std::path::PathBuf;
use std::time::Duration;

use bollard::query_parameters::UploadToContainerOptionsBuilder;
use envrt_driver_api::PathScope;
use envrt_driver_api::sync::{ExcludeSet, check_post_upload_cwd};
use envrt_driver_api::{
    DriverError, ExecuteRequest, LeaseContext, SyncKind, SyncOperation, SyncOperationResult, SyncResult,
};
use tokio::sync::mpsc;

use crate::driver::DockerDriver;
use crate::process::run_script;
use crate::sync::archive::{ArchiveError, ChannelWriter, TarPlan, build_tar};

struct Entry {
    plan: TarPlan,
    /// Environment-side target (normalized, absolute).
    target: String,
    /// Directory the archive is extracted into.
    parent: String,
    /// Whether the target is the workspace root (content replaced, not the directory).
    is_root: bool,
}

impl Entry {
    fn staged(&self) -> String {
        format!("{}/{}", self.parent.trim_end_matches('/'), self.plan.top)
    }
}

/// The refusal of a sync target that is the container's root directory.
pub(crate) const ROOT_TARGET: &str = "A sync target cannot be the root directory \"/\".";

struct Plan<'a> {
    operation: &'a SyncOperation,
    entries: Vec<Entry>,
    cwds: Vec<Option<String>>,
}

fn parent_of(path: &str) -> String {
    match path.rfind('/') {
        Some(0) | None => "/".to_owned(),
        Some(i) => path[..i].to_owned(),
    }
}

fn validate<'a>(
    workspace: &str,
    owner: (u64, u64),
    operations: &'a [SyncOperation],
) -> Result<Vec<Plan<'a>>, DriverError> {
    let mut plans = Vec::with_capacity(operations.len());
    for operation in operations {
        let mut entries = Vec::new();
        for file in &operation.files {
            let target = PathScope::WholeEnvironment.resolve(workspace, &file.target_path)?;
            if target == "/" {
                return Err(DriverError::invalid(ROOT_TARGET));
            }
            let exclude = ExcludeSet::new(&file.exclude)?;
            let source = PathBuf::from(&file.source_path);
            let follow = file.follows_symlinks();
            let meta = if follow {
                std::fs::metadata(&source)
            } else {
                std::fs::symlink_metadata(&source)
            };
            let meta = meta.map_err(|e| match e.kind() {
                std::io::ErrorKind::NotFound => DriverError::SourceMissing {
                    path: file.source_path.clone(),
                },
                _ => DriverError::io(format!("Reading {}", file.source_path), e),
            })?;
            let (ok, expected) = match file.kind {
                SyncKind::File => (meta.is_file(), "file"),
                SyncKind::Directory => (meta.is_dir(), "directory"),
            };
            if !ok {
                return Err(DriverError::SourceKind {
                    path: file.source_path.clone(),
                    expected,
                });
            }
            let is_root = target == workspace;
            if is_root && file.kind == SyncKind::File {
                return Err(DriverError::invalid(format!(
                    "A file cannot replace the workspace directory \"{workspace}\"."
                )));
            }
            let parent = if is_root { target.clone() } else { parent_of(&target) };
            entries.push(Entry {
                plan: TarPlan {
                    source,
                    top: format!("{}{}", staging_prefix(), uuid::Uuid::new_v4().simple()),
                    kind: file.kind,
                    mode: file.mode.map(|m| m & 0o7777),
                    mask: file.mode_mask(),
                    follow,
                    exclude,
                    uid: owner.0,
                    gid: owner.1,
                    target: file.target_path.clone(),
                },
                target,
                parent,
                is_root,
            });
        }
        let targets: Vec<String> = entries.iter().map(|e| e.target.clone()).collect();
        let cwds = operation
            .post_upload_commands
            .iter()
            .map(|c| {
                c.cwd
                    .as_deref()
                    .map(|cwd| check_post_upload_cwd(cwd, &targets))
                    .transpose()
            })
            .collect::<Result<Vec<_>, _>>()?;
        plans.push(Plan {
            operation,
            entries,
            cwds,
        });
    }
    Ok(plans)
}

/// The first part of every staged name: `.envrt-sync-{tag}-`, the tag naming this host's
/// boot and pid namespace (see `envrt_driver_files::stale::pid_scope_tag`).
fn scope_prefix() -> &'static str {
    static PREFIX: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    PREFIX.get_or_init(|| format!(".envrt-sync-{}-", envrt_driver_files::stale::pid_scope_tag()))
}

/// The staged names of this process: `.envrt-sync-{tag}-{pid}-`, then a uuid. The next
/// sync in beside a target removes those a killed process left (a pid of this tag that
/// no longer lives).
fn staging_prefix() -> String {
    format!("{}{}-", scope_prefix(), std::process::id())
}

/// Which of the `listed` entries (one path a line, as [`FINALIZE`] prints them) were
/// staged in one of `parents` by a process of this host that no longer lives. A line that
/// is not exactly such a name (a command may plant any name) is left alone.
fn left_by_dead_processes(listed: &str, parents: &[&str]) -> Vec<String> {
    let prefix = scope_prefix();
    let mut dead: Vec<String> = listed
        .lines()
        .filter(|line| {
            let Some((parent, name)) = line.rsplit_once('/') else {
                return false;
            };
            let parent = if parent.is_empty() { "/" } else { parent };
            let own_parent = parents
                .iter()
                .any(|p| p.trim_end_matches('/') == parent.trim_end_matches('/'));
            let Some((pid, id)) = envrt_driver_files::stale::named_pid(name, prefix) else {
                return false;
            };
            let id_ok = id.len() == 32 && id.bytes().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase());
            own_parent && id_ok && !envrt_driver_files::stale::pid_is_live(pid)
        })
        .map(str::to_owned)
        .collect();
    dead.sort();
    dead.dedup();
    dead
}

/// Lists what earlier syncs staged in the parents, then moves every staged copy into
/// place. Arguments: the staging scope prefix, the number of parents and the parents
/// (each entry of a parent whose name starts with the prefix is printed, a line each, 256
/// at most: a command can make any number of such names), then triples (kind, staged,
/// target): `r` entries replace the target; `m` entries (`m:<octal>` with a mode) replace
/// the content of the workspace root.
const FINALIZE: &str = r#"set -e
pre=$1; n=$2; shift 2; c=0
while [ "$n" -gt 0 ]; do
  for f in "$1"/"$pre"*; do
    [ "$c" -lt 256 ] || break
    if [ -e "$f" ] || [ -L "$f" ]; then printf '%s\n' "$f"; c=$((c + 1)); fi
  done
  n=$((n - 1)); shift
done
while [ $# -ge 3 ]; do
  k=$1; t=$2; d=$3; shift 3
  case $k in
  m*)
    for f in "$d"/* "$d"/.[!.]* "$d"/..?*; do
      { [ -e "$f" ] || [ -L "$f" ]; } || continue
      case "$f" in "$d"/.envrt-sync-*) continue;; esac
      rm -rf -- "$f"
    done
    for f in "$t"/* "$t"/.[!.]* "$t"/..?*; do
      { [ -e "$f" ] || [ -L "$f" ]; } || continue
      mv -- "$f" "$d"/
    done
    m=${k#m}; m=${m#:}
    if [ -n "$m" ]; then chmod "$m" "$d"; fi
    rmdir -- "$t";;
  *)
    if [ -d "$d" ] && [ ! -L "$d" ]; then rm -rf -- "$d"; elif [ -e "$d" ] || [ -L "$d" ]; then rm -f -- "$d"; fi
    mv -- "$t" "$d";;
  esac
done
"#;

async fn upload(driver: &DockerDriver, container: &str, entry: &Entry) -> Result<(u64, u64), DriverError> {
    let (tx, rx) = mpsc::channel::<Result<bytes::Bytes, std::io::Error>>(8);
    let plan = TarPlan {
        source: entry.plan.source.clone(),
        top: entry.plan.top.clone(),
        kind: entry.plan.kind,
        mode: entry.plan.mode,
        mask: entry.plan.mask,
        follow: entry.plan.follow,
        exclude: entry.plan.exclude.clone(),
        uid: entry.plan.uid,
        gid: entry.plan.gid,
        target: entry.plan.target.clone(),
    };
    let error_tx = tx.clone();
    let producer = tokio::task::spawn_blocking(move || {
        let result = build_tar(&plan, ChannelWriter::new(tx));
        if let Err(e) = &result {
            // Abort the upload rather than let the engine see a well-formed short archive.
            let _ = error_tx.blocking_send(Err(std::io::Error::other(format!("{e:?}"))));
        }
        result
    });
    let body = futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|item| (item, rx)) });
    let options = UploadToContainerOptionsBuilder::default().path(&entry.parent).build();
    let uploaded = driver
        .engine
        .docker
        .upload_to_container(container, Some(options), bollard::body_try_stream(body))
        .await;
    let produced = producer
        .await
        .map_err(|e| DriverError::other(format!("The archive builder failed: {e}")))?;
    // A refusal explains itself; otherwise the engine's side of a failure does (the
    // builder's broken pipe is only its echo).
    if let Err(ArchiveError::Refused(e)) = produced {
        return Err(e);
    }
    uploaded.map_err(|e| {
        if crate::engine::is_not_found(&e) {
            DriverError::ResourceGone {
                id: container.to_owned(),
            }
        } else {
            driver.engine.error("uploading files", e)
        }
    })?;
    let counts = produced.map_err(ArchiveError::into_driver)?;
    Ok((counts.files, counts.bytes))
}

/// Host → container.
pub(crate) async fn sync_in(
    driver: &DockerDriver,
    context: &LeaseContext,
    operations: &[SyncOperation],
) -> Result<SyncResult, DriverError> {
    let container = DockerDriver::container_of(context)?;
    let workspace = DockerDriver::workspace_of(context);
    let owner = driver.owner_of(context).await?;
    let plans = validate(&workspace, owner, operations)?;
    let mut results = Vec::with_capacity(plans.len());
    for plan in plans {
        let mut result = SyncOperationResult {
            operation_id: plan.operation.operation_id.clone(),
            ..Default::default()
        };
        let parents: Vec<&str> = plan.entries.iter().map(|e| e.parent.as_str()).collect();
        // Parents that already exist (by the engine's path stats) need no `mkdir` exec.
        if !parents.is_empty() && !all_directories(&driver.engine, container, &parents).await {
            let (_, stderr, code) = run_script(
                &driver.engine,
                container,
                None,
                "for d; do mkdir -p -- \"$d\" || exit 1; done",
                &parents,
                "creating sync target directories",
            )
            .await?;
            if code != Some(0) {
                return Err(DriverError::other(format!(
                    "Could not create the sync target directories: {}",
                    String::from_utf8_lossy(&stderr).trim()
                )));
            }
        }
        let mut staged = Vec::new();
        let mut failure = None;
        for entry in &plan.entries {
            staged.push(entry.staged());
            match upload(driver, container, entry).await {
                Ok((files, bytes)) => {
                    result.files_transferred += files;
                    result.bytes_transferred += bytes;
                }
                Err(e) => {
                    failure = Some(e);
                    break;
                }
            }
        }
        if failure.is_none() {
            let mut distinct: Vec<&str> = parents.clone();
            distinct.sort_unstable();
            distinct.dedup();
            let mut args: Vec<String> = vec![scope_prefix().to_owned(), distinct.len().to_string()];
            args.extend(distinct.iter().map(|p| (*p).to_owned()));
            for entry in &plan.entries {
                args.push(match (entry.is_root, entry.plan.mode) {
                    (true, Some(mode)) => format!("m:{mode:o}"),
                    (true, None) => "m".to_owned(),
                    (false, _) => "r".to_owned(),
                });
                args.push(entry.staged());
                args.push(entry.target.clone());
            }
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            match run_script(&driver.engine, container, None, FINALIZE, &args, "placing synced files").await {
                Ok((listed, _, Some(0))) => {
                    staged.clear();
                    // What a killed program staged here: removed, best effort (the sync
                    // itself succeeded). One exec, only when there is something.
                    let dead = left_by_dead_processes(&String::from_utf8_lossy(&listed), &distinct);
                    if !dead.is_empty() {
                        let dead: Vec<&str> = dead.iter().map(String::as_str).collect();
                        let _ = run_script(
                            &driver.engine,
                            container,
                            None,
                            "rm -rf -- \"$@\"",
                            &dead,
                            "removing what a killed sync staged",
                        )
                        .await;
                    }
                }
                Ok((_, stderr, _)) => {
                    failure = Some(DriverError::other(format!(
                        "Could not move synced files into place: {}",
                        String::from_utf8_lossy(&stderr).trim()
                    )))
                }
                Err(e) => failure = Some(e),
            }
        }
        if let Some(error) = failure {
            if !staged.is_empty() {
                let args: Vec<&str> = staged.iter().map(String::as_str).collect();
                let _ = run_script(
                    &driver.engine,
                    container,
                    None,
                    "rm -rf -- \"$@\"",
                    &args,
                    "cleaning up",
                )
                .await;
            }
            return Err(error);
        }
        for (command, cwd) in plan.operation.post_upload_commands.iter().zip(&plan.cwds) {
            let mut request = ExecuteRequest::new("sh", ["-c", command.command.as_str()]);
            request.cwd = Some(cwd.clone().unwrap_or_else(|| workspace.clone()));
            request.timeout = command.timeout_ms.map(Duration::from_millis);
            let outcome =
                crate::execute::execute(&driver.engine, driver.config.kill_grace, container, &workspace, request)
                    .await?;
            envrt_driver_api::sync::post_upload_verdict(
                &command.command,
                outcome.timed_out,
                outcome.signal.as_deref(),
                outcome.exit_code,
            )?;
        }
        results.push(result);
    }
    Ok(SyncResult { operations: results })
}

/// Go `os.FileMode`'s symlink and directory bits in the engine's path stat.
const GO_MODE_SYMLINK: u32 = 1 << 27;
const GO_MODE_DIR: u32 = 1 << 31;

/// Whether every one of `paths` is an existing directory (not a link), by the engine's
/// path stat: a request each, a few milliseconds, instead of a `mkdir -p` exec in the
/// container (~100 ms on a loaded host). `false` whenever a stat cannot tell.
async fn all_directories(engine: &crate::engine::Engine, container: &str, paths: &[&str]) -> bool {
    for path in paths {
        let options = bollard::query_parameters::ContainerArchiveInfoOptionsBuilder::default()
            .path(path)
            .build();
        match engine
            .retry(|| {
                engine
                    .docker
                    .get_container_archive_info(container, Some(options.clone()))
            })
            .await
        {
            Ok(stat) if stat.file_mode & GO_MODE_SYMLINK == 0 && stat.file_mode & GO_MODE_DIR != 0 => {}
            _ => return false,
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_exact_names_of_dead_processes_of_this_host_in_the_parents_are_swept() {
        let prefix = scope_prefix();
        assert!(prefix.starts_with(".envrt-sync-") && prefix.len() == ".envrt-sync-".len() + 9);
        let id = "0123456789abcdef0123456789abcdef";
        let (live, dead) = (std::process::id(), 4_194_305_u32);
        let listed = [
            format!("/w/{prefix}{dead}-{id}"),
            format!("/w/{prefix}{dead}-{id}"),
            format!("/{prefix}{dead}-{id}"),
            format!("/w/{prefix}{live}-{id}"),
            format!("/elsewhere/{prefix}{dead}-{id}"),
            format!("/w/{prefix}{dead}-{id}x"),
            format!("/w/{prefix}{dead}-0123456789ABCDEF0123456789ABCDEF"),
            format!("/w/{prefix}x{dead}-{id}"),
            format!("/w/.envrt-sync-00000000-{dead}-{id}"),
            format!("/w/.envrt-sync-{id}"),
        ]
        .join("\n");
        assert_eq!(
            left_by_dead_processes(&listed, &["/w/", "/"]),
            vec![format!("/{prefix}{dead}-{id}"), format!("/w/{prefix}{dead}-{id}")]
        );
        assert!(staging_prefix().ends_with(&format!("-{live}-")));
    }
}

//! `sync_out` (container → host, contract section 6) through the archive API.
//!
//! The engine's tar stream is read as it arrives (never held whole) on a blocking thread
//! and extracted by the shared extractor ([`envrt_driver_files::archive`]) into a staging
//! sibling of the host target, which then replaces the target by a rename. Entries with
//! `..` or absolute names and links that lead out of the target are refused
//! ([`DriverError::EntryEscapesTarget`]); no path is resolved through an entry of the
//! archive and links are created last, so nothing is ever written through one.

use std::path::PathBuf;

use bollard::query_parameters::{ContainerArchiveInfoOptionsBuilder, DownloadFromContainerOptionsBuilder};
use envrt_driver_api::PathScope;
use envrt_driver_api::sync::ExcludeSet;
use envrt_driver_api::{DriverError, LeaseContext, SyncKind, SyncOperation, SyncOperationResult, SyncResult};
use futures::{StreamExt, TryStreamExt};

use envrt_driver_files::archive::{ExtractError, ExtractPlan, Staging, extract};

use crate::driver::DockerDriver;
use crate::engine::is_not_found;
use crate::process::run_script;

/// Go `os.FileMode` bits in the engine's path stat.
const GO_MODE_DIR: u32 = 1 << 31;
const GO_MODE_SYMLINK: u32 = 1 << 27;

struct Entry<'a> {
    source_text: &'a str,
    target_text: &'a str,
    source: String,
    target: PathBuf,
    kind: SyncKind,
    mode: Option<u32>,
    follow: bool,
    exclude: ExcludeSet,
    keep_special_bits: bool,
    max_bytes: u64,
}

/// Container → host.
pub(crate) async fn sync_out(
    driver: &DockerDriver,
    context: &LeaseContext,
    operations: &[SyncOperation],
) -> Result<SyncResult, DriverError> {
    let container = DockerDriver::container_of(context)?;
    let workspace = DockerDriver::workspace_of(context);
    let mut plans = Vec::with_capacity(operations.len());
    for operation in operations {
        let mut entries = Vec::new();
        for file in &operation.files {
            if file.target_path.is_empty() {
                return Err(DriverError::invalid("A sync target path is empty."));
            }
            entries.push(Entry {
                source_text: &file.source_path,
                target_text: &file.target_path,
                source: PathScope::WholeEnvironment.resolve(&workspace, &file.source_path)?,
                target: PathBuf::from(&file.target_path),
                kind: file.kind,
                mode: file.mode.map(|m| m & 0o7777),
                follow: file.follows_symlinks(),
                exclude: ExcludeSet::new(&file.exclude)?,
                keep_special_bits: file.keep_special_bits.unwrap_or(false),
                max_bytes: file.byte_limit(),
            });
        }
        plans.push((operation, entries));
    }
    let mut results = Vec::with_capacity(plans.len());
    for (operation, entries) in plans {
        let mut result = SyncOperationResult {
            operation_id: operation.operation_id.clone(),
            ..Default::default()
        };
        for entry in &entries {
            let (files, bytes) = if entry.follow {
                // Links followed inside the container: copy with -L to a scratch place and
                // send that.
                let scratch = format!("/tmp/.envrt-out-{}", uuid::Uuid::new_v4().simple());
                let copied = copy_following_links(driver, container, entry, &scratch).await;
                let sent = match copied {
                    Ok(()) => download(driver, container, entry, &scratch).await,
                    Err(e) => Err(e),
                };
                let _ = run_script(
                    &driver.engine,
                    container,
                    None,
                    "rm -rf -- \"$1\"",
                    &[&scratch],
                    "cleaning up",
                )
                .await;
                sent?
            } else {
                download(driver, container, entry, &entry.source).await?
            };
            result.files_transferred += files;
            result.bytes_transferred += bytes;
        }
        results.push(result);
    }
    Ok(SyncResult { operations: results })
}

async fn copy_following_links(
    driver: &DockerDriver,
    container: &str,
    entry: &Entry<'_>,
    scratch: &str,
) -> Result<(), DriverError> {
    let script = "[ -e \"$1\" ] || exit 3; cp -RL -- \"$1\" \"$2\"";
    let (_, stderr, code) = run_script(
        &driver.engine,
        container,
        None,
        script,
        &[&entry.source, scratch],
        "copying a sync source",
    )
    .await?;
    match code {
        Some(0) => Ok(()),
        Some(3) => Err(DriverError::SourceMissing {
            path: entry.source_text.to_owned(),
        }),
        _ => Err(DriverError::other(format!(
            "Could not read sync source \"{}\" in the container: {}",
            entry.source_text,
            String::from_utf8_lossy(&stderr).trim()
        ))),
    }
}

/// The archive API answers 404 both for a missing path and for a missing container: a
/// container removed behind envrt's back is a lost lease
/// ([`DriverError::ResourceGone`]), not a missing source.
async fn missing(driver: &DockerDriver, container: &str, entry: &Entry<'_>) -> DriverError {
    match driver.engine.docker.inspect_container(container, None).await {
        Err(e) if is_not_found(&e) => DriverError::ResourceGone {
            id: container.to_owned(),
        },
        _ => DriverError::SourceMissing {
            path: entry.source_text.to_owned(),
        },
    }
}

async fn download(
    driver: &DockerDriver,
    container: &str,
    entry: &Entry<'_>,
    path: &str,
) -> Result<(u64, u64), DriverError> {
    let engine = &driver.engine;
    let options = ContainerArchiveInfoOptionsBuilder::default().path(path).build();
    let stat = match engine
        .retry(|| {
            engine
                .docker
                .get_container_archive_info(container, Some(options.clone()))
        })
        .await
    {
        Ok(stat) => stat,
        Err(e) if is_not_found(&e) => return Err(missing(driver, container, entry).await),
        Err(e) => return Err(engine.error("reading a sync source", e)),
    };
    let go_mode = stat.file_mode;
    let is_dir = go_mode & GO_MODE_DIR != 0;
    let is_link = go_mode & GO_MODE_SYMLINK != 0;
    let (ok, expected) = match entry.kind {
        SyncKind::Directory => (is_dir, "directory"),
        SyncKind::File => (!is_dir && !is_link && go_mode & 0xfff0_0000 == 0, "file"),
    };
    if !ok {
        return Err(DriverError::SourceKind {
            path: entry.source_text.to_owned(),
            expected,
        });
    }
    let options = DownloadFromContainerOptionsBuilder::default().path(path).build();
    // Bounded: the stream simply ends at the deadline, which the extraction reports as a
    // truncated archive.
    let deadline = tokio::time::sleep(driver.config.transfer_timeout);
    let stream = engine
        .docker
        .download_from_container(container, Some(options))
        .take_until(deadline)
        .map_err(std::io::Error::other);
    let reader = tokio_util::io::SyncIoBridge::new(tokio_util::io::StreamReader::new(Box::pin(stream)));
    let target = entry.target.clone();
    let target_text = entry.target_text.to_owned();
    let source_text = entry.source_text.to_owned();
    let (kind, mode, exclude) = (entry.kind, entry.mode, entry.exclude.clone());
    let (keep_special_bits, max_bytes) = (entry.keep_special_bits, entry.max_bytes);
    let counts = tokio::task::spawn_blocking(move || {
        let plan = ExtractPlan {
            kind,
            mode,
            exclude: &exclude,
            keep_special_bits,
            max_bytes,
            final_target: &target,
            source_shown: &source_text,
            target_shown: &target_text,
        };
        let staging = Staging::new(&target).map_err(ExtractError::Refused)?;
        let counts = extract(reader, &plan, &staging)?;
        staging.place().map_err(ExtractError::Refused)?;
        Ok::<_, ExtractError>(counts)
    })
    .await
    .map_err(|e| DriverError::other(format!("The archive reader failed: {e}")))?
    .map_err(|e| match e {
        ExtractError::Io(context, io) if io.get_ref().is_some_and(|inner| inner.is::<bollard::errors::Error>()) => {
            DriverError::Unavailable {
                message: crate::engine::unreachable_message(&engine.address, "downloading files"),
                source: Some(Box::new(DriverError::io(context, io))),
            }
        }
        other => other.into_driver(),
    })?;
    Ok((counts.files, counts.bytes))
}

//! Native sync (contract section 6): every check first, then every entry of an operation
//! staged beside its target, then all renamed into place together, then the post-upload
//! commands. A failed operation leaves no target and no staged file behind.

use std::path::{Path, PathBuf};

use envrt_driver_api::sync::{
    ExcludeSet, PostUploadCommand, SyncKind, check_post_upload_cwd, is_within, normalize_absolute,
};
use envrt_driver_api::{DriverError, ExecuteRequest, LeaseContext, SyncOperation, SyncOperationResult, SyncResult};

use crate::LocalDriver;
mod copy;

use async_trait::async_trait;
use envrt_driver_api::FileSync;

use crate::execute::{self, ExecSite};
use crate::workspace::{check_no_escape, path_str};
use copy::{CopySpec, Counts, Staged};

/// One entry, checked and resolved.
struct Planned {
    source: PathBuf,
    source_shown: String,
    target: PathBuf,
    target_shown: String,
    kind: SyncKind,
    mode: Option<u32>,
    exclude: ExcludeSet,
    follow: bool,
    mask: u32,
    max_bytes: u64,
}

/// A post-upload command with its checked cwd.
struct PlannedCommand {
    command: String,
    cwd: PathBuf,
    timeout_ms: Option<u64>,
}

/// A host-side path: absolute, no `..`, not `/`.
fn host_path(path: &str) -> Result<PathBuf, DriverError> {
    match normalize_absolute(path) {
        Some(p) if p != "/" && !path.contains('\0') => Ok(PathBuf::from(p)),
        _ => Err(DriverError::invalid(format!(
            "host path {path:?} must be absolute, without '..', and not the root"
        ))),
    }
}

/// Refuses a target equal to the workspace itself, and targets that overlap.
fn check_targets(plans: &[Planned], workspace: Option<&Path>) -> Result<(), DriverError> {
    for (i, a) in plans.iter().enumerate() {
        if workspace.is_some_and(|w| w == a.target) {
            return Err(DriverError::invalid(format!(
                "sync target {:?} is the lease workspace itself; name a path inside it",
                a.target_shown
            )));
        }
        for b in &plans[i + 1..] {
            let (sa, sb) = (path_str(&a.target)?, path_str(&b.target)?);
            if is_within(sa, sb) || is_within(sb, sa) {
                return Err(DriverError::invalid(format!(
                    "sync targets {:?} and {:?} overlap",
                    a.target_shown, b.target_shown
                )));
            }
        }
    }
    Ok(())
}

fn plan_entry(file: &envrt_driver_api::SyncFile, source: PathBuf, target: PathBuf) -> Result<Planned, DriverError> {
    Ok(Planned {
        source,
        source_shown: file.source_path.clone(),
        target,
        target_shown: file.target_path.clone(),
        kind: file.kind,
        mode: file.mode,
        exclude: ExcludeSet::new(&file.exclude)?,
        follow: file.follows_symlinks(),
        mask: file.mode_mask(),
        max_bytes: file.byte_limit(),
    })
}

/// Which side of a transfer is the lease workspace.
#[derive(Clone, Copy)]
enum Direction {
    /// Targets are in the workspace.
    In,
    /// Sources are in the workspace.
    Out,
}

/// Stages and commits every planned entry (blocking I/O); all or nothing. `confine` is the
/// workspace every environment-side path must stay in (`None` under the host path scope).
fn transfer(plans: &[Planned], confine: Option<&Path>, direction: Direction) -> Result<Counts, DriverError> {
    let mut counts = Counts::default();
    let mut staged: Vec<Staged> = Vec::new();
    let mut created: Vec<PathBuf> = Vec::new();
    let outcome = (|| {
        for plan in plans {
            let floor = match direction {
                Direction::In => confine,
                Direction::Out => None,
            };
            created.extend(copy::create_parents(&plan.target, floor)?);
            if let (Direction::In, Some(workspace)) = (direction, confine) {
                check_no_escape(workspace, &plan.target, &plan.target_shown)?;
            }
            let spec = CopySpec {
                source: &plan.source,
                target: &plan.target,
                target_shown: &plan.target_shown,
                source_shown: &plan.source_shown,
                kind: plan.kind,
                mode: plan.mode,
                exclude: &plan.exclude,
                follow: plan.follow,
                source_confine: match direction {
                    Direction::In => None,
                    Direction::Out => confine,
                },
                mask: plan.mask,
                budget: std::cell::Cell::new(envrt_driver_files::sparse::ByteBudget::new(match direction {
                    Direction::In => u64::MAX,
                    Direction::Out => plan.max_bytes,
                })),
                fault: match direction {
                    Direction::In => "sync_in",
                    Direction::Out => "sync_out",
                },
            };
            staged.push(copy::stage(&spec, &mut counts)?);
        }
        copy::commit(&mut staged)
    })();
    match outcome {
        Ok(()) => Ok(counts),
        Err(e) => {
            copy::rollback(&mut staged);
            copy::remove_created(&created);
            Err(e)
        }
    }
}

/// Runs `transfer` on the blocking pool.
async fn transfer_blocking(
    plans: Vec<Planned>,
    confine: Option<&Path>,
    direction: Direction,
) -> Result<Counts, DriverError> {
    let confine = confine.map(Path::to_path_buf);
    tokio::task::spawn_blocking(move || transfer(&plans, confine.as_deref(), direction))
        .await
        .map_err(|e| DriverError::Other {
            message: "the sync task failed".into(),
            source: Some(Box::new(e)),
        })?
}

/// Host → lease workspace.
pub(crate) async fn sync_in(
    driver: &LocalDriver,
    context: &LeaseContext,
    workspace: &Path,
    operations: &[SyncOperation],
) -> Result<SyncResult, DriverError> {
    let mut result = SyncResult::default();
    for operation in operations {
        // Every check before anything is written.
        let mut plans = Vec::with_capacity(operation.files.len());
        for file in &operation.files {
            let target = driver.resolve_path(workspace, &file.target_path)?;
            let source = host_path(&file.source_path)?;
            plans.push(plan_entry(file, source, target)?);
        }
        check_targets(&plans, Some(workspace))?;
        let commands = plan_commands(&operation.post_upload_commands, &plans, workspace)?;

        let counts = transfer_blocking(plans, driver.confinement(workspace), Direction::In).await?;
        for command in &commands {
            run_post_upload(driver, context, workspace, command).await?;
        }
        result.operations.push(SyncOperationResult {
            operation_id: operation.operation_id.clone(),
            files_transferred: counts.files,
            bytes_transferred: counts.bytes,
        });
    }
    Ok(result)
}

/// Checks each post-upload cwd against the operation's targets; the default is the first
/// target (its parent for a file), or the workspace when there is none.
fn plan_commands(
    commands: &[PostUploadCommand],
    plans: &[Planned],
    workspace: &Path,
) -> Result<Vec<PlannedCommand>, DriverError> {
    let targets = plans
        .iter()
        .map(|p| path_str(&p.target).map(str::to_owned))
        .collect::<Result<Vec<_>, _>>()?;
    let default = match plans.first() {
        Some(p) if p.kind == SyncKind::File => p.target.parent().unwrap_or(workspace).to_path_buf(),
        Some(p) => p.target.clone(),
        None => workspace.to_path_buf(),
    };
    commands
        .iter()
        .map(|c| {
            let cwd = match &c.cwd {
                Some(cwd) => PathBuf::from(check_post_upload_cwd(cwd, &targets)?),
                None => default.clone(),
            };
            Ok(PlannedCommand {
                command: c.command.clone(),
                cwd,
                timeout_ms: c.timeout_ms,
            })
        })
        .collect()
}

async fn run_post_upload(
    driver: &LocalDriver,
    context: &LeaseContext,
    workspace: &Path,
    command: &PlannedCommand,
) -> Result<(), DriverError> {
    let shown = path_str(&command.cwd)?;
    if let Some(workspace) = driver.confinement(workspace) {
        check_no_escape(workspace, &command.cwd, shown)?;
    }
    if !command.cwd.is_dir() {
        return Err(DriverError::invalid(format!(
            "post-upload command cwd {shown:?} is not a directory"
        )));
    }
    let mut request = ExecuteRequest::new("sh", ["-c".to_owned(), command.command.clone()]);
    request.timeout = command.timeout_ms.map(std::time::Duration::from_millis);
    request.max_output_bytes = Some(64 * 1024);
    let site = ExecSite {
        workspace,
        cwd: &command.cwd,
        lease_key: &context.lease.id,
        table: driver.processes(),
        kill_grace: driver.config().kill_grace,
        env_allowlist: &driver.config().env_allowlist,
        containment: driver.containment_mode(),
        identity: None,
    };
    let outcome = execute::run(&site, request).await?;
    envrt_driver_api::sync::post_upload_verdict(
        &command.command,
        outcome.timed_out,
        outcome.signal.as_deref(),
        outcome.exit_code,
    )
}

/// Lease workspace → host.
pub(crate) async fn sync_out(
    driver: &LocalDriver,
    workspace: &Path,
    operations: &[SyncOperation],
) -> Result<SyncResult, DriverError> {
    let mut result = SyncResult::default();
    for operation in operations {
        if !operation.post_upload_commands.is_empty() {
            return Err(DriverError::invalid("post-upload commands apply to sync_in only"));
        }
        let mut plans = Vec::with_capacity(operation.files.len());
        for file in &operation.files {
            let source = driver.resolve_path(workspace, &file.source_path)?;
            let target = host_path(&file.target_path)?;
            plans.push(plan_entry(file, source, target)?);
        }
        check_targets(&plans, None)?;
        let counts = transfer_blocking(plans, driver.confinement(workspace), Direction::Out).await?;
        result.operations.push(SyncOperationResult {
            operation_id: operation.operation_id.clone(),
            files_transferred: counts.files,
            bytes_transferred: counts.bytes,
        });
    }
    Ok(result)
}

#[async_trait]
impl FileSync for LocalDriver {
    async fn sync_in(&self, context: &LeaseContext, operations: &[SyncOperation]) -> Result<SyncResult, DriverError> {
        let workspace = self.live_workspace(context)?;
        sync_in(self, context, &workspace, operations).await
    }

    async fn sync_out(&self, context: &LeaseContext, operations: &[SyncOperation]) -> Result<SyncResult, DriverError> {
        let workspace = self.live_workspace(context)?;
        sync_out(self, &workspace, operations).await
    }
}

//! The sync group: each operation checked whole, transferred (see `sync_in` and
//! `sync_out`), then its post-upload commands run in order.

pub(crate) mod sync_in;
pub(crate) mod sync_out;

use std::time::Duration;

use async_trait::async_trait;
use envrt_driver_api::sync::{check_post_upload_cwd, post_upload_verdict};
use envrt_driver_api::{
    DriverError, ExecuteRequest, FileSync, LeaseContext, SyncKind, SyncOperation, SyncOperationResult, SyncResult,
};

use crate::SshDriver;

#[async_trait]
impl FileSync for SshDriver {
    async fn sync_in(&self, context: &LeaseContext, operations: &[SyncOperation]) -> Result<SyncResult, DriverError> {
        let place = self.place(context).await?;
        let mut results = Vec::new();
        for op in operations {
            let plans = op
                .files
                .iter()
                .map(|f| sync_in::plan(f, &place.workspace))
                .collect::<Result<Vec<_>, _>>()?;
            let targets: Vec<(String, String)> = plans
                .iter()
                .map(|p| (p.target.clone(), p.target_shown.clone()))
                .collect();
            sync_in::check_distinct(&targets, Some(&place.workspace))?;
            let target_paths: Vec<String> = targets.iter().map(|(t, _)| t.clone()).collect();
            let mut commands = Vec::new();
            for command in &op.post_upload_commands {
                let cwd = match &command.cwd {
                    Some(cwd) => check_post_upload_cwd(cwd, &target_paths)?,
                    None => match plans.first() {
                        Some(p) if p.kind == SyncKind::File => std::path::Path::new(&p.target)
                            .parent()
                            .map(|d| d.to_string_lossy().into_owned())
                            .unwrap_or_else(|| place.workspace.clone()),
                        Some(p) => p.target.clone(),
                        None => place.workspace.clone(),
                    },
                };
                commands.push((command, cwd));
            }
            let counts = sync_in::transfer(&place.host, &place.workspace, &place.lease_dir, plans).await?;
            for (command, cwd) in commands {
                let mut request = ExecuteRequest::new("sh", ["-c".to_string(), command.command.clone()]);
                request.cwd = Some(cwd);
                request.timeout = command.timeout_ms.map(Duration::from_millis);
                let result = self.exec_at(&place, request).await?;
                post_upload_verdict(
                    &command.command,
                    result.timed_out,
                    result.signal.as_deref(),
                    result.exit_code,
                )?;
            }
            results.push(SyncOperationResult {
                operation_id: op.operation_id.clone(),
                files_transferred: counts.files,
                bytes_transferred: counts.bytes,
            });
        }
        Ok(SyncResult { operations: results })
    }

    async fn sync_out(&self, context: &LeaseContext, operations: &[SyncOperation]) -> Result<SyncResult, DriverError> {
        let place = self.place(context).await?;
        let mut results = Vec::new();
        for op in operations {
            let plans = op
                .files
                .iter()
                .map(|f| sync_out::plan(f, &place.workspace))
                .collect::<Result<Vec<_>, _>>()?;
            let targets: Vec<(String, String)> = plans.iter().map(|p| p.target()).collect();
            sync_in::check_distinct(&targets, None)?;
            let counts = sync_out::transfer(&place.host, &place.workspace, plans).await?;
            results.push(SyncOperationResult {
                operation_id: op.operation_id.clone(),
                files_transferred: counts.files,
                bytes_transferred: counts.bytes,
            });
        }
        Ok(SyncResult { operations: results })
    }
}

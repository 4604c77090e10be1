//! The host-side check of post-upload command cwds, made before anything is sent to the
//! worker.

use envrt_driver_api::DriverError;
use envrt_driver_api::sync::{SyncOperation, check_post_upload_cwd, normalize_absolute};

/// Refuses a post-upload cwd that is not absolute, contains `..`, or is not under one of
/// its operation's targets. Relative targets are relative to the lease's remote working
/// directory (`remoteCwd` in the lease metadata, as the worker reported it at acquire);
/// when it is unknown only the worker can place them, so the host refuses only cwds that
/// no target could contain, and leaves the rest to the worker, which checks before it
/// copies anything.
pub(crate) fn check_cwds(operations: &[SyncOperation], remote_cwd: Option<&str>) -> Result<(), DriverError> {
    for operation in operations {
        let mut targets = Vec::new();
        let mut all_known = true;
        for file in &operation.files {
            let absolute = match (file.target_path.starts_with('/'), remote_cwd) {
                (true, _) => normalize_absolute(&file.target_path),
                (false, Some(base)) => normalize_absolute(&format!("{base}/{}", file.target_path)),
                (false, None) => None,
            };
            match absolute {
                Some(target) => targets.push(target),
                None => all_known = false,
            }
        }
        for cwd in operation.post_upload_commands.iter().filter_map(|c| c.cwd.as_deref()) {
            if all_known {
                check_post_upload_cwd(cwd, &targets)?;
            } else if normalize_absolute(cwd).is_none() {
                return Err(DriverError::PostUploadCwd { cwd: cwd.to_owned() });
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use envrt_driver_api::SyncFile;
    use envrt_driver_api::sync::PostUploadCommand;

    use super::*;

    fn operation(target: &str, cwd: &str) -> Vec<SyncOperation> {
        vec![SyncOperation {
            operation_id: "op".into(),
            files: vec![SyncFile::directory("/host/src", target)],
            post_upload_commands: vec![PostUploadCommand {
                command: "true".into(),
                cwd: Some(cwd.into()),
                timeout_ms: None,
            }],
        }]
    }

    fn refusal(cwd: &str) -> String {
        format!("Post-upload command cwd \"{cwd}\" must be an absolute path under one of the operation's targets.")
    }

    #[test]
    fn relative_targets_resolve_against_the_remote_cwd() {
        assert!(check_cwds(&operation("app", "/workspace/app/src"), Some("/workspace")).is_ok());
        let err = check_cwds(&operation("app", "/workspace/other"), Some("/workspace")).unwrap_err();
        assert_eq!(err.to_string(), refusal("/workspace/other"));
    }

    #[test]
    fn absolute_targets_need_no_remote_cwd() {
        assert!(check_cwds(&operation("/workspace/app", "/workspace/app"), None).is_ok());
        let err = check_cwds(&operation("/workspace/app", "/workspace"), None).unwrap_err();
        assert_eq!(err.to_string(), refusal("/workspace"));
    }

    #[test]
    fn without_a_remote_cwd_only_impossible_cwds_are_refused_by_the_host() {
        // Placed by the worker, which knows where "app" is.
        assert!(check_cwds(&operation("app", "/anywhere/app"), None).is_ok());
        for bad in ["relative/dir", "/workspace/../etc"] {
            let err = check_cwds(&operation("app", bad), None).unwrap_err();
            assert_eq!(err.to_string(), refusal(bad));
        }
    }
}

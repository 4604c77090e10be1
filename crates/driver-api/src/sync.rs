//! File sync input and result (contract section 6), and the path rules every driver
//! applies: environment-side paths confined to the lease workspace, post-upload cwds under
//! a target, exclude globs.

use std::path::{Component, Path};

use globset::{GlobBuilder, GlobSet, GlobSetBuilder};
use serde::{Deserialize, Serialize};

use crate::error::DriverError;

/// Whether a sync entry is one file or a directory tree.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SyncKind {
    /// One regular file (or a link to one, with `followSymlinks`).
    File,
    /// A directory and everything below it.
    Directory,
}

/// Access a mounted entry asks for (carried to providers that mount rather than copy).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SyncAccess {
    /// Read-write.
    Rw,
    /// Read-only.
    Ro,
}

/// One file or directory to transfer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SyncFile {
    /// Where to read: host-side for `sync_in`, environment-side for `sync_out`.
    pub source_path: String,
    /// Where to write: environment-side for `sync_in`, host-side for `sync_out`.
    pub target_path: String,
    /// File or directory.
    pub kind: SyncKind,
    /// Final mode of the target (of the file, or of the top directory).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<u32>,
    /// Globs of paths (relative to the source) to leave out.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub exclude: Vec<String>,
    /// Copy what links point to instead of the links; default false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub follow_symlinks: Option<bool>,
    /// Requested access.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub access: Option<SyncAccess>,
    /// A path below the target that must stay writable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub writable_path: Option<String>,
    /// Keep the set-uid, set-gid and sticky bits of the copied entries; default false: every
    /// driver clears them in both directions (a copy is written by a privileged host or
    /// worker, so a kept set-uid bit would hand out its privilege). An explicit `mode` is
    /// applied as given either way.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keep_special_bits: Option<bool>,
    /// Sync out only: most bytes of file content (apparent sizes, holes included) this entry
    /// may write on the host; default [`DEFAULT_SYNC_MAX_BYTES`]. Over it the entry is
    /// refused with [`DriverError::SyncTooLarge`] and nothing is placed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_bytes: Option<u64>,
}

/// The bound of one sync out entry when [`SyncFile::max_bytes`] is not given: 64 GiB.
pub const DEFAULT_SYNC_MAX_BYTES: u64 = 64 << 30;

/// The mode bits a copy keeps: permissions only, or with the special bits too.
pub fn kept_mode_bits(keep_special_bits: bool) -> u32 {
    if keep_special_bits { 0o7777 } else { 0o777 }
}

impl SyncFile {
    /// A directory entry with no options.
    pub fn directory(source: impl Into<String>, target: impl Into<String>) -> Self {
        SyncFile {
            source_path: source.into(),
            target_path: target.into(),
            kind: SyncKind::Directory,
            mode: None,
            exclude: Vec::new(),
            follow_symlinks: None,
            access: None,
            writable_path: None,
            keep_special_bits: None,
            max_bytes: None,
        }
    }

    /// A file entry with no options.
    pub fn file(source: impl Into<String>, target: impl Into<String>) -> Self {
        SyncFile {
            kind: SyncKind::File,
            ..SyncFile::directory(source, target)
        }
    }

    /// Whether links are followed.
    pub fn follows_symlinks(&self) -> bool {
        self.follow_symlinks.unwrap_or(false)
    }

    /// The mode bits copied from a source entry (see [`SyncFile::keep_special_bits`]).
    pub fn mode_mask(&self) -> u32 {
        kept_mode_bits(self.keep_special_bits.unwrap_or(false))
    }

    /// The sync out bound of this entry (see [`SyncFile::max_bytes`]).
    pub fn byte_limit(&self) -> u64 {
        self.max_bytes.unwrap_or(DEFAULT_SYNC_MAX_BYTES)
    }
}

/// A shell command run in the environment after an operation's files land.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PostUploadCommand {
    /// Run with `sh -c`.
    pub command: String,
    /// Absolute, no `..`, under one of the operation's targets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    /// Timeout in milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
}

/// A group of files transferred together, then its post-upload commands.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SyncOperation {
    /// Echoed in the result.
    pub operation_id: String,
    /// The entries, in order.
    pub files: Vec<SyncFile>,
    /// Commands run after the files land (sync in only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub post_upload_commands: Vec<PostUploadCommand>,
}

/// Counts for one operation.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SyncOperationResult {
    /// The operation's id.
    pub operation_id: String,
    /// Regular files written (directories and links not counted).
    pub files_transferred: u64,
    /// Bytes of regular-file content written.
    pub bytes_transferred: u64,
}

/// Counts for every operation, in order.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SyncResult {
    /// One per operation.
    pub operations: Vec<SyncOperationResult>,
}

/// Resolves an environment-side path against the workspace root (an absolute path):
/// relative paths are joined to it, absolute paths must lie under it. Any `..` component,
/// an empty path or a NUL byte is refused. Returns the normalized absolute path.
pub fn confine_to_workspace(workspace_root: &str, path: &str) -> Result<String, DriverError> {
    let outside = || DriverError::PathOutsideWorkspace { path: path.to_owned() };
    if path.is_empty() || path.contains('\0') {
        return Err(outside());
    }
    let root = normalize_absolute(workspace_root).ok_or_else(outside)?;
    let joined = if path.starts_with('/') {
        path.to_owned()
    } else {
        format!("{root}/{path}")
    };
    let normalized = normalize_absolute(&joined).ok_or_else(outside)?;
    if is_within(&root, &normalized) {
        Ok(normalized)
    } else {
        Err(outside())
    }
}

/// Normalizes an absolute Unix path lexically (`.` and repeated `/` dropped); `None` when
/// it is not absolute or has a `..` component.
pub fn normalize_absolute(path: &str) -> Option<String> {
    if !path.starts_with('/') {
        return None;
    }
    let mut out = String::new();
    for component in Path::new(path).components() {
        match component {
            Component::RootDir | Component::CurDir => {}
            Component::Normal(part) => {
                out.push('/');
                out.push_str(part.to_str()?);
            }
            Component::ParentDir | Component::Prefix(_) => return None,
        }
    }
    if out.is_empty() {
        out.push('/');
    }
    Some(out)
}

/// Whether normalized absolute `path` is `base` or below it (component-wise).
pub fn is_within(base: &str, path: &str) -> bool {
    base == "/" || path == base || path.strip_prefix(base).is_some_and(|rest| rest.starts_with('/'))
}

/// The verdict on a post-upload command that ran: `Ok` for exit code 0, otherwise
/// [`DriverError::PostUploadFailed`] whose outcome is `a timeout`, `signal S`,
/// `exit code N`, or `an unknown status` when the command reported neither. One wording for
/// every driver.
pub fn post_upload_verdict(
    command: &str,
    timed_out: bool,
    signal: Option<&str>,
    exit_code: Option<i32>,
) -> Result<(), DriverError> {
    let outcome = if timed_out {
        "a timeout".to_owned()
    } else if let Some(signal) = signal {
        format!("signal {signal}")
    } else {
        match exit_code {
            Some(0) => return Ok(()),
            Some(code) => format!("exit code {code}"),
            None => "an unknown status".to_owned(),
        }
    };
    Err(DriverError::PostUploadFailed {
        command: command.to_owned(),
        outcome,
    })
}

/// Checks a post-upload command's cwd: absolute, no `..`, and under one of `targets`
/// (normalized absolute environment-side paths).
pub fn check_post_upload_cwd(cwd: &str, targets: &[String]) -> Result<String, DriverError> {
    let refused = || DriverError::PostUploadCwd { cwd: cwd.to_owned() };
    let normalized = normalize_absolute(cwd).ok_or_else(refused)?;
    if targets.iter().any(|t| is_within(t, &normalized)) {
        Ok(normalized)
    } else {
        Err(refused())
    }
}

/// Compiled exclude globs. A pattern without `/` matches a name at any depth; a pattern
/// with `/` matches the path relative to the source. A matching directory is skipped with
/// everything below it.
#[derive(Clone, Debug)]
pub struct ExcludeSet {
    anywhere: GlobSet,
    anchored: GlobSet,
    empty: bool,
}

impl ExcludeSet {
    /// Compiles the patterns; an invalid one is refused with its text.
    pub fn new(patterns: &[String]) -> Result<Self, DriverError> {
        let mut anywhere = GlobSetBuilder::new();
        let mut anchored = GlobSetBuilder::new();
        for pattern in patterns {
            let trimmed = pattern.trim_start_matches("./").trim_end_matches('/');
            let glob = GlobBuilder::new(trimmed.trim_start_matches('/'))
                .literal_separator(true)
                .build()
                .map_err(|_| DriverError::InvalidGlob {
                    pattern: pattern.clone(),
                })?;
            if trimmed.contains('/') {
                anchored.add(glob);
            } else {
                anywhere.add(glob);
            }
        }
        let build = |b: GlobSetBuilder| b.build().map_err(|e| DriverError::invalid(e.to_string()));
        Ok(ExcludeSet {
            anywhere: build(anywhere)?,
            anchored: build(anchored)?,
            empty: patterns.is_empty(),
        })
    }

    /// Whether `relative` (a `/`-separated path relative to the source) is excluded.
    pub fn is_excluded(&self, relative: &str) -> bool {
        if self.empty {
            return false;
        }
        let name = relative.rsplit('/').next().unwrap_or(relative);
        self.anywhere.is_match(name) || self.anchored.is_match(relative)
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn post_upload_verdicts_have_one_wording() {
        let text = |t, s: Option<&str>, c| post_upload_verdict("make", t, s, c).err().map(|e| e.to_string());
        assert_eq!(text(false, None, Some(0)), None);
        assert_eq!(
            text(false, None, Some(2)).unwrap(),
            "Post-upload command \"make\" failed with exit code 2."
        );
        assert_eq!(
            text(false, Some("SIGKILL"), None).unwrap(),
            "Post-upload command \"make\" failed with signal SIGKILL."
        );
        assert_eq!(
            text(true, Some("SIGKILL"), None).unwrap(),
            "Post-upload command \"make\" failed with a timeout."
        );
        assert_eq!(
            text(false, None, None).unwrap(),
            "Post-upload command \"make\" failed with an unknown status."
        );
    }
    use super::*;

    #[test]
    fn confine_accepts_paths_inside_and_refuses_escapes() {
        let root = "/ws/lease-1";
        assert_eq!(confine_to_workspace(root, "a/b").unwrap(), "/ws/lease-1/a/b");
        assert_eq!(confine_to_workspace(root, "./a//b/").unwrap(), "/ws/lease-1/a/b");
        assert_eq!(confine_to_workspace(root, "/ws/lease-1/x").unwrap(), "/ws/lease-1/x");
        assert_eq!(confine_to_workspace(root, "/ws/lease-1").unwrap(), "/ws/lease-1");
        assert_eq!(confine_to_workspace(root, ".").unwrap(), "/ws/lease-1");
        for bad in [
            "../x",
            "a/../../x",
            "a/../b",
            "/etc/passwd",
            "/ws/lease-10",
            "/ws",
            "",
            "a\0b",
        ] {
            let err = confine_to_workspace(root, bad).unwrap_err();
            assert_eq!(
                err.to_string(),
                format!("Path \"{bad}\" is outside the lease workspace.")
            );
        }
    }

    #[test]
    fn a_whole_environment_scope_takes_any_absolute_path_but_never_dot_dot() {
        use crate::driver::PathScope;
        let whole = PathScope::WholeEnvironment;
        assert_eq!(whole.resolve("/workspace", "/tmp/x").unwrap(), "/tmp/x");
        assert_eq!(whole.resolve("/workspace", "/usr//bin/").unwrap(), "/usr/bin");
        assert_eq!(whole.resolve("/workspace", "/").unwrap(), "/");
        assert_eq!(whole.resolve("/workspace", "a/b").unwrap(), "/workspace/a/b");
        assert_eq!(whole.resolve("/workspace/", ".").unwrap(), "/workspace");
        for bad in ["../x", "a/../../x", "/workspace/../etc", "", "a\0b"] {
            assert_eq!(
                whole.resolve("/workspace", bad).unwrap_err().to_string(),
                format!("Path \"{bad}\" is outside the lease workspace.")
            );
        }
        assert_eq!(
            PathScope::Workspace
                .resolve("/workspace", "/tmp/x")
                .unwrap_err()
                .to_string(),
            "Path \"/tmp/x\" is outside the lease workspace."
        );
        assert_eq!(
            (PathScope::default(), whole.as_str()),
            (PathScope::Workspace, "whole-environment")
        );
        let cwd = PathScope::CwdAnywhere;
        assert_eq!(cwd.resolve_cwd("/workspace", "/usr/bin").unwrap(), "/usr/bin");
        assert_eq!(
            cwd.resolve("/workspace", "/usr/bin").unwrap_err().to_string(),
            "Path \"/usr/bin\" is outside the lease workspace."
        );
        assert_eq!(
            PathScope::Workspace
                .resolve_cwd("/workspace", "/usr")
                .unwrap_err()
                .to_string(),
            "Path \"/usr\" is outside the lease workspace."
        );
        assert!(whole.any_cwd() && whole.any_file_path() && cwd.any_cwd() && !cwd.any_file_path());
        assert!(!PathScope::Workspace.any_cwd() && !PathScope::Workspace.any_file_path());
    }

    #[test]
    fn post_upload_cwd_rules() {
        let targets = vec!["/ws/app".to_string(), "/ws/data/in".to_string()];
        assert_eq!(check_post_upload_cwd("/ws/app", &targets).unwrap(), "/ws/app");
        assert_eq!(check_post_upload_cwd("/ws/app/src/", &targets).unwrap(), "/ws/app/src");
        for bad in ["ws/app", "/ws/app/../etc", "/ws", "/ws/application", "/ws/data"] {
            assert_eq!(
                check_post_upload_cwd(bad, &targets).unwrap_err().to_string(),
                format!(
                    "Post-upload command cwd \"{bad}\" must be an absolute path under one of the operation's targets."
                )
            );
        }
    }

    #[test]
    fn exclude_globs() {
        let set = ExcludeSet::new(&["*.log".into(), "node_modules".into(), "build/out/**".into()]).unwrap();
        assert!(set.is_excluded("a.log"));
        assert!(set.is_excluded("deep/dir/a.log"));
        assert!(set.is_excluded("x/node_modules"));
        assert!(set.is_excluded("build/out/a"));
        assert!(!set.is_excluded("src/build/out/a"));
        assert!(!set.is_excluded("a.logx"));
        let err = ExcludeSet::new(&["a[".into()]).unwrap_err();
        assert_eq!(err.to_string(), "Exclude pattern \"a[\" is not a valid glob.");
        assert!(!ExcludeSet::new(&[]).unwrap().is_excluded("anything"));
    }

    #[test]
    fn sync_operation_wire_shape() {
        let op: SyncOperation = serde_json::from_value(serde_json::json!({
            "operationId": "op1",
            "files": [{"sourcePath": "/h", "targetPath": "t", "kind": "directory", "exclude": ["*.o"], "followSymlinks": true, "mode": 493}],
            "postUploadCommands": [{"command": "make", "cwd": "/ws/t", "timeoutMs": 5000}]
        }))
        .unwrap();
        assert_eq!(op.files[0].kind, SyncKind::Directory);
        assert!(op.files[0].follows_symlinks());
        assert_eq!(op.files[0].mode, Some(0o755));
        assert_eq!(op.post_upload_commands[0].timeout_ms, Some(5000));
        let result = SyncResult {
            operations: vec![SyncOperationResult {
                operation_id: "op1".into(),
                files_transferred: 2,
                bytes_transferred: 10,
            }],
        };
        assert_eq!(
            serde_json::to_value(&result).unwrap(),
            serde_json::json!({"operations": [{"operationId": "op1", "filesTransferred": 2, "bytesTransferred": 10}]})
        );
    }
}

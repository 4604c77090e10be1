//! Which environment-side paths a driver accepts (contract section 5, the path-scope
//! table): [`PathScope`], declared by
//! [`EnvironmentDriver::path_scope`](crate::EnvironmentDriver::path_scope).

use serde::{Deserialize, Serialize};

use crate::error::DriverError;

/// Which environment-side paths (`cwd`, sync targets and sources) a driver accepts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PathScope {
    /// Only paths inside the lease workspace: the lease shares its machine with others
    /// (the host itself, for `local`), so the workspace is the boundary. Anything else is
    /// refused with `Path "{path}" is outside the lease workspace.`
    #[default]
    Workspace,
    /// Any absolute path of the environment: the lease is a whole isolated environment
    /// (a container, a sandbox), which is itself the boundary. Relative paths still start
    /// at the workspace, and a `..` component, an empty path or a NUL byte are still
    /// refused with the text above.
    WholeEnvironment,
    /// Commands may start in any directory of the environment (`cwd` as under
    /// [`PathScope::WholeEnvironment`]), while file transfer stays within the workspace (as
    /// under [`PathScope::Workspace`]): a driver that can enter any directory of its
    /// isolated environment but moves files only through the workspace it owns on the host.
    CwdAnywhere,
}

impl PathScope {
    /// `workspace` or `whole-environment`.
    pub fn as_str(self) -> &'static str {
        match self {
            PathScope::Workspace => "workspace",
            PathScope::WholeEnvironment => "whole-environment",
            PathScope::CwdAnywhere => "cwd-anywhere",
        }
    }

    /// Whether a command's `cwd` may be any absolute directory of the environment.
    pub fn any_cwd(self) -> bool {
        self != PathScope::Workspace
    }

    /// Whether sync sources and targets may be any absolute path of the environment.
    pub fn any_file_path(self) -> bool {
        self == PathScope::WholeEnvironment
    }

    /// Resolves a command's `cwd` under this scope ([`PathScope::resolve`] with the cwd
    /// rule).
    pub fn resolve_cwd(self, workspace_root: &str, cwd: &str) -> Result<String, DriverError> {
        if self.any_cwd() {
            PathScope::WholeEnvironment.resolve(workspace_root, cwd)
        } else {
            PathScope::Workspace.resolve(workspace_root, cwd)
        }
    }

    /// Resolves an environment-side file `path` (a sync source or target) against
    /// `workspace_root` under this scope; the normalized absolute path, or
    /// [`DriverError::PathOutsideWorkspace`].
    pub fn resolve(self, workspace_root: &str, path: &str) -> Result<String, DriverError> {
        match self {
            PathScope::Workspace | PathScope::CwdAnywhere => crate::sync::confine_to_workspace(workspace_root, path),
            PathScope::WholeEnvironment => crate::sync::confine_to_workspace("/", &relative_to(workspace_root, path))
                .map_err(|_| DriverError::PathOutsideWorkspace { path: path.to_owned() }),
        }
    }
}

/// `path` made absolute against `root` (lexically; no check).
fn relative_to(root: &str, path: &str) -> String {
    if path.starts_with('/') || path.is_empty() {
        path.to_owned()
    } else {
        format!("{}/{path}", root.trim_end_matches('/'))
    }
}

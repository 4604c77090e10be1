//! Finding the file a command names, on the command's own `PATH`, the way `execvp` in the
//! child would find it; so that the driver can hand the spawn a path (see [`find_program`]).

use std::io;
use std::path::{Path, PathBuf};

use nix::unistd::{AccessFlags, access};

/// The shell that runs a file found on `PATH` that has no `#!` line, as `execvp` does.
pub(crate) const SCRIPT_SHELL: &str = "/bin/sh";

/// The file to execute for `name`, searched the way `execvp` in the child would search it:
/// a name with a `/` is taken as it is (relative to the command's cwd); otherwise the first
/// `dir/name` on the command's own `path` that is a regular file we may execute, an empty
/// or relative entry counting from `cwd`. Nothing found is `NotFound`, unless a candidate
/// was a regular file without execute permission (`PermissionDenied`, as `execvp` reports).
///
/// Handing the standard library a path instead of a bare name lets it start the command
/// with `posix_spawn` (a `vfork`-style clone): given a bare name while the child's
/// environment sets `PATH`, it falls back to `fork` + `execvp`, which copies the page
/// tables of the whole host process and serializes concurrent spawns.
pub(crate) fn find_program(name: &str, path: &str, cwd: &Path) -> io::Result<PathBuf> {
    if name.contains('/') {
        return Ok(PathBuf::from(name));
    }
    let mut denied = false;
    for dir in path.split(':') {
        let candidate = cwd.join(if dir.is_empty() { "." } else { dir }).join(name);
        match std::fs::metadata(&candidate) {
            Ok(meta) if meta.is_file() => {
                if access(&candidate, AccessFlags::X_OK).is_ok() {
                    return Ok(candidate);
                }
                denied = true;
            }
            _ => {}
        }
    }
    Err(if denied {
        io::Error::from(io::ErrorKind::PermissionDenied)
    } else {
        io::Error::from(io::ErrorKind::NotFound)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn an_empty_entry_is_the_cwd_and_a_name_with_a_slash_is_not_looked_up() {
        let dir = std::env::temp_dir().join(format!("envrt-program-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let tool = dir.join("tool");
        std::fs::write(&tool, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o700)).unwrap();
        assert_eq!(find_program("tool", "/nonexistent:", &dir).unwrap(), dir.join("./tool"));
        assert_eq!(find_program("tool", "::", &dir).unwrap(), dir.join("./tool"));
        assert_eq!(
            find_program("tool", "/nonexistent", &dir).unwrap_err().kind(),
            io::ErrorKind::NotFound
        );
        assert_eq!(find_program("x/tool", "", &dir).unwrap(), PathBuf::from("x/tool"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

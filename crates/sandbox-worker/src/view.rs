//! Where an unprivileged `bwrap` finds the lease directories and the init binary.
//!
//! `bwrap` resolves every bind source with `realpath` under its own (unprivileged) user,
//! so each directory above the lease root and above the worker binary must be searchable
//! by the sandbox user. The worker makes its lease root `0711` (search, no listing). When
//! an ancestor is still closed (a `0700` state directory, `/root`), the worker moves
//! itself into a private mount namespace (so nothing is visible on the host and all of
//! it goes with the worker) and bind-mounts the lease root and its own binary under a
//! fresh `0711` directory in the temp dir, which is then what `bwrap` is given. The
//! directory is removed at exit; one left by a killed worker is removed by the next
//! worker that makes a view.

use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use nix::mount::{MsFlags, mount};
use nix::sched::{CloneFlags, unshare};

/// How `bwrap` reaches the worker's files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct View {
    /// The lease root as the worker sees it.
    pub(crate) root: PathBuf,
    /// The same directory as `bwrap` reaches it.
    pub(crate) bwrap_root: PathBuf,
    /// The worker binary as `bwrap` reaches it.
    pub(crate) bwrap_init: PathBuf,
    /// The private view directory to remove at exit, when one was made.
    made: Option<PathBuf>,
}

impl View {
    /// The plain view: `bwrap` uses the real paths.
    pub(crate) fn direct(root: &Path, init: &Path) -> View {
        View {
            root: root.to_path_buf(),
            bwrap_root: root.to_path_buf(),
            bwrap_init: init.to_path_buf(),
            made: None,
        }
    }

    /// Prepares the view for sandboxes run as `identity` (must run before any thread is
    /// started: a private mount namespace can only be entered by a single-threaded
    /// process). Errors are the text to print before exiting.
    pub(crate) fn prepare(root: &Path, init: &Path, identity: Option<(u32, u32)>) -> Result<View, String> {
        let Some((uid, gid)) = identity else {
            return Ok(View::direct(root, init));
        };
        let fail = |what: &str, e: &dyn std::fmt::Display| format!("envrt-sandbox-worker: {what}: {e}");
        // The root: search for everyone, listing for nobody but the worker.
        std::fs::set_permissions(root, std::fs::Permissions::from_mode(0o711))
            .map_err(|e| fail(&format!("cannot set the mode of {}", root.display()), &e))?;
        let root = std::fs::canonicalize(root).map_err(|e| fail("cannot resolve the lease root", &e))?;
        let init = std::fs::canonicalize(init).map_err(|e| fail("cannot resolve its own binary", &e))?;
        if reachable(&root, uid, gid) && reachable(&init, uid, gid) {
            return Ok(View::direct(&root, &init));
        }
        unshare(CloneFlags::CLONE_NEWNS).map_err(|e| fail("cannot enter a private mount namespace", &e))?;
        mount(
            None::<&str>,
            "/",
            None::<&str>,
            MsFlags::MS_REC | MsFlags::MS_PRIVATE,
            None::<&str>,
        )
        .map_err(|e| fail("cannot make its mounts private", &e))?;
        // the view directories of workers that are gone (a killed worker cannot remove its
        // own; its mounts died with its namespace)
        envrt_driver_files::stale::remove_dirs_of_dead_pids(&std::env::temp_dir(), VIEW_PREFIX);
        let made = std::env::temp_dir().join(format!("{VIEW_PREFIX}{}-{}", std::process::id(), uuid::Uuid::new_v4()));
        std::fs::DirBuilder::new()
            .mode(0o711)
            .create(&made)
            .map_err(|e| fail(&format!("cannot create {}", made.display()), &e))?;
        std::fs::set_permissions(&made, std::fs::Permissions::from_mode(0o711))
            .map_err(|e| fail(&format!("cannot set the mode of {}", made.display()), &e))?;
        let (bwrap_root, bwrap_init) = (made.join("leases"), made.join("init"));
        std::fs::create_dir(&bwrap_root).map_err(|e| fail("cannot create the view", &e))?;
        std::fs::write(&bwrap_init, b"").map_err(|e| fail("cannot create the view", &e))?;
        for (source, target) in [(&root, &bwrap_root), (&init, &bwrap_init)] {
            mount(
                Some(source.as_path()),
                target.as_path(),
                None::<&str>,
                MsFlags::MS_BIND,
                None::<&str>,
            )
            .map_err(|e| fail(&format!("cannot bind {} into the view", source.display()), &e))?;
        }
        Ok(View {
            root,
            bwrap_root,
            bwrap_init,
            made: Some(made),
        })
    }

    /// A lease directory (under the root) as `bwrap` reaches it.
    pub(crate) fn lease_dir(&self, dir: &Path) -> PathBuf {
        match dir.strip_prefix(&self.root) {
            Ok(rest) => self.bwrap_root.join(rest),
            Err(_) => dir.to_path_buf(),
        }
    }

    /// Removes the private view directory (the mounts go with the namespace).
    pub(crate) fn remove(&self) {
        if let Some(made) = &self.made {
            for mounted in [&self.bwrap_root, &self.bwrap_init] {
                // Unmounted so the directory can go; the namespace dies with us anyway.
                let _ = nix::mount::umount2(mounted.as_path(), nix::mount::MntFlags::MNT_DETACH);
            }
            let _ = std::fs::remove_dir_all(made);
        }
    }
}

/// Name prefix of the view directories (`<prefix><worker pid>-<uuid>` in the temp dir).
const VIEW_PREFIX: &str = "envrt-sandbox-view-";

/// Whether `uid`/`gid` can search every directory above `path`.
fn reachable(path: &Path, uid: u32, gid: u32) -> bool {
    path.ancestors().skip(1).all(|dir| match std::fs::metadata(dir) {
        Ok(m) => {
            let mode = m.mode();
            if m.uid() == uid {
                mode & 0o100 != 0
            } else if m.gid() == gid {
                mode & 0o010 != 0
            } else {
                mode & 0o001 != 0
            }
        }
        Err(_) => false,
    })
}

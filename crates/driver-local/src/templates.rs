//! Templates of the local driver: a template is a copy of a lease's workspace kept under
//! `{root}/.templates/{id}/tree`, described by `{root}/.templates/{id}/template.json`. A
//! lease started from it gets a copy of that tree as its workspace.
//!
//! Files are cloned with `FICLONE` (the blocks are shared, copy-on-write) where the file
//! system supports it (btrfs, XFS with reflink, bcachefs), and copied otherwise. A
//! template is staged in a hidden sibling and renamed into place once complete, so a
//! failed capture leaves nothing listed. The staging directory's name,
//! `.new-{template id}.lease-{lease id}`, names the lease captured: a capture cut short by
//! a crash is an inventory item of that lease (`recovery`), reaped once the lease ends.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use async_trait::async_trait;
use envrt_driver_api::template::{check_template_id, new_template_id};
use envrt_driver_api::{DriverError, Environment, JsonMap, LeaseContext, TemplateRef, Templates, Timestamp};

use crate::LocalDriver;
use crate::workspace::{create_private_dir, remove_tree};

/// The directory under the root that holds every template.
const TEMPLATES_DIR: &str = ".templates";
/// The file describing one template.
const DESCRIPTION: &str = "template.json";
/// The copied workspace of one template.
const TREE: &str = "tree";

/// What a copy did: files cloned (shared blocks), files copied byte by byte, bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct CopyStats {
    pub(crate) cloned: u64,
    pub(crate) copied: u64,
    pub(crate) bytes: u64,
}

fn io_err(what: &str, path: &Path, e: io::Error) -> DriverError {
    DriverError::io(format!("cannot {what} {}", path.display()), e)
}

/// One regular file: cloned when the file system can, else copied; created `0600`, then
/// given `mode`.
fn copy_file(source: &Path, dest: &Path, mode: u32, stats: &mut CopyStats) -> Result<(), DriverError> {
    let mut from = OpenOptions::new()
        .read(true)
        .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits())
        .open(source)
        .map_err(|e| io_err("open", source, e))?;
    let mut to = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(dest)
        .map_err(|e| io_err("create", dest, e))?;
    let len = from.metadata().map_err(|e| io_err("inspect", source, e))?.len();
    if len > 0 && rustix::fs::ioctl_ficlone(&to, &from).is_ok() {
        stats.cloned += 1;
    } else {
        io::copy(&mut from, &mut to).map_err(|e| io_err("copy", source, e))?;
        stats.copied += 1;
    }
    stats.bytes += len;
    fs::set_permissions(dest, fs::Permissions::from_mode(mode & 0o7777)).map_err(|e| io_err("set the mode of", dest, e))
}

/// Copies the content of directory `source` into the existing directory `dest`: files,
/// directories and symbolic links (as links), keeping permission bits; FIFOs, sockets
/// and devices are skipped. Iterative, so any depth is fine. Directories get their mode
/// once everything inside is written.
pub(crate) fn copy_tree(source: &Path, dest: &Path) -> Result<CopyStats, DriverError> {
    let mut stats = CopyStats::default();
    let mut pending: Vec<(PathBuf, PathBuf)> = vec![(source.to_path_buf(), dest.to_path_buf())];
    let mut modes: Vec<(PathBuf, u32)> = Vec::new();
    while let Some((from, to)) = pending.pop() {
        for entry in fs::read_dir(&from).map_err(|e| io_err("read", &from, e))? {
            let entry = entry.map_err(|e| io_err("read", &from, e))?;
            let path = entry.path();
            let target = to.join(entry.file_name());
            let meta = fs::symlink_metadata(&path).map_err(|e| io_err("inspect", &path, e))?;
            let kind = meta.file_type();
            if kind.is_dir() {
                fs::DirBuilder::new()
                    .mode(0o700)
                    .create(&target)
                    .map_err(|e| io_err("create", &target, e))?;
                modes.push((target.clone(), meta.permissions().mode()));
                pending.push((path, target));
            } else if kind.is_file() {
                copy_file(&path, &target, meta.permissions().mode(), &mut stats)?;
            } else if kind.is_symlink() {
                let link = fs::read_link(&path).map_err(|e| io_err("read the link", &path, e))?;
                std::os::unix::fs::symlink(&link, &target).map_err(|e| io_err("create", &target, e))?;
            }
        }
    }
    for (dir, mode) in modes.into_iter().rev() {
        fs::set_permissions(&dir, fs::Permissions::from_mode(mode & 0o7777))
            .map_err(|e| io_err("set the mode of", &dir, e))?;
    }
    Ok(stats)
}

/// The prefix of a capture's staging directory under the templates directory.
const STAGING_PREFIX: &str = ".new-";

/// The staging directory name of template `id` captured from `lease`.
fn staging_name(id: &str, lease: &str) -> Result<String, DriverError> {
    Ok(format!(
        "{STAGING_PREFIX}{id}.{}",
        crate::workspace::lease_dir_name(lease)?
    ))
}

/// The lease a staging directory name was made for, when it is one.
pub(crate) fn staging_lease(name: &str) -> Option<String> {
    let (id, lease_dir) = name.strip_prefix(STAGING_PREFIX)?.split_once('.')?;
    check_template_id(id).ok()?;
    let lease = lease_dir.strip_prefix(crate::workspace::LEASE_DIR_PREFIX)?;
    (staging_name(id, lease).ok()? == name).then(|| lease.to_owned())
}

impl LocalDriver {
    pub(crate) fn templates_dir(&self) -> PathBuf {
        self.root().join(TEMPLATES_DIR)
    }

    /// Removes a capture's staging directory left by a crash, then the templates
    /// directory when that was its last entry.
    pub(crate) fn remove_staging(&self, name: &str) -> Result<(), DriverError> {
        let parent = self.templates_dir();
        let doomed = parent.join(name);
        match remove_tree(&doomed) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(io_err("remove", &doomed, e)),
        }
        let _ = fs::remove_dir(&parent);
        Ok(())
    }

    /// The directory of template `id` (checked to be a plain name).
    fn template_dir(&self, id: &str) -> Result<PathBuf, DriverError> {
        check_template_id(id)?;
        Ok(self.templates_dir().join(id))
    }

    /// Fills a new lease's (empty) workspace from `template`.
    pub(crate) fn seed_workspace(&self, template: &TemplateRef, workspace: &Path) -> Result<CopyStats, DriverError> {
        let tree = self.template_dir(&template.id)?.join(TREE);
        if !tree.is_dir() {
            return Err(DriverError::other(format!(
                "Template \"{}\" has no files under {} any more.",
                template.id,
                tree.display()
            )));
        }
        copy_tree(&tree, workspace)
    }

    fn read_template(dir: &Path) -> Option<TemplateRef> {
        let text = fs::read(dir.join(DESCRIPTION)).ok()?;
        serde_json::from_slice(&text).ok()
    }
}

#[async_trait]
impl Templates for LocalDriver {
    async fn capture_template(&self, context: &LeaseContext, label: Option<&str>) -> Result<TemplateRef, DriverError> {
        let workspace = self.live_workspace(context)?;
        let parent = self.templates_dir();
        let id = new_template_id();
        let staging = parent.join(staging_name(&id, &context.lease.id)?);
        // The parent may be removed by a deletion of the last template meanwhile: retry.
        let mut attempts = 0;
        loop {
            match create_private_dir(&parent) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(io_err("create", &parent, e)),
            }
            match create_private_dir(&staging) {
                Ok(()) => break,
                Err(e) if e.kind() == io::ErrorKind::NotFound && attempts < 3 => attempts += 1,
                Err(e) => return Err(io_err("create", &staging, e)),
            }
        }
        let done = self.template_dir(&id)?;
        let started = std::time::Instant::now();
        let result = (|| {
            let tree = staging.join(TREE);
            create_private_dir(&tree).map_err(|e| io_err("create", &tree, e))?;
            let stats = copy_tree(&workspace, &tree)?;
            // The tree is staged, not described: a crash here leaves a half template.
            envrt_driver_api::fault::point("capture");
            let mut metadata = JsonMap::new();
            metadata.insert("path".into(), done.join(TREE).to_string_lossy().into_owned().into());
            metadata.insert("filesCloned".into(), stats.cloned.into());
            metadata.insert("filesCopied".into(), stats.copied.into());
            metadata.insert("bytes".into(), stats.bytes.into());
            metadata.insert("captureMillis".into(), (started.elapsed().as_millis() as u64).into());
            let template = TemplateRef {
                id: id.clone(),
                kind: "snapshot".into(),
                environment_id: context.lease.environment_id.clone().unwrap_or_default(),
                company_id: context.lease.company_id.clone(),
                label: label.map(str::to_owned),
                source_lease_id: Some(context.lease.id.clone()),
                created_at: Some(Timestamp::now()),
                metadata,
            };
            let json = serde_json::to_vec_pretty(&template).map_err(|e| DriverError::other(e.to_string()))?;
            let description = staging.join(DESCRIPTION);
            let mut file = File::options()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&description)
                .map_err(|e| io_err("create", &description, e))?;
            io::Write::write_all(&mut file, &json).map_err(|e| io_err("write", &description, e))?;
            envrt_driver_api::fault::point("capture");
            fs::rename(&staging, &done).map_err(|e| io_err("rename", &staging, e))?;
            Ok(template)
        })();
        if result.is_err() {
            let _ = remove_tree(&staging);
            let _ = fs::remove_dir(&parent);
        }
        result
    }

    async fn list_templates(
        &self,
        environment: &Environment,
        company_id: &str,
    ) -> Result<Vec<TemplateRef>, DriverError> {
        let parent = self.templates_dir();
        let entries = match fs::read_dir(&parent) {
            Ok(entries) => entries,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(io_err("read", &parent, e)),
        };
        let mut found: Vec<TemplateRef> = entries
            .flatten()
            .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
            .filter_map(|e| Self::read_template(&e.path()))
            .filter(|t| t.environment_id == environment.id && t.company_id == company_id)
            .filter(|t| check_template_id(&t.id).is_ok())
            .collect();
        found.sort_by(|a, b| (a.created_at, &a.id).cmp(&(b.created_at, &b.id)));
        Ok(found)
    }

    async fn delete_template(&self, _environment: &Environment, template: &TemplateRef) -> Result<bool, DriverError> {
        let dir = self.template_dir(&template.id)?;
        if fs::symlink_metadata(&dir).is_err() {
            return Ok(false);
        }
        // Renamed away first, so the template stops being listed at once even if the
        // removal of a large tree is interrupted.
        let doomed = self.templates_dir().join(format!(".old-{}", template.id));
        fs::rename(&dir, &doomed).map_err(|e| io_err("rename", &dir, e))?;
        remove_tree(&doomed).map_err(|e| io_err("remove", &doomed, e))?;
        // The last template gone: nothing of templates is left under the root.
        let _ = fs::remove_dir(self.templates_dir());
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_staging_name_names_its_lease_and_nothing_else_parses() {
        let name = staging_name("tpl-0123456789abcdef", "l-1").unwrap();
        assert_eq!(name, ".new-tpl-0123456789abcdef.lease-l-1");
        assert_eq!(staging_lease(&name).as_deref(), Some("l-1"));
        for other in [
            "tpl-0123456789abcdef",
            ".new-tpl-0123456789abcdef",
            ".new-tpl-0123456789abcdef.l-1",
            ".new-../x.lease-l-1",
            ".new-tpl-0123456789abcdef.lease-l/1",
        ] {
            assert_eq!(staging_lease(other), None, "{other}");
        }
    }

    #[test]
    fn a_tree_copy_keeps_modes_and_links_and_skips_fifos() {
        let base = std::env::temp_dir().join(format!("envrt-local-copytree-{}", uuid::Uuid::new_v4().simple()));
        let (from, to) = (base.join("from"), base.join("to"));
        fs::create_dir_all(from.join("d/e")).unwrap();
        fs::write(from.join("d/e/f"), b"deep").unwrap();
        fs::write(from.join("x"), b"").unwrap();
        fs::set_permissions(from.join("x"), fs::Permissions::from_mode(0o751)).unwrap();
        fs::set_permissions(from.join("d"), fs::Permissions::from_mode(0o500)).unwrap();
        std::os::unix::fs::symlink("d/e/f", from.join("link")).unwrap();
        nix::unistd::mkfifo(&from.join("fifo"), nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        fs::create_dir(&to).unwrap();
        let stats = copy_tree(&from, &to).unwrap();
        assert_eq!(stats.cloned + stats.copied, 2);
        assert_eq!(stats.bytes, 4);
        assert_eq!(fs::read(to.join("d/e/f")).unwrap(), b"deep");
        assert_eq!(fs::read_link(to.join("link")).unwrap(), Path::new("d/e/f"));
        assert!(!to.join("fifo").exists());
        let mode = |p: &str| fs::metadata(to.join(p)).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode("x"), 0o751);
        assert_eq!(mode("d"), 0o500);
        for dir in [&from, &to] {
            fs::set_permissions(dir.join("d"), fs::Permissions::from_mode(0o700)).unwrap();
        }
        fs::remove_dir_all(&base).unwrap();
    }
}

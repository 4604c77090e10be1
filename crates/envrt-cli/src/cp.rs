//! `envrt cp SRC DST`: native sync between the host and a lease. `lease:ID:/path` names the
//! lease side; exactly one side is a lease. `-` as the host side is stdin (as a file's
//! content) or stdout (a file's content, nothing else on stdout).
//!
//! Where DST exists, `envrt cp` follows `docker cp`'s rules and deletes nothing the copy
//! does not name: a file SRC over an existing directory DST lands in `DST/basename(SRC)`; a
//! directory SRC over an existing directory DST lands in `DST/basename(SRC)`, or, when SRC
//! ends in `/.`, its content lands in DST itself; where the landing directory exists the
//! copy is merged into it ([`crate::cp_merge`]). `--replace` keeps the exact-path rule
//! instead: DST becomes SRC (a directory target is replaced whole). `--exclude PATTERN`
//! leaves out matching entries of a directory SRC (the sync's globs).
//!
//! Two replacements are refused rather than done silently, on either side: a file over an
//! existing directory (with `--replace`, or inside a merge), and a file over an existing
//! read-only file (no write bit for anyone). The lease side is looked at with a small `sh`
//! probe through execute.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};

use clap::Args;
use envrt::files::EntryKind;
use envrt::{DriverError, RuntimeError, SyncFile, SyncKind, SyncOperation, SyncResult};

use crate::app::App;
use crate::cp_merge::{
    cannot_look, content_form, join_shown, lease_basename, merge_host, merge_lease, missing_directory, not_a_directory,
    staging_name,
};
use crate::cp_progress::{Measure, Progress, tree_size};
use crate::error::CliError;
use envrt::config::Paths;

#[derive(Debug, Args)]
pub(crate) struct CpArgs {
    /// No progress line and no summary.
    #[arg(short, long)]
    pub(crate) quiet: bool,
    /// DST becomes exactly SRC: an existing directory DST is replaced whole (no merge, no
    /// `DST/basename(SRC)`).
    #[arg(long)]
    pub(crate) replace: bool,
    /// Leave out the entries of a directory SRC that match this glob (repeatable): a
    /// pattern without `/` matches an entry's name at any depth (`*.log`, `node_modules`),
    /// one with `/` matches its path relative to SRC (`build/out/**`); a matching directory
    /// is left out with everything below it. A file SRC is copied as named.
    #[arg(long, value_name = "PATTERN")]
    pub(crate) exclude: Vec<String>,
    /// The source: a host path or `lease:ID:/path`.
    pub(crate) src: String,
    /// The destination: a host path or `lease:ID:/path`.
    pub(crate) dst: String,
}

/// One side of a copy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Side {
    /// A host path.
    Host(String),
    /// A path in a lease's environment.
    Lease { id: String, path: String },
}

/// Parses `lease:ID:PATH` (else a host path).
pub(crate) fn parse_side(arg: &str) -> Result<Side, CliError> {
    let Some(rest) = arg.strip_prefix("lease:") else {
        return Ok(Side::Host(arg.to_owned()));
    };
    match rest.split_once(':') {
        Some((id, path)) if !id.is_empty() && !path.is_empty() => Ok(Side::Lease {
            id: id.to_owned(),
            path: path.to_owned(),
        }),
        _ => Err(CliError::Usage(format!(
            "envrt: \"{arg}\" is not a lease path; write lease:ID:/path"
        ))),
    }
}

fn host_absolute(path: &str) -> Result<String, CliError> {
    let absolute = std::path::absolute(Path::new(path))
        .map_err(|e| CliError::Usage(format!("envrt: bad path \"{path}\": {e}")))?;
    absolute
        .to_str()
        .map(str::to_owned)
        .ok_or_else(|| CliError::Usage(format!("envrt: path \"{path}\" is not valid UTF-8")))
}

fn totals(result: &SyncResult) -> (u64, u64) {
    result.operations.iter().fold((0, 0), |(f, b), op| {
        (f + op.files_transferred, b + op.bytes_transferred)
    })
}

/// The refusal of a file copied over an existing directory.
pub(crate) fn over_directory(dst: &str) -> CliError {
    CliError::Usage(format!(
        "envrt: \"{dst}\" is a directory: a file does not replace it (name a path inside it)"
    ))
}

/// The refusal of a file copied over an existing read-only file.
pub(crate) fn over_read_only(dst: &str) -> CliError {
    CliError::Usage(format!(
        "envrt: \"{dst}\" is a read-only file: envrt cp does not replace it"
    ))
}

/// What a destination is, as far as the two refusals care.
#[derive(Debug, PartialEq, Eq)]
enum Found {
    Directory,
    ReadOnlyFile,
    Other,
}

/// The lease-side destination, looked at through execute by the library's probe
/// ([`envrt::files::probe`]); `Other` when the driver cannot run it.
async fn probe_lease(app: &App, lease_id: &str, path: &str) -> Found {
    match envrt::files::probe(&app.runtime, lease_id, path, true).await {
        Some(found) if found.is_real_directory() => Found::Directory,
        Some(found) if found.is_read_only_file() => Found::ReadOnlyFile,
        _ => Found::Other,
    }
}

/// The host-side destination.
fn probe_host(path: &Path) -> Found {
    use std::os::unix::fs::PermissionsExt;
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => Found::Directory,
        Ok(m) if m.is_file() && m.permissions().mode() & 0o222 == 0 => Found::ReadOnlyFile,
        _ => Found::Other,
    }
}

fn refuse(found: Found, dst: &str) -> Result<(), CliError> {
    match found {
        Found::Directory => Err(over_directory(dst)),
        Found::ReadOnlyFile => Err(over_read_only(dst)),
        Found::Other => Ok(()),
    }
}

/// Stdin's bytes as a file (mode `0644`) in a fresh temporary directory.
fn stdin_file() -> Result<(tempfile::TempDir, String), CliError> {
    use std::io::Read;
    use std::os::unix::fs::PermissionsExt;
    let failed = |e: std::io::Error| CliError::Failure(format!("envrt: cannot stage stdin: {e}"));
    let dir = tempfile::tempdir().map_err(failed)?;
    let path = dir.path().join("stdin");
    let mut data = Vec::new();
    std::io::stdin().lock().read_to_end(&mut data).map_err(failed)?;
    std::fs::write(&path, &data).map_err(failed)?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).map_err(failed)?;
    let text = host_absolute(&path.to_string_lossy())?;
    Ok((dir, text))
}

/// One copy: the two paths, the options, and the names the user wrote (for errors).
struct Copy<'a> {
    app: &'a App,
    lease_id: String,
    inbound: bool,
    /// The host path, absolute (a staged file for `-`).
    host: String,
    /// The lease path.
    remote: String,
    /// SRC ended in `/.`.
    contents: bool,
    exclude: Vec<String>,
    dst_arg: String,
    from_stdin: bool,
    to_stdout: bool,
    show: bool,
    label: String,
}

impl Copy<'_> {
    fn progress(&self, measure: Measure) -> Progress {
        Progress::start(self.show, self.label.clone(), measure)
    }

    fn operation(&self, kind: SyncKind, source: &str, target: &str) -> Vec<SyncOperation> {
        let file = match kind {
            SyncKind::File => SyncFile::file(source, target),
            SyncKind::Directory => {
                let mut file = SyncFile::directory(source, target);
                file.exclude = self.exclude.clone();
                file
            }
        };
        vec![SyncOperation {
            operation_id: "envrt-cp".into(),
            files: vec![file],
            post_upload_commands: Vec::new(),
        }]
    }

    /// One sync from `source` to `target` in this copy's direction.
    async fn sync(&self, kind: SyncKind, source: &str, target: &str) -> Result<SyncResult, RuntimeError> {
        let operation = self.operation(kind, source, target);
        if self.inbound {
            self.app.runtime.sync_in(&self.lease_id, &operation).await
        } else {
            self.app.runtime.sync_out(&self.lease_id, &operation).await
        }
    }

    fn measure_in(&self) -> Measure {
        Measure {
            total: Some(tree_size(Path::new(&self.host))),
            landing: None,
        }
    }

    /// `--replace` (and every copy whose DST does not exist): DST becomes exactly SRC.
    async fn exact(&self) -> Result<SyncResult, CliError> {
        if self.inbound {
            let is_dir = Path::new(&self.host).is_dir();
            // A source that is not there is the sync's own error to give.
            if Path::new(&self.host).is_file() {
                refuse(probe_lease(self.app, &self.lease_id, &self.remote).await, &self.dst_arg)?;
            }
            let kind = if is_dir { SyncKind::Directory } else { SyncKind::File };
            let _progress = self.progress(self.measure_in());
            return Ok(self.sync(kind, &self.host, &self.remote).await?);
        }
        // The environment side's kind is unknown here: try a directory, then a file (stdout
        // takes a file only).
        let first = if self.to_stdout {
            SyncKind::File
        } else {
            SyncKind::Directory
        };
        let progress = self.progress(Measure::default());
        match self.sync(first, &self.remote, &self.host).await {
            Err(RuntimeError::Driver(DriverError::SourceKind { .. })) if first == SyncKind::Directory => {
                drop(progress);
                refuse(probe_host(Path::new(&self.host)), &self.dst_arg)?;
                let _progress = self.progress(Measure::default());
                Ok(self.sync(SyncKind::File, &self.remote, &self.host).await?)
            }
            other => Ok(other?),
        }
    }

    /// Host → lease without deleting what DST holds.
    async fn merge_in(&self) -> Result<SyncResult, CliError> {
        let host = Path::new(&self.host);
        let (app, id) = (self.app, self.lease_id.as_str());
        let runtime = &app.runtime;
        if !host.is_dir() {
            if !host.exists() {
                return self.exact().await;
            }
            let found = envrt::files::probe(runtime, id, &self.remote, true).await;
            let name = host.file_name().and_then(|n| n.to_str()).filter(|_| !self.from_stdin);
            let (target, shown, found) = match (&found, name) {
                (Some(p), Some(name)) if p.is_real_directory() => {
                    let target = join_shown(&self.remote, name);
                    let found = probe_lease(app, id, &target).await;
                    (target, join_shown(&self.dst_arg, name), found)
                }
                (Some(p), _) if p.kind == EntryKind::Missing && self.dst_arg.ends_with('/') => {
                    return Err(missing_directory(&self.dst_arg));
                }
                _ => (self.remote.clone(), self.dst_arg.clone(), found_of(found.as_ref())),
            };
            refuse(found, &shown)?;
            let _progress = self.progress(self.measure_in());
            return Ok(self.sync(SyncKind::File, &self.host, &target).await?);
        }
        let Some(found) = envrt::files::probe(runtime, id, &self.remote, false).await else {
            if envrt::files::in_declared_scope(runtime, id, &self.remote).await {
                return Err(cannot_look(&self.dst_arg));
            }
            // The driver refuses the path with its own words.
            return self.exact().await;
        };
        if found.kind == EntryKind::Missing {
            return self.exact().await;
        }
        if !found.is_real_directory() {
            return Err(not_a_directory(&self.dst_arg));
        }
        let name = host.file_name().and_then(|n| n.to_str()).filter(|_| !self.contents);
        let (dest, shown) = match name {
            None => (self.remote.clone(), self.dst_arg.clone()),
            Some(name) => {
                let dest = join_shown(&self.remote, name);
                let shown = join_shown(&self.dst_arg, name);
                match envrt::files::probe(runtime, id, &dest, false).await {
                    None => return Err(cannot_look(&shown)),
                    Some(p) if p.kind == EntryKind::Missing => {
                        let _progress = self.progress(self.measure_in());
                        return Ok(self.sync(SyncKind::Directory, &self.host, &dest).await?);
                    }
                    Some(p) if p.is_real_directory() => (dest, shown),
                    Some(_) => return Err(not_a_directory(&shown)),
                }
            }
        };
        let staging = join_shown(&dest, &staging_name());
        let result = {
            let _progress = self.progress(self.measure_in());
            self.sync(SyncKind::Directory, &self.host, &staging).await?
        };
        merge_lease(runtime, id, &staging, &dest, &shown, |p| format!("lease:{id}:{p}")).await?;
        Ok(result)
    }

    /// Lease → host without deleting what DST holds.
    async fn merge_out(&self) -> Result<SyncResult, CliError> {
        let host = Path::new(&self.host);
        match std::fs::symlink_metadata(host) {
            Err(_) => {
                if self.dst_arg.ends_with('/') {
                    // Only a directory SRC may make a new directory DST/.
                    let staging = self.host_staging(host.parent().unwrap_or(Path::new("/")))?;
                    let tree = staging.join("tree");
                    let outcome = self
                        .sync(SyncKind::Directory, &self.remote, &tree.to_string_lossy())
                        .await;
                    let moved = match &outcome {
                        Ok(_) => std::fs::rename(&tree, host)
                            .map_err(|e| CliError::Failure(format!("envrt: cannot move the copy into place: {e}"))),
                        Err(_) => Ok(()),
                    };
                    let _ = std::fs::remove_dir_all(&staging);
                    return match outcome {
                        Err(RuntimeError::Driver(DriverError::SourceKind { .. })) => {
                            Err(missing_directory(&self.dst_arg))
                        }
                        other => {
                            moved?;
                            Ok(other?)
                        }
                    };
                }
                self.exact().await
            }
            Ok(meta) if meta.is_dir() => {
                let staging = self.host_staging(host)?;
                let tree = staging.join("tree");
                let outcome = {
                    let total = self.lease_size().await;
                    let _progress = self.progress(Measure {
                        total,
                        landing: Some(tree.clone()),
                    });
                    self.sync(SyncKind::Directory, &self.remote, &tree.to_string_lossy())
                        .await
                };
                let result = match outcome {
                    Ok(result) => result,
                    Err(RuntimeError::Driver(DriverError::SourceKind { .. })) => {
                        let _ = std::fs::remove_dir_all(&staging);
                        return self.file_into(host).await;
                    }
                    Err(e) => {
                        let _ = std::fs::remove_dir_all(&staging);
                        return Err(e.into());
                    }
                };
                let name = lease_basename(&self.remote).filter(|_| !self.contents);
                let (dest, shown) = match name {
                    None => (host.to_path_buf(), self.dst_arg.clone()),
                    Some(name) => (host.join(name), join_shown(&self.dst_arg, name)),
                };
                let shown_of = |p: &Path| {
                    let relative = p.strip_prefix(&dest).unwrap_or(p);
                    join_shown(&shown, &relative.to_string_lossy())
                };
                match std::fs::symlink_metadata(&dest) {
                    Err(_) => {
                        let moved = std::fs::rename(&tree, &dest);
                        let _ = std::fs::remove_dir(&staging);
                        moved.map_err(|e| CliError::Failure(format!("envrt: cannot move the copy into place: {e}")))?;
                    }
                    Ok(m) if m.is_dir() => merge_host(&tree, &dest, &staging, &shown, shown_of)?,
                    Ok(_) => {
                        let _ = std::fs::remove_dir_all(&staging);
                        return Err(not_a_directory(&shown));
                    }
                }
                Ok(result)
            }
            Ok(_) => {
                // An existing file (or link): a file SRC replaces it, a directory does not.
                refuse(probe_host(host), &self.dst_arg)?;
                let _progress = self.progress(Measure::default());
                match self.sync(SyncKind::File, &self.remote, &self.host).await {
                    Err(RuntimeError::Driver(DriverError::SourceKind { .. })) => Err(not_a_directory(&self.dst_arg)),
                    other => Ok(other?),
                }
            }
        }
    }

    /// The size of the lease-side source (`du -sk`, in whole KiB), only when a progress line
    /// is drawn.
    async fn lease_size(&self) -> Option<u64> {
        if !self.show {
            return None;
        }
        let mut request = envrt::ExecuteRequest::new("du", ["-sk", "--", self.remote.as_str()]);
        request.max_output_bytes = Some(4096);
        request.timeout = Some(std::time::Duration::from_secs(30));
        let result = self.app.runtime.execute(&self.lease_id, request).await.ok()?;
        let kib: u64 = String::from_utf8_lossy(&result.stdout)
            .split_whitespace()
            .next()?
            .parse()
            .ok()?;
        Some(kib * 1024)
    }

    /// A file SRC into the existing host directory `dir`: `dir/basename(SRC)`.
    async fn file_into(&self, dir: &Path) -> Result<SyncResult, CliError> {
        let Some(name) = lease_basename(&self.remote) else {
            return Err(over_directory(&self.dst_arg));
        };
        let target = dir.join(name);
        let shown = join_shown(&self.dst_arg, name);
        refuse(probe_host(&target), &shown)?;
        let _progress = self.progress(Measure::default());
        Ok(self
            .sync(SyncKind::File, &self.remote, &target.to_string_lossy())
            .await?)
    }

    /// A fresh staging directory inside `dir` (kept until the merge removes it).
    fn host_staging(&self, dir: &Path) -> Result<PathBuf, CliError> {
        tempfile::Builder::new()
            .prefix(".envrt-cp-")
            .tempdir_in(dir)
            .map(tempfile::TempDir::keep)
            .map_err(|e| CliError::Failure(format!("envrt: cannot stage the copy in \"{}\": {e}", dir.display())))
    }
}

/// What a probe found, as far as the two refusals care.
fn found_of(found: Option<&envrt::files::Probe>) -> Found {
    match found {
        Some(found) if found.is_real_directory() => Found::Directory,
        Some(found) if found.is_read_only_file() => Found::ReadOnlyFile,
        _ => Found::Other,
    }
}

pub(crate) async fn run(paths: &Paths, args: CpArgs) -> Result<u8, CliError> {
    let (src, dst) = (parse_side(&args.src)?, parse_side(&args.dst)?);
    let mut contents = false;
    let src = match src {
        Side::Host(h) if h != "-" => Side::Host(match content_form(&h) {
            Some(p) => {
                contents = true;
                p.to_owned()
            }
            None => h,
        }),
        Side::Lease { id, path } => match content_form(&path) {
            Some(p) => {
                contents = true;
                Side::Lease { id, path: p.to_owned() }
            }
            None => Side::Lease { id, path },
        },
        other => other,
    };
    let mut staged: Option<tempfile::TempDir> = None;
    let to_stdout = dst == Side::Host("-".into());
    let from_stdin = src == Side::Host("-".into());
    let mut host_side = |h: &str, inbound: bool| -> Result<String, CliError> {
        if h != "-" {
            return host_absolute(h);
        }
        if inbound {
            let (dir, path) = stdin_file()?;
            staged = Some(dir);
            return Ok(path);
        }
        let dir = tempfile::tempdir().map_err(|e| CliError::Failure(format!("envrt: cannot stage stdout: {e}")))?;
        let path = host_absolute(&dir.path().join("stdout").to_string_lossy())?;
        staged = Some(dir);
        Ok(path)
    };
    let (lease_id, inbound, host, remote) = match (&src, &dst) {
        (Side::Host(h), Side::Lease { id, path }) => (id.clone(), true, host_side(h, true)?, path.clone()),
        (Side::Lease { id, path }, Side::Host(h)) => (id.clone(), false, host_side(h, false)?, path.clone()),
        _ => {
            return Err(CliError::Usage(
                "envrt: exactly one of SRC and DST must be a lease path (lease:ID:/path)".into(),
            ));
        }
    };
    let app = App::open(paths).await?;
    app.existing_lease(&lease_id).await?;
    let copy = Copy {
        app: &app,
        lease_id,
        inbound,
        host,
        remote,
        contents,
        exclude: args.exclude,
        dst_arg: args.dst.clone(),
        from_stdin,
        to_stdout,
        show: !args.quiet && std::io::stderr().is_terminal(),
        label: format!("copying {} → {}", args.src, args.dst),
    };
    let result = if args.replace || to_stdout {
        copy.exact().await?
    } else if inbound {
        copy.merge_in().await?
    } else {
        copy.merge_out().await?
    };
    if to_stdout {
        let data =
            std::fs::read(&copy.host).map_err(|e| CliError::Failure(format!("envrt: cannot read the copy: {e}")))?;
        let mut out = std::io::stdout().lock();
        out.write_all(&data)
            .and_then(|()| out.flush())
            .map_err(|e| CliError::Failure(format!("envrt: cannot write stdout: {e}")))?;
    }
    drop(staged);
    if !args.quiet {
        let (files, bytes) = totals(&result);
        crate::say!(
            "copied {}, {}: {} → {}",
            crate::plural(files, "file", "files"),
            crate::plural(bytes, "byte", "bytes"),
            args.src,
            args.dst
        );
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lease_paths_parse_and_bad_ones_are_refused() {
        assert_eq!(parse_side("./x").unwrap(), Side::Host("./x".into()));
        assert_eq!(
            parse_side("lease:abc:/w/x").unwrap(),
            Side::Lease {
                id: "abc".into(),
                path: "/w/x".into()
            }
        );
        assert_eq!(
            parse_side("lease:abc:rel:with:colons").unwrap(),
            Side::Lease {
                id: "abc".into(),
                path: "rel:with:colons".into()
            }
        );
        for bad in ["lease:", "lease:abc", "lease::/x", "lease:abc:"] {
            assert_eq!(
                parse_side(bad).unwrap_err().to_string(),
                format!("envrt: \"{bad}\" is not a lease path; write lease:ID:/path")
            );
        }
    }
}

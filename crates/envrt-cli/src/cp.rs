//! `envrt cp SRC DST`: native sync between the host and a lease. `lease:ID:/path` names the
//! lease side; exactly one side is a lease. DST is the exact path the source becomes (a
//! directory target is replaced by the source tree). `-` as the host side is stdin (as a
//! file's content) or stdout (a file's content, nothing else on stdout).
//!
//! Two replacements are refused rather than done silently, on either side: a file over an
//! existing directory, and a file over an existing read-only file (no write bit for
//! anyone). The lease side is looked at with a small `sh` probe through execute; a driver
//! without execute gets no such check there.

use std::io::{IsTerminal, Write};
use std::path::Path;
use std::time::Duration;

use clap::Args;
use envrt::{DriverError, RuntimeError, SyncFile, SyncKind, SyncOperation, SyncResult};

use crate::app::App;
use crate::error::CliError;
use envrt::config::Paths;

#[derive(Debug, Args)]
pub(crate) struct CpArgs {
    /// No progress line and no summary.
    #[arg(short, long)]
    quiet: bool,
    /// The source: a host path or `lease:ID:/path`.
    src: String,
    /// The destination: a host path or `lease:ID:/path`.
    dst: String,
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

/// A spinner on stderr while the copy runs; cleared when dropped.
struct Progress {
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Progress {
    fn start(show: bool, label: String) -> Progress {
        if !show {
            return Progress { task: None };
        }
        const FRAMES: [char; 4] = ['|', '/', '-', '\\'];
        let started = std::time::Instant::now();
        let draw = move |i: usize| {
            let mut err = std::io::stderr().lock();
            let _ = write!(
                err,
                "\r\x1b[2K{} {label} ({:.1} s)",
                FRAMES[i % FRAMES.len()],
                started.elapsed().as_secs_f64()
            );
            let _ = err.flush();
        };
        // The first frame right away, so even a quick copy shows what it did.
        draw(0);
        let task = tokio::spawn(async move {
            for i in 1.. {
                tokio::time::sleep(Duration::from_millis(100)).await;
                draw(i);
            }
        });
        Progress { task: Some(task) }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
            let mut err = std::io::stderr().lock();
            let _ = write!(err, "\r\x1b[2K");
            let _ = err.flush();
        }
    }
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

pub(crate) async fn run(paths: &Paths, args: CpArgs) -> Result<u8, CliError> {
    let (src, dst) = (parse_side(&args.src)?, parse_side(&args.dst)?);
    let mut staged: Option<tempfile::TempDir> = None;
    let to_stdout = dst == Side::Host("-".into());
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
    let host_is_dir = Path::new(&host).is_dir();
    // A source that is not there is the sync's own error to give.
    if inbound && Path::new(&host).is_file() {
        refuse(probe_lease(&app, &lease_id, &remote).await, &args.dst)?;
    }
    let show = !args.quiet && std::io::stderr().is_terminal();
    let label = format!("copying {} → {}", args.src, args.dst);
    let progress = Progress::start(show, label);
    let operation = |kind: SyncKind| {
        let (source, target) = if inbound {
            (host.clone(), remote.clone())
        } else {
            (remote.clone(), host.clone())
        };
        let file = match kind {
            SyncKind::File => SyncFile::file(source, target),
            SyncKind::Directory => SyncFile::directory(source, target),
        };
        vec![SyncOperation {
            operation_id: "envrt-cp".into(),
            files: vec![file],
            post_upload_commands: Vec::new(),
        }]
    };
    let result = if inbound {
        let kind = if host_is_dir {
            SyncKind::Directory
        } else {
            SyncKind::File
        };
        app.runtime.sync_in(&lease_id, &operation(kind)).await
    } else {
        // The environment side's kind is unknown here: try a directory, then a file (stdout
        // takes a file only).
        let first = if to_stdout { SyncKind::File } else { SyncKind::Directory };
        match app.runtime.sync_out(&lease_id, &operation(first)).await {
            Err(RuntimeError::Driver(DriverError::SourceKind { .. })) if first == SyncKind::Directory => {
                match refuse(probe_host(Path::new(&host)), &args.dst) {
                    Ok(()) => app.runtime.sync_out(&lease_id, &operation(SyncKind::File)).await,
                    Err(refusal) => {
                        drop(progress);
                        return Err(refusal);
                    }
                }
            }
            other => other,
        }
    };
    drop(progress);
    let result = result?;
    if to_stdout {
        let data = std::fs::read(&host).map_err(|e| CliError::Failure(format!("envrt: cannot read the copy: {e}")))?;
        let mut out = std::io::stdout().lock();
        out.write_all(&data)
            .and_then(|()| out.flush())
            .map_err(|e| CliError::Failure(format!("envrt: cannot write stdout: {e}")))?;
    }
    drop(staged);
    if !args.quiet {
        let (files, bytes) = totals(&result);
        eprintln!("copied {files} files, {bytes} bytes: {} → {}", args.src, args.dst);
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

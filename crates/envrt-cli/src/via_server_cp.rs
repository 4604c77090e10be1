//! `envrt cp` through a service (`--server`): a host directory into a lease, and a lease
//! file or directory out to the host, as tar streams over `/v1/leases/{id}/files`.
//!
//! The service syncs whole directories in, so this follows `docker cp`'s rules only where
//! nothing is merged: a copy lands at DST, or at `DST/basename(SRC)` when DST is an existing
//! directory; where that landing path already exists the copy is refused unless
//! `--replace` says to replace it whole, with
//! `envrt: "{path}" exists in the lease, and a copy through a service replaces a directory whole; pass --replace to replace it`
//! (into a lease) or
//! `envrt: "{path}" exists on the host, and a copy through a service does not merge into it; pass --replace to replace it`
//! (out of one; a file over an existing file is replaced, as `docker cp` does). A single
//! host file into a lease, `-` (stdin, stdout) and `--exclude` are refused with
//! [`unsupported`]'s text. The lease side is looked at with a small `sh` probe through
//! execute. What comes back is unpacked with the `tar` crate's `unpack_in`, which refuses
//! an entry that would land outside the target.

use std::path::{Path, PathBuf};

use bytes::Bytes;
use hyper::Method;
use serde_json::{Value, json};

use crate::cp::{CpArgs, Side, parse_side};
use crate::error::CliError;
use crate::server::{Server, segment};
use crate::via_server::unsupported;

/// What is at a lease path.
#[derive(Debug, PartialEq, Eq)]
enum Found {
    Nothing,
    Directory,
    Other,
}

/// Looks at `path` in lease `id` with `sh`.
async fn probe(server: &Server, id: &str, path: &str) -> Result<Found, CliError> {
    let script =
        r#"if [ -d "$1" ]; then echo dir; elif [ -e "$1" ] || [ -L "$1" ]; then echo other; else echo none; fi"#;
    let body = json!({ "command": "sh", "args": ["-c", script, "sh", path] });
    let doc: Value = server
        .json(
            Method::POST,
            &format!("/v1/leases/{}/execute", segment(id)),
            Some(&body),
        )
        .await?;
    match doc["stdout"].as_str().map(str::trim) {
        Some("dir") => Ok(Found::Directory),
        Some("other") => Ok(Found::Other),
        Some("none") => Ok(Found::Nothing),
        _ => Err(CliError::Failure(format!(
            "envrt: cannot look at \"{path}\" in the lease (it runs no sh probe)"
        ))),
    }
}

fn basename(path: &str) -> &str {
    path.trim_end_matches('/').rsplit('/').next().unwrap_or(path)
}

fn join_lease(dir: &str, name: &str) -> String {
    format!("{}/{name}", dir.trim_end_matches('/'))
}

fn io(what: &str) -> impl Fn(std::io::Error) -> CliError + '_ {
    move |e| CliError::Failure(format!("envrt: cannot {what}: {e}"))
}

pub(crate) async fn run(server: &Server, args: CpArgs) -> Result<u8, CliError> {
    if !args.exclude.is_empty() {
        return Err(unsupported("cp --exclude"));
    }
    let (files, bytes) = match (parse_side(&args.src)?, parse_side(&args.dst)?) {
        (Side::Host(src), Side::Lease { id, path }) => upload(server, &args, &src, &id, &path).await?,
        (Side::Lease { id, path }, Side::Host(dst)) => download(server, &args, &id, &path, &dst).await?,
        _ => {
            return Err(CliError::Usage(
                "envrt: exactly one of SRC and DST must be a lease path (lease:ID:/path)".into(),
            ));
        }
    };
    if !args.quiet {
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

async fn upload(server: &Server, args: &CpArgs, src: &str, id: &str, dst: &str) -> Result<(u64, u64), CliError> {
    if src == "-" {
        return Err(unsupported("cp - (stdin) into a lease"));
    }
    let meta = std::fs::metadata(src).map_err(|e| CliError::Usage(format!("envrt: cannot read \"{src}\": {e}")))?;
    if !meta.is_dir() {
        return Err(unsupported("cp of a single file into a lease"));
    }
    let exists = |path: &str| {
        CliError::Usage(format!(
            "envrt: \"{path}\" exists in the lease, and a copy through a service replaces a directory whole; pass --replace to replace it"
        ))
    };
    let land = if args.replace {
        dst.to_owned()
    } else {
        match probe(server, id, dst).await? {
            Found::Nothing => dst.to_owned(),
            Found::Directory if !src.ends_with("/.") => {
                let land = join_lease(dst, basename(src));
                if probe(server, id, &land).await? != Found::Nothing {
                    return Err(exists(&land));
                }
                land
            }
            _ => return Err(exists(dst)),
        }
    };
    let root = PathBuf::from(src);
    let tar = tokio::task::spawn_blocking(move || pack(&root))
        .await
        .map_err(|e| CliError::Failure(format!("envrt: the pack task failed: {e}")))??;
    let path = format!("/v1/leases/{}/files?path={}", segment(id), segment(&land));
    let answer = server
        .raw(Method::PUT, &path, Some("application/x-tar"), Bytes::from(tar))
        .await?;
    let result: envrt::SyncResult = serde_json::from_slice(&answer).map_err(|e| {
        CliError::Failure(format!(
            "envrt: the service answered the copy with unexpected JSON: {e}"
        ))
    })?;
    Ok(result.operations.iter().fold((0, 0), |(f, b), op| {
        (f + op.files_transferred, b + op.bytes_transferred)
    }))
}

/// A tar of the contents of `root` (links as links).
fn pack(root: &Path) -> Result<Vec<u8>, CliError> {
    let mut builder = tar::Builder::new(Vec::new());
    builder.follow_symlinks(false);
    builder.append_dir_all(".", root).map_err(io("pack the directory"))?;
    builder.into_inner().map_err(io("pack the directory"))
}

async fn download(server: &Server, args: &CpArgs, id: &str, src: &str, dst: &str) -> Result<(u64, u64), CliError> {
    if dst == "-" {
        return Err(unsupported("cp to - (stdout)"));
    }
    let kind = match probe(server, id, src).await? {
        Found::Directory => "directory",
        _ => "file",
    };
    let dst_path = Path::new(dst);
    let land = if dst_path.is_dir() && !(kind == "directory" && src.ends_with("/.") && args.replace) {
        dst_path.join(basename(src))
    } else {
        dst_path.to_path_buf()
    };
    let existing = std::fs::symlink_metadata(&land).ok();
    match &existing {
        Some(meta) if args.replace => {
            if meta.is_dir() {
                std::fs::remove_dir_all(&land).map_err(io("replace the host directory"))?;
            } else {
                std::fs::remove_file(&land).map_err(io("replace the host file"))?;
            }
        }
        Some(meta) if kind == "directory" || meta.is_dir() => {
            return Err(CliError::Usage(format!(
                "envrt: \"{}\" exists on the host, and a copy through a service does not merge into it; pass --replace to replace it",
                land.display()
            )));
        }
        _ => {}
    }
    let path = format!("/v1/leases/{}/files?path={}&kind={kind}", segment(id), segment(src));
    let tar = server.raw(Method::GET, &path, None, Bytes::new()).await?;
    let is_dir = kind == "directory";
    tokio::task::spawn_blocking(move || unpack(&tar, &land, is_dir))
        .await
        .map_err(|e| CliError::Failure(format!("envrt: the unpack task failed: {e}")))?
}

/// Unpacks `tar` at `land`: a directory's contents into it, or its one file as it.
fn unpack(tar: &[u8], land: &Path, is_dir: bool) -> Result<(u64, u64), CliError> {
    let parent = land
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let staging = tempfile::Builder::new()
        .prefix(".envrt-cp-")
        .tempdir_in(parent)
        .map_err(io("stage the copy"))?;
    let (mut files, mut bytes) = (0u64, 0u64);
    let mut archive = tar::Archive::new(tar);
    archive.set_preserve_permissions(true);
    for entry in archive.entries().map_err(io("read the service's tar"))? {
        let mut entry = entry.map_err(io("read the service's tar"))?;
        if entry.header().entry_type().is_file() {
            files += 1;
            bytes += entry.size();
        }
        let name = entry.path().map(|p| p.display().to_string()).unwrap_or_default();
        if !entry.unpack_in(staging.path()).map_err(io("unpack the copy"))? {
            return Err(CliError::Failure(format!(
                "envrt: the service's tar entry \"{name}\" would land outside the target"
            )));
        }
    }
    let from = if is_dir {
        staging.path().to_path_buf()
    } else {
        let mut names = std::fs::read_dir(staging.path()).map_err(io("read the copy"))?;
        match names.next() {
            Some(entry) => entry.map_err(io("read the copy"))?.path(),
            None => return Err(CliError::Failure("envrt: the service's tar held no file".into())),
        }
    };
    // A directory's staging directory itself becomes the landing directory (its removal
    // when `staging` drops then finds nothing).
    std::fs::rename(&from, land).map_err(io("move the copy into place"))?;
    Ok((files, bytes))
}

//! Sync as tar streams. `PUT /v1/leases/{id}/files?path=TARGET` takes a tar body, unpacks
//! it into a private staging directory on the service's host (at most
//! [`Limits::max_upload_bytes`](crate::Limits) of tar), and syncs that directory in to
//! `TARGET` (a directory sync in, with the driver's own rules for what lands where).
//! `GET /v1/leases/{id}/files?path=SOURCE[&kind=file]` syncs `SOURCE` out into a staging
//! directory and answers a tar of it (a directory's contents, or the one file under its
//! name). Staging lives in a fresh temporary directory (mode 0700) removed when the request
//! ends; the tar is unpacked with `tar`'s own refusal of entries that leave it.

use std::path::Path as FsPath;
use std::sync::Arc;

use axum::Json;
use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use envrt::{SyncFile, SyncKind, SyncOperation, SyncResult};
use futures::StreamExt as _;
use serde::Deserialize;
use tokio::io::AsyncWriteExt as _;

use super::{audit, principal, query};
use crate::auth::Principal;
use crate::error::ApiError;
use crate::state::Service;

type Who = Option<axum::Extension<Principal>>;

/// The query of both routes.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FilesQuery {
    path: String,
    #[serde(default)]
    kind: Option<SyncKind>,
}

fn io(what: &str) -> impl Fn(std::io::Error) -> ApiError + '_ {
    move |e| ApiError::internal(format!("cannot {what}: {e}"))
}

fn operation(file: SyncFile) -> Vec<SyncOperation> {
    vec![SyncOperation {
        operation_id: "envrt-serve".into(),
        files: vec![file],
        post_upload_commands: Vec::new(),
    }]
}

pub(super) async fn sync_in(
    State(service): State<Arc<Service>>,
    who: Who,
    Path(id): Path<String>,
    q: Result<Query<FilesQuery>, axum::extract::rejection::QueryRejection>,
    body: Body,
) -> Result<Json<SyncResult>, ApiError> {
    let who = principal(who)?;
    who.require("sync")?;
    let q = query(q)?;
    let result = async {
        let runtime = service.runtime_for(&who.tenant);
        if runtime.lease(&id).await?.is_none() {
            return Err(envrt::RuntimeError::LeaseNotFound { id: id.clone() }.into());
        }
        let staging = tempfile::tempdir().map_err(io("create a staging directory"))?;
        let archive = staging.path().join("upload.tar");
        receive(body, &archive, service.limits.max_upload_bytes).await?;
        let root = staging.path().join("root");
        let unpack_to = root.clone();
        tokio::task::spawn_blocking(move || unpack(&archive, &unpack_to))
            .await
            .map_err(|e| ApiError::internal(format!("the unpack task failed: {e}")))??;
        let root = root.to_string_lossy().into_owned();
        Ok(Json(
            runtime
                .sync_in(&id, &operation(SyncFile::directory(root, q.path)))
                .await?,
        ))
    }
    .await;
    audit(&service, &who, "sync.in", Some(&id), &result.as_ref().map(|_| ()));
    result
}

/// Writes the body to `path`, refusing more than `limit` bytes.
async fn receive(body: Body, path: &FsPath, limit: usize) -> Result<(), ApiError> {
    let mut file = tokio::fs::File::create(path).await.map_err(io("stage the upload"))?;
    let mut stream = body.into_data_stream();
    let mut total = 0usize;
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| ApiError::invalid(format!("Cannot read the request body: {e}")))?;
        total += chunk.len();
        if total > limit {
            return Err(super::too_large(limit));
        }
        file.write_all(&chunk).await.map_err(io("stage the upload"))?;
    }
    file.flush().await.map_err(io("stage the upload"))
}

fn unpack(archive: &FsPath, root: &FsPath) -> Result<(), ApiError> {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::create_dir(root).map_err(io("create the staging root"))?;
    std::fs::set_permissions(root, std::fs::Permissions::from_mode(0o755)).map_err(io("set the staging root mode"))?;
    let file = std::fs::File::open(archive).map_err(io("open the staged upload"))?;
    let mut tar = tar::Archive::new(file);
    tar.set_preserve_permissions(true);
    tar.set_overwrite(true);
    let entries = tar
        .entries()
        .map_err(|e| ApiError::invalid(format!("The body is not a tar archive: {e}")))?;
    for entry in entries {
        let mut entry = entry.map_err(|e| ApiError::invalid(format!("The body is not a tar archive: {e}")))?;
        let name = entry.path().map(|p| p.display().to_string()).unwrap_or_default();
        let placed = entry
            .unpack_in(root)
            .map_err(|e| ApiError::invalid(format!("Cannot unpack tar entry \"{name}\": {e}")))?;
        if !placed {
            return Err(ApiError::invalid(format!(
                "Tar entry \"{name}\" would be written outside the target."
            )));
        }
    }
    Ok(())
}

pub(super) async fn sync_out(
    State(service): State<Arc<Service>>,
    who: Who,
    Path(id): Path<String>,
    q: Result<Query<FilesQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, ApiError> {
    let who = principal(who)?;
    who.require("sync")?;
    let q = query(q)?;
    let runtime = service.runtime_for(&who.tenant);
    let staging = tempfile::tempdir().map_err(io("create a staging directory"))?;
    let kind = q.kind.unwrap_or(SyncKind::Directory);
    let name = q.path.rsplit('/').find(|s| !s.is_empty()).unwrap_or("file").to_owned();
    let out = staging.path().join("out");
    let target = match kind {
        SyncKind::Directory => out.clone(),
        SyncKind::File => {
            std::fs::create_dir(&out).map_err(io("create the staging root"))?;
            out.join(&name)
        }
    };
    let file = match kind {
        SyncKind::Directory => SyncFile::directory(q.path, target.to_string_lossy()),
        SyncKind::File => SyncFile::file(q.path, target.to_string_lossy()),
    };
    runtime.sync_out(&id, &operation(file)).await?;
    let archive = staging.path().join("download.tar");
    let (from, to) = (out.clone(), archive.clone());
    tokio::task::spawn_blocking(move || pack(&from, &to))
        .await
        .map_err(|e| ApiError::internal(format!("the pack task failed: {e}")))??;
    // The open file outlives the staging directory removed below.
    let file = tokio::fs::File::open(&archive).await.map_err(io("open the tar"))?;
    drop(staging);
    let body = Body::from_stream(tokio_util::io::ReaderStream::new(file));
    Ok((
        StatusCode::OK,
        [(axum::http::header::CONTENT_TYPE, "application/x-tar")],
        body,
    )
        .into_response())
}

fn pack(from: &FsPath, archive: &FsPath) -> Result<(), ApiError> {
    let file = std::fs::File::create(archive).map_err(io("create the tar"))?;
    let mut builder = tar::Builder::new(file);
    builder.follow_symlinks(false);
    builder.append_dir_all(".", from).map_err(io("write the tar"))?;
    builder.into_inner().map_err(io("write the tar"))?;
    Ok(())
}

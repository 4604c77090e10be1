//! Templates: capture a lease's state, list and delete an environment's templates. Every
//! template is the token's tenant's: the runtime lists, finds and deletes only templates
//! of that tenant, so another tenant's template answers as an unknown one.

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use envrt::core::template::TemplateRef;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{audited, json_body, principal};
use crate::auth::Principal;
use crate::error::ApiError;
use crate::state::Service;

type Who = Option<axum::Extension<Principal>>;

/// `POST /v1/leases/{id}/templates`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct CaptureBody {
    label: Option<String>,
}

pub(super) async fn list(
    State(service): State<Arc<Service>>,
    who: Who,
    Path(id): Path<String>,
) -> Result<Json<Vec<TemplateRef>>, ApiError> {
    let who = principal(who)?;
    who.require("templates:read")?;
    Ok(Json(
        service.runtime_for(&who.tenant).templates(&id, &who.tenant).await?,
    ))
}

pub(super) async fn capture(
    State(service): State<Arc<Service>>,
    who: Who,
    Path(id): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Result<(StatusCode, Json<TemplateRef>), ApiError> {
    let who = principal(who)?;
    who.require("templates:write")?;
    let body: CaptureBody = json_body(&service, body)?;
    audited(&service, &who, "template.capture", Some(&id), async {
        let runtime = service.runtime_for(&who.tenant);
        let template = runtime.capture_template(&id, body.label.as_deref()).await?;
        Ok((StatusCode::CREATED, Json(template)))
    })
    .await
}

pub(super) async fn delete(
    State(service): State<Arc<Service>>,
    who: Who,
    Path((id, template)): Path<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    let who = principal(who)?;
    who.require("templates:write")?;
    audited(&service, &who, "template.delete", None, async {
        let runtime = service.runtime_for(&who.tenant);
        let deleted = runtime.delete_template(&id, &who.tenant, &template).await?;
        Ok(Json(json!({ "deleted": deleted })))
    })
    .await
}

//! Leases: acquire, list, show, release, resume, destroy, capabilities. Every lease is
//! the token's tenant's: acquire puts the tenant in the request, and the tenant-bound
//! runtime answers another tenant's lease as an unknown one.

use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use envrt::core::network::RawPolicy;
use envrt::{AcquireRequest, JsonMap, Lease, LeaseFilter, LeasePolicy, LeaseStatus, RuntimeError, Timestamp};
use serde::Deserialize;

use super::{audited, json_body, principal};
use crate::auth::Principal;
use crate::error::ApiError;
use crate::state::Service;

type Who = Option<axum::Extension<Principal>>;

/// `POST /v1/leases`.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct AcquireBody {
    environment_id: String,
    #[serde(default)]
    policy: LeasePolicy,
    run_id: Option<String>,
    issue_id: Option<String>,
    execution_workspace_id: Option<String>,
    requested_cwd: Option<String>,
    ttl_ms: Option<u64>,
    template: Option<String>,
    network: Option<RawPolicy>,
}

/// `GET /v1/leases?all=true`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ListQuery {
    #[serde(default)]
    all: bool,
}

/// `POST /v1/leases/{id}/release`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ReleaseBody {
    status: Option<LeaseStatus>,
}

pub(super) async fn acquire(
    State(service): State<Arc<Service>>,
    who: Who,
    body: Result<Bytes, BytesRejection>,
) -> Result<(StatusCode, Json<Lease>), ApiError> {
    let who = principal(who)?;
    who.require("leases:write")?;
    let body: AcquireBody = json_body(&service, body)?;
    if body.network.is_some() {
        who.require("network")?;
    }
    let network = body.network.map(super::network::policy).transpose()?;
    let result = async {
        let runtime = service.runtime_for(&who.tenant);
        service.check_lease_limit(&who.tenant, &runtime).await?;
        let mut metadata = JsonMap::new();
        metadata.insert("acquiredBy".into(), "envrt serve".into());
        metadata.insert("tokenId".into(), who.token_id.clone().into());
        let request = AcquireRequest {
            environment_id: body.environment_id,
            company_id: who.tenant.clone(),
            run_id: body.run_id,
            issue_id: body.issue_id,
            execution_workspace_id: body.execution_workspace_id,
            policy: body.policy,
            requested_cwd: body.requested_cwd,
            metadata,
            requested_expires_at: body.ttl_ms.map(|ms| Timestamp::now().after(Duration::from_millis(ms))),
            template: body.template,
            network,
            // Scope reuse is not offered over HTTP yet.
            scope: None,
            reuse: Default::default(),
        };
        Ok::<_, ApiError>(runtime.acquire_lease(request).await?)
    }
    .await;
    let lease_id = result.as_ref().ok().map(|l| l.id.clone());
    super::audit(
        &service,
        &who,
        "lease.acquire",
        lease_id.as_deref(),
        &result.as_ref().map(|_| ()),
    );
    Ok((StatusCode::CREATED, Json(result?)))
}

pub(super) async fn list(
    State(service): State<Arc<Service>>,
    who: Who,
    query: Result<Query<ListQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<Vec<Lease>>, ApiError> {
    let who = principal(who)?;
    who.require("leases:read")?;
    let query = super::query(query)?;
    let filter = LeaseFilter {
        statuses: if query.all {
            Vec::new()
        } else {
            vec![LeaseStatus::Active, LeaseStatus::PendingCleanup]
        },
        ..LeaseFilter::default()
    };
    Ok(Json(service.runtime_for(&who.tenant).leases(&filter).await?))
}

pub(super) async fn show(
    State(service): State<Arc<Service>>,
    who: Who,
    Path(id): Path<String>,
) -> Result<Json<Lease>, ApiError> {
    let who = principal(who)?;
    who.require("leases:read")?;
    match service.runtime_for(&who.tenant).lease(&id).await? {
        Some(lease) => Ok(Json(lease)),
        None => Err(RuntimeError::LeaseNotFound { id }.into()),
    }
}

pub(super) async fn release(
    State(service): State<Arc<Service>>,
    who: Who,
    Path(id): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<Lease>, ApiError> {
    let who = principal(who)?;
    who.require("leases:write")?;
    let body: ReleaseBody = json_body(&service, body)?;
    audited(&service, &who, "lease.release", Some(&id), async {
        let runtime = service.runtime_for(&who.tenant);
        let status = body.status.unwrap_or(LeaseStatus::Released);
        Ok(Json(runtime.release_lease(&id, status).await?))
    })
    .await
}

pub(super) async fn resume(
    State(service): State<Arc<Service>>,
    who: Who,
    Path(id): Path<String>,
) -> Result<Json<Lease>, ApiError> {
    let who = principal(who)?;
    who.require("leases:write")?;
    audited(&service, &who, "lease.resume", Some(&id), async {
        Ok(Json(service.runtime_for(&who.tenant).resume_lease(&id).await?))
    })
    .await
}

pub(super) async fn destroy(
    State(service): State<Arc<Service>>,
    who: Who,
    Path(id): Path<String>,
) -> Result<Json<Lease>, ApiError> {
    let who = principal(who)?;
    who.require("leases:write")?;
    audited(&service, &who, "lease.destroy", Some(&id), async {
        Ok(Json(service.runtime_for(&who.tenant).destroy_lease(&id).await?))
    })
    .await
}

pub(super) async fn capabilities(
    State(service): State<Arc<Service>>,
    who: Who,
    Path(id): Path<String>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let who = principal(who)?;
    who.require("leases:read")?;
    let runtime = service.runtime_for(&who.tenant);
    let Some(lease) = runtime.lease(&id).await? else {
        return Err(RuntimeError::LeaseNotFound { id }.into());
    };
    match runtime.resolve_capabilities(&id).await? {
        Some(snapshot) => Ok(Json(
            serde_json::to_value(snapshot).map_err(|e| ApiError::internal(e.to_string()))?,
        )),
        None => Err(RuntimeError::DriverNotRegistered {
            key: lease.provider.unwrap_or_default(),
        }
        .into()),
    }
}

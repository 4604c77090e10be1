//! Leases: acquire (with an owner scope, scope reuse, labels and an idle timeout), list,
//! show, release, resume, destroy, capabilities. Every lease is
//! the token's tenant's: acquire puts the tenant in the request, and the tenant-bound
//! runtime answers another tenant's lease as an unknown one.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use envrt::core::network::RawPolicy;
use envrt::core::{Reuse, ScopeOutcome};
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
    scope: Option<String>,
    #[serde(default)]
    reuse: ReuseWord,
    #[serde(default)]
    labels: BTreeMap<String, String>,
    idle_timeout_ms: Option<u64>,
}

/// `reuse` of an acquire: `"never"` (the default) or `"scope"`.
#[derive(Clone, Copy, Debug, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(super) enum ReuseWord {
    #[default]
    Never,
    Scope,
}

/// The most labels one acquire may put on a lease.
pub const MAX_LABELS: usize = 32;

/// The refusal of labels out of bounds.
pub const LABELS_MESSAGE: &str = "Labels: at most 32, each key 1 to 128 bytes and each value at most 256 bytes, \
     without control characters.";

fn check_labels(labels: &BTreeMap<String, String>) -> Result<(), ApiError> {
    let text = |s: &str, max: usize| s.len() <= max && !s.chars().any(char::is_control);
    let ok = labels.len() <= MAX_LABELS
        && labels
            .iter()
            .all(|(k, v)| !k.is_empty() && text(k, 128) && text(v, 256));
    if ok {
        Ok(())
    } else {
        Err(ApiError::invalid(LABELS_MESSAGE))
    }
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
    if body.idle_timeout_ms.is_some() {
        who.require("leases:idle")?;
    }
    let network = body.network.map(super::network::policy).transpose()?;
    check_labels(&body.labels)?;
    let idle = body.idle_timeout_ms.map(super::lifecycle::idle_of).transpose()?;
    let idle = idle.or_else(|| service.idle_default(&body.environment_id));
    let result = async {
        let runtime = service.runtime_for(&who.tenant);
        service.check_lease_limit(&who.tenant, &runtime).await?;
        let mut metadata = JsonMap::new();
        metadata.insert("acquiredBy".into(), "envrt serve".into());
        metadata.insert("tokenId".into(), who.token_id.clone().into());
        if !body.labels.is_empty() {
            let labels: JsonMap = body.labels.into_iter().map(|(k, v)| (k, v.into())).collect();
            metadata.insert(envrt::core::LABELS_KEY.into(), labels.into());
        }
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
            scope: body.scope,
            reuse: match body.reuse {
                ReuseWord::Never => Reuse::Never,
                ReuseWord::Scope => Reuse::Scope,
            },
        };
        let lease = runtime.acquire_lease(request).await?;
        let Some(idle) = idle else {
            return Ok::<_, ApiError>(lease);
        };
        match runtime.set_idle_timeout(&lease.id, idle).await {
            Ok(lease) => Ok(lease),
            Err(error) => {
                // No lease is left without the idle timeout it was asked for.
                if let Err(e) = runtime.release_lease(&lease.id, LeaseStatus::Released).await {
                    tracing::warn!(lease_id = %lease.id, error = %e, "cannot release a lease whose idle timeout was refused");
                }
                Err(error.into())
            }
        }
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
    let lease = result?;
    // A scope's live lease handed back is no new resource.
    let status = match ScopeOutcome::of(&lease) {
        Some(ScopeOutcome::Resumed) => StatusCode::OK,
        _ => StatusCode::CREATED,
    };
    Ok((status, Json(lease)))
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

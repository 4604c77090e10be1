//! The life-cycle v2 routes (contract section 8): pause and unpause (`leases:pause`),
//! fork (`leases:fork`), keep-alive and idle timeout (`leases:idle`), and the release of
//! every lease of an owner scope or label (`leases:write`). Each checks the token's
//! operation before it reads the body or touches a driver; the tenant-bound runtime
//! answers another tenant's lease as an unknown one.

use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use envrt::core::LeaseSelector;
use envrt::{Lease, LeaseStatus};
use serde::{Deserialize, Serialize};

use super::{audited, json_body, principal};
use crate::auth::Principal;
use crate::error::ApiError;
use crate::state::Service;

type Who = Option<axum::Extension<Principal>>;

/// `POST /v1/leases/{id}/fork`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct ForkBody {
    #[serde(default = "one")]
    count: usize,
}

fn one() -> usize {
    1
}

/// `PUT /v1/leases/{id}/idle-timeout`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct IdleBody {
    idle_timeout_ms: u64,
}

/// `POST /v1/leases/release-matching`: exactly one of `scope` and `label`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct MatchingBody {
    scope: Option<String>,
    label: Option<LabelBody>,
    status: Option<LeaseStatus>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct LabelBody {
    key: String,
    value: String,
}

/// What `release-matching` answers: the leases released, and each that could not be.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct MatchingReport {
    released: Vec<Lease>,
    failures: Vec<MatchingFailure>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct MatchingFailure {
    lease_id: String,
    error: crate::error::ErrorBody,
}

/// The refusal of a release-matching body without exactly one selector.
pub const SELECTOR_MESSAGE: &str = "Give exactly one of \"scope\" and \"label\" to release leases by.";

/// The refusal of an idle timeout of 0 ms.
pub const ZERO_IDLE_MESSAGE: &str = "An idle timeout must be at least 1 ms.";

pub(super) async fn pause(
    State(service): State<Arc<Service>>,
    who: Who,
    Path(id): Path<String>,
) -> Result<Json<Lease>, ApiError> {
    let who = principal(who)?;
    who.require("leases:pause")?;
    audited(&service, &who, "lease.pause", Some(&id), async {
        Ok(Json(service.runtime_for(&who.tenant).pause_lease(&id).await?))
    })
    .await
}

pub(super) async fn unpause(
    State(service): State<Arc<Service>>,
    who: Who,
    Path(id): Path<String>,
) -> Result<Json<Lease>, ApiError> {
    let who = principal(who)?;
    who.require("leases:pause")?;
    audited(&service, &who, "lease.unpause", Some(&id), async {
        Ok(Json(service.runtime_for(&who.tenant).unpause_lease(&id).await?))
    })
    .await
}

pub(super) async fn fork(
    State(service): State<Arc<Service>>,
    who: Who,
    Path(id): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Result<(StatusCode, Json<Vec<Lease>>), ApiError> {
    let who = principal(who)?;
    who.require("leases:fork")?;
    let body: ForkBody = json_body(&service, body)?;
    let copies = audited(&service, &who, "lease.fork", Some(&id), async {
        let runtime = service.runtime_for(&who.tenant);
        // The copies count against the tenant's live leases, as acquires do. An
        // out-of-bounds count is the facade's refusal, before any driver call.
        if (1..=envrt::core::driver::MAX_FORK_COUNT).contains(&body.count) {
            service.check_lease_room(&who.tenant, &runtime, body.count).await?;
        }
        Ok(runtime.fork_lease(&id, body.count).await?)
    })
    .await?;
    for copy in &copies {
        super::audit(&service, &who, "lease.forked", Some(&copy.id), &Ok(()));
    }
    Ok((StatusCode::CREATED, Json(copies)))
}

pub(super) async fn keep_alive(
    State(service): State<Arc<Service>>,
    who: Who,
    Path(id): Path<String>,
) -> Result<Json<Lease>, ApiError> {
    let who = principal(who)?;
    who.require("leases:idle")?;
    audited(&service, &who, "lease.keep_alive", Some(&id), async {
        Ok(Json(service.runtime_for(&who.tenant).keep_alive(&id).await?))
    })
    .await
}

pub(super) async fn idle_timeout(
    State(service): State<Arc<Service>>,
    who: Who,
    Path(id): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<Lease>, ApiError> {
    let who = principal(who)?;
    who.require("leases:idle")?;
    let body: IdleBody = json_body(&service, body)?;
    let idle = idle_of(body.idle_timeout_ms)?;
    audited(&service, &who, "lease.idle_timeout", Some(&id), async {
        Ok(Json(
            service.runtime_for(&who.tenant).set_idle_timeout(&id, idle).await?,
        ))
    })
    .await
}

/// An idle timeout of `ms` milliseconds, refusing 0 ([`ZERO_IDLE_MESSAGE`]).
pub(super) fn idle_of(ms: u64) -> Result<Duration, ApiError> {
    if ms == 0 {
        return Err(ApiError::invalid(ZERO_IDLE_MESSAGE));
    }
    Ok(Duration::from_millis(ms))
}

pub(super) async fn release_matching(
    State(service): State<Arc<Service>>,
    who: Who,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<MatchingReport>, ApiError> {
    let who = principal(who)?;
    who.require("leases:write")?;
    let body: MatchingBody = json_body(&service, body)?;
    let selector = match (body.scope, body.label) {
        (Some(scope), None) => LeaseSelector::Scope(scope),
        (None, Some(LabelBody { key, value })) => LeaseSelector::Label { key, value },
        _ => return Err(ApiError::invalid(SELECTOR_MESSAGE)),
    };
    let status = body.status.unwrap_or(LeaseStatus::Released);
    let report = audited(&service, &who, "lease.release_matching", None, async {
        let runtime = service.runtime_for(&who.tenant);
        Ok(runtime.release_matching(&who.tenant, &selector, status).await?)
    })
    .await?;
    for lease in &report.released {
        super::audit(&service, &who, "lease.release", Some(&lease.id), &Ok(()));
    }
    let failures = report
        .failures
        .into_iter()
        .map(|f| MatchingFailure {
            lease_id: f.lease_id,
            error: ApiError::from(f.error).body,
        })
        .collect();
    Ok(Json(MatchingReport {
        released: report.released,
        failures,
    }))
}

//! A lease's network policy: `PUT /v1/leases/{id}/network` replaces it (the facade's
//! `update_network_policy`), and an acquire may ask for one (`network` in its body). The
//! policy is the `envrt-egress` wire shape, `{"egress": "none"|"allow"|"open", "allow":
//! [ENTRY...]}` (egress absent means `none`; an empty body asks for `none`), within the
//! environment's policy or its `grantable` list and enforceable by the lease's driver, or
//! refused with the runtime's exact text (409 `network_refused`).

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use envrt::core::network::{Policy, RawPolicy};
use serde_json::{Value, json};

use super::{audited, json_body, principal};
use crate::auth::Principal;
use crate::error::ApiError;
use crate::state::Service;

type Who = Option<axum::Extension<Principal>>;

/// A policy from its wire shape; a malformed one is 400 `invalid_request`:
/// `Invalid network policy: {policy error}`.
pub(super) fn policy(raw: RawPolicy) -> Result<Policy, ApiError> {
    Policy::try_from(raw).map_err(|e| ApiError::invalid(format!("Invalid network policy: {e}")))
}

/// Answers `{"network": LEVEL}`, the lease's network level as `envrt caps` words it
/// (`egress proxy (allow)`, `no network`, ...).
pub(super) async fn update(
    State(service): State<Arc<Service>>,
    who: Who,
    Path(id): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, ApiError> {
    let who = principal(who)?;
    who.require("network")?;
    let policy = policy(json_body(&service, body)?)?;
    audited(&service, &who, "lease.network", Some(&id), async {
        let runtime = service.runtime_for(&who.tenant);
        let level = runtime.update_network_policy(&id, &policy).await?;
        Ok(Json(json!({ "network": level.to_string() })))
    })
    .await
}

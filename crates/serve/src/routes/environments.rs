//! Environments: the configured ones, read-only. A listing shows each environment's id,
//! name, driver and status, never its driver configuration (which may name hosts, keys or
//! sockets of the service's machine).

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State};
use envrt::{Environment, RuntimeError};
use serde_json::{Value, json};

use super::principal;
use crate::auth::Principal;
use crate::error::ApiError;
use crate::state::Service;

type Who = Option<axum::Extension<Principal>>;

fn summary(environment: &Environment) -> Value {
    json!({
        "id": environment.id,
        "name": environment.name,
        "driver": environment.driver,
        "status": environment.status,
    })
}

pub(super) async fn list(State(service): State<Arc<Service>>, who: Who) -> Result<Json<Vec<Value>>, ApiError> {
    let who = principal(who)?;
    who.require("environments:read")?;
    let runtime = service.runtime_for(&who.tenant);
    let environments = runtime.store().list_environments().await.map_err(RuntimeError::from)?;
    Ok(Json(environments.iter().map(summary).collect()))
}

pub(super) async fn show(
    State(service): State<Arc<Service>>,
    who: Who,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let who = principal(who)?;
    who.require("environments:read")?;
    match service.runtime_for(&who.tenant).environment(&id).await? {
        Some(environment) => Ok(Json(summary(&environment))),
        None => Err(RuntimeError::EnvironmentNotFound { id }.into()),
    }
}

pub(super) async fn capabilities(
    State(service): State<Arc<Service>>,
    who: Who,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let who = principal(who)?;
    who.require("environments:read")?;
    let runtime = service.runtime_for(&who.tenant);
    let Some(environment) = runtime.environment(&id).await? else {
        return Err(RuntimeError::EnvironmentNotFound { id }.into());
    };
    match runtime.environment_capabilities(&id).await? {
        Some(snapshot) => Ok(Json(
            serde_json::to_value(snapshot).map_err(|e| ApiError::internal(e.to_string()))?,
        )),
        None => Err(RuntimeError::DriverNotRegistered {
            key: environment.driver,
        }
        .into()),
    }
}

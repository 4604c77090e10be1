//! The lease life-cycle verbs of the reference worker: configuration validation, probe,
//! acquire, resume, release, destroy and workspace realization, answered with the
//! protocol's typed results.

use envrt_driver_api::sync::confine_to_workspace;
use envrt_driver_api::{DriverError, Timestamp};
use envrt_plugin_protocol::environment::{
    AcquireLeaseParams, EndLeaseParams, EndState, JsonMap, LeaseRef, ProbeResult, RealizeWorkspaceParams,
    RealizedWorkspace, ResumeLeaseParams, TerminationReceipt, ValidateConfigParams, ValidationResult,
};
use envrt_plugin_protocol::{methods, to_value};
use serde_json::{Value, json};

use super::rpc::RpcError;
use super::sandbox::WORKSPACE;
use super::{Worker, inventory, lease, lease_dir, parse};

fn lease_metadata() -> JsonMap {
    JsonMap::from_iter([
        ("remoteCwd".into(), json!(WORKSPACE)),
        ("sandbox".into(), json!("bwrap")),
    ])
}

/// An acquire or resume result; `None` says the lease is gone.
fn lease_result(id: Option<String>, expires_at: Option<Timestamp>) -> Value {
    let metadata = match id {
        Some(_) => lease_metadata(),
        None => JsonMap::from_iter([("gone".into(), json!(true))]),
    };
    let expires_at = expires_at.map(|at| json!(at.to_rfc3339()));
    to_value(&LeaseRef {
        provider_lease_id: id,
        metadata: Some(metadata),
        expires_at,
    })
}

/// `environmentValidateConfig`: the reference worker reads no environment config key, so
/// an empty object (or none) is fine and any key is refused (a misspelled setting would
/// otherwise be silently ignored).
pub(super) fn validate(params: Value) -> Result<Value, RpcError> {
    let p: ValidateConfigParams = parse(methods::VALIDATE_CONFIG, params)?;
    let refused = |error: String| ValidationResult {
        ok: false,
        errors: Some(vec![error]),
        ..Default::default()
    };
    Ok(to_value(&match p.config {
        Value::Object(config) => match envrt_driver_api::config_keys::unknown_key(&config, &[]) {
            Some(error) => refused(error),
            None => ValidationResult {
                ok: true,
                normalized_config: Some(config),
                ..Default::default()
            },
        },
        Value::Null => ValidationResult {
            ok: true,
            normalized_config: Some(JsonMap::new()),
            ..Default::default()
        },
        _ => refused("config must be a JSON object".into()),
    }))
}

/// `environmentProbe`.
pub(super) fn probe(worker: &Worker) -> Value {
    to_value(&ProbeResult {
        ok: true,
        summary: Some(format!(
            "bubblewrap sandbox ready ({}, leases under {})",
            worker.sandbox.version,
            worker.leases.root.display()
        )),
        metadata: json!({"root": worker.leases.root.display().to_string(), "bwrap": worker.sandbox.version})
            .as_object()
            .cloned(),
        ..Default::default()
    })
}

/// `environmentAcquireLease`.
pub(super) fn acquire(worker: &Worker, params: Value) -> Result<Value, RpcError> {
    let p: AcquireLeaseParams = parse(methods::ACQUIRE_LEASE, params)?;
    let requested =
        match p.requested_expires_at.as_deref() {
            None => None,
            Some(text) => Some(Timestamp::parse_rfc3339(text).ok_or_else(|| {
                RpcError::invalid_params(format!("requestedExpiresAt {text:?} is not an RFC 3339 time"))
            })?),
        };
    let (id, dir) = worker.leases.create()?;
    if let Some(holder) = &p.envrt_lease_id {
        inventory::record(&dir, holder);
    }
    let Some(at) = requested else {
        return Ok(lease_result(Some(id), None));
    };
    if let Err(e) = worker.expiries.watch(&worker.sandbox, &dir, at) {
        let _ = super::sandbox::remove_lease_dir(&dir);
        return Err(e.into());
    }
    Ok(lease_result(Some(id), Some(at)))
}

/// `environmentResumeLease`.
pub(super) async fn resume(worker: &Worker, params: Value) -> Result<Value, RpcError> {
    let p: ResumeLeaseParams = parse(methods::RESUME_LEASE, params)?;
    match p.provider_lease_id.as_deref().map(|id| worker.leases.existing(id)) {
        Some(Ok(dir)) => {
            // a lease made by an older worker (files owned by root) becomes the
            // sandbox user's, so its workspace stays writable
            let leases = worker.leases.clone();
            tokio::task::spawn_blocking(move || leases.adopt(&dir))
                .await
                .map_err(|e| DriverError::other(format!("adopting the lease failed: {e}")))??;
            Ok(lease_result(p.provider_lease_id, None))
        }
        _ => Ok(lease_result(None, None)),
    }
}

/// `environmentReleaseLease` and `environmentDestroyLease`.
pub(super) fn end(worker: &Worker, method: &str, params: Value) -> Result<Value, RpcError> {
    let p: EndLeaseParams = parse(method, params)?;
    let Some(id) = p.provider_lease_id else {
        return Ok(Value::Null);
    };
    let Some(dir) = worker.leases.path_of(&id) else {
        return Ok(Value::Null);
    };
    // Every sandbox over the lease directory is killed: its calls end (killed) and
    // its channels send their exit frames. Destroy also removes the directory.
    worker.expiries.forget(&dir);
    worker.sandbox.kill_lease(&dir);
    worker.supervisors.forget(&dir, method == methods::DESTROY_LEASE);
    worker.ingresses.forget(&dir);
    super::egress::end(&dir);
    if method == methods::RELEASE_LEASE && dir.exists() {
        // a released lease holds no host uid: a resume claims one again
        worker.leases.give_back(&dir)?;
    }
    if method == methods::DESTROY_LEASE {
        match super::sandbox::remove_lease_dir(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                return Err(DriverError::io(format!("Removing lease directory {}", dir.display()), e).into());
            }
        }
    }
    let state = if method == methods::DESTROY_LEASE {
        EndState::Destroyed
    } else {
        EndState::Stopped
    };
    Ok(to_value(&TerminationReceipt {
        provider_lease_id: id,
        state,
    }))
}

/// `environmentRealizeWorkspace`.
pub(super) fn realize(worker: &Worker, params: Value) -> Result<Value, RpcError> {
    let p: RealizeWorkspaceParams = parse(methods::REALIZE_WORKSPACE, params)?;
    let dir = lease_dir(worker, &p.lease)?;
    let wanted = p.workspace.remote_path.as_deref().unwrap_or(WORKSPACE);
    confine_to_workspace(WORKSPACE, wanted)?;
    let resolved = lease::resolve(&dir, wanted, true)?;
    // Created one component at a time without following links, so a link swapped in
    // by a running command cannot make the worker create directories elsewhere.
    lease::Beneath::open(
        &dir,
        &lease::components_below_workspace(&resolved.sandbox),
        Some(worker.leases.owner(&dir)?),
    )
    .map_err(|e| lease::beneath_error(wanted, e))?;
    let metadata = JsonMap::from_iter([("remoteCwd".into(), json!(resolved.sandbox))]);
    Ok(to_value(&RealizedWorkspace {
        cwd: resolved.sandbox,
        metadata: Some(metadata),
    }))
}

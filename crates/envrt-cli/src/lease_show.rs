//! `envrt lease show ID [--json]`: one lease's fields as `lease list` shows them, plus its
//! environment, driver, capabilities, acquisition and expiry times and holder. An unknown
//! id gets the facade's `Lease "ID" was not found.`

use envrt::core::CapabilityKey;
use envrt::sqlite::holder::Holder;
use envrt::{LeaseStatus, RuntimeError};

use crate::app::App;
use crate::error::CliError;

/// Prints lease `id`.
pub(crate) async fn show(app: &App, id: &str, json: bool) -> Result<u8, CliError> {
    let lease = app
        .runtime
        .lease(id)
        .await?
        .ok_or_else(|| RuntimeError::LeaseNotFound { id: id.to_owned() })?;
    let environment = match &lease.environment_id {
        Some(e) => app.runtime.environment(e).await?,
        None => None,
    };
    let driver = envrt::core::model::resolve_driver_key(&lease, environment.as_ref()).to_owned();
    let capabilities = match (&lease.environment_id, app.check_driver(&driver)) {
        (Some(e), Ok(())) => app.runtime.environment_capabilities(e).await.ok().flatten(),
        _ => None,
    };
    let holder = Holder::from_metadata(&lease.metadata);
    let live = matches!(lease.status, LeaseStatus::Active | LeaseStatus::PendingCleanup);
    if json {
        let document = serde_json::json!({
            "lease": lease,
            "driver": driver,
            "capabilities": capabilities,
            "holder": holder.as_ref().map(|h| serde_json::json!({"pid": h.pid, "alive": live && h.is_alive()})),
        });
        crate::out!(
            "{}",
            serde_json::to_string_pretty(&document).unwrap_or_else(|_| "null".into())
        );
        return Ok(0);
    }
    let holder_text = match &holder {
        _ if !live => "-".to_owned(),
        None => "-".to_owned(),
        Some(h) if h.is_alive() => format!("{} (alive)", h.pid),
        Some(h) => format!("{} (gone)", h.pid),
    };
    let caps = match &capabilities {
        Some(snapshot) => CapabilityKey::ALL
            .iter()
            .filter(|k| snapshot.get(**k))
            .map(|k| k.as_str())
            .collect::<Vec<_>>()
            .join(" "),
        None => "?".to_owned(),
    };
    let rows = [
        ("ID", lease.id.clone()),
        (
            "ENVIRONMENT",
            lease.environment_id.clone().unwrap_or_else(|| "-".into()),
        ),
        ("DRIVER", driver),
        ("STATUS", lease.status.to_string()),
        ("POLICY", lease.lease_policy.as_str().to_owned()),
        ("HOLDER", holder_text),
        ("ACQUIRED", lease.acquired_at.to_rfc3339()),
        (
            "EXPIRES",
            lease.expires_at.map_or_else(|| "-".to_owned(), |t| t.to_rfc3339()),
        ),
        ("CAPABILITIES", caps),
    ];
    for (key, value) in rows {
        crate::out!("{key:<13}{value}");
    }
    Ok(0)
}

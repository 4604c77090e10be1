//! Idle timeouts from the command line (contract section 8, "Idle timeout and
//! keep-alive"): `--idle-timeout DURATION` on `envrt lease acquire` and `envrt exec`, and
//! `envrt lease keep-alive ID`, which prints `{id} kept alive`; and `envrt lease extend
//! ID --ttl DURATION`, which moves the lease's expiry to that long from now and prints
//! `{id} expires at {expires_at}`.

use std::time::Duration;

use envrt::{Lease, LeaseStatus, Timestamp};

use crate::app::App;
use crate::error::CliError;

/// Parses `--idle-timeout` (`envrt: invalid --idle-timeout "{raw}" ...` when bad).
pub(crate) fn parse(raw: Option<&str>) -> Result<Option<Duration>, CliError> {
    Ok(raw
        .map(|raw| envrt::config::parse_duration("--idle-timeout", raw))
        .transpose()?)
}

/// Arms `idle` (else the environment's `idle_timeout`) on the lease just acquired; when
/// that fails, releases the lease again so no lease is left without the idle timeout it
/// was asked for.
pub(crate) async fn arm(app: &App, lease: Lease, idle: Option<Duration>) -> Result<Lease, CliError> {
    let default = || {
        let environment = lease.environment_id.as_ref()?;
        app.config.idle_timeouts.get(environment).copied()
    };
    let Some(idle) = idle.or_else(default) else {
        return Ok(lease);
    };
    match app.runtime.set_idle_timeout(&lease.id, idle).await {
        Ok(lease) => Ok(lease),
        Err(error) => {
            app.release_own(&lease, LeaseStatus::Released).await;
            Err(error.into())
        }
    }
}

/// `envrt lease keep-alive ID`.
pub(crate) async fn keep_alive(app: &App, id: &str) -> Result<u8, CliError> {
    app.existing_lease(id).await?;
    let lease = app.runtime.keep_alive(id).await?;
    crate::out!("{} kept alive", lease.id);
    Ok(0)
}

/// `envrt lease extend ID --ttl DURATION`.
pub(crate) async fn extend(app: &App, id: &str, ttl: &str) -> Result<u8, CliError> {
    let ttl = envrt::config::parse_duration("--ttl", ttl)?;
    app.existing_lease(id).await?;
    let lease = app.runtime.extend(id, Timestamp::now().after(ttl)).await?;
    let at = lease.expires_at.map(Timestamp::to_rfc3339).unwrap_or_default();
    crate::out!("{} expires at {at}", lease.id);
    Ok(0)
}

//! Idle timeouts from the command line (contract section 8, "Idle timeout and
//! keep-alive"): `--idle-timeout DURATION` on `envrt lease acquire` and `envrt exec`, and
//! `envrt lease keep-alive ID`, which prints `{id} kept alive`; and `envrt lease extend
//! ID --ttl DURATION`, which moves the lease's expiry to that long from now and prints
//! `{id} expires at {expires_at}`.

use std::time::Duration;

use envrt::{Lease, LeaseStatus, OnIdle, Timestamp};

use crate::app::App;
use crate::error::CliError;

/// What `--idle-timeout` and `--on-idle` asked for.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct IdleRequest {
    idle: Option<Duration>,
    on_idle: Option<OnIdle>,
}

/// Parses `--idle-timeout` (`envrt: invalid --idle-timeout "{raw}" ...` when bad) and
/// `--on-idle` (clap has checked its value).
pub(crate) fn parse(raw: Option<&str>, on_idle: Option<&str>) -> Result<IdleRequest, CliError> {
    Ok(IdleRequest {
        idle: raw
            .map(|raw| envrt::config::parse_duration("--idle-timeout", raw))
            .transpose()?,
        on_idle: on_idle.map(|v| if v == "pause" { OnIdle::Pause } else { OnIdle::Release }),
    })
}

/// Arms the requested idle timeout (else the environment's `idle_timeout`), with the
/// requested `on_idle` (else the environment's), on the lease just acquired; when that
/// fails, releases the lease again so no lease is left without the idle timeout it was
/// asked for.
pub(crate) async fn arm(app: &App, lease: Lease, request: IdleRequest) -> Result<Lease, CliError> {
    let environment = lease.environment_id.clone().unwrap_or_default();
    let Some(idle) = request
        .idle
        .or_else(|| app.config.idle_timeouts.get(&environment).copied())
    else {
        return Ok(lease);
    };
    let on_idle = request
        .on_idle
        .unwrap_or(if app.config.idle_pauses.contains(&environment) {
            OnIdle::Pause
        } else {
            OnIdle::Release
        });
    match app.runtime.set_idle_timeout_on(&lease.id, idle, on_idle).await {
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

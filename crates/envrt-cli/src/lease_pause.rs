//! `envrt lease pause ID` and `envrt lease unpause ID` (contract section 8, "Pause and
//! unpause"): each prints `{id} paused` or `{id} unpaused`; `envrt lease list` shows a
//! paused lease's status as `paused`.

use envrt::Lease;
use envrt::core::is_paused;

use crate::app::App;
use crate::error::CliError;

/// Pauses (`pause` true) or unpauses the lease.
pub(crate) async fn run(app: &App, id: &str, pause: bool) -> Result<u8, CliError> {
    app.existing_lease(id).await?;
    let lease = if pause {
        app.runtime.pause_lease(id).await?
    } else {
        app.runtime.unpause_lease(id).await?
    };
    crate::out!("{} {}", lease.id, if pause { "paused" } else { "unpaused" });
    Ok(0)
}

/// The status `envrt lease list` shows: `paused` for a paused lease, else its status.
pub(crate) fn status_text(lease: &Lease) -> String {
    if is_paused(lease) {
        "paused".to_owned()
    } else {
        lease.status.to_string()
    }
}

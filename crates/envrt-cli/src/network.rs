//! The network options of `lease acquire` and `exec` (`--egress`, `--allow`) and
//! `envrt lease network LEASE`, the live update of a lease's policy. A lease's policy must
//! lie within its environment's `[environment.network]` policy or `grantable` list, and
//! its driver must be able to enforce it; the runtime refuses otherwise (exit 2).

use clap::Args;
use envrt::core::network::{Policy, RawPolicy};

use crate::app::App;
use crate::error::CliError;

/// A lease's own network policy.
#[derive(Debug, Clone, Default, Args)]
pub(crate) struct NetworkArgs {
    /// The lease's own egress: none, allow or open (within the environment's policy and
    /// its grantable list; refused where the driver cannot enforce it).
    #[arg(long, value_name = "EGRESS")]
    pub(crate) egress: Option<String>,
    /// An allow entry of the lease's own policy: a name, `*.name`, a CIDR, each with an
    /// optional `:port` (repeatable; without --egress, egress is allow).
    #[arg(long = "allow", value_name = "HOST")]
    pub(crate) allow: Vec<String>,
}

impl NetworkArgs {
    /// The policy asked for, `None` when neither option is given.
    pub(crate) fn policy(&self) -> Result<Option<Policy>, CliError> {
        if self.egress.is_none() && self.allow.is_empty() {
            return Ok(None);
        }
        let egress = self
            .egress
            .clone()
            .or_else(|| (!self.allow.is_empty()).then(|| "allow".to_owned()));
        let raw = RawPolicy {
            egress,
            allow: self.allow.clone(),
        };
        Policy::try_from(raw)
            .map(Some)
            .map_err(|e| CliError::Usage(format!("envrt: --egress/--allow: {e}")))
    }
}

/// `envrt lease network LEASE [--egress E] [--allow HOST]...`: replaces the lease's policy
/// (none given: egress none) and prints the lease's network level.
pub(crate) async fn update(app: &App, id: &str, args: &NetworkArgs) -> Result<u8, CliError> {
    app.existing_lease(id).await?;
    let policy = args.policy()?.unwrap_or_else(Policy::none);
    let level = app.runtime.update_network_policy(id, &policy).await?;
    crate::out!("{id} network: {level}");
    Ok(0)
}

//! The owner side of `envrt lease`: `--scope`, `--reuse scope` and `--label` on
//! `lease acquire` (what the scoped acquire did is said on stderr), and
//! `lease release --scope S` / `--label K=V`, which end every matching lease of the
//! configured tenant (the facade's `release_matching`).

use clap::Args;
use envrt::core::{LeaseSelector, Reuse, ScopeOutcome};
use envrt::{AcquireRequest, Lease, LeaseStatus};

use crate::app::App;
use crate::error::CliError;

#[derive(Debug, Args)]
pub(crate) struct OwnerArgs {
    /// The owner scope (a tenant, agent or workspace key) recorded on the lease.
    #[arg(long, value_name = "SCOPE")]
    pub(crate) scope: Option<String>,
    /// `scope`: hand back the scope's live lease of the same configuration (resumed), or
    /// replace one whose configuration changed, instead of always making a new one.
    #[arg(long, value_name = "MODE", value_parser = parse_reuse)]
    reuse: Option<Reuse>,
    /// A label on the lease, KEY=VALUE (repeatable); `lease release --label` ends by it.
    #[arg(long = "label", value_name = "KEY=VALUE", value_parser = parse_label)]
    pub(crate) labels: Vec<(String, String)>,
}

impl OwnerArgs {
    /// Puts the scope, reuse mode and labels on `request`.
    pub(crate) fn apply(&self, request: &mut AcquireRequest) {
        request.scope = self.scope.clone();
        request.reuse = self.reuse.unwrap_or_default();
        if !self.labels.is_empty() {
            let labels: serde_json::Map<String, serde_json::Value> =
                self.labels.iter().map(|(k, v)| (k.clone(), v.clone().into())).collect();
            request.metadata.insert(envrt::core::LABELS_KEY.into(), labels.into());
        }
    }
}

/// Says on stderr what a scoped acquire did: `envrt: lease {id} created`, `... resumed`,
/// or `... replaced ({reason})`.
pub(crate) fn report_outcome(lease: &Lease) {
    match ScopeOutcome::of(lease) {
        Some(ScopeOutcome::Replaced { reason }) => crate::say!("envrt: lease {} replaced ({reason})", lease.id),
        Some(outcome) => crate::say!("envrt: lease {} {}", lease.id, outcome.as_str()),
        None => {}
    }
}

fn parse_reuse(s: &str) -> Result<Reuse, String> {
    match s {
        "scope" => Ok(Reuse::Scope),
        "never" => Ok(Reuse::Never),
        _ => Err("expected scope or never".to_owned()),
    }
}

fn parse_label(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((key, value)) if !key.is_empty() => Ok((key.to_owned(), value.to_owned())),
        _ => Err("expected KEY=VALUE with a non-empty KEY".to_owned()),
    }
}

/// What `lease release` ends besides one id.
#[derive(Debug, Args)]
pub(crate) struct SelectArgs {
    /// Release every active lease of this owner scope (in the configured tenant).
    #[arg(long, value_name = "SCOPE", conflicts_with_all = ["id", "label"])]
    pub(crate) scope: Option<String>,
    /// Release every active lease with this label, KEY=VALUE (in the configured tenant).
    #[arg(long, value_name = "KEY=VALUE", value_parser = parse_label, conflicts_with_all = ["id", "scope"])]
    pub(crate) label: Option<(String, String)>,
}

impl SelectArgs {
    fn selector(&self) -> Option<LeaseSelector> {
        match (&self.scope, &self.label) {
            (Some(scope), _) => Some(LeaseSelector::Scope(scope.clone())),
            (None, Some((key, value))) => Some(LeaseSelector::Label {
                key: key.clone(),
                value: value.clone(),
            }),
            (None, None) => None,
        }
    }
}

/// `lease release --scope` / `--label`: one `{id} {status}` line per released lease, a
/// line on stderr per failure (exit 1); nothing matching is success (idempotent). `None`
/// when no selector was given.
pub(crate) async fn release_selected(
    app: &App,
    select: &SelectArgs,
    status: LeaseStatus,
) -> Option<Result<u8, CliError>> {
    let selector = select.selector()?;
    let report = match app
        .runtime
        .release_matching(&app.config.company, &selector, status)
        .await
    {
        Ok(report) => report,
        Err(error) => return Some(Err(error.into())),
    };
    for lease in &report.released {
        crate::out!("{} {}", lease.id, lease.status);
    }
    for failure in &report.failures {
        crate::say!("envrt: could not release lease {}: {}", failure.lease_id, failure.error);
    }
    Some(Ok(if report.failures.is_empty() { 0 } else { 1 }))
}

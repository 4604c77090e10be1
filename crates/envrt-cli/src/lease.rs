//! `envrt lease acquire | list | release | destroy | pause | unpause` and `envrt gc`
//! (`lease fork` is in `lease_fork.rs`).
//!
//! A lease records its holder process (`holderPid` + `holderStartTime`). `exec` and
//! `shell` hold their ephemeral leases themselves; `lease acquire` names the process that
//! ran it (usually the shell) unless `--holder-pid` or `--detached` says otherwise. `gc`
//! releases active leases whose holder is gone (after their driver's recovery group killed
//! what they left running) and those whose backend is gone (lost, as the recovery group
//! says), retries `pending_cleanup` ones, and reconciles every driver's
//! inventory with the store (`EnvironmentRuntime::reconcile`).

use clap::{Args, Subcommand};
use envrt::sqlite::holder::Holder;
use envrt::{Lease, LeaseFilter, LeasePolicy, LeaseStatus};

use crate::Target;
use crate::app::App;
use crate::error::CliError;
use crate::gc_report::{GcReport, Reason};
use envrt::config::Paths;

#[derive(Debug, Subcommand)]
pub(crate) enum LeaseCommand {
    /// Acquire a lease and print its id.
    Acquire(AcquireArgs),
    /// List leases (active and pending clean-up; --all for every one).
    List(ListArgs),
    /// Show one lease: its fields, environment, driver, capabilities, expiry and holder.
    Show {
        /// The lease id.
        id: String,
        /// JSON: `{lease, driver, capabilities, holder}`.
        #[arg(long)]
        json: bool,
    },
    /// Release a lease.
    Release(ReleaseArgs),
    /// Destroy a lease's resource whatever its policy.
    Destroy {
        /// The lease id.
        id: String,
    },
    /// Stop every process of a lease without ending it (`lease unpause` continues them).
    Pause {
        /// The lease id.
        id: String,
    },
    /// Continue the processes of a paused lease.
    Unpause {
        /// The lease id.
        id: String,
    },
    /// Reset a lease's idle clock (a lease acquired with --idle-timeout).
    KeepAlive {
        /// The lease id.
        id: String,
    },
    /// Move a lease's expiry to this long from now (within its environment's max_ttl).
    Extend {
        /// The lease id.
        id: String,
        /// The new time to live, from now: `90`, `1.5`, `500ms`, `1s`, `2m`, `1h30m`.
        #[arg(long, value_name = "DURATION")]
        ttl: String,
    },
    /// Replace a lease's network policy (none given: egress none) and print its level.
    Network {
        /// The lease id.
        id: String,
        #[command(flatten)]
        network: crate::network::NetworkArgs,
    },
    /// Copy a live lease into new leases that start from its state; print their ids.
    Fork(crate::lease_fork::ForkArgs),
    /// Open Paperclip's runner WebSocket ingress to a lease port and keep it open until
    /// the lease ends: print its ws:// URL, generation and secret header names.
    Ingress(crate::lease_ingress::IngressArgs),
}

#[derive(Debug, Args)]
pub(crate) struct AcquireArgs {
    #[command(flatten)]
    pub(crate) target: Target,
    /// ephemeral, reuse_by_environment, reuse_by_execution_workspace or retain_on_failure.
    #[arg(long, value_name = "POLICY", default_value = "ephemeral", value_parser = parse_policy)]
    pub(crate) policy: LeasePolicy,
    /// The run this lease belongs to.
    #[arg(long, value_name = "ID")]
    pub(crate) run_id: Option<String>,
    /// The process holding the lease (gc releases it once that process is gone); default
    /// the process that ran envrt.
    #[arg(long, value_name = "PID", conflicts_with = "detached")]
    pub(crate) holder_pid: Option<u32>,
    /// No holder: gc never releases this lease (before its expiry).
    #[arg(long)]
    pub(crate) detached: bool,
    /// The lease expires after this long (default: the environment's `ttl`, else never):
    /// the driver ends it then even if its holder is gone, and `gc` records it expired.
    #[arg(long, value_name = "DURATION")]
    pub(crate) ttl: Option<String>,
    /// End the lease once it has taken no operation and run no process for this long
    /// (idle time does not count while it is paused), even if its holder is gone.
    #[arg(long, value_name = "DURATION")]
    pub(crate) idle_timeout: Option<String>,
    /// What the idle timeout does to the idle lease: `release` (the default, else the
    /// environment's `on_idle`) or `pause` (paused instead; `lease unpause` continues it).
    #[arg(long, value_name = "ACTION", value_parser = ["release", "pause"], requires = "idle_timeout")]
    pub(crate) on_idle: Option<String>,
    /// Start the lease from this template of the environment (`envrt template list`).
    #[arg(long, value_name = "TEMPLATE")]
    pub(crate) template: Option<String>,
    /// Print the whole lease record as JSON.
    #[arg(long)]
    pub(crate) json: bool,
    #[command(flatten)]
    pub(crate) network: crate::network::NetworkArgs,
    #[command(flatten)]
    pub(crate) owner: crate::lease_scope::OwnerArgs,
}

#[derive(Debug, Args)]
pub(crate) struct ListArgs {
    /// Every lease, ended ones included.
    #[arg(long)]
    pub(crate) all: bool,
    /// JSON (an array of lease records).
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct ReleaseArgs {
    /// The lease id (or --scope / --label).
    #[arg(required_unless_present_any = ["scope", "label"])]
    pub(crate) id: Option<String>,
    #[command(flatten)]
    pub(crate) select: crate::lease_scope::SelectArgs,
    /// released, failed or expired.
    #[arg(long, default_value = "released", value_parser = parse_status)]
    pub(crate) status: LeaseStatus,
}

#[derive(Debug, Args)]
pub(crate) struct GcArgs {
    /// Say what would be done, do nothing.
    #[arg(long)]
    dry_run: bool,
    /// One JSON document `{ok, dryRun, leases, orphans, errors, released, failed}` instead
    /// of the lines.
    #[arg(long)]
    json: bool,
}

fn parse_policy(s: &str) -> Result<LeasePolicy, String> {
    serde_json::from_value(serde_json::Value::String(s.to_owned())).map_err(|_| {
        "expected ephemeral, reuse_by_environment, reuse_by_execution_workspace or retain_on_failure".to_owned()
    })
}

fn parse_status(s: &str) -> Result<LeaseStatus, String> {
    serde_json::from_value(serde_json::Value::String(s.to_owned()))
        .map_err(|_| "expected released, failed or expired".to_owned())
}

pub(crate) fn to_json<T: serde::Serialize>(value: &T) -> String {
    serde_json::to_string_pretty(value).unwrap_or_else(|_| "null".into())
}

pub(crate) async fn run(paths: &Paths, command: LeaseCommand) -> Result<u8, CliError> {
    let extra = match &command {
        LeaseCommand::Acquire(args) => args.target.driver.clone(),
        _ => None,
    };
    let app = App::open_for(paths, extra.as_deref()).await?;
    match command {
        LeaseCommand::Acquire(args) => {
            let holder = if args.detached {
                None
            } else {
                let found = match args.holder_pid {
                    Some(pid) => Holder::of(pid).ok().flatten(),
                    None => Holder::parent().ok(),
                };
                match found {
                    Some(h) => Some(h),
                    None => {
                        return Err(CliError::Usage(format!(
                            "envrt: holder process {} is not running",
                            args.holder_pid.unwrap_or_else(std::os::unix::process::parent_id)
                        )));
                    }
                }
            };
            let ttl = args
                .ttl
                .as_deref()
                .map(|raw| envrt::config::parse_duration("--ttl", raw))
                .transpose()?;
            let idle = crate::lease_idle::parse(args.idle_timeout.as_deref(), args.on_idle.as_deref())?;
            let environment = app.environment_id(&args.target).await?;
            let mut request = app
                .acquire_request(
                    &environment,
                    args.policy,
                    args.run_id,
                    holder,
                    ttl,
                    "envrt lease acquire",
                    args.template,
                    args.network.policy()?,
                )
                .await?;
            args.owner.apply(&mut request);
            let lease = app.runtime.acquire_lease(request).await?;
            crate::lease_scope::report_outcome(&lease);
            let lease = crate::lease_idle::arm(&app, lease, idle).await?;
            if args.json {
                crate::out!("{}", to_json(&lease));
            } else {
                crate::out!("{}", lease.id);
            }
            Ok(0)
        }
        LeaseCommand::List(args) => {
            let filter = LeaseFilter {
                statuses: if args.all {
                    Vec::new()
                } else {
                    vec![LeaseStatus::Active, LeaseStatus::PendingCleanup]
                },
                ..Default::default()
            };
            let leases = app.runtime.leases(&filter).await?;
            if args.json {
                crate::out!("{}", to_json(&leases));
            } else {
                print_table(&leases);
            }
            Ok(0)
        }
        LeaseCommand::Show { id, json } => crate::lease_show::show(&app, &id, json).await,
        LeaseCommand::Release(args) => {
            if let Some(done) = crate::lease_scope::release_selected(&app, &args.select, args.status).await {
                return done;
            }
            let id = args.id.unwrap_or_default();
            app.existing_lease(&id).await?;
            let lease = app.runtime.release_lease(&id, args.status).await?;
            crate::out!("{} {}", lease.id, lease.status);
            Ok(0)
        }
        LeaseCommand::Destroy { id } => {
            app.existing_lease(&id).await?;
            let lease = app.runtime.destroy_lease(&id).await?;
            crate::out!("{} {} (destroyed)", lease.id, lease.status);
            Ok(0)
        }
        LeaseCommand::Network { id, network } => crate::network::update(&app, &id, &network).await,
        LeaseCommand::Pause { id } => crate::lease_pause::run(&app, &id, true).await,
        LeaseCommand::Unpause { id } => crate::lease_pause::run(&app, &id, false).await,
        LeaseCommand::Fork(args) => crate::lease_fork::fork(&app, args).await,
        LeaseCommand::KeepAlive { id } => crate::lease_idle::keep_alive(&app, &id).await,
        LeaseCommand::Extend { id, ttl } => crate::lease_idle::extend(&app, &id, &ttl).await,
        LeaseCommand::Ingress(args) => crate::lease_ingress::run(&app, args).await,
    }
}

fn holder_text(lease: &Lease) -> String {
    if !matches!(lease.status, LeaseStatus::Active | LeaseStatus::PendingCleanup) {
        return "-".into();
    }
    match Holder::from_metadata(&lease.metadata) {
        None => "-".into(),
        Some(h) if h.is_alive() => format!("{} (alive)", h.pid),
        Some(h) => format!("{} (gone)", h.pid),
    }
}

pub(crate) fn print_table(leases: &[Lease]) {
    let rows: Vec<[String; 7]> = leases
        .iter()
        .map(|l| {
            [
                l.id.clone(),
                l.environment_id.clone().unwrap_or_else(|| "-".into()),
                l.metadata_driver().unwrap_or("-").to_owned(),
                crate::lease_pause::status_text(l),
                l.lease_policy.as_str().to_owned(),
                holder_text(l),
                l.expires_at.map_or_else(|| "-".to_owned(), |t| t.to_rfc3339()),
            ]
        })
        .collect();
    let header = ["ID", "ENVIRONMENT", "DRIVER", "STATUS", "POLICY", "HOLDER", "EXPIRES"].map(String::from);
    let mut widths = header.clone().map(|h| h.len());
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    for row in std::iter::once(&header).chain(&rows) {
        let line: Vec<String> = row.iter().zip(widths).map(|(cell, w)| format!("{cell:<w$}")).collect();
        crate::out!("{}", line.join("  ").trim_end());
    }
}

/// What gc does with one lease that has not expired.
fn gc_action(lease: &Lease) -> Option<Reason> {
    match lease.status {
        LeaseStatus::PendingCleanup => Some(Reason::RetryCleanup),
        LeaseStatus::Active => match Holder::from_metadata(&lease.metadata) {
            Some(h) if !h.is_alive() => Some(Reason::HolderGone(h.pid)),
            _ => None,
        },
        _ => None,
    }
}

pub(crate) async fn gc(paths: &Paths, args: GcArgs) -> Result<u8, CliError> {
    let app = App::open(paths).await?;
    let filter = LeaseFilter {
        statuses: vec![LeaseStatus::Active, LeaseStatus::PendingCleanup],
        ..Default::default()
    };
    let mut report = GcReport::new(args.json, args.dry_run);
    // Expired leases first: their driver already ended them (or ends them now); the store
    // records them `expired`, whether or not their holder lives.
    if args.dry_run {
        let now = envrt::Timestamp::now();
        for lease in app.runtime.leases(&filter).await? {
            if lease.status == LeaseStatus::Active && lease.expires_at.is_some_and(|at| at <= now) {
                report.lease(&lease.id, Reason::Expired, None);
            }
        }
    } else {
        let expired = app.runtime.release_expired().await?;
        for lease in &expired.released {
            report.lease(&lease.id, Reason::Expired, Some(Ok(())));
        }
        for failure in &expired.failures {
            report.lease(&failure.lease_id, Reason::Expired, Some(Err(failure.error.to_string())));
        }
    }
    for lease in app.runtime.leases(&filter).await? {
        if args.dry_run && lease.expires_at.is_some_and(|at| at <= envrt::Timestamp::now()) {
            continue;
        }
        let reason = match gc_action(&lease) {
            Some(reason) => reason,
            // A lease whose backend died behind envrt's back: every operation on it fails
            // as lost, so gc ends it like a release would.
            None => match app.runtime.is_lost(&lease).await {
                Ok(true) => Reason::Lost,
                Ok(false) => continue,
                Err(e) => {
                    report.failure(format!(
                        "envrt: gc could not tell whether lease {} is lost: {e}",
                        lease.id
                    ));
                    continue;
                }
            },
        };
        if args.dry_run {
            report.lease(&lease.id, reason, None);
            continue;
        }
        let status = match reason {
            Reason::RetryCleanup => LeaseStatus::Released,
            _ => LeaseStatus::Failed,
        };
        if let Reason::HolderGone(_) = reason {
            match kill_leftovers(&app, &lease).await {
                Ok(killed) => report.killed(&lease.id, killed),
                Err(e) => report.failure(format!(
                    "envrt: gc could not kill what lease {} left running: {e}",
                    lease.id
                )),
            }
        }
        let released = match app.check_driver_of(&lease).await {
            Ok(()) => app
                .runtime
                .release_lease(&lease.id, status)
                .await
                .map_err(CliError::from),
            Err(e) => Err(e),
        };
        match released {
            Ok(mut ended) => {
                let why = match reason {
                    Reason::HolderGone(_) => Some("holder_gone"),
                    Reason::Lost => Some("lease_lost"),
                    _ => None,
                };
                if let Some(why) = why
                    && ended.failure_reason.is_none()
                {
                    ended.failure_reason = Some(why.into());
                    app.runtime.store().put_lease(&ended).await?;
                }
                report.lease(&lease.id, reason, Some(Ok(())));
            }
            Err(e) => report.lease(&lease.id, reason, Some(Err(e.to_string()))),
        }
    }
    // What each driver really holds against the store: the containers, workspaces or
    // sandboxes no lease keeps (a crash between making one and recording its lease, a lost
    // record) are removed.
    match app.runtime.reconcile(args.dry_run).await {
        Ok(reconciled) => {
            for orphan in &reconciled.orphans {
                let item = &orphan.item;
                report.orphan(&item.kind.to_string(), &item.id, item.lease_id.as_deref());
            }
            for (driver, error) in &reconciled.failures {
                report.failure(format!("envrt: gc could not reconcile driver \"{driver}\": {error}"));
            }
        }
        Err(e) => report.failure(format!("envrt: gc could not reconcile: {e}")),
    }
    Ok(report.finish())
}

/// A dead holder's commands outlive it (the driver's process table died with the holder):
/// its driver's recovery group kills them before the release removes their resources.
/// How many it killed.
async fn kill_leftovers(app: &App, lease: &Lease) -> Result<u64, String> {
    let environment = match &lease.environment_id {
        Some(id) => app.runtime.environment(id).await.ok().flatten(),
        None => None,
    };
    let key = envrt::core::model::resolve_driver_key(lease, environment.as_ref());
    let Some(driver) = app.runtime.driver(key) else {
        return Ok(0);
    };
    let Some(recovery) = driver.as_recovery() else {
        return Ok(0);
    };
    recovery
        .kill_leftovers(lease)
        .await
        .map(|killed| killed as u64)
        .map_err(|e| e.to_string())
}

impl App {
    async fn check_driver_of(&self, lease: &Lease) -> Result<(), CliError> {
        self.existing_lease(&lease.id).await.map(drop)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policies_and_statuses_parse_by_wire_name() {
        assert_eq!(parse_policy("retain_on_failure").unwrap(), LeasePolicy::RetainOnFailure);
        assert_eq!(
            parse_policy("forever").unwrap_err(),
            "expected ephemeral, reuse_by_environment, reuse_by_execution_workspace or retain_on_failure"
        );
        assert_eq!(parse_status("expired").unwrap(), LeaseStatus::Expired);
        assert_eq!(
            parse_status("gone").unwrap_err(),
            "expected released, failed or expired"
        );
    }
}

//! `envrt template capture | list | delete | setup`: a lease's state captured as a template
//! of its environment, which `envrt lease acquire --template T` (and `envrt exec --template
//! T`) start new leases from. `setup` opens a fresh lease, runs a session in it, and
//! captures it when the session ends well.

use std::sync::Arc;

use clap::{Args, Subcommand};
use envrt::core::TemplateRef;
use envrt::sqlite::holder::Holder;
use envrt::{ExecuteRequest, LeasePolicy, LeaseStatus, RuntimeError, UnsupportedOperation};

use crate::Target;
use crate::app::App;
use crate::error::CliError;
use envrt::config::Paths;

#[derive(Debug, Subcommand)]
pub(crate) enum TemplateCommand {
    /// Capture a lease's current state as a template and print its id.
    Capture(CaptureArgs),
    /// List an environment's templates.
    List(ListArgs),
    /// Delete a template (leases started from it keep their state).
    Delete(DeleteArgs),
    /// Open a fresh lease, run an interactive shell (or ARGV) in it, and capture it as a
    /// template when that exits with 0; the lease is released either way.
    Setup(SetupArgs),
}

#[derive(Debug, Args)]
pub(crate) struct SetupArgs {
    #[command(flatten)]
    target: Target,
    /// Start from this template instead of a clean lease.
    #[arg(long, value_name = "TEMPLATE")]
    from: Option<String>,
    /// A human label for the new template.
    #[arg(long, value_name = "LABEL")]
    label: Option<String>,
    /// Keep the terminal in its normal (cooked) mode during the session.
    #[arg(long)]
    no_raw: bool,
    /// What to run: default an interactive `/bin/sh -i` over a duplex channel. On a driver
    /// without duplex channels (local), ARGV is required and runs as one command.
    #[arg(last = true, value_name = "ARGV")]
    argv: Vec<String>,
}

#[derive(Debug, Args)]
pub(crate) struct CaptureArgs {
    /// The lease to capture.
    lease: String,
    /// A human label for the template.
    #[arg(long, value_name = "LABEL")]
    label: Option<String>,
    /// Print the whole template record as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct ListArgs {
    #[command(flatten)]
    target: Target,
    /// JSON (an array of template records).
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct DeleteArgs {
    /// The template id.
    template: String,
    #[command(flatten)]
    target: Target,
}

fn to_json<T: serde::Serialize>(value: &T) -> String {
    serde_json::to_string_pretty(value).unwrap_or_else(|_| "null".into())
}

pub(crate) async fn run(paths: &Paths, command: TemplateCommand) -> Result<u8, CliError> {
    let extra = match &command {
        TemplateCommand::List(args) => args.target.driver.clone(),
        TemplateCommand::Delete(args) => args.target.driver.clone(),
        TemplateCommand::Setup(args) => args.target.driver.clone(),
        TemplateCommand::Capture(_) => None,
    };
    let app = App::open_for(paths, extra.as_deref()).await?;
    let company = app.config.company.clone();
    match command {
        TemplateCommand::Capture(args) => {
            app.existing_lease(&args.lease).await?;
            let template = app.runtime.capture_template(&args.lease, args.label.as_deref()).await?;
            if args.json {
                crate::out!("{}", to_json(&template));
            } else {
                crate::out!("{}", template.id);
            }
            Ok(0)
        }
        TemplateCommand::List(args) => {
            let environments = match scoped(&args.target) {
                true => {
                    let environment = app.environment_id(&args.target).await?;
                    if let Some(driver) = app.environment_driver(&environment).await? {
                        app.check_driver(&driver)?;
                    }
                    vec![environment]
                }
                false => template_environments(&app).await?,
            };
            let mut templates = Vec::new();
            for environment in &environments {
                templates.extend(app.runtime.templates(environment, &company).await?);
            }
            envrt_lease_ids(&app, &mut templates).await?;
            if args.json {
                crate::out!("{}", to_json(&templates));
            } else {
                print_table(&templates);
            }
            Ok(0)
        }
        TemplateCommand::Delete(args) => {
            let environments = match scoped(&args.target) {
                true => {
                    let environment = app.environment_id(&args.target).await?;
                    if let Some(driver) = app.environment_driver(&environment).await? {
                        app.check_driver(&driver)?;
                    }
                    vec![environment]
                }
                false => template_environments(&app).await?,
            };
            for environment in &environments {
                if app
                    .runtime
                    .delete_template(environment, &company, &args.template)
                    .await?
                {
                    crate::out!("{} deleted", args.template);
                    return Ok(0);
                }
            }
            match (scoped(&args.target), environments.into_iter().next()) {
                (true, Some(environment)) => Err(RuntimeError::TemplateNotFound {
                    id: args.template,
                    environment_id: environment,
                }
                .into()),
                _ => Err(not_found_anywhere(&args.template, &company)),
            }
        }
        TemplateCommand::Setup(args) => setup(&app, args).await,
    }
}

/// `envrt template setup`.
async fn setup(app: &App, args: SetupArgs) -> Result<u8, CliError> {
    let mut interrupts = crate::exec::Interrupts::install();
    let environment = app.environment_id(&args.target).await?;
    let lease = app
        .acquire_from(
            &environment,
            LeasePolicy::Ephemeral,
            None,
            Holder::current().ok(),
            None,
            "envrt template setup",
            args.from.clone(),
        )
        .await?;
    let outcome = async {
        let code = run_session(app, &lease.id, &args, &mut interrupts).await?;
        if code != 0 {
            crate::say!("envrt: the setup session exited with {code}; nothing was captured");
            return Ok(code);
        }
        let template = app.runtime.capture_template(&lease.id, args.label.as_deref()).await?;
        crate::out!("{}", template.id);
        Ok(0)
    }
    .await;
    app.release_own(&lease, LeaseStatus::Released).await;
    outcome
}

/// The setup session: interactive over a duplex channel where the driver has one, else
/// ARGV as one command with its output shown when it ends.
async fn run_session(
    app: &App,
    lease_id: &str,
    args: &SetupArgs,
    interrupts: &mut crate::exec::Interrupts,
) -> Result<u8, CliError> {
    let argv: Vec<String> = if args.argv.is_empty() {
        ["/bin/sh", "-i"].iter().map(|s| s.to_string()).collect()
    } else {
        args.argv.clone()
    };
    match app.runtime.open_duplex_channel(lease_id, &argv).await {
        Ok(channel) => crate::shell::session(Arc::from(channel), !args.no_raw, interrupts).await,
        Err(
            RuntimeError::Unsupported {
                operation: UnsupportedOperation::Duplex,
                ..
            }
            | RuntimeError::DuplexNotGranted { .. },
        ) if !args.argv.is_empty() => {
            let request = ExecuteRequest::new(argv[0].clone(), argv[1..].iter().cloned());
            let result = app.runtime.execute(lease_id, request).await?;
            use std::io::Write;
            let _ = std::io::stdout().write_all(&result.stdout);
            let _ = std::io::stderr().write_all(&result.stderr);
            // Killed (no exit code) counts as a failed setup.
            Ok(result.exit_code.map_or(1, |code| (code & 0xff) as u8))
        }
        Err(
            e @ (RuntimeError::Unsupported {
                operation: UnsupportedOperation::Duplex,
                ..
            }
            | RuntimeError::DuplexNotGranted { .. }),
        ) => Err(CliError::Usage(format!(
            "{e} An interactive setup needs a duplex channel; give the setup as a command: envrt template setup -- sh -c '…'"
        ))),
        Err(e) => Err(e.into()),
    }
}

/// Whether `--env-id` or `--driver` names the environment; without them `list` and
/// `delete` look at every environment.
fn scoped(target: &Target) -> bool {
    target.env_id.is_some() || target.driver.is_some()
}

/// A template id no environment of the tenant knows.
fn not_found_anywhere(id: &str, company: &str) -> CliError {
    CliError::Usage(format!(
        "Template \"{id}\" was not found in any environment of tenant \"{company}\"."
    ))
}

/// The environments `list` and `delete` look at without `--env-id`: every one the store
/// knows (configured, or used with `--driver`) that is not archived and whose driver was
/// set up and keeps templates. Template ids are unique, so a delete finds its one.
async fn template_environments(app: &App) -> Result<Vec<String>, CliError> {
    let mut ids = Vec::new();
    for environment in app.runtime.store().list_environments().await? {
        if environment.status == envrt::EnvironmentStatus::Archived || app.check_driver(&environment.driver).is_err() {
            continue;
        }
        if app
            .runtime
            .driver(&environment.driver)
            .is_some_and(|d| d.as_templates().is_some())
        {
            ids.push(environment.id);
        }
    }
    Ok(ids)
}

/// A driver may record the lease a template came from by its own id (the sandbox
/// worker's); the listing shows envrt's lease id instead, found by provider lease id.
async fn envrt_lease_ids(app: &App, templates: &mut [TemplateRef]) -> Result<(), CliError> {
    if templates.is_empty() {
        return Ok(());
    }
    let leases = app.runtime.leases(&envrt::LeaseFilter::default()).await?;
    for template in templates {
        let Some(source) = template.source_lease_id.clone() else {
            continue;
        };
        if leases.iter().any(|l| l.id == source) {
            continue;
        }
        if let Some(lease) = leases
            .iter()
            .find(|l| l.provider_lease_id.as_deref() == Some(source.as_str()) && l.company_id == template.company_id)
        {
            template.source_lease_id = Some(lease.id.clone());
        }
    }
    Ok(())
}

fn print_table(templates: &[TemplateRef]) {
    let rows: Vec<[String; 5]> = templates
        .iter()
        .map(|t| {
            [
                t.id.clone(),
                t.kind.clone(),
                t.label.clone().unwrap_or_else(|| "-".into()),
                t.source_lease_id.clone().unwrap_or_else(|| "-".into()),
                t.created_at.map_or_else(|| "-".into(), |at| at.to_rfc3339()),
            ]
        })
        .collect();
    let header = ["TEMPLATE", "KIND", "LABEL", "FROM LEASE", "CREATED"];
    let mut widths = header.map(str::len);
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.len());
        }
    }
    let line = |cells: [&str; 5]| {
        let text: Vec<String> = cells.iter().zip(widths).map(|(c, w)| format!("{c:<w$}")).collect();
        crate::out!("{}", text.join("  ").trim_end());
    };
    line(header);
    for row in &rows {
        line(row.each_ref().map(String::as_str));
    }
}

//! `envrt template capture | list | delete`: a lease's state captured as a template of its
//! environment, which `envrt lease acquire --template T` (and `envrt exec --template T`)
//! start new leases from.

use clap::{Args, Subcommand};
use envrt::RuntimeError;
use envrt::core::TemplateRef;

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
        TemplateCommand::Capture(_) => None,
    };
    let app = App::open_for(paths, extra.as_deref()).await?;
    let company = app.config.company.clone();
    match command {
        TemplateCommand::Capture(args) => {
            app.existing_lease(&args.lease).await?;
            let template = app.runtime.capture_template(&args.lease, args.label.as_deref()).await?;
            if args.json {
                println!("{}", to_json(&template));
            } else {
                println!("{}", template.id);
            }
            Ok(0)
        }
        TemplateCommand::List(args) => {
            let environment = app.environment_id(&args.target).await?;
            if let Some(driver) = app.environment_driver(&environment).await? {
                app.check_driver(&driver)?;
            }
            let templates = app.runtime.templates(&environment, &company).await?;
            if args.json {
                println!("{}", to_json(&templates));
            } else {
                print_table(&templates);
            }
            Ok(0)
        }
        TemplateCommand::Delete(args) => {
            let environment = app.environment_id(&args.target).await?;
            if let Some(driver) = app.environment_driver(&environment).await? {
                app.check_driver(&driver)?;
            }
            if app
                .runtime
                .delete_template(&environment, &company, &args.template)
                .await?
            {
                println!("{} deleted", args.template);
                Ok(0)
            } else {
                Err(RuntimeError::TemplateNotFound {
                    id: args.template,
                    environment_id: environment,
                }
                .into())
            }
        }
    }
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
        println!("{}", text.join("  ").trim_end());
    };
    line(header);
    for row in &rows {
        line(row.each_ref().map(String::as_str));
    }
}

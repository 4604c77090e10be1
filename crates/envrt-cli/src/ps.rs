//! `envrt ps`: the persistent processes of one lease, or of every active lease whose
//! driver has them, as a table or as JSON.

use clap::Args;
use envrt::config::Paths;
use envrt::core::process::{ProcessInfo, ProcessStream};
use envrt::{LeaseFilter, LeaseStatus, RuntimeError};

use crate::app::App;
use crate::error::CliError;

#[derive(Debug, Args)]
pub(crate) struct PsArgs {
    /// Only this lease's processes.
    #[arg(long, value_name = "ID")]
    pub(crate) lease: Option<String>,
    /// Print a JSON array of processes (id, pid, startedAt, argv, tty, status, streams).
    #[arg(long)]
    pub(crate) json: bool,
}

fn written(info: &ProcessInfo, stream: ProcessStream) -> String {
    info.stream(stream)
        .map_or_else(|| "-".to_owned(), |s| s.written.to_string())
}

/// One table row: id, pid, status, stdout/tty bytes, stderr bytes, command.
fn row(info: &ProcessInfo) -> [String; 6] {
    let out = if info.tty {
        ProcessStream::Tty
    } else {
        ProcessStream::Stdout
    };
    [
        info.id.to_string(),
        info.pid.to_string(),
        info.status.to_string(),
        written(info, out),
        written(info, ProcessStream::Stderr),
        info.argv.join(" "),
    ]
}

pub(crate) async fn run(paths: &Paths, args: PsArgs) -> Result<u8, CliError> {
    let app = App::open(paths).await?;
    let mut all = Vec::new();
    match &args.lease {
        Some(id) => {
            app.existing_lease(id).await?;
            all.extend(app.runtime.processes(id).await?);
        }
        None => {
            let filter = LeaseFilter {
                statuses: vec![LeaseStatus::Active],
                ..Default::default()
            };
            for lease in app.runtime.leases(&filter).await? {
                match app.runtime.processes(&lease.id).await {
                    Ok(list) => all.extend(list),
                    // A lease whose driver has no process sessions holds none.
                    Err(
                        RuntimeError::Unsupported { .. }
                        | RuntimeError::DriverNotRegistered { .. }
                        | RuntimeError::LeaseExpired { .. }
                        | RuntimeError::LeaseIdleEnded { .. },
                    ) => {}
                    Err(error) => return Err(error.into()),
                }
            }
        }
    }
    print(&all, args.json)
}

/// Prints `all` as the table, or as JSON.
pub(crate) fn print(all: &[ProcessInfo], json: bool) -> Result<u8, CliError> {
    if json {
        let json = serde_json::to_string(&all).map_err(|e| CliError::Failure(format!("envrt: {e}")))?;
        crate::out!("{json}");
        return Ok(0);
    }
    let header = ["PROCESS", "PID", "STATUS", "OUT", "ERR", "COMMAND"].map(String::from);
    let rows: Vec<[String; 6]> = std::iter::once(header).chain(all.iter().map(row)).collect();
    let mut widths = [0usize; 6];
    for r in &rows {
        for (w, cell) in widths.iter_mut().zip(r) {
            *w = (*w).max(cell.chars().count());
        }
    }
    for r in &rows {
        let mut line = String::new();
        for (i, cell) in r.iter().enumerate() {
            if i == 5 {
                line.push_str(cell);
            } else {
                line.push_str(&format!("{cell:<width$}  ", width = widths[i]));
            }
        }
        crate::out!("{}", line.trim_end());
    }
    Ok(0)
}

//! `envrt lease fork ID --count N`: copies a live lease into N new leases (the facade's
//! `fork_lease`) and prints their ids, one per line.

use clap::Args;

use crate::app::App;
use crate::error::CliError;

#[derive(Debug, Args)]
pub(crate) struct ForkArgs {
    /// The lease to copy (it stays as it is, and keeps running).
    id: String,
    /// How many copies (1 to 16).
    #[arg(long, value_name = "N", default_value_t = 1)]
    count: usize,
}

pub(crate) async fn fork(app: &App, args: ForkArgs) -> Result<u8, CliError> {
    app.existing_lease(&args.id).await?;
    let copies = app.runtime.fork_lease(&args.id, args.count).await?;
    for copy in copies {
        crate::out!("{}", copy.id);
    }
    Ok(0)
}

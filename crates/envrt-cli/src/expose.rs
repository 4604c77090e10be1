//! `envrt expose LEASE PORT`: serve a port inside a lease on the host (contract section
//! 10) until the lease ends or this invocation is interrupted. Prints where it listens
//! (`tcp://127.0.0.1:N` or `unix:///path`), and for `--listen` beyond loopback the token a
//! connection must send first (`token T`), then serves; when the lease ends (released,
//! destroyed, expired, by any program) it says so and exits 0.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use envrt::config::Paths;
use envrt::core::{ExposeAt, LeaseStatus};

use crate::app::App;
use crate::error::CliError;

/// How often the lease's state is read again (another program may end it).
const LEASE_CHECK: Duration = Duration::from_secs(1);

#[derive(Debug, Args)]
pub(crate) struct ExposeArgs {
    /// The lease id.
    #[arg(value_name = "LEASE")]
    lease: String,
    /// The port on the lease's loopback.
    #[arg(value_name = "PORT")]
    port: u16,
    /// Listen on a unix socket made at this path (mode 0600) instead of a loopback port.
    #[arg(long, value_name = "PATH", conflicts_with = "listen")]
    unix: Option<PathBuf>,
    /// Listen on this address; beyond loopback every connection must first send the
    /// printed token and a newline.
    #[arg(long, value_name = "ADDR:PORT")]
    listen: Option<SocketAddr>,
}

pub(crate) async fn run(paths: &Paths, args: ExposeArgs) -> Result<u8, CliError> {
    let app = App::open(paths).await?;
    let at = match (args.unix, args.listen) {
        (Some(path), _) => ExposeAt::Unix(path),
        (None, Some(addr)) => ExposeAt::Listen(addr),
        (None, None) => ExposeAt::Loopback,
    };
    let endpoint = app.runtime.expose(&args.lease, args.port, at).await?;
    println!("{}", endpoint.address);
    if let Some(token) = &endpoint.token {
        println!("token {token}");
    }
    hold_until_the_lease_ends(&app, &args.lease, "its exposed port is closed").await?;
    app.runtime.close_exposed(&args.lease);
    Ok(0)
}

/// Flushes what was printed, then waits for SIGINT, SIGTERM or the end of `lease` (looked
/// at every [`LEASE_CHECK`]), saying `envrt: lease {lease} ended: {closed}` for the last:
/// a command whose endpoint lives as long as it runs.
pub(crate) async fn hold_until_the_lease_ends(app: &App, lease: &str, closed: &str) -> Result<(), CliError> {
    use std::io::Write as _;
    let _ = std::io::stdout().flush();
    use tokio::signal::unix::{SignalKind, signal};
    let (mut int, mut term) = (
        signal(SignalKind::interrupt()).map_err(|e| CliError::Failure(format!("envrt: cannot watch SIGINT: {e}")))?,
        signal(SignalKind::terminate()).map_err(|e| CliError::Failure(format!("envrt: cannot watch SIGTERM: {e}")))?,
    );
    let ended = async {
        loop {
            tokio::time::sleep(LEASE_CHECK).await;
            match app.runtime.lease(lease).await {
                Ok(Some(lease)) if lease.status == LeaseStatus::Active => {}
                _ => return,
            }
        }
    };
    tokio::select! {
        _ = int.recv() => {}
        _ = term.recv() => {}
        () = ended => crate::say!("envrt: lease {lease} ended: {closed}"),
    }
    Ok(())
}

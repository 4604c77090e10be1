//! `envrt serve`: the runtime as an authenticated HTTP/WebSocket service (the
//! `envrt-serve` crate), with the configured warm pools kept while it runs. Listens on a
//! unix socket (default `<state dir>/serve.sock`, mode 0600) or, with `--listen`, on TCP:
//! loopback only unless `--tls-cert` and `--tls-key` are given. Prints where it listens on
//! stderr, one JSON audit line per mutating call on stderr, and stops on SIGTERM or SIGINT
//! after ending live process output streams and draining in-flight requests for at most
//! `--drain`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use clap::Args;
use envrt::config::{Assembly, Paths, open_store};
use envrt_serve::{Bound, Endpoint, Limits, Service};

use crate::error::CliError;

#[derive(Debug, Args)]
pub(crate) struct ServeArgs {
    /// The unix socket to listen on (default `<state dir>/serve.sock`).
    #[arg(long, value_name = "PATH", conflicts_with = "listen")]
    socket: Option<PathBuf>,
    /// Listen on TCP at this address instead; beyond loopback only with TLS.
    #[arg(long, value_name = "ADDR")]
    listen: Option<SocketAddr>,
    /// TLS certificate chain (PEM) for `--listen`.
    #[arg(long, value_name = "FILE", requires = "tls_key", requires = "listen")]
    tls_cert: Option<PathBuf>,
    /// TLS private key (PEM) for `--listen`.
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// How long a stop waits for in-flight requests.
    #[arg(long, value_name = "DURATION", default_value = "10s")]
    drain: String,
    /// Active leases one tenant may hold at once.
    #[arg(long, value_name = "N", default_value_t = Limits::default().max_live_leases)]
    max_live_leases: usize,
    /// Running processes one tenant may have at once, over all its active leases.
    #[arg(long, value_name = "N", default_value_t = Limits::default().max_live_processes)]
    max_live_processes: usize,
    /// The largest JSON request body, bytes.
    #[arg(long, value_name = "BYTES", default_value_t = Limits::default().max_json_bytes)]
    max_body_bytes: usize,
    /// The largest tar body of a sync in, bytes.
    #[arg(long, value_name = "BYTES", default_value_t = Limits::default().max_upload_bytes)]
    max_upload_bytes: usize,
}

pub(crate) async fn run(paths: &Paths, args: ServeArgs) -> Result<u8, CliError> {
    // Caught from here on: a stop asked for while the pools fill still releases them.
    let stop_signal = envrt_serve::stop_signal();
    let drain = envrt::config::parse_duration("--drain", &args.drain)?;
    let endpoint = match args.listen {
        Some(addr) => Endpoint::Tcp {
            addr,
            tls: args.tls_cert.zip(args.tls_key),
        },
        None => Endpoint::Unix(args.socket.unwrap_or_else(|| paths.state_dir.join("serve.sock"))),
    };
    endpoint.check().map_err(CliError::Usage)?;
    let assembly = Assembly::open(paths, None).await?;
    assembly.start_pools()?;
    let tokens = open_store(paths).await?;
    let limits = Limits {
        max_json_bytes: args.max_body_bytes,
        max_upload_bytes: args.max_upload_bytes,
        max_live_leases: args.max_live_leases,
        max_live_processes: args.max_live_processes,
    };
    let audit: envrt_serve::AuditSink = Arc::new(|line| say!("{line}"));
    let service = Service::with_audit(Arc::clone(&assembly.runtime), tokens, limits, Some(audit));
    let bound = Bound::bind(&endpoint).await.map_err(CliError::Failure)?;
    say!("envrt serve: listening on {}", bound.describe());
    // At the stop, live process output streams end (their readers carry on from their
    // offsets against the next service) instead of holding the drain.
    let stopping = Arc::clone(&service);
    let stop = async move {
        stop_signal.await;
        stopping.stop();
    };
    let drained = bound.serve(envrt_serve::app(service), stop, drain).await;
    let report = assembly.runtime.stop_pools().await;
    for failure in &report.failures {
        say!("envrt serve: pool lease {}: {}", failure.lease_id, failure.error);
    }
    say!(
        "envrt serve: stopped{}",
        if drained {
            ""
        } else {
            " (in-flight requests cut at the drain bound)"
        }
    );
    Ok(0)
}

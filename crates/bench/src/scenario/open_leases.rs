//! Row 7, how cost grows with the number of open leases (`scale-open`): acquire (and
//! release) of one more lease, and execute of `true` on a lease, with 1, 100 and 1,000
//! local leases open in the same runtime and driver, each against the same operation with
//! one lease open. The three runtimes live side by side and are measured interleaved.

use envrt_runtime_core::{AcquireRequest, LeaseStatus};

use crate::Config;
use crate::measure::interleave;
use crate::report::{Figure, Row};
use crate::targets::local::Local;

const GROUP: &str = "scale-open";

/// How many leases each runtime holds open while it is measured.
const OPEN: [usize; 3] = [1, 100, 1000];

/// A local runtime with `open` leases (the facade's first one included).
async fn with_leases(open: usize) -> Result<(Local, Vec<String>), String> {
    let local = Local::open(None).await?;
    let mut extra = Vec::with_capacity(open.saturating_sub(1));
    for _ in 1..open {
        let lease = local
            .leased
            .runtime
            .acquire_lease(AcquireRequest::new(&local.leased.environment, "bench"))
            .await
            .map_err(|e| format!("acquiring lease {} of {open}: {e}", extra.len() + 2))?;
        extra.push(lease.id);
    }
    Ok((local, extra))
}

/// One more lease acquired and released at once.
async fn acquire_release(local: &Local) -> Result<(), String> {
    let runtime = &local.leased.runtime;
    let lease = runtime
        .acquire_lease(AcquireRequest::new(&local.leased.environment, "bench"))
        .await
        .map_err(|e| e.to_string())?;
    runtime
        .release_lease(&lease.id, LeaseStatus::Released)
        .await
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// The rows of `scale-open`.
pub(crate) async fn open_lease_rows(config: &Config) -> Vec<Row> {
    let mut opened = Vec::new();
    for open in OPEN {
        match with_leases(open).await {
            Ok(state) => opened.push(state),
            Err(e) => {
                for (local, extra) in opened {
                    close(local, extra).await;
                }
                return vec![Row::missing(GROUP, 7, "local leases open", e)];
            }
        }
    }
    let rounds = config.exec_rounds();
    let runs = &opened;
    let acquire = interleave(OPEN.len(), 5, rounds, |i| acquire_release(&runs[i].0)).await;
    let execute = interleave(OPEN.len(), 10, rounds, |i| async move {
        runs[i].0.leased.run(&["true"]).await
    })
    .await;
    for (local, extra) in opened {
        close(local, extra).await;
    }
    let mut rows = Vec::new();
    for (what, measured) in [("acquire + release", acquire), ("execute `true`", execute)] {
        match measured {
            Ok(m) => {
                for (i, open) in OPEN.iter().enumerate().skip(1) {
                    rows.push(
                        Row::new(
                            GROUP,
                            7,
                            format!("local {what} p50, {open} leases open"),
                            Figure::ms(m.p(i, 50.0)),
                        )
                        .baseline("1 lease open", Figure::ms(m.p(0, 50.0))),
                    );
                }
            }
            Err(e) => rows.push(Row::missing(
                GROUP,
                7,
                format!("local {what} with leases open"),
                format!("error: {e}"),
            )),
        }
    }
    rows
}

async fn close(local: Local, extra: Vec<String>) {
    for lease in extra {
        let _ = local.leased.runtime.release_lease(&lease, LeaseStatus::Released).await;
    }
    local.leased.close().await;
}

//! After the suite: nothing of it is left behind.

use envrt_runtime_core::{LeaseFilter, LeaseStatus};

use super::{Check, always};
use crate::context::{Ctx, ensure};
use crate::procs::processes_with_marker;

pub(super) const CHECKS: &[Check] = &[
    Check::new("cleanup_no_active_lease", always, no_active_lease).after_suite(),
    Check::new("cleanup_no_process", always, no_process).after_suite(),
    Check::new("cleanup_no_driver_leftovers", always, no_leftovers).after_suite(),
];

fn no_active_lease(ctx: &Ctx) -> Result<(), String> {
    ctx.block_on(async {
        let filter = LeaseFilter {
            statuses: vec![LeaseStatus::Active, LeaseStatus::PendingCleanup],
            ..Default::default()
        };
        let leases = ctx.runtime.leases(&filter).await.map_err(|e| e.to_string())?;
        let ours: Vec<String> = leases
            .into_iter()
            .filter(|l| l.company_id == ctx.company_id)
            .map(|l| format!("{} ({})", l.id, l.status))
            .collect();
        ensure(ours.is_empty(), || format!("leases left active: {ours:?}"))
    })
}

fn no_process(ctx: &Ctx) -> Result<(), String> {
    let mut left = processes_with_marker(&ctx.marker_prefix);
    for _ in 0..30 {
        if left.is_empty() {
            return Ok(());
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
        left = processes_with_marker(&ctx.marker_prefix);
    }
    Err(format!("processes of the suite survive: {left:?}"))
}

fn no_leftovers(ctx: &Ctx) -> Result<(), String> {
    let Some(probe) = ctx.leftovers.clone() else {
        return Ok(());
    };
    let left = ctx.block_on(probe())?;
    ensure(left.is_empty(), || format!("left behind: {left:?}"))
}

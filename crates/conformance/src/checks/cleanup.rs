//! After the suite: nothing of it is left behind. A look that cannot be made (no
//! leftovers probe, `/proc` unreadable) is reported as "not checked", never as a pass.

use envrt_runtime_core::{LeaseFilter, LeaseStatus};

use super::{Check, Checked, always};
use crate::context::{Ctx, ensure};

pub(super) const CHECKS: &[Check] = &[
    Check::new("cleanup_no_active_lease", always, no_active_lease)
        .promise("After the suite no lease of it is left active or pending clean-up.")
        .after_suite(),
    Check::maybe("cleanup_no_process", always, no_process)
        .promise("After the suite no process of it is left running.")
        .after_suite(),
    Check::maybe("cleanup_no_driver_leftovers", always, no_leftovers)
        .promise("After the suite the driver's leftovers probe finds nothing of it in the backend.")
        .after_suite(),
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

fn no_process(ctx: &Ctx) -> Result<Checked, String> {
    let look = || ctx.processes(&ctx.marker_prefix);
    let mut left = match look() {
        Ok(left) => left,
        Err(why) => return Ok(Checked::NotChecked(format!("cannot look for processes: {why}"))),
    };
    for _ in 0..30 {
        if left.is_empty() {
            return Ok(Checked::Yes);
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
        left = look().unwrap_or_default();
    }
    Err(format!("processes of the suite survive: {left:?}"))
}

fn no_leftovers(ctx: &Ctx) -> Result<Checked, String> {
    let Some(probe) = ctx.leftovers.clone() else {
        return Ok(Checked::NotChecked(
            "the target has no leftovers probe (Target::with_leftovers)".into(),
        ));
    };
    let left = ctx.block_on(probe())?;
    ensure(left.is_empty(), || format!("left behind: {left:?}"))?;
    Ok(Checked::Yes)
}

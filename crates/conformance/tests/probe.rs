//! The capability-honesty and life-cycle checks against probe drivers of several shapes
//! and declarations: every optional group absent, all present without opt-ins, and all
//! present with every key declared.

use std::sync::Arc;

use envrt_conformance::{Suite, Target, run_suites};
use envrt_runtime_core::CapabilityDeclaration;
use envrt_runtime_core::testkit::{ProbeDriver, ProbeShape};

const PROBE_CHECKS: &[&str] = &[
    "honesty_",
    "cleanup_",
    "lifecycle_acquire",
    "lifecycle_release",
    "lifecycle_destroy",
    "templates_",
];

fn suite(key: &'static str, shape: ProbeShape, declaration: Option<CapabilityDeclaration>) -> Suite {
    Suite::build(|| async move {
        // Without a declaration the opt-in duplexCommandStream is withheld.
        let withheld = declaration.is_none_or(|d| d.duplex_command_stream != Some(true));
        let driver = Arc::new(ProbeDriver::new(key, shape, declaration));
        let target = Target::new(driver).only(PROBE_CHECKS);
        Ok(if withheld {
            target.duplex_withheld_by_declaration()
        } else {
            target
        })
    })
    .expect("probe suite")
}

fn main() {
    let everything = CapabilityDeclaration::from_fn(|_| Some(true));
    let suites = vec![
        suite("probe_bare", ProbeShape::default(), None),
        suite("probe_undeclared", ProbeShape::full(), None),
        suite("probe_declared", ProbeShape::full(), Some(everything)),
        suite(
            "probe_partial",
            ProbeShape {
                execute: true,
                duplex: true,
                ..Default::default()
            },
            Some(everything),
        ),
    ];
    std::process::exit(if run_suites(suites) { 0 } else { 101 });
}

//! The conformance suite against the example driver (`cargo xtask conformance --driver
//! example`): leases that hold nothing, and every optional verb refused by the facade
//! with its exact texts; the capability-honesty checks prove it grants nothing it lacks.

use std::sync::Arc;

use envrt_conformance::{Suite, Target};
use envrt_driver_example::ExampleDriver;

fn main() {
    Suite::build(|| async { Ok(Target::new(Arc::new(ExampleDriver::new()))) })
        .expect("the example driver starts")
        .run_and_exit();
}

//! `execute` against a real engine (contract section 5), through the engine's exec path
//! (no supervisor mounted); `execute_agent.rs` runs the same cases through the supervisor.

mod common;

macro_rules! execute_harness {
    () => {
        crate::harness_or_skip!()
    };
}

#[path = "cases/execute.rs"]
mod cases;

//! `execute` against a real engine (contract section 5), through the engine's exec path
//! (no supervisor mounted); `execute_agent.rs` runs the same cases through the supervisor.

mod common;

macro_rules! execute_harness {
    () => {
        harness_or_skip!()
    };
}

include!("cases/execute.rs");

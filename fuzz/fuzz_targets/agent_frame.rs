//! The in-lease supervisor's frames, as the agent and its client read them.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| envrt_agent::fuzzing::agent_frame(data));

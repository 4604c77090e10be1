//! The worker protocol's typed params and results, and a refusal's structured data.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| envrt_plugin_protocol::fuzzing::protocol_params(data));

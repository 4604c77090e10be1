//! The worker protocol's bounded line reader and both line classifications.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| envrt_plugin_protocol::fuzzing::protocol_line(data));

//! The sandbox data plane's frame decoder (host and worker read with the same one).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| envrt_plugin_protocol::fuzzing::dataplane_frame(data));

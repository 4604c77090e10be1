//! Plugin manifest parsing.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| envrt_driver_plugin_sandbox::host::fuzzing::sandbox_manifest(data));

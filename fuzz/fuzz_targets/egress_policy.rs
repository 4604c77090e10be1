//! The egress policy's allow entries.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| envrt_egress::fuzzing::egress_policy(data));

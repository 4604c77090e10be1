//! A client's request head to the egress proxy.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| envrt_egress::fuzzing::egress_head(data));

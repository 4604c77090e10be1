//! A query to the egress DNS stub.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| envrt_egress::fuzzing::egress_dns(data));

//! envrt.toml parsing.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| envrt::config::Config::fuzz_config_toml(data));

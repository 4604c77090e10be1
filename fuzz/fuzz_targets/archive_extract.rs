//! The tar extractor behind every sync out, writing beneath a scratch directory.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| envrt_driver_files::archive::fuzzing::archive_extract(data));

//! Fuzz target: arbitrary bytes as an index file, opened, scanned and looked up by the engine's
//! reader (`shardlite_fuzz_checks::check_index_file` says what must hold).
#![no_main]

libfuzzer_sys::fuzz_target!(|bytes: &[u8]| shardlite_fuzz_checks::check_index_file(bytes));

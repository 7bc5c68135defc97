//! Fuzz target: arbitrary bytes as a `POST /batch` body into the server's decoder
//! (`shardlite_fuzz_checks::check_batch` says what must hold).
#![no_main]

libfuzzer_sys::fuzz_target!(|body: &[u8]| shardlite_fuzz_checks::check_batch(body));

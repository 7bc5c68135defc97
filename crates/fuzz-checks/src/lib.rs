//! What the cargo-fuzz targets in `fuzz/` check, one function per target. The fuzz targets call
//! these, and so does this crate's test of the committed seed corpus (`tests/corpus.rs`, run by
//! the ordinary `cargo test` on stable), so both check the same thing. Each function panics when
//! a property fails: libFuzzer reports a panic as a crash.

mod batch;
mod index_file;

pub use batch::check_batch;
pub use index_file::check_index_file;

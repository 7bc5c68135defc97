//! shardlite's load generators and reports.
//!
//! Today: [`keyspace`] (the deterministic keys and values every tool agrees on), [`sysio`]
//! (what a run cost: process and disk I/O from `/proc`, page-cache eviction) and
//! [`engine_bench`] (the storage engine driven directly by caller threads, without HTTP).
//! The HTTP load generator (closed and open loop) joins them with issue 5.

pub mod engine_bench;
pub mod keyspace;
pub mod sysio;

//! shardlite's load generators and reports, and every `bench` subcommand of the binary
//! (docs/bench.md).
//!
//! # Layout
//! - [`command`] (`shardlite bench`), [`matrix`] (`bench matrix`), [`engine_bench`]
//!   (`bench-engine`: the engine without HTTP); [`measure`]: what they share.
//! - [`keyspace`]: the deterministic keys and values every tool agrees on.
//! - The HTTP load: [`workload`] (what a request is), [`schedule`] (when it is sent), [`http`]
//!   (a keep-alive connection), [`cluster`] (each key to its owner), [`runner`] (one run),
//!   [`recorder`] (histograms, errors, timeline), [`cost`] (`/stats` and `/proc` each second).
//! - The report: [`report`] (text, JSON and its schema), [`html`] (`--html`).
//! - The server: [`server_process`] (`--spawn`), [`preload`] (the data set), [`cold`] (`--cold`:
//!   evicted and memory-limited) and [`device`] (the disk's ceiling of random reads).

pub mod cluster;
pub mod cold;
pub mod command;
pub mod cost;
pub mod device;
pub mod engine_bench;
pub mod html;
pub mod http;
pub mod keyspace;
pub mod matrix;
pub mod measure;
pub mod preload;
pub mod recorder;
pub mod report;
pub mod runner;
pub mod schedule;
pub mod server_process;
pub mod tls;
pub mod workload;

pub use command::BenchArgs;
pub use engine_bench::command::BenchEngineArgs;

//! shardlite's load generators and reports, and every `bench` subcommand of the binary.
//!
//! Where things live:
//! - The subcommands, flags to typed values to runs: [`command`] (`shardlite bench`),
//!   [`matrix`] (`bench matrix`: the SQLite configurations side by side, and PostgreSQL with
//!   the `postgres` feature), [`engine_bench::command`] (`bench-engine`); [`measure`] (what
//!   they share: how workloads are measured, spawned servers, the runs against one server).
//! - [`keyspace`]: the deterministic keys and values every tool agrees on.
//! - [`engine_bench`]: the storage engine driven directly by caller threads, without HTTP.
//! - The HTTP load generator (`shardlite bench`, see `docs/bench.md`):
//!   [`workload`] (what each request is: workloads, key choice, fresh insert keys),
//!   [`schedule`] (when it is sent: the one `Schedule`, closed or open loop),
//!   [`http`] (the hyper keep-alive connection), [`cluster`] (`--url` of a cluster's node: each
//!   key sent to its owner by the map of `GET /cluster`), [`runner`] (one run: connections, warm-up,
//!   measured window), [`recorder`] (HDR histograms, errors by kind, per-second timeline),
//!   [`cost`] (`/stats` and `/proc` sampled every second), [`report`] (the model, text and
//!   JSON, and the JSON's published schema), [`server_process`] (`--spawn`),
//!   [`preload`] (the data set through `POST /batch`), [`html`] (`--html`: the report with
//!   inline SVG charts), [`cold`] (`--cold`: a spawned server evicted from the page cache and
//!   limited in memory) and [`device`] (the disk's ceiling of random reads beside it). PostgreSQL's throwaway cluster is crate `shardlite-postgres`'s; what
//!   a process, the machine and a disk cost (`/proc`) is read by crate `shardlite-proc`.

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

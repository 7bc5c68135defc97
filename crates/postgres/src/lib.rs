//! PostgreSQL, for comparing it with shardlite's engine: kept out of the server, which links no
//! PostgreSQL client, and out of the binary unless its `postgres` feature is on (the default).
//!
//! - [`PgBackend`] ([`backend`]): the HTTP server's `Backend` over a PostgreSQL table —
//!   `shardlite serve --backend postgres://...` — with every SQL statement in `sql`,
//!   PostgreSQL's statistics views read in `views` and its errors mapped in `error`.
//! - [`Cluster`] ([`cluster`]): a throwaway PostgreSQL cluster from the system's binaries, for
//!   `shardlite bench matrix --spawn-postgres` ([`cluster::BENCH_TUNING`]) and for the tests of
//!   CI ([`cluster::TEST_SETTINGS`], through the `pg-cluster` binary that `.ci/postgres` runs);
//!   and the benchmark's and tests' own tables ([`fresh_table`], [`drop_table`]).

pub mod backend;
pub mod cluster;
mod error;
mod sql;
mod views;

pub use backend::{redact, PgBackend, PgOptions, DEFAULT_TABLE};
pub use cluster::{drop_table, fresh_table, Cluster};

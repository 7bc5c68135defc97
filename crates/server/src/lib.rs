//! shardlite's HTTP server: the key-value API (`/kv/{key}`, `/batch`, `/keys`, `/export`,
//! `/healthz`, `/readyz`, `/stats`, `/metrics`, `/admin/check`, `/admin/backup`, `/openapi.yaml`,
//! `/cluster`) over a
//! [`Backend`]: shardlite's engine ([`SqliteBackend`] of a
//! [`shardlite_engine::Store`]) or PostgreSQL (`PgBackend`, crate `shardlite-postgres`). `docs/http-api.md` is
//! the contract.
//!
//! ```text
//!  TcpListener ── accept (≤ max_connections open) ──> one tokio task per connection (hyper)
//!     request ──> service: route, token, method, role ──> handler ──> Backend (SQLite shown;
//!                                                               PostgreSQL: a pooled connection)
//!        GET/HEAD  ── store.submit_get ──> engine lookup threads ──> PendingGet.await
//!        PUT/DELETE ─ store.write ──────> writer queue of the key's partition (bounded:
//!        POST /batch  store.submit_batch   full => 503 + Retry-After at once) ──> Pending.await,
//!                                          resolved after the group commit; or, with the
//!                                          commit log and few writes under way, inline: the
//!                                          transaction on this thread, the flush awaited
//!        /stats, /metrics ── spawn_blocking (they stat the store's files)
//!        POST /admin/backup ── a backup thread (Store::backup), answered at once; GET: its status
//!  shutdown ──> stop accepting ──> finish in-flight requests ──> backend.close() (SQLite: commit
//!               what is queued, checkpoint) ──> run returns
//! ```
//!
//! No handler runs SQLite or other blocking work on the async runtime's threads, but for
//! inline writes: a single PUT or DELETE, with the commit log, while few writes are under way
//! and the data is warm, runs its partition's short transaction on the runtime's thread (and
//! now and then the end of a checkpoint, a few pages and two syncs), then awaits its flush
//! without blocking (`shardlite_engine::partition::writer`). Modules:
//! [`backend`] (the storage trait and its error), [`figures`] (what a backend reports),
//! [`sqlite`] (the engine's backend), [`backup_job`] (the one backup a server runs at a time,
//! on its own thread), [`backup_status`] (what it reports), `starting` (serving before the storage is open), [`server`] (accept
//! loop, limits, reloads, shutdown), [`tls`] (rustls: certificate, ALPN, client certificates),
//! `service` (one request: route, token and role, metrics), `state` (what handlers share),
//! [`cluster`] (a node of a cluster: which partitions are served here, forwarding, 421s, the
//! split `/batch`, `/cluster`), `routes` (paths, methods, roles), `kv`, `batch`, `keys`, `export`, `admin`
//! (`/admin/backup`), `stats`, `metrics` and `openapi` (the routes; `openapi` serves
//! `docs/openapi.yaml` and tests that it describes every route and error code), `conditional` (If-Match and
//! If-None-Match), `key` (hex keys), `body` (bounded body reads), [`error`] (every error's
//! status and JSON body), [`auth`] (tokens and roles), `response`, [`options`]; the process's
//! figures come from crate `shardlite-proc`. The backends import no handler: the handlers render
//! what the backends return.

mod admin;
pub mod auth;
pub mod backend;
pub mod backup_job;
pub mod backup_status;
mod batch;
mod body;
pub mod cluster;
mod conditional;
pub mod error;
mod export;
pub mod figures;
mod key;
mod keys;
mod kv;
mod metrics;
mod openapi;
pub mod options;
mod response;
mod routes;
pub mod server;
mod service;
pub mod sqlite;
mod starting;
mod state;
mod stats;
pub mod tls;

pub use backend::{Backend, BackendError, BackendResult, BoxFuture, KeyPage};
/// The `POST /batch` body decoder, exposed for the fuzz targets (`fuzz/`) only.
#[doc(hidden)]
pub use batch::decode_batch;
pub use error::ApiError;
pub use figures::Figures;
pub use options::ServerOptions;
pub use server::{run, run_reloading, run_store, Reload};
pub use sqlite::SqliteBackend;
pub use starting::Starting;

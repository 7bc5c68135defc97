//! shardlite's HTTP server: the key-value API of SPEC §2 (`/kv/{key}`, `/batch`, `/healthz`,
//! `/stats`, `/metrics`) over a [`shardlite_engine::Store`]. `docs/http-api.md` is the contract.
//!
//! ```text
//!  TcpListener ── accept (≤ max_connections open) ──> one tokio task per connection (hyper)
//!     request ──> service: route, auth, method ──> handler
//!        GET/HEAD  ── store.submit_get ──> engine lookup threads ──> PendingGet.await
//!        PUT/DELETE ─ store.submit ─────> writer queue of the key's partition (bounded:
//!        POST /batch  store.submit_batch   full => 503 + Retry-After at once) ──> Pending.await,
//!                                          resolved after the group commit
//!        /stats, /metrics ── spawn_blocking (they stat the store's files)
//!  shutdown ──> stop accepting ──> finish in-flight requests ──> store.close() (commit what is
//!               queued, checkpoint) ──> run returns
//! ```
//!
//! No handler runs SQLite or other blocking work on the async runtime's threads. Modules:
//! [`server`] (accept loop, limits, shutdown), `service` (one request: route, auth, metrics),
//! `kv`, `batch`, `stats` and `metrics` (the routes), `conditional` (If-Match and
//! If-None-Match), `key` (hex keys), `body` (bounded body reads), [`error`] (every error's
//! status and JSON body), `auth`, `procinfo`, `response`, [`options`].

mod auth;
mod batch;
mod body;
mod conditional;
pub mod error;
mod key;
mod kv;
mod metrics;
pub mod options;
mod procinfo;
mod response;
mod routes;
pub mod server;
mod service;
mod stats;

pub use error::ApiError;
pub use options::ServerOptions;
pub use server::run;

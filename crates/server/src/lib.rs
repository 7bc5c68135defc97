//! shardlite's HTTP server: the key-value API of `docs/http-api.md` over a [`Backend`], which is
//! shardlite's engine ([`SqliteBackend`]) or PostgreSQL (crate `shardlite-postgres`). [`run`]
//! serves it until told to stop; [`run_reloading`] also re-reads the token and TLS files when
//! asked, and serves as a node of a [`cluster::Cluster`]. A request's way through the server, and
//! why no handler blocks the async runtime: `docs/design.md`, "The HTTP server".
//!
//! # Layout
//!
//! Each folder imports only those below it in this list:
//!
//! - [`server`]: the front door: the accept loop, reloads, the orderly shutdown, and one
//!   request's dispatch (route, token, role, handler, metrics).
//! - `handlers`: one module per route family (`/kv`, `/batch`, `/keys`, `/export`, `/admin`,
//!   `/stats`, `/metrics`, `/openapi.yaml`, the probes), and a cluster node's side: requests for
//!   other nodes' partitions, the `/batch` split by owner, `/cluster`, moves and takeovers.
//! - `http`: what the handlers share: the state, [`options`], the routes table, [`auth`], [`tls`],
//!   [`error`], responses, bounded bodies, hex keys, conditional headers, request metrics, and the
//!   client that forwards a request to another node.
//! - [`cluster`]: a node's cluster state: the map, the lease, the gates a move closes, the
//!   restorer a failover uses.
//! - [`backend`]: the storage seam ([`Backend`], [`BackendError`]), its [`figures`], the engine's
//!   backend ([`sqlite`]), the one serving while the storage opens, and backups.

pub mod backend;
pub mod cluster;
mod handlers;
mod http;
pub mod server;

pub use backend::{backup_job, backup_status, figures, sqlite};
pub use backend::{starting::Starting, Backend, BackendError, BackendResult, BoxFuture, KeyPage};
pub use figures::Figures;
/// The `POST /batch` body decoder, exposed for the fuzz targets (`fuzz/`) only.
#[doc(hidden)]
pub use handlers::batch::decode_batch;
pub use http::{auth, error, options, tls};
pub use http::{
    error::ApiError,
    options::ServerOptions,
    replicator::{replicate, replicate_once_copied, ReplicationPolicy},
};
pub use server::{run, run_reloading, run_store, Reload};
pub use sqlite::SqliteBackend;

//! What every handler shares: the server's state and options, the routes table, tokens and
//! roles, TLS, the error and response types, and the pieces of a request that several routes
//! read (bodies, hex keys, conditional headers). None of it imports a handler.
//!
//! - `state`: [`State`](state::State), what the handlers share while the server runs.
//! - `options`: [`ServerOptions`](options::ServerOptions), what the HTTP layer is told.
//! - `routes`: which path is which route, the methods each allows and the role each needs.
//! - `auth`: bearer tokens and their roles.
//! - `tls`: rustls, the certificate and its reloads.
//! - `error`: [`ApiError`](error::ApiError), every refusal with its status and JSON body.
//! - `response`: the response type and the few ways to build one.
//! - `body`: request bodies read within a size and a time.
//! - `key`: keys (and batch values) as lowercase hex.
//! - `conditional`: `If-Match` and `If-None-Match` against entity tags.
//! - `read_from`: `Shardlite-Read-From`, who may answer a read (the owner, or a copy).
//! - `metrics`: what the HTTP layer counts between scrapes.
//! - `forward`: the client that sends a request on to the node owning its partition.
//! - `replicator`: the owner's side of replication, each flush's frames sent to the copies.

pub mod auth;
pub(crate) mod body;
pub(crate) mod conditional;
pub mod error;
pub(crate) mod forward;
pub(crate) mod key;
pub(crate) mod metrics;
pub mod options;
pub(crate) mod read_from;
pub(crate) mod replicator;
pub(crate) mod response;
pub(crate) mod routes;
pub(crate) mod state;
pub mod tls;

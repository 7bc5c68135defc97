//! The client against a real server: `shardlite_server::run` (the code `shardlite serve`
//! runs) on 127.0.0.1:0 over a real store in a temporary directory, in the test's own
//! process, one module per concern. One test binary, so the suite links once.
#![allow(clippy::unwrap_used, missing_docs)]

mod auth;
mod batch;
mod cas;
mod common;
mod kv;
mod pool;
mod retry;
mod timeouts;
mod tls;

//! The HTTP API over real HTTP: a server on 127.0.0.1:0 over a real store in a temporary
//! directory, one module per concern; and `model`, the `Backend` trait itself against a model.
//! One test binary, so the helpers in `common` are shared without dead code and the suite
//! links once.
#![allow(clippy::unwrap_used)]

mod admin;
mod auth;
mod batch;
#[path = "../common/certs.rs"]
mod certs;
mod common;
mod export;
mod keys;
mod kv;
mod limits;
mod model;
mod observability;
mod openapi;
mod readiness;
mod shutdown;
mod surface;
mod tls;
mod versions;

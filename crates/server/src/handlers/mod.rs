//! The routes' handlers, one module per route family; each reads what it needs from the request,
//! asks the backend and answers. They share the `http` layer's state, errors and responses, and
//! the dispatch in `crate::server` picks the one a request's route names.
//!
//! - `kv`: `/kv/{key}`, one record: GET, HEAD, PUT, DELETE.
//! - `batch`: `POST /batch`, many operations in one request, run on this node.
//! - `keys`: `GET /keys`, a page of a partition's keys.
//! - `export`: `GET /export`, a partition's records streamed from one snapshot.
//! - `admin`: `/admin/check`, `/admin/backup` and `/admin/compact`, on this node's storage.
//! - `stats`: `GET /stats`, the server's and the backend's figures as JSON.
//! - `metrics`: `GET /metrics`, the same and the request metrics as OpenMetrics.
//! - `openapi`: `GET /openapi.yaml`, the API's description.
//! - `probes`: `/healthz` and `/readyz`.
//! - `cluster`: a cluster node's side: requests for other nodes, the split `/batch`, `/cluster`,
//!   moves and takeovers.

pub(crate) mod admin;
pub(crate) mod batch;
pub(crate) mod cluster;
pub(crate) mod export;
pub(crate) mod keys;
pub(crate) mod kv;
pub(crate) mod metrics;
pub(crate) mod openapi;
pub(crate) mod probes;
pub(crate) mod stats;

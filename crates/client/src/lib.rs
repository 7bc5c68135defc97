//! A client of shardlite's HTTP API (docs/http-api.md; docs/clients.md compares it with the
//! Python client): reads, upserts, conditional writes, deletes, batches and a page of keys;
//! [`Client::compare_and_set`]; errors typed by the server's stable codes ([`ErrorCode`]);
//! bounded retries with backoff of the 503s that are safe to send again, honoring
//! `Retry-After` ([`Retry`]); keep-alive connections pooled across tasks, timeouts, a bearer
//! token, `https://` (rustls). It runs on hyper and tokio, like the server.
//!
//! ```no_run
//! use shardlite_client::{Client, Error, ErrorCode};
//!
//! # async fn example() -> Result<(), Error> {
//! let client = Client::builder("http://127.0.0.1:8080").token("T").build()?;
//! let written = client.put(b"user:1", "Ada").await?;
//! let record = client.get(b"user:1").await?.expect("just written");
//! assert_eq!(record.value, "Ada");
//! assert_eq!(record.etag, written.etag);
//!
//! // A conditional write: only over the state read.
//! match client.put_if(b"user:1", "Ada L.", &record.etag).await {
//!     Ok(_) => {}
//!     Err(e) if e.is_precondition_failed() => println!("changed meanwhile"),
//!     Err(e) => return Err(e),
//! }
//! // Insert only.
//! if let Err(e) = client.create(b"user:1", "Grace").await {
//!     assert_eq!(e.code(), Some(&ErrorCode::PreconditionFailed));
//! }
//! assert!(client.delete(b"user:1").await?);
//! # Ok(())
//! # }
//! ```
//!
//! More (compare-and-set, batches, a cluster's nodes): docs/clients.md.
//!
//! # Layout
//! - `builder`: the settings (URL, token, timeouts, TLS roots, retries, cluster mode).
//! - `client`: the operations; `cas`: compare-and-set; `batch`: `POST /batch`; `keys`: `GET /keys`.
//! - `etag`: tags, records, conditions; `error`: errors by the server's codes.
//! - `retry`: what is retried and how long to wait; `transport`: one attempt; `pool`: the
//!   keep-alive connections (hyper's `client::conn::http1`).
//! - `cluster`: a cluster's map, each request to its partition's owner; `partition`: the key
//!   hash that names the partition.

mod batch;
mod builder;
mod cas;
mod client;
mod cluster;
mod error;
mod etag;
mod keys;
mod partition;
mod pool;
mod retry;
mod transport;

pub use batch::{Op, OpResult, Outcome};
pub use builder::ClientBuilder;
pub use bytes::Bytes;
pub use client::Client;
pub use cluster::{ClusterMap, ClusterNode};
pub use error::{Error, ErrorCode, ServerError};
pub use etag::{Condition, ETag, InvalidETag, Record, Written};
pub use keys::KeyPage;
pub use retry::Retry;

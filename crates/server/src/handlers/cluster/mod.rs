//! The HTTP side of a cluster node (docs/cluster.md): which requests go to the node owning
//! their partition and what this node answers for them, the `/batch` split by owner, and the
//! cluster's own routes. The node's state (its map, lease and gates) is `crate::cluster`.
//!
//! - `route`: which requests are another node's: forwarded, 421, or 503 `fenced`.
//! - `batch`: `POST /batch` split by owner; this node's part runs in `super::batch`.
//! - `map`: `GET /cluster`, the map this node follows.
//! - `moving`: `/admin/move`, `/admin/adopt` and `/admin/move/records`, a partition's move.
//! - `handover`: `/admin/move` of a partition with copies: one of them made its owner.
//! - `takeover`: `/admin/takeover`, this node's step of a failover.
//! - `replicate`: `/admin/replicate`, an owner's writes taken in for the copies kept here.
//! - `common`: what these admin routes share (parameters, answers, errors, calls to other nodes).

pub(crate) mod batch;
mod common;
mod handover;
pub(crate) mod map;
pub(crate) mod moving;
pub(crate) mod replicate;
pub(crate) mod route;
pub(crate) mod takeover;

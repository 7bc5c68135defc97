//! A linearizability checker for the histories of a key-value store, for the cluster tests that
//! kill nodes and cut networks while clients run.
//!
//! A test records every client's operations in a [`History`] (a call, then a result or an unknown
//! outcome), then hands them to [`check()`]: the history is linearizable when every key, taken as
//! one register, has an order of its operations that respects real time (an operation that returned
//! before another was called comes first) and explains every result. Each key is searched on its
//! own, by Porcupine's algorithm (Lowe's improvement of Wing and Gong's): call and return entries
//! in time order, depth-first, an operation lifted out when the register accepts it and put back on
//! backtracking, and a cache of (operations linearized, register state) so that no state is
//! searched twice.
//!
//! An operation whose outcome is unknown (an error or a timeout: it may or may not have taken
//! effect) may take effect anywhere after its call, or never; a put of unknown outcome leaves the
//! register's tag unknown until a read shows it. The search treats these apart from Porcupine's
//! list, with rules that keep a violation late in a long history from costing time exponential
//! in their number (see `search.rs`); a step budget ([`Limits`]) bounds what is left.

mod bitset;
mod check;
mod history;
mod list;
mod model;
mod operation;
mod search;

pub use check::{check, check_with, Limits, Verdict, Violation};
pub use history::{History, Pending};
pub use model::Register;
pub use operation::{Input, Operation, Output};

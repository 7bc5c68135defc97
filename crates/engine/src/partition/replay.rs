//! Replaying a partition's logged transactions that its database lacks: with the commit log,
//! SQLite runs at `synchronous = NORMAL`, so a power cut can take the last commits (or the
//! whole WAL) with it while the log, flushed before each commit was made visible, still has
//! them. Each transaction is applied as the writer applied it — same ids, counters, values,
//! `next_id` and record count — and `meta.log_applied` moves past the last one in the same
//! SQLite transaction.
//!
//! The writer notes `log_applied` only when it writes `meta` anyway ([`sql::NOTE_EVERY`]), so the
//! database may hold effects logged after it, and each is applied only if the database lacks it:
//! an insert whose id is below the database's `next_id`, an update whose counter is not above the
//! record's, a delete of a record that is not there are done already. Replaying twice changes nothing.

use rusqlite::Connection;

use super::sql;
use crate::{
    commitlog::{Effect, LoggedTx},
    config::{IndexMode, TxMode},
    Result,
};

/// Applies every transaction of `txs` (in log order) that starts at or after `applied`;
/// returns how far the database has applied the log afterwards and how many it applied.
/// Deleting a record the index file covers (`id <= tombstone_floor`) leaves a tombstone, as the
/// writer would have.
pub fn replay(
    conn: &Connection,
    txs: &[LoggedTx],
    applied: u64,
    mode: IndexMode,
    tombstone_floor: u64,
) -> Result<(u64, usize)> {
    let todo: Vec<&LoggedTx> = txs.iter().filter(|tx| tx.lsn >= applied).collect();
    let Some(last) = todo.last() else { return Ok((applied, 0)) };
    let new_applied = last.end;
    sql::begin(conn, TxMode::Immediate)?;
    let run = (|| {
        let (held_next_id, _) = sql::read_meta(conn)?;
        for tx in &todo {
            for effect in &tx.effects {
                match effect {
                    Effect::Insert { id, counter, key, value } => {
                        if u64::from(*id) >= held_next_id {
                            sql::insert(conn, *id, key, *counter, value)?;
                        }
                    }
                    Effect::Update { id, counter, value } => sql::update_if_older(conn, *id, *counter, value)?,
                    Effect::Delete { id } => {
                        let tombstone = mode == IndexMode::Hash && u64::from(*id) <= tombstone_floor;
                        sql::delete(conn, *id, tombstone)?;
                    }
                }
            }
        }
        sql::write_meta(conn, last.next_id, last.records, Some(new_applied))?;
        sql::commit(conn)
    })();
    if run.is_err() {
        sql::rollback(conn);
    }
    run.map(|()| (new_applied, todo.len()))
}

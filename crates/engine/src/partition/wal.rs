//! A partition's write-ahead log as found at open, before SQLite touches it: present, or
//! missing — and then whether commits were lost with it.
//!
//! SQLite opens a WAL-mode database whose `-wal` file is gone without a word, serving the older
//! state of the database file. So before opening, [`check`] looks for the log of a database in
//! WAL mode. Missing, it says:
//! - lost, if the `-shm` wal-index of a session that did not close says frames were committed
//!   that never reached the database (`mxFrame` > `nBackfill`);
//! - maybe lost, with no readable `-shm`, if the directory was not closed cleanly (the `-shm`
//!   file exists only with Litestream: otherwise SQLite keeps the wal-index in the process's
//!   memory, `super::sql`'s in-process locks);
//! - nothing, after a clean close, or while an interrupted import was building the partition anew.
//!
//! A loss is refused with [`Error::WalMissing`] unless `accept_wal_loss` accepts it (then logged).

use std::{io::Read, path::Path};

use crate::{layout::Layout, Error, Result};

/// `WALINDEX_MAX_VERSION` of SQLite's wal.c: the wal-index format we can read.
const WAL_INDEX_VERSION: u32 = 3_007_000;
/// Bytes of one copy of the wal-index header (`WalIndexHdr`); two copies, then `nBackfill`.
const HEADER_COPY: usize = 48;
const MX_FRAME: usize = 16;
const N_BACKFILL: usize = 2 * HEADER_COPY;

/// Checks partition `p`'s log before its database is opened; `unclean`: the directory was
/// not closed cleanly. A loss is an error unless `accept_loss`, then only logged; returns
/// whether a loss was accepted.
pub fn check(layout: &Layout, p: u32, unclean: bool, accept_loss: bool) -> Result<bool> {
    let (db, wal) = (layout.db(p), layout.wal(p));
    if wal.exists() || !in_wal_mode(&db)? || building_anew(layout, p) {
        return Ok(false);
    }
    let Some(loss) = loss(&layout.shm(p), unclean) else { return Ok(false) };
    if !accept_loss {
        return Err(Error::WalMissing { path: wal, detail: loss });
    }
    tracing::error!(
        partition = p, path = %wal.display(), %loss,
        "write-ahead log missing; accepted: serving what the database file holds"
    );
    Ok(true)
}

/// Whether an interrupted import was building partition `p` anew: its build file exists from
/// before the database left WAL mode until the rename that installs it.
fn building_anew(layout: &Layout, p: u32) -> bool {
    Layout::import_build(&layout.import_staging(), p).exists()
}

/// Whether the database file's header says WAL mode (a new or empty file: no).
pub(crate) fn in_wal_mode(db: &Path) -> Result<bool> {
    let mut header = [0u8; 20];
    match std::fs::File::open(db).and_then(|mut f| f.read_exact(&mut header)) {
        Ok(()) => Ok(header[18] == 2),
        Err(e) if matches!(e.kind(), std::io::ErrorKind::NotFound | std::io::ErrorKind::UnexpectedEof) => Ok(false),
        Err(e) => Err(Error::io(db, &e)),
    }
}

/// What was lost with the log, judged from the wal-index at `shm`.
fn loss(shm: &Path, unclean: bool) -> Option<String> {
    let mut head = [0u8; N_BACKFILL + 4];
    let read = std::fs::File::open(shm).and_then(|mut f| f.read_exact(&mut head));
    match read.ok().and_then(|()| frames_not_backfilled(&head)) {
        Some(0) => None,
        Some(frames) => Some(format!(
            "the wal-index says {frames} committed page frames had not been copied into the database yet; \
             those commits are lost"
        )),
        None if unclean => Some(
            "the last session did not close the directory cleanly, so commits since its last checkpoint \
             may be lost"
                .to_owned(),
        ),
        None => None,
    }
}

/// `mxFrame - nBackfill` of a wal-index header, if the header is initialised and stable.
fn frames_not_backfilled(head: &[u8; N_BACKFILL + 4]) -> Option<u32> {
    let u32_at = |at: usize| u32::from_ne_bytes([head[at], head[at + 1], head[at + 2], head[at + 3]]);
    let stable = head[..HEADER_COPY] == head[HEADER_COPY..2 * HEADER_COPY];
    let initialised = u32_at(0) == WAL_INDEX_VERSION && head[12] == 1;
    (stable && initialised).then(|| u32_at(MX_FRAME).saturating_sub(u32_at(N_BACKFILL)))
}

#[cfg(test)]
mod tests {
    use rusqlite::Connection;

    use super::*;

    /// A database in WAL mode whose log SQLite removed at close, after a crash of the session:
    /// a loss may have happened, unless an import was building the partition anew.
    #[test]
    fn a_missing_log_is_no_loss_while_an_import_builds_the_partition_anew() {
        let dir = tempfile::tempdir().unwrap();
        let layout = Layout::new(dir.path());
        let conn = Connection::open(layout.db(0)).unwrap();
        conn.pragma_update(None, "journal_mode", "WAL").unwrap();
        conn.execute_batch("CREATE TABLE t(x); INSERT INTO t VALUES (1);").unwrap();
        conn.close().unwrap();
        assert!(in_wal_mode(&layout.db(0)).unwrap() && !layout.wal(0).exists());

        assert!(matches!(check(&layout, 0, true, false), Err(Error::WalMissing { .. })));
        assert!(check(&layout, 0, false, false).is_ok_and(|lost| !lost), "after a clean close");

        std::fs::create_dir(layout.import_staging()).unwrap();
        std::fs::write(Layout::import_build(&layout.import_staging(), 0), b"").unwrap();
        assert!(check(&layout, 0, true, false).is_ok_and(|lost| !lost));
    }
}

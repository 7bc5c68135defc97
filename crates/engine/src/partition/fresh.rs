//! A partition that has never held a record, built anew in a file of its own and renamed into
//! place: the import's fast path. Without a WAL every page is written once and nothing is
//! checkpointed; a torn build file is harmless, being no partition's until the rename.
//!
//! ```text
//!  begin:   STAGING/pNNNN.db: new, journal_mode=OFF, synchronous=OFF, the partition's meta copied
//!           DIR/pNNNN.db: checkpointed (synchronous=FULL), out of WAL mode, closed; any WAL or
//!           journal left beside it removed
//!  (the caller writes its share through the build's connection, bucket by bucket)
//!  install: key index (mode sqlite), header to WAL mode, close, fsync the file, an empty
//!           DIR/pNNNN.db-wal, rename over DIR/pNNNN.db, reopen the partition's writer on it
//!           (the import syncs the file system once all partitions are in: crate::import)
//! ```

use std::path::{Path, PathBuf};

use rusqlite::Connection;

use super::{recovery::Recovered, sql};
use crate::{
    layout::{self, Layout},
    Config, Error, IndexMode, JournalMode, Result, Synchronous,
};

/// Whether a partition can be built anew: it has never held a record (no id was ever given,
/// so no index entry, tombstone or commit-log transaction refers to one).
pub fn is_fresh(state: &Recovered) -> bool {
    state.next_id == 1 && state.records == 0
}

/// A partition's database being built in a new file.
pub struct Build {
    /// The partition.
    p: u32,
    /// The new file, in the import's staging.
    path: PathBuf,
    index: IndexMode,
}

impl Build {
    /// Starts building partition `p` (of a directory in index mode `index`) anew in `staging`:
    /// `conn`, its writer, becomes the new file's connection (holding the partition's `meta`);
    /// the partition's own database is made durable and closed.
    pub fn begin(
        conn: &mut Connection,
        (layout, p): (&Layout, u32),
        staging: &Path,
        config: &Config,
        index: IndexMode,
    ) -> Result<Self> {
        let path = Layout::import_build(staging, p);
        remove_if_present(&path)?; // torn by an interrupted import
        let build = sql::open_build(&path, sql::page_size(conn)?, config)?;
        for (name, value) in sql::meta_rows(conn)? {
            sql::set_meta_value(&build, &name, value)?;
        }
        let old = std::mem::replace(conn, build);
        sql::set_synchronous(&old, Synchronous::Full)?;
        sql::checkpoint_truncate(&old)?;
        // Until the rename, a crash leaves this file as the partition's: out of WAL mode, it is
        // whole without the WAL removed below.
        sql::leave_wal(&old)?;
        old.close().map_err(|(_, e)| Error::from(e))?;
        for leftover in [layout.wal(p), layout.shm(p), layout.journal(p)] {
            // A WAL or journal left beside the database would be applied to the new file.
            remove_if_present(&leftover)?;
        }
        Ok(Self { p, path, index })
    }

    /// Finishes the build written through `conn` and renames it over the partition's database;
    /// `conn` becomes the partition's writer again, opened with `config`.
    /// The rename is not made durable here: the import syncs the file system once, after every
    /// partition, before it counts as done (until then a rename lost to a power cut leaves the
    /// partition empty, as before the build, and a resume builds it again).
    pub fn install(self, conn: &mut Connection, layout: &Layout, config: &Config) -> Result<()> {
        if self.index == IndexMode::Sqlite {
            sql::create_key_index(conn)?;
        }
        let wal = config.journal == JournalMode::Wal;
        if wal {
            // The header says WAL before the file is synced, so opening it as the partition's
            // writer writes nothing (switching then would rewrite its first page unsynced).
            sql::set_journal(conn, JournalMode::Wal)?;
        }
        // The build holds its file's lock until closed (locking_mode EXCLUSIVE).
        let build = std::mem::replace(conn, Connection::open_in_memory()?);
        build.close().map_err(|(_, e)| Error::from(e))?;
        layout::sync_file(&self.path)?;
        let db = layout.db(self.p);
        if wal {
            // An empty log beside the database from before the rename: never a moment where the
            // partition's database is in WAL mode without one (which an open after a kill would
            // take for a lost log). Empty, it changes nothing in the old database either.
            let log = layout.wal(self.p);
            std::fs::File::create(&log).map_err(|e| Error::io(&log, &e))?;
        }
        std::fs::rename(&self.path, &db).map_err(|e| Error::io(&db, &e))?;
        *conn = sql::open_writer(&db, config, self.index)?;
        Ok(())
    }
}

fn remove_if_present(path: &Path) -> Result<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(Error::io(path, &e)),
        _ => Ok(()),
    }
}

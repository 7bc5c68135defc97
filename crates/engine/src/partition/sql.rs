//! Every SQL statement and PRAGMA of the engine, and the reason for each setting.
//!
//! Schema (format 2, `PRAGMA user_version = 2`, `application_id = 0x53484c54` "SHLT"):
//! - `records(id INTEGER PRIMARY KEY, key BLOB, counter INTEGER, value BLOB)`: ids are assigned
//!   by the writer, strictly increasing and never reused, so inserts append at the B-tree's
//!   right edge.
//! - `meta(name, value)`: `next_id`, `records` (the live count) and `log_applied` (how far into
//!   the commit log the database is), as of the last transaction that noted them ([`NOTE_EVERY`];
//!   [`read_meta`] adds the rows inserted since); `epoch` and `epoch_directory`, the epoch a
//!   partition that moved here kept ([`super::Epoch`]).
//! - `tombstones(seq, id)`: deleted ids still present in the index file, dropped by the next
//!   index merge.
//! - index mode `sqlite` adds `UNIQUE INDEX records_key ON records(key)`.

use std::{
    sync::{
        atomic::{AtomicU32, Ordering},
        Arc,
    },
    time::Duration,
};

use rusqlite::{params, Connection, OpenFlags, OptionalExtension};

use super::commits::Commits;
use crate::{
    config::{IndexMode, JournalMode, Synchronous, TxMode},
    Config, Result,
};

/// Format version stored in `PRAGMA user_version`.
pub const SCHEMA_VERSION: i64 = 2;
/// The format before `meta` was left alone by transactions that only insert and update: read
/// alike, marked [`SCHEMA_VERSION`] when a writer opens it.
const SCHEMA_VERSION_NOTING_EVERY_INSERT: i64 = 1;
/// At most this many ids are assigned between two notes of `meta` (see the module's doc).
pub const NOTE_EVERY: u64 = 64;
const APPLICATION_ID: i64 = 0x5348_4c54;
/// How long a statement waits for a lock before `SQLITE_BUSY`: in the rollback journal mode
/// readers and the writer wait for each other; in WAL only another process's writes make the
/// writer wait (Litestream's, a few milliseconds each: `crate::checkpointer`).
const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// A record as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    /// The full key.
    pub key: Vec<u8>,
    /// The update counter.
    pub counter: u64,
    /// The value.
    pub value: Vec<u8>,
}

/// SQLite's file locks within one process: every lock a connection takes or releases is
/// counted in the process, and the operating system is asked only for one exclusive lock on
/// each database, taken by its first connection; the WAL index lives in the process's memory
/// rather than in a shared `-shm` file.
///
/// A read transaction under the default `unix` VFS costs four `fcntl` calls (the database's
/// shared lock, a read mark's lock, both released): 9% of the CPU of a GET that reads SQLite,
/// measured with `perf`. One process per data directory is already the rule (`crate::dirlock`);
/// the one exception is Litestream, another process that reads each database and its WAL
/// through those locks, so with `--litestream` the default VFS stays.
const IN_PROCESS_VFS: &std::ffi::CStr = c"unix-excl";

/// Opens a partition's database with the locks `config` allows: in-process ones
/// ([`IN_PROCESS_VFS`]) unless another process (Litestream) reads it too.
fn open_partition_db(path: &std::path::Path, flags: OpenFlags, config: &Config) -> Result<Connection> {
    Ok(match config.litestream {
        true => Connection::open_with_flags(path, flags)?,
        false => Connection::open_with_flags_and_vfs(path, flags, IN_PROCESS_VFS)?,
    })
}

/// Opens the partition's one read-write connection, creating and migrating the schema.
pub fn open_writer(path: &std::path::Path, config: &Config, index: IndexMode) -> Result<Connection> {
    let conn = open_partition_db(path, OpenFlags::default(), config)?;
    conn.busy_timeout(BUSY_TIMEOUT)?;
    // page_size only takes effect before the first table exists.
    conn.pragma_update(None, "page_size", config.page_size)?;
    set_journal(&conn, config.journal)?;
    conn.pragma_update(None, "synchronous", writer_synchronous(config))?;
    common_pragmas(&conn, config)?;
    // The writer is the one place that checkpoints, at a WAL size threshold; journal_size_limit
    // truncates the WAL back after a checkpoint so its file stays bounded on disk.
    conn.pragma_update(None, "wal_autocheckpoint", config.checkpoint_pages)?;
    let limit = i64::from(config.checkpoint_pages) * i64::from(config.page_size);
    conn.pragma_update(None, "journal_size_limit", limit)?;
    create_schema(&conn, index)?;
    Ok(conn)
}

/// Opens the checkpointer's connection to a partition: it only checkpoints (never writes a
/// transaction, so the writer stays the one writer), syncing as the writer's settings say, with
/// a small page cache (a checkpoint copies WAL frames without it).
pub fn open_checkpointer(path: &std::path::Path, config: &Config) -> Result<Connection> {
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = open_partition_db(path, flags, config)?;
    conn.busy_timeout(BUSY_TIMEOUT)?;
    conn.pragma_update(None, "synchronous", writer_synchronous(config))?;
    conn.pragma_update(None, "cache_size", -64)?;
    conn.pragma_update(None, "wal_autocheckpoint", 0)?;
    Ok(conn)
}

/// Opens a connection for lookups, which refuses to write (`query_only`). It is opened
/// read-write all the same: [`IN_PROCESS_VFS`] keeps in the process only the locks of
/// connections opened read-write, and asks the operating system for a read-only one's.
pub fn open_reader(path: &std::path::Path, config: &Config) -> Result<Connection> {
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = open_partition_db(path, flags, config)?;
    conn.busy_timeout(BUSY_TIMEOUT)?;
    conn.pragma_update(None, "query_only", true)?;
    common_pragmas(&conn, config)?;
    Ok(conn)
}

fn common_pragmas(conn: &Connection, config: &Config) -> Result<()> {
    // Negative cache_size is KiB; it bounds each connection's page cache.
    conn.pragma_update(None, "cache_size", -i64::from(config.cache_size_kib))?;
    conn.pragma_update(None, "mmap_size", i64::try_from(config.mmap_size).unwrap_or(i64::MAX))?;
    conn.set_prepared_statement_cache_capacity(32);
    Ok(())
}

fn create_schema(conn: &Connection, index: IndexMode) -> Result<()> {
    let version: i64 = conn.pragma_query_value(None, "user_version", |r| r.get(0))?;
    if version > SCHEMA_VERSION {
        return Err(crate::Error::Config(format!(
            "partition schema version {version} is newer than this build ({SCHEMA_VERSION})"
        )));
    }
    if version == SCHEMA_VERSION {
        // An existing partition: opening it writes nothing (so it opens on a full disk too).
        return Ok(());
    }
    if version == SCHEMA_VERSION_NOTING_EVERY_INSERT {
        conn.pragma_update(None, "user_version", SCHEMA_VERSION)?;
        return Ok(());
    }
    conn.execute_batch(
        "BEGIN IMMEDIATE;
         CREATE TABLE IF NOT EXISTS records(
             id INTEGER PRIMARY KEY, key BLOB NOT NULL, counter INTEGER NOT NULL, value BLOB NOT NULL);
         CREATE TABLE IF NOT EXISTS meta(name TEXT PRIMARY KEY, value INTEGER NOT NULL) WITHOUT ROWID;
         CREATE TABLE IF NOT EXISTS tombstones(seq INTEGER PRIMARY KEY, id INTEGER NOT NULL);
         INSERT OR IGNORE INTO meta VALUES ('next_id', 1), ('records', 0);",
    )?;
    if index == IndexMode::Sqlite {
        create_key_index(conn)?;
    }
    conn.pragma_update(None, "application_id", APPLICATION_ID)?;
    conn.pragma_update(None, "user_version", SCHEMA_VERSION)?;
    conn.execute_batch("COMMIT;")?;
    Ok(())
}

/// Starts the writer's transaction. `BEGIN`, `COMMIT` and `ROLLBACK` are cached statements like
/// the others: preparing them anew for every transaction cost 4% of a durable PUT's CPU.
pub fn begin(conn: &Connection, mode: TxMode) -> Result<()> {
    let sql = match mode {
        TxMode::Immediate => "BEGIN IMMEDIATE",
        TxMode::Deferred => "BEGIN DEFERRED",
    };
    conn.prepare_cached(sql)?.execute([])?;
    Ok(())
}

/// Starts a read transaction and reads `(next_id, records)` in it: from here on `conn` sees the
/// partition as it is now, whatever commits later (a backup's snapshot).
pub fn begin_snapshot(conn: &Connection) -> Result<(u64, u64)> {
    conn.execute_batch("BEGIN DEFERRED")?;
    read_meta(conn)
}

/// Opens a new database file for a backup's copy: written once, synced by the caller, so
/// neither a journal nor syncs of its own.
pub fn open_backup_target(path: &std::path::Path) -> Result<Connection> {
    let conn = Connection::open(path)?;
    conn.pragma_update(None, "journal_mode", "OFF")?;
    conn.pragma_update(None, "synchronous", "OFF")?;
    Ok(conn)
}

/// Creates a new database file for a partition built anew (the import's fast path,
/// `super::fresh`): one connection writes it and the caller syncs it before renaming it into
/// place, so neither a journal nor syncs of its own (a crash leaves a file nobody reads). Its
/// schema lacks the key index of mode `sqlite`: [`create_key_index`] builds that after the rows,
/// in one sort rather than one B-tree insert a row.
pub fn open_build(path: &std::path::Path, page_size: u64, config: &Config) -> Result<Connection> {
    let conn = Connection::open(path)?;
    conn.pragma_update(None, "page_size", i64::try_from(page_size).unwrap_or(i64::MAX))?;
    conn.pragma_update(None, "journal_mode", "OFF")?;
    conn.pragma_update(None, "synchronous", "OFF")?;
    // No other connection opens the file while it is built: no file locks taken and released
    // around every transaction.
    conn.pragma_update(None, "locking_mode", "EXCLUSIVE")?;
    common_pragmas(&conn, config)?;
    create_schema(&conn, IndexMode::None)?;
    Ok(conn)
}

/// Takes a database out of WAL mode (its WAL checkpointed into it and removed), so that it is
/// whole without a WAL: opening it after a crash then misses no WAL (`super::wal`).
pub fn leave_wal(conn: &Connection) -> Result<()> {
    conn.pragma_update(None, "journal_mode", "DELETE")?;
    Ok(())
}

/// Sets the database's journal mode (into WAL from a rollback journal, or none, only its header
/// changes).
pub fn set_journal(conn: &Connection, journal: JournalMode) -> Result<()> {
    let mode = match journal {
        JournalMode::Wal => "WAL",
        JournalMode::Delete => "DELETE",
    };
    conn.pragma_update(None, "journal_mode", mode)?;
    Ok(())
}

/// Index mode `sqlite`'s unique index of the keys.
pub fn create_key_index(conn: &Connection) -> Result<()> {
    conn.execute_batch("CREATE UNIQUE INDEX IF NOT EXISTS records_key ON records(key);")?;
    Ok(())
}

/// The database's page size, bytes.
pub fn page_size(conn: &Connection) -> Result<u64> {
    Ok(conn.pragma_query_value(None, "page_size", |r| r.get::<_, i64>(0))? as u64)
}

/// Commits the writer's transaction.
pub fn commit(conn: &Connection) -> Result<()> {
    conn.prepare_cached("COMMIT")?.execute([])?;
    Ok(())
}

/// Rolls the writer's transaction back, if one is open.
pub fn rollback(conn: &Connection) {
    if !conn.is_autocommit() {
        let _ = conn.prepare_cached("ROLLBACK").and_then(|mut s| s.execute([]));
    }
}

/// `(next_id, records)`: `meta`'s, with the records inserted since it was noted. Their ids run
/// from the noted `next_id` up without a gap (ids are assigned one after another, and a
/// transaction that deletes notes), so the highest row says how many there are, and a row of
/// them lost behind the engine's back shows as a count the rows fall short of (`check`).
pub fn read_meta(conn: &Connection) -> Result<(u64, u64)> {
    let get = |name: &str| -> Result<u64> {
        Ok(conn.query_row("SELECT value FROM meta WHERE name = ?1", [name], |r| r.get::<_, i64>(0))? as u64)
    };
    let (noted_next_id, noted_records) = (get("next_id")?, get("records")?);
    let highest: Option<i64> = conn
        .prepare_cached("SELECT max(id) FROM records WHERE id >= ?1")?
        .query_row([noted_next_id as i64], |r| r.get(0))?;
    let next_id = highest.map_or(noted_next_id, |id| id as u64 + 1);
    Ok((next_id, noted_records + (next_id - noted_next_id)))
}

/// Stores `(next_id, records)` in `meta`, and how far the transaction applies the commit log if
/// it is logged, inside the writer's transaction: one statement.
pub fn write_meta(conn: &Connection, next_id: u64, records: u64, log_applied: Option<u64>) -> Result<()> {
    match log_applied {
        None => conn
            .prepare_cached(
                "INSERT INTO meta(name, value) VALUES ('next_id', ?1), ('records', ?2) \
                 ON CONFLICT(name) DO UPDATE SET value = excluded.value",
            )?
            .execute(params![next_id as i64, records as i64])?,
        Some(end) => conn
            .prepare_cached(
                "INSERT INTO meta(name, value) VALUES ('next_id', ?1), ('records', ?2), ('log_applied', ?3) \
                 ON CONFLICT(name) DO UPDATE SET value = excluded.value",
            )?
            .execute(params![next_id as i64, records as i64, end as i64])?,
    };
    Ok(())
}

/// The row with this id.
pub fn row_by_id(conn: &Connection, id: u32) -> Result<Option<Row>> {
    let mut stmt = conn.prepare_cached("SELECT key, counter, value FROM records WHERE id = ?1")?;
    Ok(stmt
        .query_row([id], |r| Ok(Row { key: r.get(0)?, counter: r.get::<_, i64>(1)? as u64, value: r.get(2)? }))
        .optional()?)
}

/// The key and counter of the row with this id (no value: the writer's existence check).
pub fn key_counter_by_id(conn: &Connection, id: u32) -> Result<Option<(Vec<u8>, u64)>> {
    let mut stmt = conn.prepare_cached("SELECT key, counter FROM records WHERE id = ?1")?;
    Ok(stmt.query_row([id], |r| Ok((r.get(0)?, r.get::<_, i64>(1)? as u64))).optional()?)
}

/// `(id, counter, value)` of the row with this key, through the UNIQUE index (mode `sqlite`).
pub fn row_by_key(conn: &Connection, key: &[u8]) -> Result<Option<(u32, Row)>> {
    let mut stmt = conn.prepare_cached("SELECT id, counter, value FROM records WHERE key = ?1")?;
    Ok(stmt
        .query_row([key], |r| {
            Ok((
                r.get::<_, i64>(0)? as u32,
                Row { key: key.to_vec(), counter: r.get::<_, i64>(1)? as u64, value: r.get(2)? },
            ))
        })
        .optional()?)
}

/// `(id, counter)` of the row with this key, through the UNIQUE index (mode `sqlite`).
pub fn id_counter_by_key(conn: &Connection, key: &[u8]) -> Result<Option<(u32, u64)>> {
    let mut stmt = conn.prepare_cached("SELECT id, counter FROM records WHERE key = ?1")?;
    Ok(stmt.query_row([key], |r| Ok((r.get::<_, i64>(0)? as u32, r.get::<_, i64>(1)? as u64))).optional()?)
}

/// The insert of one record, `(id, key, counter, value)`.
const INSERT_RECORD: &str = "INSERT INTO records(id, key, counter, value) VALUES (?, ?, ?, ?)";

/// Appends a record.
pub fn insert(conn: &Connection, id: u32, key: &[u8], counter: u64, value: &[u8]) -> Result<()> {
    let mut stmt = conn.prepare_cached(INSERT_RECORD)?;
    stmt.execute(params![id, key, counter as i64, value])?;
    Ok(())
}

/// Appends many new records, [`APPEND_ROWS`] to a statement: the bulk loader's and the import's
/// path. [`Appender::finish`] inserts the last ones; an appender dropped without it (an error
/// on the way, its transaction rolled back) inserts none of those.
pub struct Appender<'c, 'd> {
    conn: &'c Connection,
    /// `INSERT ... VALUES (?, ?, ?, ?), ...`: [`APPEND_ROWS`] rows.
    many: String,
    /// Rows not inserted yet: `(id, key, counter, value)`.
    rows: Vec<(u32, &'d [u8], u64, &'d [u8])>,
}

/// Rows an [`Appender`] inserts in one statement. A statement's step opens its cursor on the
/// table and descends to the last page; its rows after the first append where the cursor is.
const APPEND_ROWS: usize = 64;

impl<'c, 'd> Appender<'c, 'd> {
    /// An appender into `conn`'s `records`.
    pub fn new(conn: &'c Connection) -> Result<Self> {
        let many = format!("{INSERT_RECORD}{}", ", (?, ?, ?, ?)".repeat(APPEND_ROWS - 1));
        Ok(Self { conn, many, rows: Vec::with_capacity(APPEND_ROWS) })
    }

    /// Appends one record (inserted by this call or a later one, or by [`Appender::finish`]).
    pub fn append(&mut self, id: u32, key: &'d [u8], counter: u64, value: &'d [u8]) -> Result<()> {
        self.rows.push((id, key, counter, value));
        if self.rows.len() == APPEND_ROWS {
            let mut stmt = self.conn.prepare_cached(&self.many)?;
            for (i, &(id, key, counter, value)) in self.rows.iter().enumerate() {
                stmt.raw_bind_parameter(4 * i + 1, id)?;
                stmt.raw_bind_parameter(4 * i + 2, key)?;
                stmt.raw_bind_parameter(4 * i + 3, counter as i64)?;
                stmt.raw_bind_parameter(4 * i + 4, value)?;
            }
            stmt.raw_execute()?;
            self.rows.clear();
        }
        Ok(())
    }

    /// Inserts the records appended and not inserted yet.
    pub fn finish(self) -> Result<()> {
        self.rows.into_iter().try_for_each(|(id, key, counter, value)| insert(self.conn, id, key, counter, value))
    }
}

/// Replaces a record's value and counter.
pub fn update(conn: &Connection, id: u32, counter: u64, value: &[u8]) -> Result<()> {
    let mut stmt = conn.prepare_cached("UPDATE records SET counter = ?2, value = ?3 WHERE id = ?1")?;
    stmt.execute(params![id, counter as i64, value])?;
    Ok(())
}

/// Deletes a record, if it is there, and records a tombstone if the index file still holds its
/// id; whether it was there.
pub fn delete(conn: &Connection, id: u32, tombstone: bool) -> Result<bool> {
    let deleted = conn.prepare_cached("DELETE FROM records WHERE id = ?1")?.execute([id])? > 0;
    if deleted && tombstone {
        conn.prepare_cached("INSERT INTO tombstones(id) VALUES (?1)")?.execute([id])?;
    }
    Ok(deleted)
}

/// Replaces a record's value and counter if its counter is below `counter` (replaying an update
/// the database already holds changes nothing).
pub fn update_if_older(conn: &Connection, id: u32, counter: u64, value: &[u8]) -> Result<()> {
    let mut stmt = conn.prepare_cached("UPDATE records SET counter = ?2, value = ?3 WHERE id = ?1 AND counter < ?2")?;
    stmt.execute(params![id, counter as i64, value])?;
    Ok(())
}

/// All tombstones: `(ids, highest seq)`.
pub fn tombstones(conn: &Connection) -> Result<(Vec<u32>, i64)> {
    let mut stmt = conn.prepare_cached("SELECT seq, id FROM tombstones")?;
    let mut ids = Vec::new();
    let mut max_seq = 0;
    let mut rows = stmt.query([])?;
    while let Some(r) = rows.next()? {
        max_seq = max_seq.max(r.get::<_, i64>(0)?);
        ids.push(r.get::<_, i64>(1)? as u32);
    }
    Ok((ids, max_seq))
}

/// Forgets tombstones up to `max_seq` (their entries are gone from the index file).
pub fn clear_tombstones(conn: &Connection, max_seq: i64) -> Result<()> {
    conn.prepare_cached("DELETE FROM tombstones WHERE seq <= ?1")?.execute([max_seq])?;
    Ok(())
}

/// Calls `f(id, key)` for every record with an id above `after`, in id order.
pub fn scan_keys(conn: &Connection, after: u64, mut f: impl FnMut(u32, &[u8])) -> Result<()> {
    let mut stmt = conn.prepare("SELECT id, key FROM records WHERE id > ?1 ORDER BY id")?;
    let mut rows = stmt.query([after as i64])?;
    while let Some(r) = rows.next()? {
        let id = r.get::<_, i64>(0)? as u32;
        let key = r.get_ref(1)?.as_blob().map_err(rusqlite::Error::from)?;
        f(id, key);
    }
    Ok(())
}

/// Removes every record and tombstone of the partition (it is being replaced by a move).
pub fn empty_records(conn: &Connection) -> Result<()> {
    conn.execute_batch("DELETE FROM records; DELETE FROM tombstones")?;
    Ok(())
}

/// Calls `f(id, key, counter, value)` for the records with an id above `after`, in id order,
/// at most `limit` (values empty unless `values`), in one statement: one read transaction.
pub fn scan_records(
    conn: &Connection,
    after: u64,
    limit: u64,
    values: bool,
    mut f: impl FnMut(u32, &[u8], u64, &[u8]) -> Result<()>,
) -> Result<()> {
    let sql = match values {
        true => "SELECT id, key, counter, value FROM records WHERE id > ?1 ORDER BY id LIMIT ?2",
        false => "SELECT id, key, counter, x'' FROM records WHERE id > ?1 ORDER BY id LIMIT ?2",
    };
    let mut stmt = conn.prepare_cached(sql)?;
    // SQLite reads a negative LIMIT as none.
    let mut rows = stmt.query(params![after as i64, i64::try_from(limit).unwrap_or(-1)])?;
    while let Some(r) = rows.next()? {
        let blob = |i| r.get_ref(i).and_then(|v| v.as_blob().map_err(rusqlite::Error::from));
        f(r.get::<_, i64>(0)? as u32, blob(1)?, r.get::<_, i64>(2)? as u64, blob(3)?)?;
    }
    Ok(())
}

/// Rewrites the database without free space (`VACUUM`; ids are kept: `crate::partition::compact`).
pub fn vacuum(conn: &Connection) -> Result<()> {
    conn.execute_batch("VACUUM")?;
    Ok(())
}

/// Pages on the database's free list.
pub fn free_pages(conn: &Connection) -> Result<u64> {
    Ok(conn.pragma_query_value(None, "freelist_count", |r| r.get::<_, i64>(0))? as u64)
}

/// SQLite's `quick_check`: `"ok"` or the problems found.
pub fn quick_check(conn: &Connection) -> Result<String> {
    let mut stmt = conn.prepare("PRAGMA quick_check")?;
    let lines: Vec<String> = stmt.query_map([], |r| r.get(0))?.collect::<rusqlite::Result<_>>()?;
    Ok(lines.join("; "))
}

/// Replaces SQLite's automatic checkpoint (which runs inside COMMIT, delaying every waiter of
/// that commit) with a hook that only records, after each commit has taken place, the WAL's
/// size in pages; the checkpointer thread checkpoints once it passes the threshold
/// ([`checkpoint_passive`]). Also counts the writer's `commits`, begun and taken place, so that
/// lookups know whether their read transaction is still current ([`super::readers`]).
pub fn watch_wal(conn: &mut Connection, pages: Arc<AtomicU32>, commits: Arc<Commits>) -> Result<()> {
    let begun = Arc::clone(&commits);
    conn.commit_hook(Some(move || {
        begun.begin();
        false
    }))?;
    conn.wal_hook(Some(move |_: &mut rusqlite::hooks::Wal, n: std::os::raw::c_int| {
        pages.store(n.max(0) as u32, Ordering::Relaxed);
        commits.settle();
        Ok(())
    }))?;
    Ok(())
}

/// Copies what it can of the WAL into the database without waiting for readers.
/// Returns whether it copied every frame of the WAL (then the writer's next transaction starts
/// the WAL over); not when another checkpoint of the partition was under way, or when frames
/// were appended or held by a reader meanwhile.
pub fn checkpoint_passive(conn: &Connection) -> Result<bool> {
    let done = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| {
        Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?, r.get::<_, i64>(2)?))
    });
    match done {
        Ok((busy, log, copied)) => Ok(busy == 0 && copied >= log),
        Err(err) if err.sqlite_error_code() == Some(rusqlite::ErrorCode::DatabaseBusy) => Ok(false),
        Err(err) => Err(err.into()),
    }
}

/// What a checkpoint did (the three columns of `PRAGMA wal_checkpoint`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Checkpointed {
    /// Another connection kept it from finishing: a reader of older frames, or a writer.
    pub busy: bool,
    /// Frames in the WAL.
    pub wal_frames: i64,
    /// Frames copied into the database, now or before.
    pub copied: i64,
}

impl Checkpointed {
    /// WAL frames not yet in the database.
    pub fn frames_left(&self) -> i64 {
        (self.wal_frames - self.copied).max(0)
    }
}

/// The checkpoint a partition gets at close: `TRUNCATE` (every frame copied and the WAL emptied)
/// waiting at most `wait` for other connections, or, with `truncate` false, `PASSIVE` (what it
/// can, never waiting). Returns what it did, busy included: the caller says so.
pub fn checkpoint_at_close(conn: &Connection, truncate: bool, wait: Duration) -> Result<Checkpointed> {
    conn.busy_timeout(wait)?;
    let pragma = if truncate { "PRAGMA wal_checkpoint(TRUNCATE)" } else { "PRAGMA wal_checkpoint(PASSIVE)" };
    let done = conn.query_row(pragma, [], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?, r.get::<_, i64>(2)?)));
    conn.busy_timeout(BUSY_TIMEOUT)?;
    match done {
        Ok((busy, wal_frames, copied)) => Ok(Checkpointed { busy: busy != 0, wal_frames, copied }),
        // Another checkpoint under way (Litestream's): nothing copied by this one.
        Err(err) if err.sqlite_error_code() == Some(rusqlite::ErrorCode::DatabaseBusy) => {
            Ok(Checkpointed { busy: true, wal_frames: -1, copied: -1 })
        }
        Err(err) => Err(err.into()),
    }
}

/// Runs a checkpoint that also truncates the WAL (after a bulk load or an import, which no
/// other connection shares).
pub fn checkpoint_truncate(conn: &Connection) -> Result<()> {
    conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))?;
    Ok(())
}

/// SQLite's `integrity_check` of one table and its indexes (checks index content too).
pub fn integrity_check_table(conn: &Connection, table: &str) -> Result<String> {
    let mut stmt = conn.prepare(&format!("PRAGMA integrity_check({table})"))?;
    let lines: Vec<String> = stmt.query_map([], |r| r.get(0))?.collect::<rusqlite::Result<_>>()?;
    Ok(lines.join("; "))
}

/// How far into the commit log this database has applied (0: nothing logged yet).
pub fn log_applied(conn: &Connection) -> Result<u64> {
    Ok(meta_value(conn, "log_applied")?.map_or(0, |v| v as u64))
}

/// The epoch the partition kept when it moved here (`meta.epoch`, `meta.epoch_directory`).
pub fn kept_epoch(conn: &Connection) -> Result<Option<super::Epoch>> {
    let (kept, directory) = (meta_value(conn, "epoch")?, meta_value(conn, "epoch_directory")?);
    Ok(kept.zip(directory).map(|(kept, directory)| super::Epoch { kept: kept as u64, directory: directory as u64 }))
}

/// Stores the epoch the partition keeps, or (`None`) forgets it: inside a transaction.
pub fn keep_epoch(conn: &Connection, epoch: Option<super::Epoch>) -> Result<()> {
    match epoch {
        Some(e) => {
            set_meta_value(conn, "epoch", e.kept as i64)?;
            set_meta_value(conn, "epoch_directory", e.directory as i64)
        }
        None => {
            conn.execute("DELETE FROM meta WHERE name IN ('epoch', 'epoch_directory')", [])?;
            Ok(())
        }
    }
}

/// Every named value of `meta`.
pub fn meta_rows(conn: &Connection) -> Result<Vec<(String, i64)>> {
    let mut stmt = conn.prepare("SELECT name, value FROM meta")?;
    let rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?.collect::<rusqlite::Result<_>>()?;
    Ok(rows)
}

/// A named value of `meta`, if set.
pub fn meta_value(conn: &Connection, name: &str) -> Result<Option<i64>> {
    Ok(conn.query_row("SELECT value FROM meta WHERE name = ?1", [name], |r| r.get(0)).optional()?)
}

/// Sets a named value of `meta`.
pub fn set_meta_value(conn: &Connection, name: &str, value: i64) -> Result<()> {
    conn.prepare_cached("INSERT OR REPLACE INTO meta(name, value) VALUES (?1, ?2)")?.execute(params![name, value])?;
    Ok(())
}

/// Sets `synchronous` on a connection (the bulk loader restores FULL before its last
/// checkpoint, so the checkpoint's fsyncs make the load durable).
pub fn set_synchronous(conn: &Connection, sync: Synchronous) -> Result<()> {
    conn.pragma_update(None, "synchronous", synchronous_word(sync))?;
    Ok(())
}

/// Gives a partition's writer connection its usual `synchronous` again.
pub fn set_writer_synchronous(conn: &Connection, config: &Config) -> Result<()> {
    conn.pragma_update(None, "synchronous", writer_synchronous(config))?;
    Ok(())
}

/// SQLite's `synchronous` for a partition's writer, keeping the promise of `config.synchronous`:
/// - with the commit log, `NORMAL`: the log makes commits durable; SQLite still syncs its WAL
///   before each checkpoint, the database after it, and the WAL header before reusing it, so
///   its files never tear on power loss;
/// - `full` with the rollback journal, `EXTRA`: at `FULL` SQLite commits by deleting the
///   journal without syncing the directory, and a power cut then brings the journal back and
///   rolls an acknowledged commit back (found by the power-loss test);
/// - otherwise the level itself.
fn writer_synchronous(config: &Config) -> &'static str {
    match (config.synchronous, config.journal) {
        _ if config.uses_commit_log() => "NORMAL",
        (Synchronous::Full, JournalMode::Delete) => "EXTRA",
        (sync, _) => synchronous_word(sync),
    }
}

fn synchronous_word(sync: Synchronous) -> &'static str {
    match sync {
        Synchronous::Full => "FULL",
        Synchronous::Normal => "NORMAL",
        Synchronous::Off => "OFF",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Rows appended past a whole statement's worth go in at `finish`; an appender dropped
    /// without it leaves them out (its transaction is then rolled back).
    #[test]
    fn an_appender_inserts_every_row_by_finish_and_only_whole_statements_without() {
        let tmp = tempfile::tempdir().unwrap();
        let conn = open_writer(&tmp.path().join("p.db"), &Config::default(), IndexMode::Hash).unwrap();
        let rows: Vec<(Vec<u8>, Vec<u8>)> =
            (0..2 * APPEND_ROWS as u32 + 5).map(|i| (format!("k{i}").into_bytes(), i.to_le_bytes().to_vec())).collect();
        let append_all = |ids: std::ops::Range<u32>| {
            let mut insert = Appender::new(&conn).unwrap();
            for id in ids {
                let (key, value) = &rows[id as usize - 1];
                insert.append(id, key, u64::from(id) + 1, value).unwrap();
            }
            insert
        };
        append_all(1..rows.len() as u32 + 1).finish().unwrap();
        for (id, (key, value)) in (1u32..).zip(&rows) {
            let row = row_by_id(&conn, id).unwrap().unwrap();
            assert_eq!((row.key, row.counter, row.value), (key.clone(), u64::from(id) + 1, value.clone()));
        }
        empty_records(&conn).unwrap();
        drop(append_all(1..APPEND_ROWS as u32 + 4));
        let count: u32 = conn.query_row("SELECT count(*) FROM records", [], |r| r.get(0)).unwrap();
        assert_eq!(count, APPEND_ROWS as u32);
    }
}

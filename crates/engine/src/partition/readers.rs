//! A partition's pool of read-only SQLite connections.
//!
//! Connections are opened on first use, up to `readers_per_partition`, and kept; a caller that
//! finds them all busy waits on the condition variable. Bounding the pool per partition bounds
//! file descriptors (about two per connection in WAL mode) and page-cache memory
//! (`cache_size` per connection) for the whole store.
//!
//! In WAL mode a connection keeps its read transaction open between two lookups while the
//! partition's writer has committed nothing since it began ([`Commits`]): starting and ending
//! a read transaction was 15% of a GET's CPU that reads SQLite, measured with `perf`. Whatever
//! a lookup reads then holds every commit that came before it, as a new transaction would.
//! A commit is visible to new read transactions before the writer's `COMMIT` returns, so while
//! one is under way every lookup reads in a transaction of its own: else a kept transaction
//! could miss a commit that another lookup, begun after it, had already returned.
//!
//! An open read transaction keeps a checkpoint from copying the frames committed after it
//! began, and the WAL from starting over, so a checkpoint first ends those of the connections
//! not in use and has the others end theirs at their next lookup ([`ReadPool::end_idle_reads`]).
//! Not with Litestream, whose own checkpoints know nothing of this and would wait for such
//! transactions; nor outside WAL mode.

use std::{
    path::PathBuf,
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc, Condvar, Mutex,
    },
};

use rusqlite::Connection;

use super::{commits::Commits, sql};
use crate::{config::TxMode, Config, Result};

/// Read-only connections to one partition.
#[derive(Debug)]
pub struct ReadPool {
    path: PathBuf,
    config: Config,
    /// The writer's commits, in WAL mode; without them no read transaction is kept open.
    commits: Option<Arc<Commits>>,
    /// Calls of [`ReadPool::end_idle_reads`]: a read transaction that began before the last
    /// one ends at its connection's next lookup.
    ends: AtomicU64,
    /// Idle connections, and how many exist in all (idle + lent out).
    slots: Mutex<Slots>,
    /// Signalled when a connection is returned.
    returned: Condvar,
}

#[derive(Debug, Default)]
struct Slots {
    idle: Vec<Reader>,
    open: usize,
    /// Callers waiting for a connection: only they need the condition variable signalled
    /// (a signal is a system call even when nobody waits).
    waiting: usize,
}

/// A pooled connection and, while it holds a read transaction open, the pool's
/// [`ReadPool::generation`] from before that transaction began.
#[derive(Debug)]
struct Reader {
    conn: Connection,
    reading_since: Option<u64>,
}

impl Reader {
    /// Makes sure the read transaction sees every commit counted so far: keeps the open one
    /// if the generation `now` (taken before this call) is the one it began at, else starts a
    /// new one.
    fn read_from(&mut self, now: u64) -> Result<()> {
        if self.reading_since == Some(now) {
            return Ok(());
        }
        self.end_read()?;
        // Deferred: its snapshot is taken at its first read.
        sql::begin(&self.conn, TxMode::Deferred)?;
        self.reading_since = Some(now);
        Ok(())
    }

    /// Ends the read transaction, if one is open (SQLite may have ended it after an error).
    fn end_read(&mut self) -> Result<()> {
        if self.reading_since.take().is_some() && !self.conn.is_autocommit() {
            sql::commit(&self.conn)?;
        }
        Ok(())
    }
}

impl ReadPool {
    /// A pool for the database at `path` whose writer counts its `commits` (WAL mode only);
    /// opens nothing yet.
    pub fn new(path: PathBuf, config: &Config, commits: Option<Arc<Commits>>) -> Self {
        let (slots, returned) = (Mutex::new(Slots::default()), Condvar::new());
        Self { path, config: config.clone(), commits, ends: AtomicU64::new(0), slots, returned }
    }

    /// Runs a lookup `f` with a connection of the pool, which sees every commit made before
    /// the call and keeps its read transaction open for the next lookup.
    pub fn lookup<R>(&self, f: impl FnOnce(&Connection) -> Result<R>) -> Result<R> {
        let mut lent = Lent { pool: self, reader: Some(self.take()?) };
        let reader = lent.reader.as_mut().expect("a lent connection");
        match self.generation() {
            Some(now) => reader.read_from(now)?,
            None => reader.end_read()?,
        }
        let result = f(&reader.conn);
        if result.is_err() {
            // Whatever went wrong, the next lookup starts afresh.
            let _ = reader.end_read();
        }
        result
    }

    /// Runs `f` (an occasional read: a page of keys, the tombstones) with a connection of the
    /// pool holding no read transaction: each statement reads in one of its own, and none is
    /// left open.
    pub fn with<R>(&self, f: impl FnOnce(&Connection) -> Result<R>) -> Result<R> {
        let mut lent = Lent { pool: self, reader: Some(self.take()?) };
        let reader = lent.reader.as_mut().expect("a lent connection");
        reader.end_read()?;
        f(&reader.conn)
    }

    /// A read-only connection of its own, outside the pool's bound: for a scan so long that
    /// lending it a pooled one would keep lookups waiting.
    pub fn open_own(&self) -> Result<Connection> {
        sql::open_reader(&self.path, &self.config)
    }

    /// The writer's commits plus the calls of [`ReadPool::end_idle_reads`], read before a
    /// read transaction takes its snapshot (at its first read), which then holds at least
    /// these commits; `None` (no read transaction kept) outside WAL mode and while a commit is
    /// under way.
    fn generation(&self) -> Option<u64> {
        let commits = self.commits.as_ref()?.settled()?;
        Some(commits.wrapping_add(self.ends.load(Ordering::Acquire)))
    }

    /// The writer's `COMMIT` has returned: lookups may keep their read transactions again
    /// (also after a commit that wrote no frame, which SQLite's WAL hook does not see).
    pub fn commit_returned(&self) {
        if let Some(commits) = &self.commits {
            commits.settle();
        }
    }

    /// Ends the read transactions of the connections not in use, and has those in use end
    /// theirs at their next lookup, so that a checkpoint can copy every frame and the WAL
    /// start over: call before checkpointing.
    pub fn end_idle_reads(&self) {
        self.ends.fetch_add(1, Ordering::AcqRel);
        let mut slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        let before = slots.idle.len();
        slots.idle.retain_mut(|reader| match reader.end_read() {
            Ok(()) => true,
            Err(err) => {
                // Closed instead: closing a connection ends its transaction.
                tracing::warn!(path = %self.path.display(), %err, "a lookup connection could not end its read");
                false
            }
        });
        slots.open -= before - slots.idle.len();
    }

    fn take(&self) -> Result<Reader> {
        let mut slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if let Some(reader) = slots.idle.pop() {
                return Ok(reader);
            }
            if slots.open < self.config.readers_per_partition {
                slots.open += 1;
                drop(slots);
                return match sql::open_reader(&self.path, &self.config) {
                    Ok(conn) => Ok(Reader { conn, reading_since: None }),
                    Err(err) => {
                        self.slots.lock().unwrap_or_else(|p| p.into_inner()).open -= 1;
                        // A caller waiting for a connection may open the one this could not.
                        self.returned.notify_one();
                        Err(err)
                    }
                };
            }
            slots.waiting += 1;
            slots = self.returned.wait(slots).unwrap_or_else(|p| p.into_inner());
            slots.waiting -= 1;
        }
    }

    fn give_back(&self, reader: Reader) {
        let mut slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        slots.idle.push(reader);
        if slots.waiting > 0 {
            self.returned.notify_one();
        }
    }

    /// Closes the idle connections (at shutdown, before the final checkpoint).
    pub fn close_idle(&self) {
        let mut slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        let n = slots.idle.len();
        slots.idle.clear();
        slots.open -= n;
    }

    /// Connections open now.
    pub fn open_connections(&self) -> usize {
        self.slots.lock().unwrap_or_else(|p| p.into_inner()).open
    }
}

/// A connection on loan; goes back to the pool when dropped, even if the caller panics.
struct Lent<'a> {
    pool: &'a ReadPool,
    reader: Option<Reader>,
}

impl Drop for Lent<'_> {
    fn drop(&mut self) {
        if let Some(reader) = self.reader.take() {
            self.pool.give_back(reader);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::{
        sync::{mpsc, Arc},
        thread,
        time::Duration,
    };

    use super::*;

    /// A connection keeps its read transaction only while nothing is committed: a lookup after
    /// a commit sees it; and once the idle connections end theirs, a checkpoint copies every
    /// frame.
    #[test]
    fn a_kept_read_transaction_sees_every_commit_and_gives_way_to_checkpoints() {
        let dir = tempfile::tempdir().unwrap();
        let (writer, _, pool) = counted(dir.path());
        let count = || pool.lookup(count);
        for id in 1..=3 {
            insert(&writer, id);
            assert_eq!(count().unwrap(), id, "a lookup sees the commit before it");
            assert_eq!(count().unwrap(), id);
        }
        assert!(kept(&pool), "the read transaction was kept");
        insert(&writer, 4);
        assert!(!sql::checkpoint_passive(&writer).unwrap(), "the idle connection's read holds frames back");
        pool.end_idle_reads();
        assert!(sql::checkpoint_passive(&writer).unwrap());
        assert_eq!(count().unwrap(), 4);
    }

    /// A commit can be seen before the writer's WAL hook counts it. A lookup in between, on a
    /// connection whose read transaction began before the commit, sees it all the same, as a
    /// new connection does.
    #[test]
    fn a_lookup_during_a_commit_sees_what_a_lookup_before_it_saw() {
        let dir = tempfile::tempdir().unwrap();
        let (mut writer, commits, pool) = counted(dir.path());
        let pool = Arc::new(pool);
        insert(&writer, 1);
        assert_eq!(pool.lookup(count).unwrap(), 1);
        assert!(kept(&pool));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (in_hook, saw) = (Arc::clone(&pool), Arc::clone(&seen));
        // Runs where SQLite calls the WAL hook: once the commit can be seen, before it returns.
        writer
            .wal_hook(Some(move |_: &mut rusqlite::hooks::Wal, _| {
                let fresh = count(&in_hook.open_own().unwrap()).unwrap();
                let after = in_hook.lookup(count).unwrap();
                saw.lock().unwrap().push((fresh, after));
                commits.settle();
                Ok(())
            }))
            .unwrap();
        insert(&writer, 2);
        assert_eq!(*seen.lock().unwrap(), [(2, 2)], "a lookup went back to what was before the commit");
        assert_eq!(pool.lookup(count).unwrap(), 2);
        assert!(kept(&pool), "read transactions are kept again once the commit is counted");
    }

    /// A commit that writes no frame is counted by the writer once its `COMMIT` returns (SQLite's
    /// WAL hook does not see it): until then lookups keep no read transaction, afterwards they do.
    #[test]
    fn a_commit_without_frames_holds_back_kept_reads_until_it_returns() {
        let dir = tempfile::tempdir().unwrap();
        let (writer, _, pool) = counted(dir.path());
        insert(&writer, 1);
        assert_eq!(pool.lookup(count).unwrap(), 1);
        assert!(kept(&pool));
        sql::begin(&writer, TxMode::Immediate).unwrap();
        sql::commit(&writer).unwrap();
        assert_eq!(pool.lookup(count).unwrap(), 1);
        assert!(!kept(&pool), "a commit counted by SQLite's commit hook alone is still under way");
        pool.commit_returned();
        assert_eq!(pool.lookup(count).unwrap(), 1);
        assert!(kept(&pool));
    }

    /// A partition's writer in `dir` whose commits are counted, and a pool of readers that
    /// keeps its read transactions by that count.
    fn counted(dir: &std::path::Path) -> (Connection, Arc<Commits>, ReadPool) {
        let (path, config) = (dir.join("p.db"), Config::default());
        let mut writer = sql::open_writer(&path, &config, crate::IndexMode::Hash).unwrap();
        let commits = Arc::new(Commits::default());
        sql::watch_wal(&mut writer, Arc::default(), Arc::clone(&commits)).unwrap();
        let pool = ReadPool::new(path, &config, Some(Arc::clone(&commits)));
        (writer, commits, pool)
    }

    fn count(conn: &Connection) -> Result<i64> {
        Ok(conn.query_row("SELECT count(*) FROM records", [], |r| r.get::<_, i64>(0))?)
    }

    /// Commits record `id` (a statement of its own).
    fn insert(writer: &Connection, id: i64) {
        let sql = "INSERT INTO records(id, key, counter, value) VALUES (?1, ?2, 1, x'00')";
        writer.execute(sql, rusqlite::params![id, id.to_be_bytes()]).unwrap();
    }

    /// Whether the pool's idle connection holds a read transaction.
    fn kept(pool: &ReadPool) -> bool {
        !pool.slots.lock().unwrap().idle[0].conn.is_autocommit()
    }

    /// Outside WAL mode (no commit count), every statement reads in a transaction of its own.
    #[test]
    fn without_a_commit_count_no_read_transaction_is_kept() {
        let dir = tempfile::tempdir().unwrap();
        let (path, config) = (dir.path().join("p.db"), Config::default());
        let writer = sql::open_writer(&path, &config, crate::IndexMode::Hash).unwrap();
        let pool = ReadPool::new(path, &config, None);
        pool.lookup(count).unwrap();
        assert!(!kept(&pool));
        drop(writer);
    }

    const CALLERS: usize = 4;
    const CALLS: usize = 2_000;

    /// A connection that cannot be opened gives its place back to the callers waiting for one:
    /// each of them then gets an error of its own, none waits for a connection that will never
    /// be returned.
    #[test]
    fn a_failed_open_wakes_a_caller_waiting_for_a_connection() {
        let dir = tempfile::tempdir().unwrap();
        let config = Config { readers_per_partition: 1, ..Config::default() };
        let pool = Arc::new(ReadPool::new(dir.path().join("missing.db"), &config, None));
        let (done, finished) = mpsc::channel();
        for _ in 0..CALLERS {
            let (pool, done) = (Arc::clone(&pool), done.clone());
            thread::spawn(move || {
                let failures = (0..CALLS).filter(|_| pool.with(|_| Ok(())).is_err()).count();
                let _ = done.send(failures);
            });
        }
        for _ in 0..CALLERS {
            let failures = finished.recv_timeout(Duration::from_secs(60)).expect("a caller waits for ever");
            assert_eq!(failures, CALLS, "a missing database opens for no one");
        }
        assert_eq!(pool.open_connections(), 0);
    }
}

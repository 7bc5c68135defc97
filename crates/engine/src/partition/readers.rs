//! A partition's pool of read-only SQLite connections.
//!
//! Connections are opened on first use, up to `readers_per_partition`, and kept; a caller that
//! finds them all busy waits on the condition variable. Bounding the pool per partition bounds
//! file descriptors (about two per connection in WAL mode) and page-cache memory
//! (`cache_size` per connection) for the whole store.

use std::{
    path::PathBuf,
    sync::{Condvar, Mutex},
};

use rusqlite::Connection;

use super::sql;
use crate::{Config, Result};

/// Read-only connections to one partition.
#[derive(Debug)]
pub struct ReadPool {
    path: PathBuf,
    config: Config,
    /// Idle connections, and how many exist in all (idle + lent out).
    slots: Mutex<Slots>,
    /// Signalled when a connection is returned.
    returned: Condvar,
}

#[derive(Debug, Default)]
struct Slots {
    idle: Vec<Connection>,
    open: usize,
}

impl ReadPool {
    /// A pool for the database at `path`; opens nothing yet.
    pub fn new(path: PathBuf, config: &Config) -> Self {
        Self { path, config: config.clone(), slots: Mutex::new(Slots::default()), returned: Condvar::new() }
    }

    /// Runs `f` with a connection of the pool.
    pub fn with<R>(&self, f: impl FnOnce(&Connection) -> Result<R>) -> Result<R> {
        let lent = Lent { pool: self, conn: Some(self.take()?) };
        f(lent.conn.as_ref().expect("a lent connection"))
    }

    /// A read-only connection of its own, outside the pool's bound: for a scan so long that
    /// lending it a pooled one would keep lookups waiting.
    pub fn open_own(&self) -> Result<Connection> {
        sql::open_reader(&self.path, &self.config)
    }

    fn take(&self) -> Result<Connection> {
        let mut slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if let Some(conn) = slots.idle.pop() {
                return Ok(conn);
            }
            if slots.open < self.config.readers_per_partition {
                slots.open += 1;
                drop(slots);
                return sql::open_reader(&self.path, &self.config).inspect_err(|_| {
                    self.slots.lock().unwrap_or_else(|p| p.into_inner()).open -= 1;
                    // A caller waiting for a connection may open the one this could not.
                    self.returned.notify_one();
                });
            }
            slots = self.returned.wait(slots).unwrap_or_else(|p| p.into_inner());
        }
    }

    fn give_back(&self, conn: Connection) {
        self.slots.lock().unwrap_or_else(|p| p.into_inner()).idle.push(conn);
        self.returned.notify_one();
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
    conn: Option<Connection>,
}

impl Drop for Lent<'_> {
    fn drop(&mut self) {
        if let Some(conn) = self.conn.take() {
            self.pool.give_back(conn);
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

    const CALLERS: usize = 4;
    const CALLS: usize = 2_000;

    /// A connection that cannot be opened gives its place back to the callers waiting for one:
    /// each of them then gets an error of its own, none waits for a connection that will never
    /// be returned.
    #[test]
    fn a_failed_open_wakes_a_caller_waiting_for_a_connection() {
        let dir = tempfile::tempdir().unwrap();
        let config = Config { readers_per_partition: 1, ..Config::default() };
        let pool = Arc::new(ReadPool::new(dir.path().join("missing.db"), &config));
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

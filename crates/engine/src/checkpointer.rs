//! The checkpointer thread: copies partitions' WALs into their databases off the writers' path.
//!
//! After a commit the writer only notes that its partition's WAL passed the threshold
//! ([`Checkpoints::want`]); this thread runs a `PASSIVE` checkpoint beside it, on a connection of
//! its own. The writer then finishes it between two transactions ([`Checkpoints::finish`]),
//! copying what it appended meanwhile, so the WAL can start over. A failed
//! checkpoint poisons its partition.
//!
//! - With Litestream, which checkpoints itself, ours are only a backstop past
//!   [`LITESTREAM_BACKSTOP`] times the threshold, never finished by the writer.
//! - At close each partition gets a checkpoint ([`at_close`]): TRUNCATE, waiting at most
//!   [`CLOSE_WAIT`] (with Litestream, PASSIVE).
//! - An idle partition gets a TRUNCATE checkpoint, so its WAL shrinks to nothing ([`IdleWals`]).

use std::{
    sync::{atomic::Ordering, Arc},
    time::{Duration, Instant},
};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use rusqlite::Connection;

use crate::{
    partition::{sql, Partition},
    Config,
};

/// With Litestream, the WAL size (in `checkpoint_pages`) at which the store checkpoints anyway.
pub const LITESTREAM_BACKSTOP: u32 = 16;

/// How long a partition's TRUNCATE checkpoint at close waits for other connections. The store's
/// own readers are closed by then, so what it waits for is another process: a query that ends
/// soon, or a replicator that never lets go.
pub const CLOSE_WAIT: Duration = Duration::from_millis(100);

/// Work for the checkpointer.
#[derive(Debug)]
pub enum Job {
    /// Checkpoint this partition.
    Checkpoint(u32),
    /// Close the connections and exit.
    Stop,
}

/// The writers' handle: asks for checkpoints, each partition queued at most once at a time.
#[derive(Debug, Clone)]
pub struct Checkpoints {
    jobs: Sender<Job>,
}

impl Checkpoints {
    /// A handle sending to `jobs`.
    pub fn new(jobs: Sender<Job>) -> Self {
        Self { jobs }
    }

    /// Asks for a checkpoint of `partition` if its WAL holds `threshold` pages or more
    /// ([`threshold`]) and none is queued yet.
    pub fn want(&self, partition: &Partition, threshold: u32) {
        if partition.wal_pages() < threshold || partition.checkpoint_queued.swap(true, Ordering::AcqRel) {
            return;
        }
        if self.jobs.send(Job::Checkpoint(partition.id)).is_err() {
            // Closing: the writer's final checkpoint copies everything.
            partition.checkpoint_queued.store(false, Ordering::Release);
        }
    }

    /// Tells the thread to stop.
    pub fn stop(&self) {
        let _ = self.jobs.send(Job::Stop);
    }

    /// On the writer, between transactions: finishes the checkpoint this thread left
    /// unfinished, if it did, on the writer's connection `conn`.
    pub fn finish(partition: &Partition, conn: &Connection) {
        if !partition.checkpoint_unfinished.swap(false, Ordering::AcqRel) {
            return;
        }
        match partition.checkpoint_passive(conn) {
            Ok(true) => {}
            Ok(false) => {
                tracing::debug!(partition = partition.id, "a reader holds old WAL frames: checkpoint again later")
            }
            Err(err) => partition.poison(format!("checkpoint failed: {err}")),
        }
    }
}

/// Runs checkpoints as they are asked for until told to stop; between them, empties the WALs of
/// partitions gone idle ([`IdleWals`]).
pub fn run(jobs: Receiver<Job>, partitions: Vec<Arc<Partition>>, config: Config) {
    let mut idle = IdleWals::new(&partitions, &config);
    loop {
        let next = jobs.recv_timeout(IDLE_SWEEP);
        if idle.due() {
            idle.sweep(&partitions, &config);
        }
        match next {
            Ok(Job::Checkpoint(p)) => checkpoint(&partitions[p as usize], &config),
            Ok(Job::Stop) | Err(RecvTimeoutError::Disconnected) => break,
            Err(RecvTimeoutError::Timeout) => {}
        }
    }
}

/// A PASSIVE checkpoint of `partition` on a connection of its own; left unfinished (frames
/// appended meanwhile), the writer finishes it ([`Checkpoints::finish`]).
fn checkpoint(partition: &Partition, config: &Config) {
    partition.checkpoint_queued.store(false, Ordering::Release);
    if partition.poisoned().is_some() {
        return;
    }
    let started = Instant::now();
    let done = sql::open_checkpointer(&partition.db_path, config).and_then(|conn| partition.checkpoint_passive(&conn));
    match done {
        Ok(complete) => {
            partition.counters.checkpoints.fetch_add(1, Ordering::Relaxed);
            // Finished by the writer even when it copied every frame: a write transaction that
            // began while it ran appends after it and keeps the WAL from starting over, so
            // under back-to-back writes the WAL grew for ever (14 MB where the bound is 64 KiB).
            // The writer's checkpoint copies what was appended meanwhile, if anything (no sync
            // when nothing), and its next transaction starts the WAL over.
            partition.checkpoint_unfinished.store(!config.litestream, Ordering::Release);
            let us = started.elapsed().as_micros() as u64;
            tracing::debug!(partition = partition.id, complete, us, "checkpoint");
        }
        Err(err) => partition.poison(format!("checkpoint failed: {err}")),
    }
}

/// How often the checkpointer looks for partitions gone idle.
const IDLE_SWEEP: Duration = Duration::from_secs(1);
/// How long emptying an idle partition's WAL waits for its writer or a reader: a partition
/// that is busy again is left for a later sweep.
const IDLE_WAIT: Duration = Duration::from_millis(10);

/// The partitions' commit counts as last seen, and since when: a partition without a commit for
/// `idle_wal_secs` gets a TRUNCATE checkpoint, so its WAL (kept at up to `checkpoint_pages`
/// pages for reuse after a checkpoint) gives its space back. Not with Litestream, whose read
/// transaction a TRUNCATE would wait behind and whose replica a restarted WAL would reset.
struct IdleWals {
    /// Per partition: its commits when last seen changing, and when.
    seen: Vec<(u64, Instant)>,
    idle_after: Option<Duration>,
    last_sweep: Instant,
}

impl IdleWals {
    fn new(partitions: &[Arc<Partition>], config: &Config) -> Self {
        let now = Instant::now();
        let idle_after =
            (config.idle_wal_secs > 0 && !config.litestream).then(|| Duration::from_secs(config.idle_wal_secs));
        Self {
            seen: partitions.iter().map(|p| (p.counters.commits.load(Ordering::Relaxed), now)).collect(),
            idle_after,
            last_sweep: now,
        }
    }

    /// Whether a sweep is due (they come every [`IDLE_SWEEP`], checkpoints or not).
    fn due(&self) -> bool {
        self.idle_after.is_some() && self.last_sweep.elapsed() >= IDLE_SWEEP
    }

    /// Empties the WAL of each partition idle long enough whose WAL holds anything.
    fn sweep(&mut self, partitions: &[Arc<Partition>], config: &Config) {
        let (Some(idle_after), now) = (self.idle_after, Instant::now()) else { return };
        self.last_sweep = now;
        for (partition, seen) in partitions.iter().zip(&mut self.seen) {
            let commits = partition.counters.commits.load(Ordering::Relaxed);
            if commits != seen.0 {
                *seen = (commits, now);
                continue;
            }
            // The file is looked at only once the partition has been idle long enough.
            let idle = now - seen.1 >= idle_after && partition.poisoned().is_none();
            if !idle || !std::fs::metadata(&partition.wal_path).is_ok_and(|m| m.len() > 0) {
                continue;
            }
            let emptied = sql::open_checkpointer(&partition.db_path, config)
                .and_then(|conn| partition.checkpoint_at_close(&conn, true, IDLE_WAIT));
            match emptied {
                Ok(done) if !done.busy => tracing::debug!(partition = partition.id, "emptied an idle partition's WAL"),
                Ok(_) => {} // busy again: a later sweep
                Err(err) => partition.poison(format!("checkpoint failed: {err}")),
            }
        }
    }
}

/// WAL pages past which partition `partition` is checkpointed: between three quarters of the
/// threshold and all of it, a different fraction for each partition. Under writes spread evenly
/// over the keys, partitions with one threshold fill their WALs together and were checkpointed in
/// one wave (256 checkpoints, each copying up to `checkpoint_pages` pages and syncing them, on
/// the device the commit log flushes to); with thresholds apart, their periods differ and the
/// checkpoints spread out.
pub fn threshold(config: &Config, partition: u32) -> u32 {
    let pages = config.checkpoint_pages.max(1);
    let pages = if config.litestream { pages.saturating_mul(LITESTREAM_BACKSTOP) } else { pages };
    // The fractional part of partition x the golden ratio: evenly spread for any count.
    let spread = (f64::from(partition) * 0.618_033_988_749_895).fract();
    pages - (f64::from(pages) * spread / 4.0) as u32
}

/// The checkpoint of `partition` at close, on its writer's connection `conn`: TRUNCATE waiting
/// at most [`CLOSE_WAIT`], or with Litestream a PASSIVE one. Frames it leaves in the WAL are
/// logged (a warning unless Litestream is expected to hold them).
pub fn at_close(partition: &Partition, conn: &Connection, config: &Config) {
    match partition.checkpoint_at_close(conn, !config.litestream, CLOSE_WAIT) {
        Ok(done) if !done.busy && done.frames_left() == 0 => {}
        Ok(done) if config.litestream => tracing::info!(
            partition = partition.id,
            frames_left = done.frames_left(),
            "checkpoint at close left frames in the WAL for Litestream to replicate and checkpoint"
        ),
        Ok(done) => tracing::warn!(
            partition = partition.id,
            frames_left = done.frames_left(),
            "checkpoint at close did not finish: another process has the partition open (a replicator? then \
             set litestream); its WAL is kept and read at the next open"
        ),
        Err(err) => tracing::warn!(partition = partition.id, %err, "checkpoint at close failed; the WAL is kept"),
    }
}

#[cfg(test)]
mod tests {
    use rusqlite::Connection;

    use super::*;
    use crate::IndexMode;

    #[test]
    fn a_close_checkpoint_behind_another_processs_reader_reports_the_frames_it_left() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p0000.db");
        let writer = sql::open_writer(&path, &Config::default(), IndexMode::Hash).unwrap();
        let insert = |id: i64| writer.execute("INSERT INTO records VALUES (?1, x'01', 1, x'02')", [id]).unwrap();
        insert(1);
        // A reader holding a snapshot, as Litestream's long read transaction does.
        let reader = Connection::open(&path).unwrap();
        reader.execute_batch("BEGIN").unwrap();
        let _: i64 = reader.query_row("SELECT count(*) FROM records", [], |r| r.get(0)).unwrap();
        insert(2);

        let truncate = sql::checkpoint_at_close(&writer, true, CLOSE_WAIT).unwrap();
        assert!(truncate.busy && truncate.frames_left() > 0, "{truncate:?}");
        let passive = sql::checkpoint_at_close(&writer, false, CLOSE_WAIT).unwrap();
        assert!(passive.frames_left() > 0, "{passive:?}");

        reader.execute_batch("COMMIT").unwrap();
        let done = sql::checkpoint_at_close(&writer, true, CLOSE_WAIT).unwrap();
        assert!(!done.busy && done.frames_left() == 0, "{done:?}");
        assert_eq!(std::fs::metadata(dir.path().join("p0000.db-wal")).unwrap().len(), 0, "TRUNCATE empties the WAL");
    }

    #[test]
    fn with_litestream_the_store_checkpoints_only_as_a_backstop() {
        let own = Config::default();
        let replicated = Config { litestream: true, ..Config::default() };
        assert_eq!(threshold(&own, 0), own.checkpoint_pages);
        assert_eq!(threshold(&replicated, 0), own.checkpoint_pages * LITESTREAM_BACKSTOP);
    }

    #[test]
    fn partitions_have_thresholds_apart_within_the_last_quarter() {
        for pages in [16, 1000] {
            let config = Config { checkpoint_pages: pages, ..Config::default() };
            let thresholds: Vec<u32> = (0..256).map(|p| threshold(&config, p)).collect();
            assert!(thresholds.iter().all(|t| (pages * 3 / 4..=pages).contains(t)), "{thresholds:?}");
            // Spread evenly: each eighth of the last quarter holds some partitions' thresholds.
            let eighths: std::collections::BTreeSet<u32> =
                thresholds.iter().map(|t| (pages - t) * 32 / pages).collect();
            assert!(eighths.len() >= if pages >= 32 { 8 } else { 4 }, "{eighths:?}");
        }
    }
}

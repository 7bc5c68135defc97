//! The pace of a backup: at most the rate asked for, and, while the server makes writes durable
//! through its commit log, slower whenever the log's flushes take longer than they do with the
//! backup paused.
//!
//! A durable write is answered after a flush of the commit log, and on a disk shared with a
//! backup that flush waits for the backup's writes the device took before it: at full speed a
//! backup cut durable PUTs to 40-50% of their rate (`docs/operations.md`, "Numbers"). So the
//! backup yields: after each chunk it looks at the log's flushes over the last [`WINDOW`], and
//! while their mean time is above [`SLOWER`] times the time measured with the backup paused
//! (a probe of [`PROBE`], repeated every [`PROBE_EVERY`]), it sleeps after every chunk, twice
//! as long each window that stays slow, a quarter less each window that is not. A server that
//! flushes nothing (no durable writes, or an offline backup) never slows the backup, and no
//! probe is taken.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use crate::commitlog::{CommitLog, LogStats};

/// A window over which the log's flush time is judged.
const WINDOW: Duration = Duration::from_millis(100);
/// Fewer flushes than this in a window tell nothing (few durable writes: nothing to yield to).
const MIN_FLUSHES: u64 = 8;
/// The backup yields while a flush takes longer than this many times its time without it: a
/// durable PUT's rate falls about as its flush time grows, so this keeps some 80% of it.
const SLOWER: f64 = 1.25;
/// How long a probe pauses the backup: the first part lets the disk finish what the backup
/// gave it, the flushes of the rest are the probe's measure.
const PROBE: (Duration, Duration) = (Duration::from_millis(100), Duration::from_millis(200));
/// How often the flush time without the backup is measured again while the log flushes.
const PROBE_EVERY: Duration = Duration::from_secs(5);
/// The shortest sleep after a chunk once the backup yields, and the longest (4 MiB chunks:
/// at least 16 MiB/s, so a backup always finishes).
const GAP: (Duration, Duration) = (Duration::from_millis(2), Duration::from_millis(250));

/// Keeps a backup at or below its rate, and yields to durable writes.
#[derive(Debug)]
pub(crate) struct Pacer {
    rate: Option<u64>,
    started: Instant,
    bytes: u64,
    yielding: Option<Yielding>,
}

impl Pacer {
    /// A pacer of `rate` bytes per second (`None`: no limit), starting now, yielding to the
    /// flushes of `log` if there is one.
    pub(crate) fn new(rate: Option<u64>, log: Option<Arc<CommitLog>>) -> Self {
        let yielding = log.map(Yielding::new);
        Self { rate: rate.filter(|r| *r > 0), started: Instant::now(), bytes: 0, yielding }
    }

    /// Whether the backup yields to a commit log's flushes (and so pauses to time them alone).
    pub(crate) fn yields(&self) -> bool {
        self.yielding.is_some()
    }

    /// `bytes` more were written: waits until they are due, and as long as durable writes
    /// need the disk more.
    pub(crate) fn wrote(&mut self, bytes: u64) {
        self.bytes += bytes;
        if let Some(yielding) = &mut self.yielding {
            yielding.after_chunk();
        }
        let Some(rate) = self.rate else { return };
        let due = Duration::from_secs_f64(self.bytes as f64 / rate as f64);
        if let Some(wait) = due.checked_sub(self.started.elapsed()) {
            std::thread::sleep(wait);
        }
    }
}

/// The backup's yielding to the commit log's flushes.
#[derive(Debug)]
struct Yielding {
    log: Arc<CommitLog>,
    /// A flush's mean time with the backup paused, at the last probe (`None`: too few flushes
    /// then to tell).
    alone: Option<Duration>,
    /// When the next probe is due.
    probe_at: Instant,
    /// The window under way: when it began and the log's figures then.
    window: (Instant, LogStats),
    /// The sleep after each chunk.
    gap: Duration,
}

impl Yielding {
    fn new(log: Arc<CommitLog>) -> Self {
        let now = Instant::now();
        let window = (now, log.stats());
        Self { log, alone: None, probe_at: now, window, gap: Duration::ZERO }
    }

    /// A chunk was written: sleeps the gap, and at the end of a window sets the next gap from
    /// the window's flushes (probing first when a probe is due).
    fn after_chunk(&mut self) {
        if !self.gap.is_zero() {
            std::thread::sleep(self.gap);
        }
        if self.window.0.elapsed() < WINDOW {
            return;
        }
        let flush = mean_flush(&self.window.1, &self.log.stats());
        if flush.is_some() && self.probe_at <= Instant::now() {
            self.alone = self.probe();
            self.probe_at = Instant::now() + PROBE_EVERY;
        }
        self.gap = match (flush, self.alone) {
            (Some(flush), Some(alone)) if flush.as_secs_f64() > SLOWER * alone.as_secs_f64() => {
                (self.gap * 2).clamp(GAP.0, GAP.1)
            }
            _ => Some(self.gap * 3 / 4).filter(|gap| *gap >= GAP.0).unwrap_or_default(),
        };
        tracing::debug!(?flush, alone = ?self.alone, gap = ?self.gap, "the backup's pace");
        self.window = (Instant::now(), self.log.stats());
    }

    /// Pauses the backup and measures a flush's mean time meanwhile.
    fn probe(&self) -> Option<Duration> {
        std::thread::sleep(PROBE.0);
        let before = self.log.stats();
        std::thread::sleep(PROBE.1);
        mean_flush(&before, &self.log.stats())
    }
}

/// A flush's mean time between two readings of the log's figures (`None`: fewer than
/// [`MIN_FLUSHES`] flushes between them).
fn mean_flush(before: &LogStats, after: &LogStats) -> Option<Duration> {
    let flushes = after.flushes - before.flushes;
    (flushes >= MIN_FLUSHES).then(|| Duration::from_nanos((after.flush_nanos - before.flush_nanos) / flushes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mean_flush_time_needs_enough_flushes() {
        let at = |flushes, flush_nanos| LogStats { flushes, flush_nanos, ..LogStats::default() };
        assert_eq!(mean_flush(&at(10, 1_000), &at(18, 9_000)), Some(Duration::from_nanos(1_000)));
        assert_eq!(mean_flush(&at(10, 1_000), &at(17, 9_000)), None, "7 flushes tell nothing");
    }
}

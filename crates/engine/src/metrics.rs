//! Store-wide counters the writers update and `/stats` and `/metrics` read: commits, requests
//! per commit (a power-of-two histogram: how well group commit batches), commit time.

use std::{
    sync::atomic::{AtomicU64, Ordering},
    time::Duration,
};

use serde::{Deserialize, Serialize};

/// Histogram buckets: requests per commit up to 1, 2, 4, ... 2048, and more.
const BUCKETS: usize = 13;

/// Counters shared by all writer threads.
#[derive(Debug, Default)]
pub struct Metrics {
    commits: AtomicU64,
    inline_commits: AtomicU64,
    requests: AtomicU64,
    commit_nanos: AtomicU64,
    batch_sizes: [AtomicU64; BUCKETS],
}

/// A copy of the counters at one moment.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MetricsSnapshot {
    /// Transactions committed (or attempted).
    pub commits: u64,
    /// Of those, the ones their caller ran itself (inline writes).
    #[serde(default)]
    pub inline_commits: u64,
    /// Requests those transactions carried.
    pub requests: u64,
    /// Time spent in transactions, nanoseconds.
    pub commit_nanos: u64,
    /// `(upper bound of requests per commit, commits)`; the last bound is `u64::MAX`.
    pub batch_sizes: Vec<(u64, u64)>,
}

impl Metrics {
    /// Records one transaction of `requests` requests that took `elapsed`.
    pub fn record_commit(&self, requests: usize, elapsed: Duration) {
        self.commits.fetch_add(1, Ordering::Relaxed);
        self.requests.fetch_add(requests as u64, Ordering::Relaxed);
        self.commit_nanos.fetch_add(elapsed.as_nanos() as u64, Ordering::Relaxed);
        let bucket = (usize::BITS - requests.saturating_sub(1).leading_zeros()) as usize;
        self.batch_sizes[bucket.min(BUCKETS - 1)].fetch_add(1, Ordering::Relaxed);
    }

    /// Records that the last transaction recorded ran inline, on its caller's thread.
    pub fn record_inline(&self) {
        self.inline_commits.fetch_add(1, Ordering::Relaxed);
    }

    /// The counters now.
    pub fn snapshot(&self) -> MetricsSnapshot {
        MetricsSnapshot {
            commits: self.commits.load(Ordering::Relaxed),
            inline_commits: self.inline_commits.load(Ordering::Relaxed),
            requests: self.requests.load(Ordering::Relaxed),
            commit_nanos: self.commit_nanos.load(Ordering::Relaxed),
            batch_sizes: self
                .batch_sizes
                .iter()
                .enumerate()
                .map(|(i, n)| (if i == BUCKETS - 1 { u64::MAX } else { 1 << i }, n.load(Ordering::Relaxed)))
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batch_sizes_land_in_power_of_two_buckets() {
        let m = Metrics::default();
        for n in [1, 2, 3, 4, 5, 1000, 100_000] {
            m.record_commit(n, Duration::from_micros(1));
        }
        let s = m.snapshot();
        assert_eq!((s.commits, s.requests), (7, 1 + 2 + 3 + 4 + 5 + 1000 + 100_000));
        let count = |bound: u64| s.batch_sizes.iter().find(|(b, _)| *b == bound).unwrap().1;
        assert_eq!((count(1), count(2), count(4), count(8), count(1024), count(u64::MAX)), (1, 1, 2, 1, 1, 1));
    }
}

//! What a run observed: latencies in HDR histograms (in all and per second of the run),
//! outcomes by kind, and the open loop's late and unsent requests. Each connection records into
//! its own [`Recorder`] (no sharing on the hot path); recorders are merged when the run ends.

use std::{collections::BTreeMap, time::Duration};

use hdrhistogram::Histogram;
use serde::Serialize;

/// Longest latency the histograms hold, µs; longer ones are clamped to it.
const MAX_LATENCY_US: u64 = 60_000_000;

/// A latency histogram in microseconds, 3 significant digits, 1 µs to 60 s.
pub fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, MAX_LATENCY_US, 3).expect("valid histogram bounds")
}

/// A per-second latency histogram: 2 significant digits (1%) keep one second of one connection
/// at ~20 KB, where 3 digits would take ~140 KB.
fn new_second_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, MAX_LATENCY_US, 2).expect("valid histogram bounds")
}

/// The outcome of one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// An HTTP answer with this status.
    Status(u16),
    /// No answer within the timeout.
    Timeout,
    /// The connection failed (refused, reset, closed mid-request).
    Connection,
}

/// Errors by kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Errors {
    /// 3xx answers (the API never redirects).
    pub status_3xx: u64,
    /// 4xx answers (a 404 on a select means the key space is not the one loaded).
    pub status_4xx: u64,
    /// 5xx answers (503: the server's queues were full).
    pub status_5xx: u64,
    /// Requests without an answer within the timeout.
    pub timeout: u64,
    /// Connections that failed.
    pub connection: u64,
}

impl Errors {
    /// All errors.
    pub fn total(&self) -> u64 {
        self.status_3xx + self.status_4xx + self.status_5xx + self.timeout + self.connection
    }

    fn count(&mut self, outcome: Outcome) {
        match outcome {
            Outcome::Status(s) if (300..400).contains(&s) => self.status_3xx += 1,
            Outcome::Status(s) if (400..500).contains(&s) => self.status_4xx += 1,
            Outcome::Status(s) if s >= 500 => self.status_5xx += 1,
            Outcome::Status(_) => {}
            Outcome::Timeout => self.timeout += 1,
            Outcome::Connection => self.connection += 1,
        }
    }

    fn add(&mut self, o: &Self) {
        self.status_3xx += o.status_3xx;
        self.status_4xx += o.status_4xx;
        self.status_5xx += o.status_5xx;
        self.timeout += o.timeout;
        self.connection += o.connection;
    }
}

/// One second of the run.
#[derive(Debug, Clone)]
pub struct Second {
    /// Requests answered successfully (2xx) in this second.
    pub ok: u64,
    /// Errors in this second.
    pub errors: u64,
    /// Latencies of the successful requests (2 significant digits).
    pub latency: Histogram<u64>,
}

impl Default for Second {
    fn default() -> Self {
        Self { ok: 0, errors: 0, latency: new_second_histogram() }
    }
}

/// What one connection (or, merged, the whole run) observed during the measured window.
#[derive(Debug, Clone)]
pub struct Recorder {
    /// Latencies of successful (2xx) requests.
    pub latency: Histogram<u64>,
    /// Successful requests.
    pub ok: u64,
    /// 201 answers: records created (inserts).
    pub created: u64,
    /// Errors by kind.
    pub errors: Errors,
    /// Answers by status code.
    pub statuses: BTreeMap<u16, u64>,
    /// Per second of the measured window, by completion time.
    pub seconds: Vec<Second>,
    /// Every request sent, warm-up and measured, whatever its outcome: what the server
    /// should have counted.
    pub sent: u64,
    /// 201 answers, warm-up and measured: the records this run added.
    pub created_all: u64,
    /// Open loop: measured requests sent more than `LATE_AFTER` after their intended start.
    pub late: u64,
    /// Open loop: requests due before the end that were never sent.
    pub unsent: u64,
    /// Against a cluster: requests sent to each node (by its index in the map), warm-up included.
    pub node_sent: Vec<u64>,
    /// Against a cluster: of those, the ones the node answered 421 (not its partition).
    pub node_misdirected: Vec<u64>,
}

impl Default for Recorder {
    fn default() -> Self {
        Self {
            latency: new_histogram(),
            ok: 0,
            created: 0,
            errors: Errors::default(),
            statuses: BTreeMap::new(),
            seconds: Vec::new(),
            sent: 0,
            created_all: 0,
            late: 0,
            unsent: 0,
            node_sent: Vec::new(),
            node_misdirected: Vec::new(),
        }
    }
}

impl Recorder {
    /// Records a measured request that completed `at` after the measured window began, with
    /// `latency` from its (intended) start.
    pub fn record(&mut self, at: Duration, latency: Duration, outcome: Outcome) {
        let sec = at.as_secs() as usize;
        if self.seconds.len() <= sec {
            self.seconds.resize_with(sec + 1, Second::default);
        }
        let second = &mut self.seconds[sec];
        if let Outcome::Status(s) = outcome {
            *self.statuses.entry(s).or_default() += 1;
            if s == 201 {
                self.created += 1;
            }
        }
        if matches!(outcome, Outcome::Status(200..=299)) {
            let us = (latency.as_micros() as u64).clamp(1, MAX_LATENCY_US);
            self.latency.saturating_record(us);
            second.latency.saturating_record(us);
            self.ok += 1;
            second.ok += 1;
        } else {
            self.errors.count(outcome);
            second.errors += 1;
        }
    }

    /// Adds another recorder's observations to this one.
    pub fn merge(&mut self, other: &Recorder) {
        // Both histograms have the same bounds, so adding cannot fail.
        let _ = self.latency.add(&other.latency);
        self.ok += other.ok;
        self.created += other.created;
        self.errors.add(&other.errors);
        for (s, n) in &other.statuses {
            *self.statuses.entry(*s).or_default() += n;
        }
        if self.seconds.len() < other.seconds.len() {
            self.seconds.resize_with(other.seconds.len(), Second::default);
        }
        for (mine, theirs) in self.seconds.iter_mut().zip(&other.seconds) {
            mine.ok += theirs.ok;
            mine.errors += theirs.errors;
            let _ = mine.latency.add(&theirs.latency);
        }
        self.sent += other.sent;
        self.created_all += other.created_all;
        self.late += other.late;
        self.unsent += other.unsent;
        add_counts(&mut self.node_sent, &other.node_sent);
        add_counts(&mut self.node_misdirected, &other.node_misdirected);
    }

    /// Counts a request sent to node `node` of a cluster, and whether it was answered 421.
    pub fn count_node(&mut self, node: usize, misdirected: bool) {
        for (counts, add) in [(&mut self.node_sent, true), (&mut self.node_misdirected, misdirected)] {
            if counts.len() <= node {
                counts.resize(node + 1, 0);
            }
            counts[node] += u64::from(add);
        }
    }
}

/// Adds `other`'s counts to `mine`, index by index.
fn add_counts(mine: &mut Vec<u64>, other: &[u64]) {
    if mine.len() < other.len() {
        mine.resize(other.len(), 0);
    }
    for (m, o) in mine.iter_mut().zip(other) {
        *m += o;
    }
}

/// Latency percentiles, milliseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Percentiles {
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
    /// 99.9th percentile.
    pub p999: f64,
    /// Largest.
    pub max: f64,
    /// Mean.
    pub mean: f64,
}

impl Percentiles {
    /// The percentiles of `h` (µs), in ms; zeros for an empty histogram.
    pub fn of(h: &Histogram<u64>) -> Self {
        if h.is_empty() {
            return Self::default();
        }
        let ms = |us: u64| us as f64 / 1000.0;
        Self {
            p50: ms(h.value_at_quantile(0.5)),
            p90: ms(h.value_at_quantile(0.9)),
            p99: ms(h.value_at_quantile(0.99)),
            p999: ms(h.value_at_quantile(0.999)),
            max: ms(h.max()),
            mean: h.mean() / 1000.0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn percentiles_of_a_known_distribution() {
        let mut r = Recorder::default();
        // 1..=1000 ms, once each.
        for i in 1..=1000u32 {
            r.record(Duration::ZERO, MS * i, Outcome::Status(200));
        }
        let p = Percentiles::of(&r.latency);
        // 3 significant digits: within 0.1%.
        let close = |a: f64, b: f64| (a - b).abs() <= b * 0.001 + 0.001;
        assert!(close(p.p50, 500.0), "{p:?}");
        assert!(close(p.p90, 900.0), "{p:?}");
        assert!(close(p.p99, 990.0), "{p:?}");
        assert!(close(p.p999, 999.0), "{p:?}");
        assert!(close(p.max, 1000.0), "{p:?}");
        assert!(close(p.mean, 500.5), "{p:?}");
        assert_eq!(Percentiles::of(&new_histogram()), Percentiles::default());
    }

    #[test]
    fn outcomes_are_counted_by_kind_and_second() {
        let mut r = Recorder::default();
        r.record(MS * 10, MS, Outcome::Status(201));
        r.record(MS * 1500, MS, Outcome::Status(200));
        r.record(MS * 1600, MS, Outcome::Status(404));
        r.record(MS * 1700, MS, Outcome::Status(503));
        r.record(MS * 3100, MS, Outcome::Timeout);
        r.record(MS * 3200, MS, Outcome::Connection);
        assert_eq!((r.ok, r.created), (2, 1));
        assert_eq!(r.errors, Errors { status_3xx: 0, status_4xx: 1, status_5xx: 1, timeout: 1, connection: 1 });
        assert_eq!(r.errors.total(), 4);
        assert_eq!(r.statuses, BTreeMap::from([(200, 1), (201, 1), (404, 1), (503, 1)]));
        let per_sec: Vec<(u64, u64)> = r.seconds.iter().map(|s| (s.ok, s.errors)).collect();
        assert_eq!(per_sec, vec![(1, 0), (1, 2), (0, 0), (0, 2)]);
        // Errors carry no latency: only the two successes are in the histogram.
        assert_eq!(r.latency.len(), 2);
    }

    #[test]
    fn merging_adds_everything() {
        let mut a = Recorder { sent: 3, late: 1, ..Recorder::default() };
        a.record(Duration::ZERO, MS * 2, Outcome::Status(200));
        let mut b = Recorder { sent: 4, unsent: 2, ..Recorder::default() };
        b.record(MS * 2100, MS * 4, Outcome::Status(200));
        b.record(MS * 100, MS, Outcome::Timeout);
        a.merge(&b);
        assert_eq!((a.ok, a.sent, a.late, a.unsent, a.errors.timeout), (2, 7, 1, 2, 1));
        assert_eq!(a.latency.len(), 2);
        assert_eq!(a.seconds.len(), 3);
        assert_eq!((a.seconds[0].ok, a.seconds[0].errors, a.seconds[2].ok), (1, 1, 1));
        assert!(a.latency.equivalent(a.latency.max(), 4000));
    }
}

//! When requests are sent: the one [`Schedule`] of a run. Closed loop: C connections, each
//! sends its next request as soon as the previous answer arrives (like wrk, hey, autocannon).
//! Open loop: a fixed total rate R spread over C connections; each request has an intended
//! start on a fixed timetable and its latency counts from that moment, not from when it was
//! actually sent (the coordinated-omission correction of wrk2), so a stalled server is charged
//! for the requests that queued behind the stall. [`Pacer`] is that timetable, on durations
//! since the run's start so it can be tested without a clock.

use std::time::Duration;

use serde::Serialize;

/// How requests are paced.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(rename_all = "lowercase", tag = "kind")]
pub enum Schedule {
    /// Closed loop: `connections` keep-alive connections, one request in flight on each.
    Closed {
        /// Connections.
        connections: usize,
    },
    /// Open loop: `rate` requests/s in all, spread evenly over `connections` connections.
    Open {
        /// Connections (the most requests in flight at once).
        connections: usize,
        /// Requests per second, in all.
        rate: f64,
    },
}

impl Schedule {
    /// Connections of the schedule.
    pub fn connections(&self) -> usize {
        match *self {
            Self::Closed { connections } | Self::Open { connections, .. } => connections,
        }
    }

    /// The pacer of connection `conn`; `None` in a closed loop.
    pub fn pacer(&self, conn: usize) -> Option<Pacer> {
        match *self {
            Self::Closed { .. } => None,
            Self::Open { connections, rate } => Some(Pacer::new(rate, connections, conn)),
        }
    }
}

/// A request sent more than this after its intended start counts as late: it could not be
/// sent on time because the connection was still waiting for an earlier answer.
pub const LATE_AFTER: Duration = Duration::from_millis(1);

/// The timetable of one connection in an open loop: its k-th request is intended at
/// `offset + k * interval` after the start, where `interval = connections / rate` and the
/// connections' offsets are staggered evenly across one interval.
#[derive(Debug, Clone)]
pub struct Pacer {
    /// Nanoseconds between this connection's requests (f64: rates need not divide a second).
    interval_ns: f64,
    /// Nanoseconds from the start to this connection's first request.
    offset_ns: f64,
    next: u64,
}

/// What the pacer says about the next request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slot {
    /// Its intended start, since the run's start: latency counts from here.
    pub intended: Duration,
    /// How long to wait before sending it (zero if it is due or overdue).
    pub wait: Duration,
    /// It is more than [`LATE_AFTER`] overdue.
    pub late: bool,
}

impl Pacer {
    /// The timetable of connection `conn` of `connections` sharing `rate` requests/s.
    pub fn new(rate: f64, connections: usize, conn: usize) -> Self {
        let interval_ns = connections as f64 * 1e9 / rate;
        Self { interval_ns, offset_ns: interval_ns * conn as f64 / connections as f64, next: 0 }
    }

    /// The next request's slot, given the time `now` since the start; advances the timetable.
    pub fn next_slot(&mut self, now: Duration) -> Slot {
        let intended = self.peek();
        self.next += 1;
        Slot { intended, wait: intended.saturating_sub(now), late: now > intended + LATE_AFTER }
    }

    /// The intended start of the next request, without advancing.
    pub fn peek(&self) -> Duration {
        Self::nanos(self.offset_ns + self.interval_ns * self.next as f64)
    }

    /// Requests whose intended start is before `end` but that were never sent: what the
    /// connection still owed when the run ended.
    pub fn unsent_before(&self, end: Duration) -> u64 {
        let after_offset = end.as_nanos() as f64 - self.offset_ns;
        if after_offset <= 0.0 {
            return 0;
        }
        let due = (after_offset / self.interval_ns).ceil() as u64;
        due.saturating_sub(self.next)
    }

    fn nanos(ns: f64) -> Duration {
        Duration::from_nanos(ns.round() as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn connections_share_the_rate_on_a_staggered_timetable() {
        // 1000/s over 4 connections: each sends every 4 ms, offsets 0, 1, 2, 3 ms.
        let mut all: Vec<Duration> = (0..4)
            .flat_map(|c| {
                let mut p = Pacer::new(1000.0, 4, c);
                (0..5).map(move |_| p.next_slot(Duration::ZERO).intended).collect::<Vec<_>>()
            })
            .collect();
        all.sort();
        let expected: Vec<Duration> = (0..20).map(|i| MS * i).collect();
        assert_eq!(all, expected);
    }

    #[test]
    fn latency_counts_from_the_intended_start_and_late_requests_are_counted() {
        // One connection at 1000/s (a request every 1 ms) against a server that stalls for
        // 10 ms on the first request and then answers in 0.1 ms. Simulated in virtual time.
        let mut p = Pacer::new(1000.0, 1, 0);
        let mut now = Duration::ZERO;
        let (mut latencies, mut late) = (Vec::new(), 0);
        for k in 0..20 {
            let slot = p.next_slot(now);
            now += slot.wait;
            if slot.late {
                late += 1;
            }
            now += if k == 0 { MS * 10 } else { MS / 10 };
            latencies.push(now - slot.intended);
        }
        // The stall is charged to the requests that queued behind it: request 1 was due at
        // 1 ms, sent at 10 ms, answered at 10.1 ms: 9.1 ms, not 0.1 ms as a closed loop says.
        assert_eq!(latencies[0], MS * 10);
        assert_eq!(latencies[1], MS * 91 / 10);
        assert_eq!(latencies[2], MS * 82 / 10);
        // The backlog drains by 0.9 ms per request: requests 1..=9 are sent over 1 ms late,
        // request 10 is 0.9 ms overdue (within LATE_AFTER), request 11 is on time.
        assert_eq!(late, 9);
        assert_eq!(latencies[10], MS);
        assert_eq!(latencies[19], MS / 10);
    }

    #[test]
    fn requests_never_sent_are_owed_at_the_end() {
        let mut p = Pacer::new(100.0, 1, 0); // due at 0, 10, 20, ... ms
        assert_eq!(p.unsent_before(MS * 35), 4); // 0, 10, 20, 30
        p.next_slot(Duration::ZERO);
        p.next_slot(MS * 10);
        assert_eq!(p.unsent_before(MS * 35), 2);
        assert_eq!(p.unsent_before(MS * 20), 0);
        let late_starter = Pacer::new(100.0, 2, 1); // offset 10 ms, every 20 ms
        assert_eq!(late_starter.unsent_before(MS * 5), 0);
        assert_eq!(late_starter.unsent_before(MS * 31), 2);
    }

    #[test]
    fn a_closed_loop_has_no_pacer() {
        assert!(Schedule::Closed { connections: 3 }.pacer(0).is_none());
        assert_eq!(Schedule::Open { connections: 5, rate: 10.0 }.connections(), 5);
    }
}

//! Fencing: a node serves its partitions only while it holds its lease in etcd. The binary
//! tells [`Lease`] until when each renewal holds it; past that moment (no renewal came: etcd
//! unreachable, the node frozen) or once told it is lost (etcd said the lease expired), the
//! node's own partitions answer 503 `fenced` until it holds a lease again and has read the map
//! since.
//!
//! The moment is counted from when the renewal was *sent*, so it falls before etcd's own
//! expiry, which counts from when etcd received it: a node stops serving before any other node
//! can see its lease gone and fail its partitions over.

use std::{
    sync::atomic::{AtomicU64, Ordering},
    time::Instant,
};

/// Until when this node holds its lease.
#[derive(Debug)]
pub struct Lease {
    /// What the milliseconds count from.
    origin: Instant,
    /// Milliseconds after `origin` until which the lease is held; 0: not held.
    until_ms: AtomicU64,
}

impl Lease {
    /// A lease not held yet.
    pub fn new() -> Self {
        Self { origin: Instant::now(), until_ms: AtomicU64::new(0) }
    }

    /// The lease is held until `until` (a renewal sent now, plus its time to live).
    pub fn hold_until(&self, until: Instant) {
        let ms = until.saturating_duration_since(self.origin).as_millis();
        self.until_ms.store(u64::try_from(ms).unwrap_or(u64::MAX).max(1), Ordering::Release);
    }

    /// The lease is lost (expired in etcd, or given up).
    pub fn lose(&self) {
        self.until_ms.store(0, Ordering::Release);
    }

    /// Whether the lease is held now.
    pub fn held(&self) -> bool {
        let until = self.until_ms.load(Ordering::Acquire);
        until != 0 && (self.origin.elapsed().as_millis() as u64) < until
    }
}

impl Default for Lease {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn a_lease_is_held_until_its_moment_or_until_lost() {
        let lease = Lease::new();
        assert!(!lease.held(), "not held before the first renewal");
        lease.hold_until(Instant::now() + Duration::from_secs(60));
        assert!(lease.held());
        lease.lose();
        assert!(!lease.held());
        std::thread::sleep(Duration::from_millis(10));
        lease.hold_until(Instant::now());
        assert!(!lease.held(), "a moment passed is not held");
    }
}

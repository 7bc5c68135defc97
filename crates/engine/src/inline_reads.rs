//! Whether a read the record cache missed runs on its caller's thread ([`InlineReads`]).
//!
//! A read handed to a lookup thread costs two thread wake-ups, and on a virtual machine they
//! cost more than the read: with the data in the page cache, a GET read through a lookup thread
//! took 30-38 µs of the server's CPU, one read on the caller's thread 21-24 µs, the difference
//! in the scheduler (`shardlite bench`, `perf`; 64 connections, 256 partitions). A read that waits
//! for the disk, though, must not hold the caller's thread (an async runtime's worker, serving
//! many connections), and the lookup threads exist to keep the disk's queue full.
//!
//! So every read is timed, inline or not, and reads run inline while few of them are slow:
//! each read slower than `inline_read_us` (50 µs: a read from the page cache takes a few, one
//! from flash at least about 50, NVMe 70-100) that read the disk adds [`SLOW_COST`] to a debt
//! that each fast read pays down by one, and reads run inline while the debt stays under
//! [`INLINE_LIMIT`]. "Read the disk": the thread's block reads (`getrusage(RUSAGE_THREAD)`,
//! `ru_inblock`) grew since its last slow read, asked only after a slow one. A read that was slow
//! because its thread was preempted (a busy machine: on 2 cores under 64 connections, with 4M
//! records, about half the reads were sent to the lookup threads for that alone) is not. On data in
//! memory the debt stays at zero and nothing is written to it; on data on disk (more than one
//! read in [`SLOW_COST`] slow) reads go to the lookup threads within two slow reads, and come
//! back once the lookup threads' reads have been fast long enough to pay the debt.

use std::{
    sync::atomic::{AtomicU64, Ordering},
    time::Duration,
};

use nix::sys::resource::{getrusage, UsageWho};

/// What a slow read adds to the debt; a fast read pays one back.
pub const SLOW_COST: u64 = 64;
/// Reads run inline while the debt is below this: two slow reads in a row stop them.
pub const INLINE_LIMIT: u64 = 2 * SLOW_COST;
/// The debt grows no further: after a spell of reads from the disk, this many fast reads
/// (a fraction of a second under load) bring inline reads back.
const MAX_DEBT: u64 = 64 * SLOW_COST;

/// Where the store's reads run, and how many ran on their caller's thread.
#[derive(Debug)]
pub struct InlineReads {
    /// A read slower than this is taken to have waited for the disk; zero: no read runs inline.
    slow: Duration,
    debt: AtomicU64,
    inline: AtomicU64,
}

impl InlineReads {
    /// Reads slower than `slow` count against inline reads; with zero none runs inline.
    pub fn new(slow: Duration) -> Self {
        Self { slow, debt: AtomicU64::new(0), inline: AtomicU64::new(0) }
    }

    /// Whether the next read may run on its caller's thread (then reads are fast).
    pub fn allowed(&self) -> bool {
        !self.slow.is_zero() && self.debt.load(Ordering::Relaxed) < INLINE_LIMIT
    }

    /// Records how long a read took (inline or on a lookup thread, which runs this); `inline`:
    /// it ran on its caller's thread.
    pub fn record(&self, took: Duration, inline: bool) {
        self.note(took >= self.slow && read_the_disk(), inline);
    }

    /// Counts a read, `slow` (it waited for the disk) or not.
    fn note(&self, slow: bool, inline: bool) {
        if inline {
            self.inline.fetch_add(1, Ordering::Relaxed);
        }
        let debt = self.debt.load(Ordering::Relaxed);
        if slow {
            if debt < MAX_DEBT {
                self.debt.fetch_add(SLOW_COST, Ordering::Relaxed);
            }
        } else if debt > 0 {
            let _ = self.debt.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |d| d.checked_sub(1));
        }
    }

    /// Reads that ran on their caller's thread so far.
    pub fn count(&self) -> u64 {
        self.inline.load(Ordering::Relaxed)
    }
}

thread_local! {
    /// This thread's block reads when it last asked (`None`: never).
    static BLOCK_READS: std::cell::Cell<Option<i64>> = const { std::cell::Cell::new(None) };
}

/// Whether this thread read blocks from the disk since it last asked (the first time: taken
/// to have; `getrusage` failing: too).
fn read_the_disk() -> bool {
    let now = getrusage(UsageWho::RUSAGE_THREAD).map(|usage| usage.block_reads()).ok();
    let before = BLOCK_READS.with(|cell| cell.replace(now));
    match (before, now) {
        (Some(before), Some(now)) => now > before,
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FAST: Duration = Duration::from_micros(5);
    const SLOW_READ: Duration = Duration::from_micros(50);

    fn reads() -> InlineReads {
        InlineReads::new(SLOW_READ)
    }

    #[test]
    fn fast_reads_run_inline_and_write_nothing() {
        let reads = reads();
        for _ in 0..1000 {
            assert!(reads.allowed());
            reads.record(FAST, true);
        }
        assert_eq!(reads.debt.load(Ordering::Relaxed), 0);
        assert_eq!(reads.count(), 1000);
    }

    #[test]
    fn two_slow_reads_send_reads_to_the_lookup_threads_until_fast_ones_pay_them_back() {
        let reads = reads();
        reads.note(true, true);
        assert!(reads.allowed(), "one slow read is forgiven");
        reads.note(true, true);
        assert!(!reads.allowed());
        for _ in 0..SLOW_COST {
            reads.note(false, false);
        }
        assert!(reads.allowed(), "the lookup threads' fast reads bring inline reads back");
        assert_eq!(reads.count(), 2);
    }

    #[test]
    fn one_slow_read_in_more_than_slow_cost_keeps_reads_inline() {
        let reads = reads();
        for _ in 0..100 {
            reads.note(true, true);
            for _ in 0..SLOW_COST {
                reads.record(FAST, true);
            }
            assert!(reads.allowed());
        }
    }

    #[test]
    fn a_slow_read_that_read_no_block_from_the_disk_is_not_counted_slow() {
        let reads = reads();
        reads.record(SLOW_READ, true);
        let debt = reads.debt.load(Ordering::Relaxed);
        assert_eq!(debt, SLOW_COST, "a thread's first slow read is taken to have read the disk");
        for _ in 0..10 {
            reads.record(SLOW_READ * 20, true);
        }
        assert_eq!(reads.debt.load(Ordering::Relaxed), debt - 10, "slow, but no block read (preempted): fast ones");
        assert!(reads.allowed());
    }

    #[test]
    fn with_no_bound_no_read_runs_inline() {
        let reads = InlineReads::new(Duration::ZERO);
        assert!(!reads.allowed());
        reads.record(FAST, false);
        assert!(!reads.allowed());
    }

    #[test]
    fn the_debt_of_a_long_spell_on_disk_is_bounded() {
        let reads = reads();
        for _ in 0..100_000 {
            reads.note(true, false);
        }
        assert!(!reads.allowed());
        for _ in 0..MAX_DEBT {
            reads.record(FAST, false);
        }
        assert!(reads.allowed());
    }
}

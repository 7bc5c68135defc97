//! [`PartitionHasher`]: which partition of a cluster a key is in, computed exactly as every
//! node computes it (the engine's `keyhash` module): `h = XXH3-64(key, seed)`, and the high 32
//! bits reduced by multiply-shift over the partition count, `(hi * P) >> 32`. The seed and the
//! count come from the cluster's map (`GET /cluster`). Only the partition is computed here, not
//! the index fingerprint; the engine's golden vectors are repeated below, and a test compares
//! with the engine's own hasher, so the two cannot drift apart.

use xxhash_rust::xxh3::xxh3_64_with_seed;

/// The partition of a key under one map's hash seed and partition count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PartitionHasher {
    seed: u64,
    partitions: u32,
}

impl PartitionHasher {
    /// Keys hashed with `seed` over `partitions` partitions (at least one).
    pub fn new(seed: u64, partitions: u32) -> Self {
        Self { seed, partitions }
    }

    /// The partition of `key`, `0..partitions`.
    pub fn partition(&self, key: &[u8]) -> u32 {
        let high = xxh3_64_with_seed(key, self.seed) >> 32;
        ((high * u64::from(self.partitions)) >> 32) as u32
    }
}

#[cfg(test)]
mod tests {
    use shardlite_engine::KeyHasher;

    use super::*;

    /// The engine's golden vectors (seed, partitions, key) -> partition: pinned forever.
    #[test]
    fn golden_vectors() {
        let cases: &[(u64, u32, &[u8], u32)] = &[
            (0, 256, b"a", 230),
            (0, 256, b"shardlite", 63),
            (42, 16, b"0123456789abcdef0123456789abcdef", 15),
            (u64::MAX, 10, &[0u8; 32], 2),
            (7, 1, b"k", 0),
        ];
        for &(seed, partitions, key, partition) in cases {
            assert_eq!(PartitionHasher::new(seed, partitions).partition(key), partition, "seed {seed} key {key:?}");
        }
    }

    #[test]
    fn every_key_is_in_the_engines_partition() {
        for (seed, partitions) in [(0, 1), (6_001_118_325_060_159_828, 8), (3, 256), (u64::MAX, 1000)] {
            let (ours, engine) = (PartitionHasher::new(seed, partitions), KeyHasher::new(seed, partitions));
            for i in 0u32..2000 {
                let key = format!("key-{i}").repeat(1 + i as usize % 5);
                assert_eq!(ours.partition(key.as_bytes()), engine.locate(key.as_bytes()).partition, "{key}");
            }
        }
    }
}

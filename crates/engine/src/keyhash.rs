//! The stable key hash: the one place that turns a key into its partition and index fingerprint.
//!
//! `h = XXH3-64(key, seed)`, computed the same on every platform and forever (the golden vectors
//! below pin it). The high 32 bits pick the partition by multiply-shift range reduction
//! (`(hi * P) >> 32`), the low 32 bits are the fingerprint stored in the compact index, so the two
//! are independent: the keys of one partition still spread over all fingerprints.

use xxhash_rust::xxh3::xxh3_64_with_seed;

/// Where a key lives: its partition and its 32-bit index fingerprint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyHash {
    /// The partition, `0..partitions`.
    pub partition: u32,
    /// The fingerprint stored in the compact index.
    pub fingerprint: u32,
}

/// Hashes keys for one data directory (its seed, partition count and fingerprint width).
#[derive(Debug, Clone, Copy)]
pub struct KeyHasher {
    seed: u64,
    partitions: u32,
    fingerprint_mask: u32,
}

impl KeyHasher {
    /// A hasher for `partitions` partitions with full 32-bit fingerprints.
    pub fn new(seed: u64, partitions: u32) -> Self {
        Self::with_fingerprint_bits(seed, partitions, 32)
    }

    /// A hasher whose fingerprints keep only their top `bits` bits (1..=32). Narrow
    /// fingerprints exist to force collisions in tests; data directories use 32.
    pub fn with_fingerprint_bits(seed: u64, partitions: u32, bits: u8) -> Self {
        assert!((1..=32).contains(&bits), "fingerprint bits must be 1..=32");
        assert!(partitions > 0, "at least one partition");
        Self { seed, partitions, fingerprint_mask: u32::MAX << (32 - u32::from(bits)) }
    }

    /// The full 64-bit hash of a key.
    pub fn hash64(&self, key: &[u8]) -> u64 {
        xxh3_64_with_seed(key, self.seed)
    }

    /// The partition and fingerprint of a key.
    pub fn locate(&self, key: &[u8]) -> KeyHash {
        let h = self.hash64(key);
        let high = h >> 32;
        KeyHash {
            partition: ((high * u64::from(self.partitions)) >> 32) as u32,
            fingerprint: (h as u32) & self.fingerprint_mask,
        }
    }

    /// The partition count this hasher spreads keys over.
    pub fn partitions(&self) -> u32 {
        self.partitions
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// XXH3-64 reference values (from the xxHash project's own sanity tests): if these move,
    /// the hash is no longer XXH3 and every data directory on disk is unreadable.
    #[test]
    fn xxh3_matches_the_reference() {
        assert_eq!(xxh3_64_with_seed(b"", 0), 0x2D06_8005_38D3_94C2);
        assert_eq!(KeyHasher::new(0, 1).hash64(b""), 0x2D06_8005_38D3_94C2);
    }

    /// Golden vectors: (seed, partitions, key) -> (partition, fingerprint). Pinned forever;
    /// computed independently with the reference C implementation (Python's `xxhash` package).
    #[test]
    fn golden_vectors() {
        let cases: &[(u64, u32, &[u8], u32, u32)] = &[
            (0, 256, b"a", 230, 513_166_879),
            (0, 256, b"shardlite", 63, 2_499_207_562),
            (42, 16, b"0123456789abcdef0123456789abcdef", 15, 1_992_795_254),
            (u64::MAX, 10, &[0u8; 32], 2, 4_103_358_789),
            (7, 1, b"k", 0, 627_691_771),
        ];
        for &(seed, parts, key, partition, fingerprint) in cases {
            let got = KeyHasher::new(seed, parts).locate(key);
            assert_eq!(got, KeyHash { partition, fingerprint }, "seed {seed} partitions {parts} key {key:?}");
        }
    }

    #[test]
    fn partitions_are_in_range_and_balanced() {
        let hasher = KeyHasher::new(1, 7);
        let mut counts = [0u32; 7];
        for i in 0u32..70_000 {
            let p = hasher.locate(&i.to_le_bytes()).partition;
            counts[p as usize] += 1;
        }
        for c in counts {
            assert!((9_000..11_000).contains(&c), "unbalanced: {counts:?}");
        }
    }

    #[test]
    fn narrow_fingerprints_keep_the_top_bits() {
        let wide = KeyHasher::new(3, 4).locate(b"key");
        let narrow = KeyHasher::with_fingerprint_bits(3, 4, 4).locate(b"key");
        assert_eq!(narrow.partition, wide.partition);
        assert_eq!(narrow.fingerprint, wide.fingerprint & 0xF000_0000);
    }
}

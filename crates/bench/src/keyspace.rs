//! The deterministic key space: key *i* and value *i* of a data set are pure functions of
//! `(seed, i)`, so the loader, the benchmarks and the tests regenerate any record without
//! sharing files.
//!
//! `block(seed, i, j)` = XXH3-64 of the 16 bytes `i (u64 LE) ‖ j (u64 LE)` with `seed`, as
//! 8 little-endian bytes. Key *i* of length `n` is `block(seed, i, 0) ‖ block(seed, i, 1) ‖ ...`
//! cut to `n` bytes; value *i* uses `seed ^ VALUE_SEED` the same way. Keys of distinct *i* are
//! distinct with overwhelming probability (64 bits already per block).

use xxhash_rust::xxh3::xxh3_64_with_seed;

/// Mixed into the seed for values, so values never equal keys.
pub const VALUE_SEED: u64 = 0x7661_6c75_6573_2121; // "values!!"

fn fill(seed: u64, i: u64, len: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(len.next_multiple_of(8));
    let mut j = 0u64;
    while out.len() < len {
        let mut input = [0u8; 16];
        input[..8].copy_from_slice(&i.to_le_bytes());
        input[8..].copy_from_slice(&j.to_le_bytes());
        out.extend_from_slice(&xxh3_64_with_seed(&input, seed).to_le_bytes());
        j += 1;
    }
    out.truncate(len);
    out
}

/// Key `i` of the data set `seed`, `len` bytes.
pub fn key(seed: u64, i: u64, len: usize) -> Vec<u8> {
    fill(seed, i, len)
}

/// Value `i` of the data set `seed`, `len` bytes.
pub fn value(seed: u64, i: u64, len: usize) -> Vec<u8> {
    fill(seed ^ VALUE_SEED, i, len)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(b: &[u8]) -> String {
        b.iter().map(|x| format!("{x:02x}")).collect()
    }

    #[test]
    fn keys_and_values_are_pinned() {
        // Test vectors, computed independently with the reference C XXH3 (Python's `xxhash`):
        // if these change, every data set on disk means something else.
        assert_eq!(hex(&key(1, 0, 32)), "1b5ecaa4fc0568415f4bfaf8b428a37c6fa5aae8761cd31ccbea45ca59e12f6e");
        assert_eq!(hex(&key(1, 12345, 32)), "e7a5df7c2b1b3e3429d829232dea94f55b56f3b7b77132e3e221655a58cf38a8");
        assert_eq!(hex(&value(1, 7, 12)), "f9d6692a0baacd13ed0682bb");
        assert_eq!(hex(&key(0, 0, 32)), hex(&key(0, 0, 40)[..32]));
        assert_eq!(key(1, 5, 32).len(), 32);
        assert_eq!(value(1, 5, 570).len(), 570);
        assert_ne!(key(1, 5, 32), key(1, 6, 32));
        assert_ne!(key(1, 5, 32), key(2, 5, 32));
        assert_ne!(key(1, 5, 32), value(1, 5, 32));
        assert_eq!(hex(&key(0, 0, 8)), format!("{:016x}", xxh3_64_with_seed(&[0u8; 16], 0).swap_bytes()));
    }
}

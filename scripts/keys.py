#!/usr/bin/env python3
"""Writes COUNT random existing keys of a `shardlite load` data set (hex, one a line).

usage: scripts/keys.py RECORDS COUNT [SEED] > keys.txt   (needs: pip install xxhash)

Key i is XXH3-64(i LE ‖ j LE, seed) for j = 0, 1, 2, 3, each as 8 little-endian bytes, cut to
32 bytes: the same function as crates/bench/src/keyspace.rs (its test vectors pin both).
"""
import random, struct, sys
import xxhash

def key(seed, i, n=32):
    out = b"".join(struct.pack("<Q", xxhash.xxh3_64_intdigest(struct.pack("<QQ", i, j), seed=seed)) for j in range(4))
    return out[:n]

if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    records, count = int(sys.argv[1]), int(sys.argv[2])
    seed = int(sys.argv[3]) if len(sys.argv) > 3 else 1
    assert key(1, 0).hex() == "1b5ecaa4fc0568415f4bfaf8b428a37c6fa5aae8761cd31ccbea45ca59e12f6e"
    rng = random.Random(11)
    for _ in range(count):
        sys.stdout.write(key(seed, rng.randrange(records)).hex() + "\n")

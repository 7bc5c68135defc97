#!/bin/bash
# A backup's rate against dd's, and the restore's time, in one run (docs/benchmarks.md,
# "Backup and restore"): three rounds of dd of the partition's files, `shardlite backup --data`, `shardlite
# restore`, the page cache evicted before each. Needs bc, a release build, a directory $SRC:
#   shardlite load --data /tmp/bk-one --records 20000000 --partitions 1
# usage: SRC=/tmp/bk-one scripts/backup-rate.sh   (writes and removes /tmp/bk-out, /tmp/bk-restored)
set -e
B=${BIN:-target/release/shardlite}; E=$(dirname "$0")/evict-cache; SRC=${SRC:-/tmp/bk-one}
t() { local s=$(date +%s.%N); "$@" >/tmp/bk-last.out 2>&1; echo "$(date +%s.%N) - $s" | bc; }
for round in 1 2 3; do
  $E $SRC >/dev/null; a=$(t dd if=$SRC/p0000.db of=/tmp/bk-dd.db bs=4M conv=fsync); b=$(t dd if=$SRC/p0000.idx of=/tmp/bk-dd.idx bs=4M conv=fsync); echo "round $round dd db+idx: $a + $b s"; rm -f /tmp/bk-dd.*
  $E $SRC >/dev/null; s=$(t $B backup --data $SRC --to /tmp/bk-out); echo "round $round backup --data: $s s: $(tail -1 /tmp/bk-last.out)"
  $E /tmp/bk-out >/dev/null; s=$(t $B restore --from /tmp/bk-out --data /tmp/bk-restored); echo "round $round restore: $s s: $(tail -1 /tmp/bk-last.out)"
  rm -rf /tmp/bk-out /tmp/bk-restored
done

#!/bin/bash
# Copying one partition: dd vs SQLite's online backup API vs VACUUM INTO (docs/benchmarks.md,
# "Backup and restore"). Needs python3 (sqlite3 module), bc, a release build, a partition at $SRC/p0000.db:
#   shardlite load --data /tmp/bk-one --records 20000000 --partitions 1
# usage: SRC=/tmp/bk-one scripts/backup-copy-methods.sh   (writes and removes /tmp/bk-*.db)
set -e
SRC=${SRC:-/tmp/bk-one}; E=$(dirname "$0")/evict-cache
t() { local s=$(date +%s.%N); "$@" >/dev/null 2>&1; echo "$(date +%s.%N) - $s" | bc; }
for round in 1 2; do
  $E $SRC >/dev/null; echo "round $round dd db: $(t dd if=$SRC/p0000.db of=/tmp/bk-dd.db bs=1M conv=fsync) s"; rm -f /tmp/bk-dd.db
  $E $SRC >/dev/null; s=$(t python3 -c "
import sqlite3,os
src=sqlite3.connect('file:$SRC/p0000.db?mode=ro',uri=True); dst=sqlite3.connect('/tmp/bk-api.db')
dst.execute('PRAGMA journal_mode=OFF'); dst.execute('PRAGMA synchronous=OFF')
src.backup(dst,pages=1024); dst.close(); f=os.open('/tmp/bk-api.db',os.O_RDONLY); os.fsync(f)"); echo "round $round backup API (1024 pages/step): $s s"; rm -f /tmp/bk-api.db
  $E $SRC >/dev/null; s=$(t python3 -c "
import sqlite3,os
src=sqlite3.connect('file:$SRC/p0000.db?mode=ro',uri=True); src.execute(\"VACUUM INTO '/tmp/bk-vac.db'\"); f=os.open('/tmp/bk-vac.db',os.O_RDONLY); os.fsync(f)"); echo "round $round VACUUM INTO: $s s"; rm -f /tmp/bk-vac.db
done

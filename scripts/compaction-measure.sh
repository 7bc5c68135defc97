#!/bin/bash
# Space under a delete-heavy workload, with and without compaction (docs/operations.md,
# "Compaction"): load RECORDS (db-a) into 8 partitions, serve, run scripts/churn.py (half deletes
# of random records, half inserts) for 2 x RUN seconds, compacting with `shardlite compact --url` after RUN
# seconds, 1.5 x RUN and at the end of 2 x RUN; stop, `shardlite check`, and compare with a fresh
# directory of the surviving records (export + import). Prints sizes (databases, WALs, index
# files) at each step. Needs python3 with xxhash.
# usage: [BIN=target/release/shardlite] [RECORDS=1000000] [RUN=180] scripts/compaction-measure.sh /tmp/work
set -e
B=${BIN:-target/release/shardlite}; N=${RECORDS:-1000000}; T=${RUN:-180}; W=$1; P=${PORT:-18977}
S=$(cd "$(dirname "$0")" && pwd)
sizes() { for k in db db-wal idx; do ls -l "$1"/*.$k 2>/dev/null | awk -v k=$k '{s+=$5} END {printf "%s %.1f MiB  ", k, s/1048576}'; done; echo; }
rm -rf "$W"; mkdir -p "$W"
$B load --data "$W/d" --shape db-a --records "$N" --partitions 8 | tail -1
echo "fresh load:              $(sizes "$W/d")"
RUST_LOG=warn $B serve --data "$W/d" --listen 127.0.0.1:$P >"$W/serve.log" 2>&1 &
SERVER=$!; sleep 3
# One churn of 2 x RUN seconds: RUN seconds without compaction, then `shardlite compact --url`
# at RUN and 1.5 x RUN seconds, and once more after it.
( sleep "$T"; echo "after $T s of churn, no compaction: $(sizes "$W/d")"
  for i in 1 2; do $B compact --url http://127.0.0.1:$P; echo "  after compaction $i: $(sizes "$W/d")"; sleep $((T / 2)); done ) &
COMPACTIONS=$!
python3 "$S/churn.py" http://127.0.0.1:$P "$W/d" "$N" $((2 * T)) 2 >"$W/churn.log"
wait $COMPACTIONS
tail -1 "$W/churn.log"
echo "after churn:             $(sizes "$W/d")"
$B compact --url http://127.0.0.1:$P
echo "after a last compaction: $(sizes "$W/d")"
kill -TERM $SERVER; wait $SERVER || true
echo "closed:                  $(sizes "$W/d")"
$B check --data "$W/d" | tail -1
$B export --data "$W/d" --format bin --out "$W/live.bin" | tail -1
$B import --data "$W/fresh" --partitions 8 "$W/live.bin" | tail -1
echo "fresh, surviving records: $(sizes "$W/fresh")"

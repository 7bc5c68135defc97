#!/bin/bash
# Durable PUT rate alone and while `shardlite backup --url` runs back to back (docs/operations.md,
# "Numbers"): wrk -t2 -c64 -d10s, new keys, 32-byte values, against `serve --synchronous full` on
# $SRC, two rounds; with each, the commit log's mean flush time and the load average.
# RATE="--max-rate 100" paces the backups. Needs wrk, a release build, $SRC:
#   shardlite load --data /tmp/bk-src --records 20000000 --partitions 16
# usage: SRC=/tmp/bk-src [RATE="--max-rate 100"] scripts/backup-put-rate.sh   (writes and removes /tmp/bk-live)
B=${BIN:-target/release/shardlite}; W=$(dirname "$0")/wrk/insert.lua; P=${PORT:-18931}; SRC=${SRC:-/tmp/bk-src}
RUST_LOG=warn $B serve --data $SRC --listen 127.0.0.1:$P --synchronous full >/dev/null 2>&1 &
S=$!; sleep 3
log() { curl -s http://127.0.0.1:$P/metrics | awk '/^shardlite_flushes_total /{f=$2} /^shardlite_log_flush_seconds_total /{s=$2} END{printf "%.0f %.9f\n", f, s}'; }
# The PUT rate, and the commit log's mean flush time meanwhile (from /metrics).
put() {
  local a=($(log)) r=$(VALUE_SIZE=32 wrk -t2 -c64 -d10s -s $W http://127.0.0.1:$P | grep Requests/sec) b=($(log))
  echo "$r, flush $(awk "BEGIN{printf \"%.3f\", (${b[1]} - ${a[1]}) * 1000 / (${b[0]} - ${a[0]})}") ms, load $(cut -d' ' -f1 /proc/loadavg)"
}
for round in 1 2; do
  echo "round $round without backup: $(put)"
  rm -f /tmp/bk-stop; ( n=0; while [ ! -f /tmp/bk-stop ]; do n=$((n+1)); $B backup --url http://127.0.0.1:$P --to /tmp/bk-live $RATE 2>/dev/null | sed "s/^/  backup $n: /"; rm -rf /tmp/bk-live; done ) &
  L=$!; sleep 0.5
  echo "round $round during backups: $(put)"
  touch /tmp/bk-stop; wait $L
done
rm -f /tmp/bk-stop; kill -TERM $S; wait $S

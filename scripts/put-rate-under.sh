#!/bin/bash
# Durable PUT rate and the commit log's mean flush time, alone and while a command runs back to
# back (docs/benchmarks.md, "Backup and restore": what a backup's reads and writes cost durable PUTs).
# For each LABEL COMMAND pair: wrk -t2 -c64 -d10s of new keys (32-byte values) alone, then while
# COMMAND repeats (the last line of its output shown); each line with the server's CPU (% of a
# core) and the load average. One `serve --synchronous full` on $SRC for all pairs, at
# 127.0.0.1:$PORT. Needs wrk, bc, a release build, $SRC (shardlite load --data /tmp/bk-src
# --records 20000000 --partitions 16). Example:
#   SRC=/tmp/bk-src scripts/put-rate-under.sh \
#     backup 'target/release/shardlite backup --url http://127.0.0.1:18931 --to /tmp/bk-live; rm -rf /tmp/bk-live' \
#     write 'scripts/disk-load.py write /tmp/bk-w 1600 --sync 64; rm /tmp/bk-w'
B=${BIN:-target/release/shardlite}; W=$(dirname "$0")/wrk/insert.lua; P=${PORT:-18931}; SRC=${SRC:-/tmp/bk-src}
RUST_LOG=${RUST_LOG:-warn} $B serve --data $SRC --listen 127.0.0.1:$P --synchronous full >/dev/null 2>&1 &
S=$!
# Until the store is open (its figures in /metrics): before, PUTs are answered 503 at once.
until curl -s http://127.0.0.1:$P/metrics | grep -q '^shardlite_flushes_total '; do kill -0 $S || exit 1; sleep 0.5; done
log() { curl -s http://127.0.0.1:$P/metrics | awk '/^shardlite_flushes_total /{f=$2} /^shardlite_log_flush_seconds_total /{s=$2} END{printf "%.0f %.9f\n", f, s}'; }
cpu() { awk '{print $14 + $15}' /proc/$S/stat; }
put() {
  local a=($(log)) c=$(cpu)
  local r=$(VALUE_SIZE=32 wrk -t2 -c64 -d10s -s $W http://127.0.0.1:$P | awk '/Requests\/sec/{print $2}')
  local b=($(log)) d=$(cpu)
  echo "put/s $r, flush $(echo "scale=3; (${b[1]} - ${a[1]}) * 1000 / (${b[0]} - ${a[0]})" | bc) ms, server cpu $(( (d - c) / 10 ))%, load $(cut -d' ' -f1 /proc/loadavg)"
}
while [ $# -ge 2 ]; do
  echo "$1 alone:  $(put)"
  rm -f /tmp/bk-stop; ( n=0; while [ ! -f /tmp/bk-stop ]; do n=$((n + 1)); bash -c "$2" 2>&1 | tail -1 | sed "s/^/  $1 $n: /"; done ) &
  L=$!; sleep 0.5
  echo "$1 during: $(put)"
  touch /tmp/bk-stop; wait $L; shift 2
done
rm -f /tmp/bk-stop; kill -TERM $S; wait $S

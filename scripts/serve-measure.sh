#!/usr/bin/env bash
# Serves a data directory with the process's memory (page cache included) limited, after
# evicting its files from the page cache, and measures GET, PUT-update and PUT-insert with wrk
# (2 threads, 100 connections), printing disk reads and writes per request (/proc/diskstats).
#
# usage: scripts/serve-measure.sh DATA_DIR KEYS_FILE VALUE_SIZE MEM_MB
#   KEYS_FILE: existing keys of the data set, hex, one a line (GET and UPDATE pick from it).
#   ONLY_GET=1 measures GET alone; SKIP_GET=1 only the writes; SECONDS_GET (20) and
#   SECONDS_WRITE (15) set the durations.
# Needs: wrk, bc, curl, python3, a release build (cargo build --release -p shardlite), root (for
# the memory limit: scripts/with-memory-limit; scripts/evict-cache empties the page cache first).
set -u
[ $# -eq 4 ] || { sed -n '2,11p' "$0"; exit 2; }
data=$1 keys=$2 vsize=$3 mem=$4
here=$(cd "$(dirname "$0")" && pwd)
bin=$here/../target/release/shardlite
port=18999
device=$(lsblk -no pkname "$(df --output=source "$data" | tail -1)" 2>/dev/null | head -1)
device=${device:-$(basename "$(df --output=source "$data" | tail -1)")}
"$here/evict-cache" "$data"
"$here/with-memory-limit" "$mem" "$bin" serve --data "$data" --listen 127.0.0.1:$port --synchronous full \
  > /tmp/serve-measure.log 2>&1 &
for _ in $(seq 1 600); do curl -sf http://127.0.0.1:$port/readyz >/dev/null && break; sleep 0.5; done
disk() { awk -v d="$device" '$3==d{print $4, $8}' /proc/diskstats; }
run() {  # name script seconds
  read -r r0 w0 < <(disk)
  out=$(KEYS=$keys VALUE_SIZE=$vsize wrk -t2 -c100 -d"$3"s --latency -s "$here/wrk/$2" http://127.0.0.1:$port)
  read -r r1 w1 < <(disk)
  reqs=$(echo "$out" | awk '/requests in/{print $1}')
  echo "== $1: $(echo "$out" | grep -E 'Requests/sec|Non-2xx|Socket errors' | tr -s ' ' | tr '\n' ' ')"
  echo "   latency: $(echo "$out" | grep -E '^ +(50|90|99)%' | tr -s ' ' | tr '\n' ' ')"
  echo "   disk reads/request $(echo "scale=2; ($r1-$r0)/$reqs" | bc)  disk writes/request $(echo "scale=2; ($w1-$w0)/$reqs" | bc)  requests $reqs"
}
[ -z "${SKIP_GET:-}" ] && run GET get.lua "${SECONDS_GET:-20}"
[ -z "${ONLY_GET:-}" ] && run UPDATE update.lua "${SECONDS_WRITE:-15}"
[ -z "${ONLY_GET:-}" ] && run INSERT insert.lua "${SECONDS_WRITE:-15}"
pkill -TERM -f "shardlite serve --data $data"
wait
tail -1 /tmp/serve-measure.log

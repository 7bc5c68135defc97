#!/usr/bin/env bash
# The HTTP server's rates as ratios of its own /healthz rate (docs/http-api.md, "Performance
# notes"): loads RECORDS
# DB-A records into a fresh directory, then ROUNDS times starts `shardlite serve` on it and runs
# wrk (2 threads, 100 connections, DURATION each) against /healthz, GET of random existing keys
# and PUT of new keys, printing one line per run and each round's ratios to its /healthz rate.
# /healthz is measured twice: wrk's plain loop, and requests built in Lua like the GETs'
# (scripts/wrk/get.lua with HEALTHZ=1), whose client cost per request equals theirs.
#
# usage: scripts/http-ratios.sh [serve flags...]     e.g. --record-cache-mib 0, --max-batch 1
#   env: RECORDS (200000), ROUNDS (3), DURATION (10, seconds per run), PARTITIONS (256), DIR (temporary),
#   WARMUP (5: seconds of GETs, not measured, before the measured GETs: the record cache fills)
# Needs: wrk, curl, python3 with xxhash (scripts/keys.py), a release build
# (cargo build --release -p shardlite). Only 127.0.0.1; every run stops by itself.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=$here/../target/release/shardlite
records=${RECORDS:-200000} rounds=${ROUNDS:-3} secs=${DURATION:-10} parts=${PARTITIONS:-256}
dir=${DIR:-$(mktemp -d /tmp/shardlite-ratios.XXXXXX)}
port=18998
keys=$dir.keys
trap 'rm -rf "$dir" "$keys"' EXIT
"$bin" load --data "$dir" --records "$records" --partitions "$parts" --json >/dev/null
python3 "$here/keys.py" "$records" 200000 >"$keys"

rate() {  # route-name wrk-args...
  local out
  out=$(wrk -t2 -c100 -d"${secs}s" --latency "$@")
  local qps p50 p99 errs
  qps=$(awk '/Requests\/sec/{print $2}' <<<"$out")
  p50=$(awk '$1=="50%"{print $2}' <<<"$out")
  p99=$(awk '$1=="99%"{print $2}' <<<"$out")
  errs=$(awk '/Non-2xx|Socket errors/{print}' <<<"$out" | tr -s ' ' | tr '\n' ' ')
  echo "$qps $p50 $p99 ${errs:-0 errors}"
}

for round in $(seq "$rounds"); do
  RUST_LOG=warn "$bin" serve --data "$dir" --listen 127.0.0.1:$port --synchronous full "$@" >/dev/null 2>&1 &
  server=$!
  for _ in $(seq 300); do curl -sf http://127.0.0.1:$port/readyz >/dev/null && break; sleep 0.1; done
  read -r h h50 h99 herr < <(rate http://127.0.0.1:$port/healthz)
  read -r l l50 l99 lerr < <(HEALTHZ=1 KEYS=$keys rate -s "$here/wrk/get.lua" http://127.0.0.1:$port)
  KEYS=$keys wrk -t2 -c100 -d"${WARMUP:-5}s" -s "$here/wrk/get.lua" http://127.0.0.1:$port >/dev/null
  read -r g g50 g99 gerr < <(KEYS=$keys rate -s "$here/wrk/get.lua" http://127.0.0.1:$port)
  read -r p p50 p99 perr < <(VALUE_SIZE=32 rate -s "$here/wrk/insert.lua" http://127.0.0.1:$port)
  kill -TERM $server && wait $server || true
  printf 'round %s  healthz %8.0f/s p50 %-7s p99 %-7s %s\n' "$round" "$h" "$h50" "$h99" "$herr"
  printf '         healthz.lua %4.0f/s p50 %-7s p99 %-7s %s\n' "$l" "$l50" "$l99" "$lerr"
  printf '         GET     %8.0f/s p50 %-7s p99 %-7s %s  %5.1f%% of healthz, %5.1f%% of healthz.lua\n' \
    "$g" "$g50" "$g99" "$gerr" "$(echo "100*$g/$h" | bc -l)" "$(echo "100*$g/$l" | bc -l)"
  printf '         PUT     %8.0f/s p50 %-7s p99 %-7s %s  %5.1f%% of healthz\n' "$p" "$p50" "$p99" "$perr" \
    "$(echo "100*$p/$h" | bc -l)"
done

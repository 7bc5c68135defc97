#!/usr/bin/env bash
# How long an orderly shutdown takes under write load, and how many file descriptors the server
# holds meanwhile (docs/operations.md, "Install and run": TimeoutStopSec and LimitNOFILE of
# deploy/shardlite.service): loads RECORDS DB-A records into PARTITIONS partitions, then ROUNDS
# times starts `shardlite serve` (default flags: synchronous=full), runs `shardlite bench
# --workloads WORKLOAD --concurrency CONNS` against it, and after LOAD seconds counts its open
# descriptors and sends SIGTERM, timing until the process has exited.
#
# usage: scripts/shutdown-time.sh [serve flags...]   env: RECORDS (200000), PARTITIONS (256),
#   ROUNDS (3), CONNS (100), LOAD (8 s), WORKLOAD (insert)
# Needs: curl, a release build (cargo build --release -p shardlite; or BIN). Only 127.0.0.1.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=${BIN:-$here/../target/release/shardlite}
records=${RECORDS:-200000} parts=${PARTITIONS:-256} rounds=${ROUNDS:-3} conns=${CONNS:-100}
load=${LOAD:-8} workload=${WORKLOAD:-insert}
dir=$(mktemp -d /tmp/shardlite-shutdown.XXXXXX)
server= bench=
trap 'kill $server $bench 2>/dev/null || true; rm -rf "$dir"' EXIT
"$bin" load --data "$dir/data" --records "$records" --partitions "$parts" --json >/dev/null
port=18620
for round in $(seq "$rounds"); do
  RUST_LOG=warn "$bin" serve --data "$dir/data" --listen 127.0.0.1:$port "$@" >/dev/null 2>&1 &
  server=$!
  for _ in $(seq 600); do curl -sf http://127.0.0.1:$port/readyz >/dev/null && break; sleep 0.1; done
  "$bin" bench --url http://127.0.0.1:$port --workloads "$workload" --concurrency "$conns" \
    --duration $((load + 30)) --warmup 0 --json >/dev/null 2>&1 &
  bench=$!
  sleep "$load"
  fds=$(ls /proc/$server/fd | wc -l)
  start=$(date +%s%N)
  kill -TERM $server
  status=0; wait $server || status=$?
  stopped=$(( ($(date +%s%N) - start) / 1000000 ))
  kill $bench 2>/dev/null || true; wait $bench 2>/dev/null || true
  echo "round $round: $parts partitions, $workload at $conns connections: $fds open fds; SIGTERM to exit $stopped ms (exit status $status)"
done

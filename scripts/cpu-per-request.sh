#!/usr/bin/env bash
# Server CPU per request of each workload, and its ratio to the no-op route (`/healthz`) of the
# same run (docs/benchmarks.md, "Server CPU per request against the no-op route").
#
# Loads RECORDS DB-A records once; then ROUNDS rounds, each on a fresh copy of that directory:
# `shardlite serve` (with SERVE_ARGS), `shardlite bench --workloads WORKLOADS`, the server
# stopped. CPU per request is the server's CPU (`cost.server_cpu_pct`) over the rate. With BASE
# (another build's binary) each round runs it first, on a copy of its own, so that the two
# builds alternate on the same machine.
#
#   scripts/cpu-per-request.sh
#   BASE=/tmp/shardlite-before ROUNDS=3 scripts/cpu-per-request.sh
#   SERVE_ARGS="--record-cache-mib 0" scripts/cpu-per-request.sh
#   WORKLOADS=insert CONCURRENCY=100 DURATION=8 SERVE_ARGS="--synchronous normal" scripts/cpu-per-request.sh
set -euo pipefail

BIN=${BIN:-target/release/shardlite}
BASE=${BASE:-}
ROUNDS=${ROUNDS:-3}
RECORDS=${RECORDS:-200000}
WORKLOADS=${WORKLOADS:-noop,select,insert}
CONCURRENCY=${CONCURRENCY:-64}
DURATION=${DURATION:-6}
PORT=${PORT:-18790}
read -r -a serve_args <<<"${SERVE_ARGS:-}"

work=$(mktemp -d)
server=
cleanup() {
    [ -n "$server" ] && kill "$server" 2>/dev/null && wait "$server" 2>/dev/null
    rm -rf "$work"
}
trap cleanup EXIT

"$BIN" load --data "$work/loaded" --records "$RECORDS" >/dev/null

# run LABEL BINARY: one round of one build.
run() {
    local label=$1 bin=$2
    rm -rf "$work/run"
    cp -r "$work/loaded" "$work/run"
    "$bin" serve --data "$work/run" --listen "127.0.0.1:$PORT" "${serve_args[@]}" >"$work/serve.log" 2>&1 &
    server=$!
    until curl -sf "127.0.0.1:$PORT/readyz" >/dev/null; do sleep 0.2; done
    "$bin" bench --url "http://127.0.0.1:$PORT" --pid "$server" --workloads "$WORKLOADS" \
        --concurrency "$CONCURRENCY" --warmup 1 --duration "$DURATION" --json >"$work/$label.json" 2>/dev/null
    kill "$server"
    wait "$server" || true
    server=
    python3 - "$work/$label.json" "$label" <<'PY'
import json, sys

report, label = json.load(open(sys.argv[1])), sys.argv[2]
runs = report["runs"]
cpu = {r["name"]: r["cost"]["server_cpu_pct"] / 100 / r["queries_per_sec"] * 1e6 for r in runs}
noop = cpu.get("noop")
cells = []
for r in runs:
    name, us = r["name"], cpu[r["name"]]
    ratio = f" ({us / noop:.2f}x)" if noop else ""
    cells.append(f"{name} {r['queries_per_sec']:,.0f}/s {us:.1f} µs{ratio} p99 {r['latency_ms']['p99']} ms")
print(f"{label}: " + " | ".join(cells))
PY
}

for round in $(seq "$ROUNDS"); do
    if [ -n "$BASE" ]; then
        run "base-$round" "$BASE"
    fi
    run "this-$round" "$BIN"
done

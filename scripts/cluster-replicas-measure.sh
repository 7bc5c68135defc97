#!/usr/bin/env bash
# What replicas cost a durable write (docs/cluster.md, "Replicas: measured"): one etcd member
# holds two clusters of 3 nodes each on loopback, PARTITIONS partitions each, all six with fresh
# data directories: /plain/ (one copy of each partition) and /copied/ (`--copies COPIES --acks
# ACKS`, by default 3 and 2: every write on its owner and one of two replicas before its
# answer). ROUNDS times, in turn:
# `shardlite bench --url` of the plain cluster's n1, then of the copied one's (each request
# straight to its key's owner by `GET /cluster`), inserts of new keys on CONNS connections for
# DURATION s; printed per run: inserts/s, p50, p99, errors, the three nodes' CPU per insert
# (/proc/PID/stat around the run, warm-up included) and its part on each kind of thread (the
# HTTP runtime's, its blocking threads included; the partitions' writers, which also apply the
# copies' transactions; the commit log's flusher; the rest), and the copied over the plain figures.
# Then, with POSTGRES=1, each round also runs `shardlite bench matrix --spawn-postgres
# --pg-standby`: PostgreSQL with one synchronous standby on this machine (every commit flushed
# on both) behind the same HTTP server, the same inserts (pool PG_POOL), beside one shardlite
# server (`immediate`: its defaults); printed: its inserts/s, p50, p99, and the copied cluster
# over it.
# With DELAY_MS=N, each node's address in the map is a port of `delay-proxy` (PROXY, crate
# shardlite-delay-proxy), which forwards to the node with every byte delayed N ms each way: every
# hop to a node (from another node, or from the bench) takes 2N ms more than on loopback.
#
# usage: scripts/cluster-replicas-measure.sh   env: PARTITIONS (256), ROUNDS (2), CONNS (100),
#   DURATION (5), WARMUP (1), COPIES (3), ACKS (2), POSTGRES (0), PG_POOL (16), DELAY_MS (none),
#   SERVE_ARGS (more `shardlite serve` flags for every node, e.g. "--worker-threads 1")
# Needs: etcd (ETCD), curl, python3, a release build (BIN); PostgreSQL's binaries for POSTGRES=1.
# Only 127.0.0.1; every process stops with the script, and its files go with it.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=${BIN:-$here/../target/release/shardlite}
etcd=${ETCD:-etcd}
parts=${PARTITIONS:-256} rounds=${ROUNDS:-2} conns=${CONNS:-100} secs=${DURATION:-5} warmup=${WARMUP:-1}
postgres=${POSTGRES:-0} pg_pool=${PG_POOL:-16} copies=${COPIES:-3} acks=${ACKS:-2} delay=${DELAY_MS:-}
proxy_bin=${PROXY:-$here/../target/release/delay-proxy}
serve_args=${SERVE_ARGS:-}
# shellcheck source=cluster-etcd.sh
source "$here/cluster-etcd.sh"

declare -A at listen pid
pairs=()
for prefix in plain copied; do
  members=()
  for n in n1 n2 n3; do
    at[$prefix-$n]=$(port)
    listen[$prefix-$n]=${at[$prefix-$n]}
    if [ -n "$delay" ]; then
      listen[$prefix-$n]=$(port)
      pairs+=("127.0.0.1:${at[$prefix-$n]}=127.0.0.1:${listen[$prefix-$n]}")
    fi
    members+=("$n=http://127.0.0.1:${at[$prefix-$n]}")
  done
  replicas=()
  [ "$prefix" = copied ] && replicas=(--copies "$copies" --acks "$acks")
  "$bin" cluster init --etcd "$endpoint" --etcd-prefix "/$prefix/" --partitions "$parts" "${replicas[@]}" \
    --nodes "$(IFS=,; echo "${members[*]}")" >/dev/null
  for n in n1 n2 n3; do
    # shellcheck disable=SC2086 # SERVE_ARGS: several words
    RUST_LOG=warn "$bin" serve --data "$dir/$prefix-$n" --listen "127.0.0.1:${listen[$prefix-$n]}" --cluster \
      --etcd "$endpoint" --etcd-prefix "/$prefix/" --node-id "$n" ${serve_args} >"$dir/$prefix-$n.log" 2>&1 &
    pids+=($!)
    pid[$prefix]="${pid[$prefix]:-} $!"
  done
done
if [ -n "$delay" ]; then
  "$proxy_bin" --delay-ms "$delay" "${pairs[@]}" >"$dir/proxy.log" 2>&1 &
  pids+=($!)
fi
for key in "${!at[@]}"; do
  for _ in $(seq 600); do curl -sf "http://127.0.0.1:${at[$key]}/readyz" >/dev/null && break; sleep 0.1; done
done

# CPU ticks of the processes PIDS: in all, then those of their HTTP, writer and flusher threads.
cpu_ticks() {
  local p all=0
  for p in "$@"; do all=$((all + $(awk '{print $14 + $15}' "/proc/$p/stat"))); done
  for p in "$@"; do cat /proc/"$p"/task/*/stat 2>/dev/null; done |
    awk -v all="$all" '{t[$2] += $14 + $15} END {print all, t["(shardlite-http)"] + 0, t["(shardlite-write)"] + 0, t["(shardlite-flush)"] + 0}'
}

# One run against cluster PREFIX; prints "rate p50 p99 errors cpu_us_per_insert by_thread".
measure() {
  local before after
  # shellcheck disable=SC2086
  before=$(cpu_ticks ${pid[$1]})
  "$bin" bench --url "http://127.0.0.1:${at[$1-n1]}" --workloads insert --concurrency "$conns" \
    --duration "$secs" --warmup "$warmup" --json >"$dir/run.json" 2>"$dir/bench.log"
  # shellcheck disable=SC2086
  after=$(cpu_ticks ${pid[$1]})
  python3 - "$dir/run.json" "$before" "$after" "$(getconf CLK_TCK)" "$secs" "$warmup" <<'PY'
import json, sys
run = json.load(open(sys.argv[1]))["runs"][0]
before, after = ([int(t) for t in a.split()] for a in sys.argv[2:4])
hz, secs, warmup = (float(a) for a in sys.argv[4:])
qps = run["queries_per_sec"]
us = [(b - a) / hz * 1e6 / (qps * (secs + warmup)) for a, b in zip(before, after)]
total, http, write, flush = us
parts = f"HTTP {http:.1f}/writers {write:.1f}/flusher {flush:.1f}/other {total - http - write - flush:.1f}"
print(round(qps), run["latency_ms"]["p50"], run["latency_ms"]["p99"], run["error_total"], round(total, 1),
      parts.replace(" ", "_"))
PY
}
echo "partitions $parts, $conns connections, ${secs}s per run, copied: $copies copies, acks $acks${delay:+, every hop to a node ${delay} ms slower each way}"
for round in $(seq "$rounds"); do
  read -r plain p50 p99 errors cpu threads <<<"$(measure plain)"
  echo "round $round plain:  $plain inserts/s, p50 $p50 ms, p99 $p99 ms, $errors errors, $cpu us of the nodes' CPU each (${threads//_/ } us)"
  read -r copied c50 c99 cerrors ccpu cthreads <<<"$(measure copied)"
  echo "round $round copied: $copied inserts/s, p50 $c50 ms, p99 $c99 ms, $cerrors errors, $ccpu us of the nodes' CPU each (${cthreads//_/ } us);" \
    "copied/plain: rate $(python3 -c "print(round($copied / $plain, 2))"), CPU $(python3 -c "print(round($ccpu / $cpu, 2))")"
  [ "$postgres" = 1 ] || continue
  "$bin" bench matrix --configs immediate --workloads insert --records 0 --partitions "$parts" \
    --concurrency "$conns" --duration "$secs" --warmup "$warmup" --spawn-postgres --pg-standby \
    --pg-pool-size "$pg_pool" --json >"$dir/matrix.json" 2>"$dir/matrix.log"
  read -r pg p50 p99 errors one <<<"$(python3 - "$dir/matrix.json" <<'PY'
import json, sys
runs = json.load(open(sys.argv[1]))["runs"]
pg = next(r for r in runs if r["name"].endswith("[postgres-standby]"))
one = next(r for r in runs if r["name"].endswith("[immediate]"))
print(round(pg["queries_per_sec"]), pg["latency_ms"]["p50"], pg["latency_ms"]["p99"], pg["error_total"],
      round(one["queries_per_sec"]))
PY
)"
  echo "round $round PostgreSQL + sync standby (pool $pg_pool): $pg inserts/s, p50 $p50 ms, p99 $p99 ms, $errors errors;" \
    "one shardlite server: $one inserts/s; copied/PostgreSQL: $(python3 -c "print(round($copied / $pg, 2))")"
done

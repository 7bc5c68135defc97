#!/usr/bin/env bash
# What a partition-aware client gets from a cluster (docs/cluster.md, "Measured: a
# partition-aware client"), on a machine too small to give each node cores of its own: every
# server is pinned to the same SERVER_CPUS and `shardlite bench` to BENCH_CPUS, so a cluster of
# NODES nodes and a single node have the same CPU, and the cluster's rate over the single
# node's is its rate per node per unit of CPU. One etcd member holds two clusters (prefixes
# /single/ and /multi/): `solo`, owning all PARTITIONS partitions, and n1..nNODES, owning them in
# runs; every node's data directory is a copy of one load of RECORDS DB-A records. ROUNDS
# times, for each CONNS: `shardlite bench --url` of `solo`, then of n1 (which routes each GET
# to its owner by `GET /cluster`), printing queries/s, p50, p99, the servers' CPU per query
# (/proc/PID/stat around each run, warm-up included) and how many requests each node served
# directly (the report's `nodes`).
#
# With RATE (requests/s per node) the comparison is made at equal load per node instead, as on
# machines of their own: node i of the cluster is pinned to the i-th core of NODE_CPUS (the
# single node to the first), the bench runs on any core, open loop at RATE against the single
# node and NODES x RATE against the cluster, and each server's CPU per query it answered is
# printed: what a node's own core pays per GET, which bounds its rate.
#
# usage: scripts/cluster-client-measure.sh   env: RECORDS (200000), PARTITIONS (16), NODES (2),
#   ROUNDS (2), CONNS ("32"), DURATION (5), WARMUP (1), SERVER_CPUS (0), BENCH_CPUS (1),
#   RATE (unset), NODE_CPUS ("0 1")
# Needs: etcd (ETCD), curl, python3, taskset, a release build (BIN). Only 127.0.0.1; every
# process stops with the script.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=${BIN:-$here/../target/release/shardlite}
etcd=${ETCD:-etcd}
records=${RECORDS:-200000} parts=${PARTITIONS:-16} nodes=${NODES:-2} rounds=${ROUNDS:-2} conns=${CONNS:-32}
secs=${DURATION:-5} warmup=${WARMUP:-1} server_cpus=${SERVER_CPUS:-0} bench_cpus=${BENCH_CPUS:-1}
rate=${RATE:-} node_cpus=(${NODE_CPUS:-0 1})
if [ -n "$rate" ]; then bench_cpus=0-$(($(nproc) - 1)); fi
cpus_of() {  # node index (0: the single node) -> the cores it is pinned to
  if [ -z "$rate" ]; then echo "$server_cpus"; else echo "${node_cpus[$(( ($1 > 0 ? $1 - 1 : 0) % ${#node_cpus[@]} ))]}"; fi
}
# shellcheck source=cluster-etcd.sh
source "$here/cluster-etcd.sh"
"$bin" load --data "$dir/loaded" --records "$records" --partitions "$parts" --json >/dev/null

declare -A addr pid
start() {  # node prefix
  addr[$1]=127.0.0.1:$(port)
  cp -a "$dir/loaded" "$dir/$1"
}
start solo
"$bin" cluster init --etcd "$endpoint" --etcd-prefix /single/ --partitions "$parts" \
  --nodes "solo=http://${addr[solo]}" >/dev/null
members=()
for i in $(seq "$nodes"); do start "n$i"; members+=("n$i=http://${addr[n$i]}"); done
"$bin" cluster init --etcd "$endpoint" --etcd-prefix /multi/ --partitions "$parts" \
  --nodes "$(IFS=,; echo "${members[*]}")" >/dev/null
serve() {  # node prefix index
  RUST_LOG=warn taskset -c "$(cpus_of "$3")" "$bin" serve --data "$dir/$1" --listen "${addr[$1]}" --cluster \
    --etcd "$endpoint" --etcd-prefix "$2" --node-id "$1" >"$dir/$1.log" 2>&1 &
  pids+=($!)
  pid[$1]=$!
  for _ in $(seq 300); do curl -sf "http://${addr[$1]}/readyz" >/dev/null && break; sleep 0.1; done
}
serve solo /single/ 0
for i in $(seq "$nodes"); do serve "n$i" /multi/ "$i"; done

cpu_ticks() { local t=0; for p in "$@"; do t=$((t + $(awk '{print $14 + $15}' "/proc/$p/stat"))); done; echo $t; }

measure() {  # url connections rate pid... -> "qps p50 p99 errors cpu_us_per_query nodes"
  local url=$1 c=$2 open_loop=() before after
  [ -n "$3" ] && open_loop=(--rate "$3")
  shift 3
  before=$(cpu_ticks "$@")
  taskset -c "$bench_cpus" "$bin" bench --url "$url" --records "$records" --workloads select --concurrency "$c" \
    "${open_loop[@]}" --duration "$secs" --warmup "$warmup" --json >"$dir/run.json" 2>"$dir/bench.log"
  after=$(cpu_ticks "$@")
  python3 - "$dir/run.json" "$((after - before))" "$(getconf CLK_TCK)" "$secs" "$warmup" <<'PY'
import json, sys
run = json.load(open(sys.argv[1]))["runs"][0]
ticks, hz, secs, warmup = (float(a) for a in sys.argv[2:])
qps = run["queries_per_sec"]
nodes = ",".join(f'{n["node"]}:{n["direct"]}/{n["sent"]}' for n in run.get("nodes", [])) or "-"
print(round(qps), run["latency_ms"]["p50"], run["latency_ms"]["p99"], run["error_total"],
      round(ticks / hz * 1e6 / (qps * (secs + warmup)), 1), nodes)
PY
}

cluster_pids=()
for i in $(seq "$nodes"); do cluster_pids+=("${pid[n$i]}"); done
if [ -n "$rate" ]; then
  echo "open loop at $rate GET/s per node; single node on CPU $(cpus_of 0), cluster nodes on CPUs ${node_cpus[*]}, bench on CPU $bench_cpus; $records records, $parts partitions, $nodes nodes"
else
  echo "servers on CPU $server_cpus, bench on CPU $bench_cpus; $records records, $parts partitions, $nodes nodes"
fi
for round in $(seq "$rounds"); do
  for c in $conns; do
    read -r sq s50 s99 serr scpu snodes < <(measure "http://${addr[solo]}" "$c" "$rate" "${pid[solo]}")
    read -r mq m50 m99 merr mcpu mnodes < <(measure "http://${addr[n1]}" "$c" "${rate:+$((rate * nodes))}" "${cluster_pids[@]}")
    python3 -c "
import sys
sq, mq, scpu, mcpu = map(float, sys.argv[1:])
print(f'round $round, $c connections: single node {sq:,.0f}/s p50 $s50 ms p99 $s99 ms ($serr errors), {scpu} us CPU/query, direct $snodes;'
      f' $nodes-node cluster {mq:,.0f}/s p50 $m50 ms p99 $m99 ms ($merr errors), {mcpu} us CPU/query (all nodes), direct $mnodes;'
      + (f' cluster/single: CPU/query {mcpu/scpu:.2f}x, so a node\'s core serves {scpu/mcpu:.1%} of the single node\'s GETs' if '$rate' else
         f' cluster/single: rate {mq/sq:.1%}, CPU/query {mcpu/scpu:.2f}x'))
" "$sq" "$mq" "$scpu" "$mcpu"
  done
done

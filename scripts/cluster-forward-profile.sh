#!/usr/bin/env bash
# Where a forwarding node's CPU goes (docs/cluster.md, "Where the forwarding node's CPU goes"):
# the setup of cluster-forward-measure.sh (one etcd member, `owner` owning all PARTITIONS
# partitions with RECORDS DB-A records, a spare `proxy` owning none), then
# `shardlite bench --url` of `proxy` with CONNS connections for 10 s while, 2 s in, `perf record
# -g` samples the proxy for 6 s into OUT, and the same again while `perf stat` counts the proxy's
# network system calls for 6 s (divide by the GET rate printed for calls per forwarded GET).
# Read the profile with `perf report -i OUT --no-children --sort dso,symbol`.
#
# usage: scripts/cluster-forward-profile.sh   env: RECORDS (200000), PARTITIONS (16), CONNS (32),
#   OUT (/tmp/forward-perf.data)
# Needs: etcd (ETCD), perf, curl, python3, a release build (BIN). Only 127.0.0.1; every process
# stops with the script.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=${BIN:-$here/../target/release/shardlite}
etcd=${ETCD:-etcd}
records=${RECORDS:-200000} parts=${PARTITIONS:-16} conns=${CONNS:-32} out=${OUT:-/tmp/forward-perf.data}
# shellcheck source=cluster-etcd.sh
source "$here/cluster-etcd.sh"
owner_and_proxy
calls=syscalls:sys_enter_sendto,syscalls:sys_enter_writev,syscalls:sys_enter_recvfrom,syscalls:sys_enter_epoll_wait

load() {  # -> GET/s and p50 of a 10 s run, once it ends
  "$bin" bench --url "http://127.0.0.1:$proxy" --no-cluster-routing --records "$records" --workloads select \
    --concurrency "$conns" --duration 10 --warmup 1 --json >"$dir/run.json" 2>/dev/null
  python3 -c "import json; r = json.load(open('$dir/run.json'))['runs'][0]; print(f\"{r['queries_per_sec']:.0f} GET/s forwarded, p50 {r['latency_ms']['p50']} ms\")"
}
load &
job=$!
sleep 2
perf record -F 999 -g -p "$proxy_pid" -o "$out" -- sleep 6 2>/dev/null
wait "$job"
load &
job=$!
sleep 2
perf stat -e "$calls" -p "$proxy_pid" -- sleep 6 2>&1 | grep syscalls
wait "$job"

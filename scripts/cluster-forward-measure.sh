#!/usr/bin/env bash
# What forwarding costs a GET in a cluster (docs/cluster.md, "Measured"): one etcd member, a
# node `owner` owning all PARTITIONS partitions (RECORDS DB-A records loaded into it), and a spare
# node `proxy` owning none, which forwards every request to `owner`. ROUNDS times, for each
# CONNS in the list, `shardlite bench --url ... --workloads select` against `owner` (direct) and
# then against `proxy` (every GET forwarded), printing queries/s, p50 and p99, and the CPU per
# query of the servers (owner + proxy, from /proc/PID/stat around each run: the CPU of the whole
# run, warm-up included, over queries/s x (duration + warm-up)).
#
# usage: scripts/cluster-forward-measure.sh    env: RECORDS (200000), PARTITIONS (16),
#   ROUNDS (2), CONNS ("1 32"), DURATION (5 s measured), WARMUP (1 s)
# Needs: etcd (Debian's etcd-server; ETCD), curl, python3, a release build (BIN).
# Only 127.0.0.1; every process stops with the script.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=${BIN:-$here/../target/release/shardlite}
etcd=${ETCD:-etcd}
records=${RECORDS:-200000} parts=${PARTITIONS:-16} rounds=${ROUNDS:-2} conns=${CONNS:-1 32}
secs=${DURATION:-5} warmup=${WARMUP:-1}
# shellcheck source=cluster-etcd.sh
source "$here/cluster-etcd.sh"
owner_and_proxy

cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

measure() {  # port connections -> "qps p50 p99 errors cpu_us_per_query"
  local before after
  before=$(($(cpu_ticks "$owner_pid") + $(cpu_ticks "$proxy_pid")))
  "$bin" bench --url "http://127.0.0.1:$1" --no-cluster-routing --records "$records" --workloads select --concurrency "$2" \
    --duration "$secs" --warmup "$warmup" --json >"$dir/run.json"
  after=$(($(cpu_ticks "$owner_pid") + $(cpu_ticks "$proxy_pid")))
  python3 - "$dir/run.json" "$((after - before))" "$(getconf CLK_TCK)" "$secs" "$warmup" <<'PY'
import json, sys
run = json.load(open(sys.argv[1]))["runs"][0]
ticks, hz, secs, warmup = (float(a) for a in sys.argv[2:])
qps = run["queries_per_sec"]
print(round(qps), run["latency_ms"]["p50"], run["latency_ms"]["p99"], run["error_total"],
      round(ticks / hz * 1e6 / (qps * (secs + warmup)), 1))
PY
}

for round in $(seq "$rounds"); do
  for c in $conns; do
    read -r dq d50 d99 derr dcpu < <(measure "$owner" "$c")
    read -r fq f50 f99 ferr fcpu < <(measure "$proxy" "$c")
    python3 -c "
import sys
dq, fq, d50, f50, dcpu, fcpu = map(float, sys.argv[1:])
print(f'round $round, $c connections: direct {dq:,.0f}/s p50 {d50} ms p99 $d99 ms ($derr errors), CPU {dcpu} us/query;'
      f' forwarded {fq:,.0f}/s p50 {f50} ms p99 $f99 ms ($ferr errors), CPU {fcpu} us/query (both servers);'
      f' forwarded/direct: rate {fq/dq:.1%}, p50 +{f50-d50:.3f} ms ({(f50-d50)/d50:.2f} direct p50s), CPU {fcpu/dcpu:.2f}x')
" "$dq" "$fq" "$d50" "$f50" "$dcpu" "$fcpu"
  done
done

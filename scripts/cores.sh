#!/usr/bin/env bash
# How the bulk load, the import, GETs and durable inserts scale with cores: each run pinned to
# the first N cores with taskset (the loader and the import size their threads from the CPUs
# they may use; serve's HTTP runtime too). Served runs: the server on cores 0..N-1,
# `shardlite bench` on the next N (so N goes up to half the cores), 32 x N connections.
# GETs three ways: with the record cache (the default), without it (every GET reads SQLite;
# such reads run on the request's thread while they are fast), and without it with every
# read sent to a lookup thread (inline_read_us = 0); the no-op route, the floor each is divided
# by; durable inserts against `synchronous=normal`. Prints three markdown tables.
#
#   scripts/cores.sh [BINARY]          BINARY: a release build (default target/release/shardlite)
#   RECORDS=2000000 CORES="1 2 4 8 16" DIR=/tmp/cores DURATION=5 scripts/cores.sh
set -euo pipefail
bin="${1:-target/release/shardlite}"
records="${RECORDS:-2000000}"
duration="${DURATION:-5}"
total="$(nproc)"
cores="${CORES:-$(for n in 1 2 4 8 16 32 64; do if [ "$n" -le "$total" ]; then echo "$n"; fi; done)}"
dir="${DIR:-$(mktemp -d)}"
port=18080
mkdir -p "$dir"
trap 'pkill -f "serve --data $dir" 2>/dev/null || true' EXIT
field() { python3 -c "import json,sys; d=json.load(sys.stdin); print($1)"; }
pin() { local n="$1"; shift; taskset -c "0-$((n - 1))" "$@"; }

# serve_bench N DATA WORKLOAD RECORDS [VAR=VALUE ...]: a server pinned to N cores over DATA (with
# the settings given as variables), the bench on the next N cores; prints the bench's JSON.
serve_bench() {
  local n="$1" data="$2" workload="$3" keys="$4"
  shift 4
  env "$@" taskset -c "0-$((n - 1))" "$bin" serve --data "$data" --listen "127.0.0.1:$port" \
    >"$dir/serve.out" 2>"$dir/serve.err" &
  for _ in $(seq 600); do grep -q '^listening on' "$dir/serve.out" && break; sleep 0.1; done
  taskset -c "$n-$((2 * n - 1))" "$bin" bench --url "http://127.0.0.1:$port" --workloads "$workload" \
    --records "$keys" --concurrency $((32 * n)) --threads "$n" --duration "$duration" --json 2>/dev/null
  pkill -f "serve --data $data" || true
  wait 2>/dev/null || true
}
rate() { field 'round(d["runs"][0]["queries_per_sec"])'; }
cpu() { field '"%.1f" % (d["runs"][0]["cost"]["server_cpu_pct"] * 1e4 / d["runs"][0]["queries_per_sec"])'; }
ratio() { python3 -c "print('%.2fx' % ($1 / $2))"; }
p99() { field '"%.1f ms" % d["runs"][0]["latency_ms"]["p99"]'; }
# "rate (µs, ratio to the no-op route)" of one GET run; $noop holds the no-op route's µs
get() {
  local report us
  report="$(serve_bench "$@")"
  us="$(cpu <<<"$report")"
  echo "$(rate <<<"$report") ($us µs, $(ratio "$us" "$noop"))"
}

echo "machine: $total cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)), $records DB-A records, 256 partitions" >&2
pin "$total" "$bin" load --data "$dir/source" --records "$records" --json >/dev/null
"$bin" export --data "$dir/source" --out "$dir/records.bin" >/dev/null 2>&1

loads=""
gets=""
inserts=""
for n in $cores; do
  rm -rf "$dir/load" "$dir/import" "$dir/insert"
  load="$(pin "$n" "$bin" load --data "$dir/load" --records "$records" --json | field 'round(d["records_per_sec"])')"
  import="$(pin "$n" "$bin" import --data "$dir/import" --json "$dir/records.bin" | field 'round(d["records_per_sec"])')"
  loads+="| $n | $load | $import |"$'\n'
  if [ $((2 * n)) -le "$total" ]; then
    noop="$(serve_bench "$n" "$dir/source" noop 0 | cpu)"
    cached="$(get "$n" "$dir/source" select "$records")"
    uncached="$(get "$n" "$dir/source" select "$records" SHARDLITE_RECORD_CACHE_MIB=0)"
    handed="$(get "$n" "$dir/source" select "$records" SHARDLITE_RECORD_CACHE_MIB=0 SHARDLITE_INLINE_READ_US=0)"
    gets+="| $n | $noop µs | $cached | $uncached | $handed |"$'\n'
    report="$(serve_bench "$n" "$dir/insert" insert 0)"
    rm -rf "$dir/insert"
    normal="$(serve_bench "$n" "$dir/insert" insert 0 SHARDLITE_SYNCHRONOUS=normal)"
    us="$(cpu <<<"$report")"
    inserts+="| $n | $(rate <<<"$report") | $(p99 <<<"$report") | $us µs ($(ratio "$us" "$noop")) |"
    inserts+=" $(rate <<<"$normal") | $(ratio "$(rate <<<"$report")" "$(rate <<<"$normal")") |"$'\n'
  fi
done
printf '| cores | load, records/s | import, records/s |\n|---|---|---|\n%s\n' "$loads"
printf '| cores | no-op route, server CPU each | GET, q/s (server CPU each, against the no-op route) | GET, record cache off | record cache off, every read on a lookup thread |\n|---|---|---|---|---|\n%s\n' "$gets"
printf '| cores | durable inserts/s | p99 | server CPU per insert (against the no-op route) | inserts/s, `synchronous=normal` | durable / normal |\n|---|---|---|---|---|---|\n%s' "$inserts"

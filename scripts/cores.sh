#!/usr/bin/env bash
# How the bulk load, the import and cached GETs scale with cores: each run pinned to the first
# N cores with taskset (the loader and the import size their threads from the CPUs they may
# use; serve's HTTP runtime too). GETs: the server on cores 0..N-1, `shardlite bench` on the
# next N (so N goes up to half the cores). Prints one markdown table.
#
#   scripts/cores.sh [BINARY]          BINARY: a release build (default target/release/shardlite)
#   RECORDS=2000000 CORES="1 2 4 8 16" DIR=/tmp/cores scripts/cores.sh
set -euo pipefail
bin="${1:-target/release/shardlite}"
records="${RECORDS:-2000000}"
total="$(nproc)"
cores="${CORES:-$(for n in 1 2 4 8 16 32 64; do if [ "$n" -le "$total" ]; then echo "$n"; fi; done)}"
dir="${DIR:-$(mktemp -d)}"
mkdir -p "$dir"
trap 'pkill -f "serve --data $dir" 2>/dev/null || true' EXIT
field() { python3 -c "import json,sys; d=json.load(sys.stdin); print($1)"; }
pin() { local n="$1"; shift; taskset -c "0-$((n - 1))" "$@"; }

echo "machine: $total cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)), $records DB-A records, 256 partitions" >&2
pin "$total" "$bin" load --data "$dir/source" --records "$records" --json >/dev/null
"$bin" export --data "$dir/source" --out "$dir/records.bin" >/dev/null 2>&1

echo "| cores | load, records/s | import, records/s | cached GET, q/s | GET server CPU, µs/request |"
echo "|---|---|---|---|---|"
for n in $cores; do
  rm -rf "$dir/load" "$dir/import"
  load="$(pin "$n" "$bin" load --data "$dir/load" --records "$records" --json | field 'round(d["records_per_sec"])')"
  import="$(pin "$n" "$bin" import --data "$dir/import" --json "$dir/records.bin" | field 'round(d["records_per_sec"])')"
  get="-"
  cpu="-"
  if [ $((2 * n)) -le "$total" ]; then
    pin "$n" "$bin" serve --data "$dir/source" --listen 127.0.0.1:18080 >"$dir/serve.out" 2>"$dir/serve.err" &
    for _ in $(seq 600); do grep -q '^listening on' "$dir/serve.out" && break; sleep 0.1; done
    report="$(taskset -c "$n-$((2 * n - 1))" "$bin" bench --url http://127.0.0.1:18080 --workloads select \
      --records "$records" --concurrency $((32 * n)) --threads "$n" --duration 5 --json 2>/dev/null)"
    get="$(field 'round(d["runs"][0]["queries_per_sec"])' <<<"$report")"
    cpu="$(field '"%.1f" % (d["runs"][0]["cost"]["server_cpu_pct"] * 1e4 / d["runs"][0]["queries_per_sec"])' <<<"$report")"
    pkill -f "serve --data $dir/source" || true
    wait 2>/dev/null || true
  fi
  echo "| $n | $load | $import | $get | $cpu |"
done

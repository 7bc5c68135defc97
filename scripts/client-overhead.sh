#!/usr/bin/env bash
# What the Rust client costs a GET (docs/clients.md, "Overhead"): loads RECORDS DB-A records
# into PARTITIONS partitions, serves them, then ROUNDS times runs, one after the other against
# the same server, `shardlite bench --url` (select: its own hyper connections, driven by hand)
# and crates/client/examples/get_rate.rs (the same GETs through shardlite_client::Client),
# both with CONNS connections on 2 threads for DURATION s after WARMUP s, and prints each
# round's rates and their ratio. EXAMPLES names builds of the example to run in turn in each
# round (copies of an earlier build beside the new one, to compare them in one run).
#
# usage: scripts/client-overhead.sh   env: RECORDS (200000), PARTITIONS (16), ROUNDS (3),
#   CONNS (100), DURATION (10), WARMUP (2), TARGET (target dir, default ./target),
#   EXAMPLES (default: the release build's get_rate)
# Needs: curl, python3, release builds (cargo build --release -p shardlite
#   -p shardlite-client --example get_rate). Only 127.0.0.1; every run stops by itself.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
target=${TARGET:-${CARGO_TARGET_DIR:-$here/../target}}
bin=$target/release/shardlite examples=${EXAMPLES:-$target/release/examples/get_rate}
records=${RECORDS:-200000} parts=${PARTITIONS:-16} rounds=${ROUNDS:-3} conns=${CONNS:-100}
secs=${DURATION:-10} warmup=${WARMUP:-2} port=18720
dir=$(mktemp -d /tmp/shardlite-client.XXXXXX)
server=
trap 'kill $server 2>/dev/null || true; rm -rf "$dir"' EXIT
"$bin" load --data "$dir/data" --records "$records" --partitions "$parts" --json >/dev/null
RUST_LOG=warn "$bin" serve --data "$dir/data" --listen 127.0.0.1:$port >/dev/null 2>&1 &
server=$!
for _ in $(seq 300); do curl -sf http://127.0.0.1:$port/readyz >/dev/null && break; sleep 0.1; done
url=http://127.0.0.1:$port

for round in $(seq "$rounds"); do
  "$bin" bench --url "$url" --workloads select --concurrency "$conns" --threads 2 \
    --duration "$secs" --warmup "$warmup" --json >"$dir/bench.json"
  raw=$(python3 -c 'import json,sys; r=json.load(open(sys.argv[1]))["runs"][0]; print(round(r["queries_per_sec"]), r["error_total"], round(r["generator_cpu_pct"]/100*1e6/r["queries_per_sec"],1))' "$dir/bench.json")
  read -r raw_rate raw_errors raw_cpu <<<"$raw"
  echo "round $round: bench $raw_rate/s ($raw_errors errors, generator CPU $raw_cpu us/request)"
  for example in $examples; do
    line=$("$example" --url "$url" --connections "$conns" --threads 2 --duration "$secs" --warmup "$warmup" --keys "$records")
    client_rate=$(sed -E 's/^client GET: ([0-9]+) requests.*/\1/' <<<"$line")
    echo "  $example: $line"
    python3 -c "import sys; print(f'  client/bench: {int(sys.argv[2])/int(sys.argv[1]):.1%}')" "$raw_rate" "$client_rate"
  done
done

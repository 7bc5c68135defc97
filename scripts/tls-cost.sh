#!/usr/bin/env bash
# What TLS costs GET throughput (docs/operations.md, "TLS"): loads RECORDS DB-A records, makes a
# throwaway CA and a certificate for localhost (openssl CLI, for the measurement only), then
# ROUNDS times serves the same directory over http and over https (same build, same flags,
# one after the other) and runs `shardlite bench --url ... --workloads select --concurrency
# CONNS` against each, printing queries/s, p99 and the CPU per query of the server and of the
# load generator (which share the machine) of each run, and the https/http ratio.
#
# usage: scripts/tls-cost.sh        env: RECORDS (200000), PARTITIONS (16), ROUNDS (2),
#   CONNS (100), DURATION (8 s measured), WARMUP (2 s)
# Needs: openssl, curl, python3, a release build (cargo build --release -p shardlite; or BIN).
# Only 127.0.0.1; every run stops by itself.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=${BIN:-$here/../target/release/shardlite}
records=${RECORDS:-200000} parts=${PARTITIONS:-16} rounds=${ROUNDS:-2} conns=${CONNS:-100}
secs=${DURATION:-8} warmup=${WARMUP:-2}
dir=$(mktemp -d /tmp/shardlite-tls.XXXXXX)
trap 'kill $server 2>/dev/null || true; rm -rf "$dir"' EXIT
server=
"$bin" load --data "$dir/data" --records "$records" --partitions "$parts" --json >/dev/null
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 -subj /CN=test-ca \
  -keyout "$dir/ca.key" -out "$dir/ca.pem" 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=localhost \
  -keyout "$dir/key.pem" -out "$dir/cert.csr" 2>/dev/null
openssl x509 -req -in "$dir/cert.csr" -CA "$dir/ca.pem" -CAkey "$dir/ca.key" -days 1 \
  -extfile <(printf 'subjectAltName=DNS:localhost') -out "$dir/cert.pem" 2>/dev/null

measure() {  # scheme port serve-flags...
  local scheme=$1 port=$2; shift 2
  RUST_LOG=warn "$bin" serve --data "$dir/data" --listen 127.0.0.1:$port "$@" >/dev/null 2>&1 &
  server=$!
  for _ in $(seq 300); do curl -sfk "$scheme://localhost:$port/readyz" >/dev/null && break; sleep 0.1; done
  # measure runs in a subshell: the EXIT trap cannot see this server, so stop it here, always.
  local status=0
  "$bin" bench --url "$scheme://localhost:$port" --tls-ca "$dir/ca.pem" --workloads select \
    --concurrency "$conns" --duration "$secs" --warmup "$warmup" --json >"$dir/$scheme.json" || status=$?
  kill -TERM $server; wait $server || true
  [ "$status" = 0 ] || return "$status"
  python3 - "$dir/$scheme.json" <<'PY'
import json, sys
run = json.load(open(sys.argv[1]))["runs"][0]
qps, server = run["queries_per_sec"], run["cost"].get("server_cpu_pct") or 0
# CPU per query: the server's (from its /stats) and the load generator's, microseconds.
print(round(qps), run["latency_ms"]["p99"], run["error_total"],
      round(server / 100 * 1e6 / qps, 1), round(run["generator_cpu_pct"] / 100 * 1e6 / qps, 1))
PY
}

for round in $(seq "$rounds"); do
  read -r http http99 httperr httpcpu httpgen < <(measure http 18610)
  read -r https https99 httpserr httpscpu httpsgen < <(measure https 18611 --tls-cert "$dir/cert.pem" --tls-key "$dir/key.pem")
  python3 -c "import sys; h,s=float(sys.argv[1]),float(sys.argv[2]); print(f'round $round: http {h:,.0f}/s (p99 $http99 ms, $httperr errors; CPU/query server $httpcpu us, client $httpgen us), https {s:,.0f}/s (p99 $https99 ms, $httpserr errors; server $httpscpu us, client $httpsgen us): https/http {s/h:.1%}')" "$http" "$https"
done

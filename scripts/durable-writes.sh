#!/usr/bin/env bash
# Durable writes at the sizing note's layout (256 partitions): what one flush for many
# partitions buys. For each configuration, a fresh directory of PARTITIONS partitions with
# RECORDS DB-A records and `shardlite serve` on it; then wrk (2 threads, CONNS connections,
# DURATION each) sends PUTs of new keys (inserts), PUTs of existing keys (updates) and POST
# /batch of BATCH puts over random existing keys (each touching ~BATCH partitions); /metrics is
# read before and after each run: acknowledged writes, flushes (commit log fdatasyncs, or WAL
# fsyncs of each partition's commit without it) and server CPU, per write, and the mean time of
# one commit-log flush (its write and fdatasync). A second line splits the server's CPU and its
# threads' sleeps (voluntary context switches) per write by thread name (writer threads, HTTP
# workers, ...), from /proc/PID/task before and after the run.
#
# Configurations: `full` (the default: synchronous=full through the shared commit log),
# `full, no log` (--commit-log false: every partition's commit fsyncs its own WAL) and `normal`
# (--synchronous normal: no fsync before the answer; survives a crash, not a power loss).
#
# usage: scripts/durable-writes.sh [serve flags for every configuration...]
#   env: PARTITIONS (256), CONNS (100), DURATION (10 s), RECORDS (200000), BATCH (100),
#        CONFIGS (full,nolog,normal), BIN (target/release/shardlite: another build to compare)
# Needs: wrk, curl, python3 with xxhash (scripts/keys.py), a release build
# (cargo build --release -p shardlite). Only 127.0.0.1; every run stops by itself.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=${BIN:-$here/../target/release/shardlite}
parts=${PARTITIONS:-256} conns=${CONNS:-100} secs=${DURATION:-10} records=${RECORDS:-200000} batch=${BATCH:-100}
configs=${CONFIGS:-full,nolog,normal}
port=18997
work=$(mktemp -d /tmp/shardlite-durable.XXXXXX)
keys=$work/keys
server=""
trap '[ -n "$server" ] && kill -TERM $server 2>/dev/null; rm -rf "$work"' EXIT
python3 "$here/keys.py" "$records" 200000 >"$keys"

metric() {  # name: its value in the last scrape
  awk -v m="$1" '$1 == m {print $2}' "$work/metrics"
}

threads() {  # per thread: name, voluntary context switches, CPU ticks (user + system)
  for t in /proc/"$server"/task/*; do
    echo "$(tr -d ' ' <"$t/comm") $(awk '/^voluntary_ctxt/{print $2}' "$t/status") $(awk '{print $14 + $15}' "$t/stat")"
  done 2>/dev/null || true
}

scrape() {
  curl -sf http://127.0.0.1:$port/metrics >"$work/metrics"
  echo "$(metric shardlite_flushes_total) $(metric process_cpu_seconds_total) $(metric shardlite_log_flush_seconds_total)"
}

run() {  # label per-request-writes wrk-args...
  local label=$1 per=$2
  shift 2
  read -r f0 c0 s0 < <(scrape)
  threads >"$work/threads0"
  local out
  out=$(wrk -t2 -c"$conns" -d"${secs}s" --latency "$@" http://127.0.0.1:$port)
  read -r f1 c1 s1 < <(scrape)
  threads >"$work/threads1"
  local n rate p50 p99 errs
  n=$(awk '/requests in/{print $1}' <<<"$out")
  rate=$(awk '/Requests\/sec/{print $2}' <<<"$out")
  p50=$(awk '$1=="50%"{print $2}' <<<"$out")
  p99=$(awk '$1=="99%"{print $2}' <<<"$out")
  errs=$(awk '/Non-2xx|Socket errors/{print}' <<<"$out" | tr -s ' ' | tr '\n' ' ')
  python3 - "$label" "$n" "$rate" "$per" "$p50" "$p99" "$f0" "$f1" "$c0" "$c1" "${s0:-0}" "${s1:-0}" "${errs:-0 errors}" \
    "$work/threads0" "$work/threads1" "$(getconf CLK_TCK)" <<'PY'
import collections, re, sys
label, n, rate, per, p50, p99, f0, f1, c0, c1, s0, s1, errs, t0, t1, tck = sys.argv[1:]
writes = int(n) * int(per)
flushes = float(f1) - float(f0)
mean_flush = f"{1e3 * (float(s1) - float(s0)) / flushes:5.2f} ms" if flushes and float(s1) > float(s0) else "    -   "
print(f"  {label:8} {float(rate) * int(per):9.0f} writes/s  p50 {p50:>8}  p99 {p99:>8}  "
      f"flushes/write {flushes / writes:6.3f}  mean flush {mean_flush}  server CPU/write {1e6 * (float(c1) - float(c0)) / writes:6.1f} us  {errs}")
def load(path):  # thread name without its number -> [sleeps, ticks], summed
    groups = collections.defaultdict(lambda: [0, 0])
    for line in open(path):
        name, sleeps, ticks = line.split()
        group = groups[re.sub(r"[-0-9]+$", "", name)]
        group[0] += int(sleeps)
        group[1] += int(ticks)
    return groups
before, after = load(t0), load(t1)
parts = []
for name, (sleeps, ticks) in sorted(after.items(), key=lambda kv: -kv[1][1]):
    cpu = 1e6 * (ticks - before[name][1]) / int(tck) / writes
    if cpu >= 1:
        parts.append(f"{name} {cpu:.1f} us, {(sleeps - before[name][0]) / writes:.2f} sleeps")
print(f"  {'':8} per write by thread: " + "; ".join(parts))
PY
}

for config in ${configs//,/ }; do
  case $config in
    full) flags=(--synchronous full) label="full (commit log)" ;;
    nolog) flags=(--synchronous full --commit-log false) label="full, no log" ;;
    normal) flags=(--synchronous normal) label="normal" ;;
    *) echo "unknown configuration $config (full, nolog, normal)" >&2; exit 2 ;;
  esac
  rm -rf "$work/data"
  "$bin" load --data "$work/data" --records "$records" --partitions "$parts" --json >/dev/null
  RUST_LOG=warn "$bin" serve --data "$work/data" --listen 127.0.0.1:$port "${flags[@]}" "$@" >/dev/null 2>&1 &
  server=$!
  for _ in $(seq 300); do curl -sf http://127.0.0.1:$port/readyz >/dev/null && break; sleep 0.1; done
  echo "$label: $parts partitions, $conns connections, ${secs} s each"
  VALUE_SIZE=32 run insert 1 -s "$here/wrk/insert.lua"
  KEYS=$keys VALUE_SIZE=32 run update 1 -s "$here/wrk/update.lua"
  KEYS=$keys BATCH=$batch VALUE_SIZE=32 run batch "$batch" -s "$here/wrk/batch.lua"
  kill -TERM $server && wait $server || true
  server=""
done

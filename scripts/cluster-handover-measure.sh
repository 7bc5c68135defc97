#!/usr/bin/env bash
# What handing partitions over costs the writes under way (docs/cluster.md, "Moving a partition
# with copies"): one etcd member and a cluster of 3 nodes on loopback, PARTITIONS partitions,
# `--copies 3 --acks 2`, fresh data directories. ROUNDS times, in turn: `shardlite bench --url`
# of n1 `--no-cluster-routing` (n1 forwards each request to its key's owner, as for any client
# that does not route by the map: a routing one is answered 421 by an old owner, and must read
# the map again), inserts of new keys on CONNS connections for DURATION s, once undisturbed and
# once while HANDOVERS partitions are handed over one after another (`shardlite cluster move P
# NODE`, P drawn at random, NODE one of its copies), spread over the run; the second first in
# even rounds (the data grows from run to run). Printed per run: inserts/s, p50, p99, errors (of them 4xx: 421 from an old owner
# reached by n1 before n1 followed the new map); for the handovers their write pauses (how long
# each partition's writes were held), the copies named stale, the map version at the end.
#
# usage: scripts/cluster-handover-measure.sh   env: PARTITIONS (256), ROUNDS (2), CONNS (100),
#   DURATION (10), HANDOVERS (8)
# Needs: etcd (ETCD), curl, python3, a release build (BIN). Only 127.0.0.1; every process stops
# with the script, and its files go with it.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=${BIN:-$here/../target/release/shardlite}
etcd=${ETCD:-etcd}
parts=${PARTITIONS:-256} rounds=${ROUNDS:-2} conns=${CONNS:-100} secs=${DURATION:-10} handovers=${HANDOVERS:-8}
# shellcheck source=cluster-etcd.sh
source "$here/cluster-etcd.sh"

declare -A at
members=()
for n in n1 n2 n3; do
  at[$n]=$(port)
  members+=("$n=http://127.0.0.1:${at[$n]}")
done
"$bin" cluster init --etcd "$endpoint" --partitions "$parts" --copies 3 --acks 2 \
  --nodes "$(IFS=,; echo "${members[*]}")" >/dev/null
for n in n1 n2 n3; do
  serve_node "$n" "${at[$n]}"
done

run() {  # label -> "rate p50 p99 errors 4xx"
  "$bin" bench --url "http://127.0.0.1:${at[n1]}" --no-cluster-routing --workloads insert \
    --concurrency "$conns" --duration "$secs" --warmup 1 --json >"$dir/$1.json" 2>"$dir/bench.log"
  python3 - "$dir/$1.json" <<'PY'
import json, sys
run = json.load(open(sys.argv[1]))["runs"][0]
errors = run["errors"]
print(round(run["queries_per_sec"]), run["latency_ms"]["p50"], run["latency_ms"]["p99"], run["error_total"],
      errors["status_4xx"])
PY
}

# Hands HANDOVERS random partitions to one of their copies, spread over the run; one JSON
# answer per line in $dir/handovers.
hand_over() {
  local gap
  gap=$(python3 -c "print($secs / ($handovers + 1))")
  sleep 1
  for _ in $(seq "$handovers"); do
    sleep "$gap"
    read -r p to <<<"$(curl -sf "http://127.0.0.1:${at[n1]}/cluster" | python3 -c '
import json, random, sys
m = json.load(sys.stdin)
p = random.randrange(m["partitions"])
stale = (m.get("stale") or [[]] * m["partitions"])[p]
print(p, random.choice([n for n in m["replicas"][p] if n not in stale]))')"
    "$bin" cluster move "$p" "$to" --etcd "$endpoint" --json | tr -d '\n' >>"$dir/handovers"
    echo >>"$dir/handovers"
  done
}

undisturbed() {
  local rate p50 p99 errors refused
  read -r rate p50 p99 errors refused <<<"$(run quiet)"
  echo "round $1 undisturbed:     $rate inserts/s, p50 $p50 ms, p99 $p99 ms, $errors errors ($refused 4xx)"
}

handing() {
  local rate p50 p99 errors refused mover pauses
  : >"$dir/handovers"
  hand_over &
  mover=$!
  read -r rate p50 p99 errors refused <<<"$(run handing)"
  wait "$mover"
  pauses=$(python3 - "$dir/handovers" <<'PY'
import json, sys
answers = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
pauses = sorted(a["write_pause_ms"] for a in answers)
stale = sum(len(a["stale"]) for a in answers)
print(f"{len(answers)} handed over, write pauses {pauses[0]:.1f}-{pauses[-1]:.1f} ms "
      f"(median {pauses[len(pauses) // 2]:.1f}), {stale} copies named stale, map version {answers[-1]['map_version']}")
PY
)
  echo "round $1 with handovers: $rate inserts/s, p50 $p50 ms, p99 $p99 ms, $errors errors ($refused 4xx); $pauses"
}

echo "partitions $parts, $conns connections, ${secs}s per run, 3 copies, acks 2, $handovers handovers per disturbed run"
# The two runs alternate which goes first: the data grows from run to run.
for round in $(seq "$rounds"); do
  if [ $((round % 2)) = 1 ]; then
    undisturbed "$round"
    handing "$round"
  else
    handing "$round"
    undisturbed "$round"
  fi
done
